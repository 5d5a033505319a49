"""bench/hot_queue.py's pure parts: the symmetric preset copied with another load-balancing mode."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.hot_queue import _selection, with_policy
from raftmq.routing.cluster_connection import LOAD_BALANCING


def test_with_policy_copies_the_preset_with_only_the_mode_changed(tmp_path: Path) -> None:
    assert _selection(tmp_path, "symmetric") == ["--preset", "symmetric"]  # nothing copied: the preset
    with_policy(tmp_path, "ON_DEMAND")
    names = sorted(p.name for p in tmp_path.glob("*.toml"))
    assert names == ["symmetric-g1.toml", "symmetric-g2.toml", "symmetric-g3.toml", "symmetric.toml"]
    topology = tomllib.loads((tmp_path / "symmetric.toml").read_text())
    (connection,) = topology["cluster_connection"]
    assert connection["message_load_balancing"] == "ON_DEMAND" and "ON_DEMAND" in LOAD_BALANCING
    shipped = Path(__file__).resolve().parents[2] / "configs" / "symmetric.toml"
    assert tomllib.loads(shipped.read_text())["cluster_connection"][0]["message_load_balancing"] == "LOCAL_FIRST"
    assert (tmp_path / "symmetric-g1.toml").read_text() == (shipped.parent / "symmetric-g1.toml").read_text()
    assert _selection(tmp_path, "symmetric") == ["--config", str(tmp_path / "symmetric.toml")]

from __future__ import annotations

from pathlib import Path

import pytest

from raftmq.config import NodeConfig, load_node_config
from raftmq.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_shipped_preset_loads_and_matches_defaults() -> None:
    assert load_node_config(REPO / "configs" / "node.toml") == NodeConfig()


def test_values_reach_nested_sections(tmp_path: Path) -> None:
    config = load_node_config(write(tmp_path, "[node]\nport = 7000\n[core]\nmax_delivery_count = 3\n[limits]\nmax_headers = 9\n"))
    assert (config.port, config.core.max_delivery_count, config.limits.max_headers) == (7000, 3, 9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[node]\nprot = 1\n", r"node\.toml: unknown key node\.prot"),
        ("[nodes]\nport = 1\n", r"node\.toml: unknown table or key 'nodes'"),
        ("[node]\nport = 'x'\n", r"node\.toml: node\.port must be int, got str 'x'"),
        ("[node]\nport = -1\n", r"node\.port must not be negative"),
        ("[core]\nmax_delivery_count = true\n", r"core\.max_delivery_count must be int"),
        ("node = 3\n", r"'node' must be a table"),
        ("[node\n", r"node\.toml: not valid TOML"),
    ],
)
def test_errors_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_node_config(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_node_config(tmp_path / "nope.toml")

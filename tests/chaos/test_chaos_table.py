"""`raftmq chaos table`: one summary row per finished run directory; a run without results (a
harness that died) is an ERROR row, and the exit status is 0 only when every run is valid."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from chaos.cli import chaos_command


def finished(root: Path, name: str, nemeses: list[str], targets: list[str], seed: int,
             results: dict[str, object] | None) -> None:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"options": {"nemeses": nemeses, "targets": targets, "seed": seed}}))
    if results is not None:
        (run_dir / "results.json").write_text(json.dumps(results))


def test_a_table_of_runs(tmp_path: Path) -> None:
    good = {"attempted": 10, "acknowledged": 9, "lost": 0, "stored_duplicates": 0, "unexpected": 0,
            "unavailable_max_s": 1.5, "valid": True}
    finished(tmp_path, "a", ["kill"], ["leader", "one", "minority", "majority", "all"], 0, good)
    finished(tmp_path, "b", ["power-loss"], ["all"], 3, good)
    runner = CliRunner()
    result = runner.invoke(chaos_command, ["table", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "power-loss@all" in result.output and "INVALID" not in result.output
    finished(tmp_path, "c", ["corrupt"], [], 1, None)
    finished(tmp_path, "d", ["clock"], [], 2, {**good, "lost": 2, "valid": False})
    result = runner.invoke(chaos_command, ["table", str(tmp_path)])
    assert result.exit_code == 1 and "ERROR" in result.output and "INVALID" in result.output


def test_a_run_given_every_kind_shows_all_and_what_struck(tmp_path: Path) -> None:
    """A run asked for every kind is `all`, not fourteen names, and its row says which faults
    struck (run.json's faults_struck), not what was asked."""
    from chaos.generator import NEMESES

    good = {"attempted": 10, "acknowledged": 10, "lost": 0, "stored_duplicates": 0, "unexpected": 0,
            "unavailable_max_s": 0.5, "valid": True}
    run_dir = tmp_path / "every"
    run_dir.mkdir()
    asked = list(NEMESES)
    (run_dir / "run.json").write_text(json.dumps({
        "options": {"nemeses": [n for n in asked if n != "drain"], "targets": [], "seed": 4, "asked": asked},
        "nemeses_asked": asked, "faults_struck": {"transfer": 1, "kill": 2}}))
    (run_dir / "results.json").write_text(json.dumps(good))
    result = CliRunner().invoke(chaos_command, ["table", str(tmp_path)], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "transfer ×1, kill ×2" in result.output, result.output
    assert "power-loss" not in result.output and " all " in result.output, result.output

"""The synthetic run generator (spark_audit.synth): a run whose history matches its files."""

from __future__ import annotations

import json
from pathlib import Path

from spark_audit.synth import make_run


def test_a_synthetic_run_receives_every_acknowledged_send(tmp_path: Path) -> None:
    made = make_run(tmp_path, "s", groups=2, members=3, messages=40, batch=10)
    ops = [json.loads(line) for line in (made.path / "history.jsonl").read_text().splitlines()]
    sent = sorted(op["value"] for op in ops if op["f"] == "send" and op["type"] == "ok")
    received = sorted(op["value"] for op in ops if op["f"] == "receive" and op["type"] == "ok")
    assert len(sent) == 80 and received == sent
    assert made.planted == []
    assert sorted(p.name for p in (made.path / "data" / "g1").iterdir()) == ["n1", "n2", "n3"]

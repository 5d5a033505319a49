"""One short end-to-end run per nemesis family beyond kill, pause and partition
(tests/chaos/test_chaos_runs.py has those): real processes, the queue workload, the faults of
the schedule really made (each recorded `ok` with what it did), and the run valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.environment import requirements
from chaos.history import read_history
from chaos.run import RunOptions, run

pytestmark = pytest.mark.integration

FAMILIES = ("power-loss", "corrupt", "clock", "disk-full", "packet")


@pytest.mark.parametrize("nemesis", FAMILIES)
def test_a_short_run_under_each_nemesis_is_valid(nemesis: str, tmp_path: Path) -> None:
    problems = requirements([nemesis])
    if problems:
        pytest.skip("; ".join(problems))
    # Power loss with a backlog (consumers start at the drain), the control of the planted
    # no-fsync bug's run in test_chaos_runs.py: acknowledged messages wait through the faults.
    # A corruption stops its node, damages a file and restarts it: on two cores under a full suite
    # only one fitted in 14 s (once in a CI run), so it gets longer.
    limit = 18 if nemesis == "corrupt" else 14
    run_dir, result = run(RunOptions(nemeses=(nemesis,), time_limit_s=limit, rate=40, concurrency=3, seed=2,
                                     out=tmp_path / "runs", backlog=nemesis == "power-loss"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 200 and result.lost == 0
    made = [op for op in read_history(run_dir / "nemesis.jsonl") if op.f == nemesis and op.type == "ok"]
    assert len(made) >= 2, f"the schedule made {len(made)} {nemesis} faults"
    healed = [op for op in read_history(run_dir / "nemesis.jsonl") if op.f == "heal" and op.type == "fail"]
    assert not healed, healed  # every fault was undone
    if nemesis == "power-loss":
        assert sum(sum(op.value["dropped_bytes"].values()) for op in made) > 0  # un-fsynced writes were lost
    if nemesis == "corrupt":
        assert any(op.value["damage"] for op in made)
    network = json.loads((run_dir / "run.json").read_text())["network"]
    assert network == ("namespaces" if nemesis == "packet" else "loopback")
    assert any((run_dir / "data" / "g1").glob("n*/raft/raft.journal"))  # every node's files stay for the audit

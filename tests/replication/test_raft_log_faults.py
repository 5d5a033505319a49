"""RaftLog under faults, members as real processes (kill -9, SIGSTOP) through the harness of
bench/raft_bench.py, which kills them by pid at teardown: no acknowledged append is ever lost
or stored twice.
"""

from __future__ import annotations

import importlib.util
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def load_harness() -> Any:
    spec = importlib.util.spec_from_file_location("raft_bench", ROOT / "bench" / "raft_bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = load_harness()


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[Any]:
    group = harness.Group(3, root=str(tmp_path))
    try:
        yield group.start()
    finally:
        group.close()


def committed_ids(member: Any) -> list[str]:
    return member.request("ids")["ids"]


def test_kill_9_of_the_leader_loses_no_acknowledged_append(process_group: Any) -> None:
    leader = process_group.leader()
    stream = leader.send("stream", prefix="a", count=100_000, concurrency=20, body=512)
    time.sleep(1.0)
    acked_before_kill = list(leader.acked)
    leader.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    new_leader = process_group.leader(timeout=5, exclude=leader)
    reply = new_leader.request("append", ids=["after-kill"], timeout=5)
    assert reply["acked"] == ["after-kill"]
    assert time.monotonic() - killed_at < 3.0
    acked = set(leader.acked)
    assert len(acked_before_kill) > 100
    ids = committed_ids(new_leader)
    assert acked <= set(ids), f"{len(acked - set(ids))} acknowledged appends lost"
    assert len(ids) == len(set(ids)), "an append was stored twice"
    del stream


def test_kill_9_of_every_member_then_restart_keeps_every_acknowledged_append(process_group: Any) -> None:
    leader = process_group.leader()
    leader.send("stream", prefix="b", count=100_000, concurrency=20, body=512)
    time.sleep(1.0)
    for member in process_group.members:
        member.signal(signal.SIGKILL)
    acked = set(leader.acked)
    assert len(acked) > 100
    for member in process_group.members:
        member.start()
    new_leader = process_group.leader(timeout=10)
    assert new_leader.request("append", ids=["after-restart"], timeout=5)["acked"] == ["after-restart"]
    for member in process_group.members:
        deadline = time.monotonic() + 5
        while "after-restart" not in (ids := committed_ids(member)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert acked <= set(ids), f"{member.address} lost {len(acked - set(ids))} acknowledged appends"
        assert len(ids) == len(set(ids))


def test_a_paused_leader_acknowledges_nothing_uncommitted_and_steps_down(process_group: Any) -> None:
    leader = process_group.leader()
    leader.send("stream", prefix="c", count=100_000, concurrency=20, body=512)
    time.sleep(0.5)
    leader.signal(signal.SIGSTOP)
    try:
        new_leader = process_group.leader(timeout=5, exclude=leader)
        assert new_leader.request("append", ids=["while-paused"], timeout=5)["acked"] == ["while-paused"]
    finally:
        leader.signal(signal.SIGCONT)
    deadline = time.monotonic() + 3
    while leader.request("status")["status"]["is_leader"] and time.monotonic() < deadline:
        time.sleep(0.02)
    leaders = [m for m in process_group.members if m.request("status")["status"]["is_leader"]]
    assert len(leaders) == 1 and leaders[0] is not leader
    time.sleep(0.3)  # acks the resumed old leader might still emit
    ids = committed_ids(leaders[0])
    acked = set(leader.acked)
    assert acked <= set(ids), f"{len(acked - set(ids))} appends acknowledged by the paused leader were not committed"
    assert len(ids) == len(set(ids))

"""The drain waits for acknowledged values that have not arrived yet, longer than for quiet alone:
a group killed near a run's end may need a restart, an election and its links' reconnection
before what it holds flows again, and a value that is late is not a value lost."""

from __future__ import annotations

import pytest

from chaos.client import QueueWorkload
from chaos.history import FAIL, INFO, INVOKE, OK, History
from chaos.run import DRAIN_AWAITED_S, DRAIN_IDLE_S, WORKLOADS, draining
from chaos.workload import Env, Workload


def workload(kind: type[Workload] = QueueWorkload) -> tuple[Workload, History]:
    history = History()
    return kind(Env(("stomp://127.0.0.1:1",), history, 1, 0.1, 1, mqtt=(("127.0.0.1:1",),))), history


@pytest.mark.parametrize("kind", WORKLOADS.values(), ids=WORKLOADS.keys())
def test_every_workload_awaits_its_acknowledged_values(kind: type[Workload]) -> None:
    w, history = workload(kind)
    history.record("p0", INVOKE, "send", "p0-1")
    history.record("p0", OK, "send", "p0-1")
    assert w.awaited() == 1
    history.record("c0", OK, "receive", "p0-1")
    assert w.awaited() == 0
    history.record("p0", OK, "send", "p0-2")
    history.record("c0", OK, "receive", {"value": "p0-2", "term": 3, "plain": True})  # as the stale workload's
    assert w.awaited() == 0


def test_a_committed_transactions_values_are_awaited_and_an_aborted_ones_not() -> None:
    w, history = workload()
    committed = {"id": "p0-t0", "values": ["p0-0", "p0-1"], "abort": False}
    history.record("p0", INVOKE, "txn", committed)
    assert w.awaited() == 0  # not committed yet
    history.record("p0", OK, "txn", committed)
    aborted = {"id": "p0-t1", "values": ["p0-2"], "abort": True}
    history.record("p0", INVOKE, "txn", aborted)
    history.record("p0", FAIL, "txn", aborted, error="aborted")
    assert w.awaited() == 2
    history.record("c0", OK, "receive", "p0-1")
    assert w.awaited() == 1


def test_acknowledged_values_not_received_are_awaited_once_each() -> None:
    w, history = workload()
    assert w.awaited() == 0
    for value in ("p0-1", "p0-2", "p0-3"):
        history.record("p0", INVOKE, "send", value)
        history.record("p0", OK, "send", value)
    history.record("p0", INVOKE, "send", "p0-4")
    history.record("p0", INFO, "send", "p0-4", error="timed out")  # not acknowledged: not awaited
    assert w.awaited() == 3
    history.record("c0", OK, "receive", "p0-2")
    history.record("c1", OK, "receive", "p0-2", redelivered=True)  # twice is still one
    history.record("c1", OK, "receive", "p0-4")  # an indeterminate value arriving counts for nothing
    assert w.awaited() == 2
    history.record("c0", OK, "receive", "p0-1")
    history.record("c0", OK, "receive", "p0-3")
    assert w.awaited() == 0


def test_a_value_received_before_its_acknowledgement_is_not_awaited() -> None:
    w, history = workload()
    history.record("p0", INVOKE, "send", "p0-1")
    history.record("c0", OK, "receive", "p0-1")  # delivered before the receipt came back
    assert w.awaited() == 0
    history.record("p0", OK, "send", "p0-1")
    assert w.awaited() == 0


def test_the_drain_waits_longer_only_while_values_are_awaited() -> None:
    assert draining(0.0, 0) and draining(DRAIN_IDLE_S - 0.1, 0)
    assert not draining(DRAIN_IDLE_S, 0)  # quiet and nothing awaited: done
    assert draining(DRAIN_IDLE_S + 0.1, 1) and draining(DRAIN_AWAITED_S - 0.1, 5)
    assert not draining(DRAIN_AWAITED_S, 1)  # lost, not late: the checker says so


def test_the_docs_say_how_long_the_drain_waits() -> None:
    from pathlib import Path

    from chaos.run import DRAIN_MAX_S
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "chaos.md").read_text().split())
    said = (f"The drain ends after {DRAIN_IDLE_S:g} s without a delivery, or, while acknowledged values (a receipted "
            "send's, a committed transaction's) have reached no consumer yet, after "
            f"{DRAIN_AWAITED_S:g} s without one (at most {DRAIN_MAX_S:g} s)")
    assert said in text

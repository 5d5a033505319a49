"""The drain waits for acknowledged values that have not arrived yet, longer than for quiet alone:
a group killed near a run's end may need a restart, an election and its links' reconnection
before what it holds flows again, and a value that is late is not a value lost."""

from __future__ import annotations

import pytest

from chaos.client import QueueWorkload
from chaos.cross_group import CrossGroupWorkload, SharedQueueWorkload
from chaos.history import INFO, INVOKE, OK, History
from chaos.mqtt import MqttWorkload
from chaos.run import DRAIN_AWAITED_S, DRAIN_IDLE_S, draining
from chaos.topic import TopicWorkload
from chaos.workload import Env, Workload


def workload(kind: type[Workload] = QueueWorkload) -> tuple[Workload, History]:
    history = History()
    return kind(Env(("stomp://127.0.0.1:1",), history, 1, 0.1, 1, mqtt=(("127.0.0.1:1",),))), history


@pytest.mark.parametrize("kind", [QueueWorkload, CrossGroupWorkload, SharedQueueWorkload, TopicWorkload,
                                  MqttWorkload])
def test_the_workloads_that_send_values_for_consumers_await_them(kind: type[Workload]) -> None:
    w, history = workload(kind)
    history.record("p0", INVOKE, "send", "p0-1")
    history.record("p0", OK, "send", "p0-1")
    assert w.awaited() == 1
    history.record("c0", OK, "receive", "p0-1")
    assert w.awaited() == 0


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
    said = (f"The drain ends after {DRAIN_IDLE_S:g} s without a delivery, or, while acknowledged values of a queue "
            "workload (queue, cross-group, shared-queue), the topic or the mqtt workload have reached no consumer "
            f"yet, after {DRAIN_AWAITED_S:g} s without one (at most {DRAIN_MAX_S:g} s)")
    assert said in text

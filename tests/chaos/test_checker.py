"""The queue checker on synthetic histories: each anomaly it exists for, and the valid case."""

from __future__ import annotations

from pathlib import Path

from chaos.checker import check_queue
from chaos.history import FAIL, INFO, INVOKE, OK, History, read_history
from tests.helpers.histories import Builder as HistoryBuilder


class Builder(HistoryBuilder):
    def send(self, value: str, outcome: str = OK) -> None:
        self.op(value.split("-")[0], INVOKE, "send", value)
        self.op(value.split("-")[0], outcome, "send", value)

    def receive(self, value: str, consumer: str = "c1", redelivered: bool = False) -> None:
        self.op(consumer, OK, "receive", value, redelivered)


def test_a_clean_history_is_valid() -> None:
    b = Builder()
    for i in range(5):
        b.send(f"p1-{i}")
        b.receive(f"p1-{i}")
    result = check_queue(b.history.ops)
    assert result.valid and (result.attempted, result.acknowledged, result.received, result.lost) == (5, 5, 5, 0)


def test_lost_values_are_placed_in_their_producers_sequence() -> None:
    b = Builder()
    for i in range(6):
        b.send(f"p1-{i}")
    for i in (1, 3):
        b.receive(f"p1-{i}")
    result = check_queue(b.history.ops)
    assert not result.valid
    assert (result.lost, result.lost_prefix, result.lost_middle, result.lost_postfix) == (4, 1, 1, 2)
    assert result.lost_values == ["p1-0", "p1-2", "p1-4", "p1-5"]


def test_unknown_outcomes_are_neither_lost_nor_unexpected() -> None:
    b = Builder()
    b.send("p1-0", INFO)
    b.send("p1-1", INFO)
    b.receive("p1-1")
    b.op("p1", INVOKE, "send", "p1-2")  # the run ended before its outcome
    result = check_queue(b.history.ops)
    assert result.valid and result.indeterminate == 3 and result.recovered == 1 and result.lost == 0


def test_a_value_nobody_sent_or_whose_send_failed_is_unexpected() -> None:
    b = Builder()
    b.send("p1-0", FAIL)
    b.receive("p1-0")
    b.receive("p9-7")
    result = check_queue(b.history.ops)
    assert not result.valid and result.unexpected == 2 and result.unexpected_values == ["p1-0", "p9-7"]


def test_a_redelivery_is_allowed_and_a_second_stored_copy_is_not() -> None:
    b = Builder()
    b.send("p1-0")
    b.send("p1-1")
    b.receive("p1-0")
    b.receive("p1-0", redelivered=True)
    assert check_queue(b.history.ops).redelivered == 1
    b.receive("p1-1")
    b.receive("p1-1")
    result = check_queue(b.history.ops)
    assert not result.valid and result.stored_duplicates == 1 and result.duplicated_values == ["p1-1"]


def test_a_redelivery_recorded_before_the_delivery_it_follows_is_still_a_redelivery() -> None:
    # A migrating consumer (c1) got the MESSAGE just before its DISCONNECT; the redelivery
    # that DISCONNECT caused reached c3, whose reception the history holds first.
    b = Builder()
    b.send("p0-314")
    b.receive("p0-314", consumer="c3", redelivered=True)
    b.receive("p0-314", consumer="c1")
    result = check_queue(b.history.ops)
    assert result.valid and (result.redelivered, result.stored_duplicates) == (1, 0)
    b.receive("p0-314", consumer="c2")  # a second delivery without the flag: a second stored copy
    result = check_queue(b.history.ops)
    assert not result.valid and result.stored_duplicates == 1 and result.duplicated_values == ["p0-314"]


def test_reordering_is_counted_not_judged() -> None:
    b = Builder()
    for i in range(3):
        b.send(f"p1-{i}")
    for i in (0, 2, 1):
        b.receive(f"p1-{i}")
    result = check_queue(b.history.ops)
    assert result.valid and result.reordered == 1


def test_unavailability_and_recovery_after_heal() -> None:
    b = Builder()
    b.send("p1-0")
    b.op("p1", INVOKE, "send", "p1-1")
    b.clock += 3.0  # no ok for three seconds
    b.op("nemesis", OK, "heal")
    b.clock += 0.5
    b.op("p1", OK, "send", "p1-1")
    result = check_queue(b.history.ops)
    assert result.unavailable_max_s >= 3.0 and result.recovery_s == [0.51]


def test_a_history_round_trips_through_its_file(tmp_path: Path) -> None:
    history = History(tmp_path / "history.jsonl")
    history.record("p1", INVOKE, "send", "p1-0", node="g1/n1")
    history.record("p1", INFO, "send", "p1-0", error="connection lost")
    history.close()
    ops = read_history(tmp_path / "history.jsonl")
    assert [(op.type, op.value, op.node, op.error) for op in ops] == [
        (INVOKE, "p1-0", "g1/n1", None), (INFO, "p1-0", None, "connection lost")]

"""The topic checker on synthetic histories: what each subscriber was owed, and each anomaly."""

from __future__ import annotations

from chaos.history import FAIL, INFO, INVOKE, OK
from chaos.topic_checker import check_topic
from tests.helpers.histories import Builder as HistoryBuilder


class Builder(HistoryBuilder):
    """Sends, subscription windows and deliveries on topics."""

    def subscribe(self, process: str, durable: bool, outcome: str = OK) -> None:
        self.op(process, INVOKE, "subscribe", {"durable": durable})
        self.op(process, outcome, "subscribe", {"durable": durable})

    def detach(self, process: str, durable: bool) -> None:
        self.op(process, OK, "detach", {"durable": durable})

    def send(self, value: str, outcome: str = OK) -> None:
        self.op(value.split("-")[0], INVOKE, "send", value)
        self.op(value.split("-")[0], outcome, "send", value)

    def receive(self, process: str, value: str, redelivered: bool = False) -> None:
        self.op(process, OK, "receive", value, redelivered)


def test_every_subscriber_gets_its_copy_and_the_history_is_valid() -> None:
    b = Builder()
    b.subscribe("d0", True)
    b.subscribe("s0", False)
    for i in range(4):
        b.send(f"p1-{i}")
        b.receive("d0", f"p1-{i}")
        b.receive("s0", f"p1-{i}")
    result = check_topic(b.history.ops)
    assert result.valid, result.to_dict()
    assert (result.owed, result.received, result.deliveries, result.stored_duplicates) == (4, 4, 8, 0)
    assert (result.durable_subscribers, result.non_durable_subscribers, result.windows) == (1, 1, 2)


def test_a_durable_subscriber_is_owed_what_was_sent_while_it_was_away_and_a_loss_is_placed() -> None:
    b = Builder()
    b.send("p1-0")  # before it subscribed: not owed
    b.subscribe("d0", True)
    b.send("p1-1")
    b.receive("d0", "p1-1")
    b.detach("d0", True)  # it crashed
    b.send("p1-2")  # sent while it was away: still owed
    b.send("p1-3")
    b.subscribe("d0", True)
    b.receive("d0", "p1-3")
    b.send("p1-4")
    result = check_topic(b.history.ops)
    assert not result.valid and result.owed == 4
    assert (result.lost, result.lost_middle, result.lost_postfix) == (2, 1, 1)
    assert result.lost_values == ["d0:p1-2", "d0:p1-4"]


def test_a_send_concurrent_with_the_first_subscribe_is_not_owed() -> None:
    b = Builder()
    b.op("p1", INVOKE, "send", "p1-0")
    b.subscribe("d0", True)
    b.op("p1", OK, "send", "p1-0")
    result = check_topic(b.history.ops)
    assert result.valid and result.owed == 0 and result.lost == 0


def test_a_non_durable_subscriber_is_never_lost_but_its_gaps_are_counted() -> None:
    b = Builder()
    b.subscribe("s0", False)
    b.send("p1-0")  # sent within the window and never received: a gap
    b.detach("s0", False)
    b.send("p1-1")  # while it was disconnected: not a gap
    b.subscribe("s0", False)
    b.send("p1-2")
    b.receive("s0", "p1-2")
    result = check_topic(b.history.ops)
    assert result.valid and result.lost == 0 and result.gaps == 1 and result.windows == 2


def test_a_value_stored_before_the_subscription_was_made_is_unexpected() -> None:
    b = Builder()
    b.send("p1-0")
    b.send("p1-1")
    b.subscribe("s0", False)
    b.receive("s0", "p1-0")  # a non-durable subscription made after p1-0 was stored
    b.subscribe("d0", True)
    b.receive("d0", "p1-1")  # so was the durable one
    result = check_topic(b.history.ops)
    assert not result.valid and result.early == 2 and result.unexpected == 2
    assert result.unexpected_values == ["d0:p1-1", "s0:p1-0"]


def test_a_non_durable_window_after_a_reconnect_owes_nothing_from_before_it() -> None:
    b = Builder()
    b.subscribe("s0", False)
    b.send("p1-0")
    b.detach("s0", False)
    b.subscribe("s0", False)
    b.receive("s0", "p1-0")  # its old subscription ended with the connection: this copy cannot exist
    result = check_topic(b.history.ops)
    assert not result.valid and result.early == 1


def test_unsent_and_failed_values_are_unexpected_and_unknown_ones_recovered() -> None:
    b = Builder()
    b.subscribe("d0", True)
    b.send("p1-0", FAIL)
    b.send("p1-1", INFO)
    b.receive("d0", "p1-0")
    b.receive("d0", "p1-1")
    b.receive("d0", "p9-9")
    result = check_topic(b.history.ops)
    assert not result.valid and result.unexpected == 2 and result.recovered == 1
    assert result.unexpected_values == ["d0:p1-0", "d0:p9-9"]


def test_a_copy_per_subscriber_is_no_duplicate_but_a_second_unflagged_copy_is() -> None:
    b = Builder()
    b.subscribe("d0", True)
    b.subscribe("d1", True)
    b.send("p1-0")
    b.receive("d0", "p1-0")
    b.receive("d1", "p1-0")
    b.receive("d1", "p1-0", redelivered=True)
    assert check_topic(b.history.ops).valid
    b.receive("d0", "p1-0")
    result = check_topic(b.history.ops)
    assert not result.valid and result.stored_duplicates == 1 and result.redelivered == 1


def test_across_groups_a_durable_is_owed_from_the_first_value_that_reached_it() -> None:
    b = Builder()
    b.op("p1", OK, "open", {"group": 0})
    b.op("d0", INVOKE, "subscribe", {"durable": True, "group": 1})
    b.op("d0", OK, "subscribe", {"durable": True, "group": 1})
    b.op("s0", INVOKE, "subscribe", {"durable": False, "group": 1})
    b.op("s0", OK, "subscribe", {"durable": False, "group": 1})
    for i in range(5):
        b.send(f"p1-{i}")  # p1-0 went out before group 0 knew of the subscriptions: not owed
    b.op("s1", INVOKE, "subscribe", {"durable": False, "group": 1})
    b.op("s1", OK, "subscribe", {"durable": False, "group": 1})
    b.receive("s1", "p1-4")  # its copy crossed the bridge after s1 subscribed: not early
    for i in (1, 2, 4):
        b.receive("d0", f"p1-{i}")
    result = check_topic(b.history.ops)
    assert not result.valid and result.early == 0 and result.gaps == 0  # s0 missed everything: not judged
    assert (result.owed, result.lost, result.lost_values) == (3, 1, ["d0:p1-3"])

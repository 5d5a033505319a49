"""The mqtt checker on hand-made histories: what each subscriber (and each shared group) was
owed, what MQTT and raftmq promise about repeats, and each anomaly caught."""

from __future__ import annotations

from typing import Any

from chaos.history import FAIL, INFO, INVOKE, OK
from chaos.mqtt_checker import check_mqtt, qos_of
from tests.helpers.histories import Builder as HistoryBuilder


class Builder(HistoryBuilder):
    """Publishers, kept-session subscribers and their deliveries, as chaos.mqtt records them."""

    def open(self, publisher: str, qos: int, protocol: str = "3.1.1") -> None:
        self.op(publisher, OK, "open", {"qos": qos, "protocol": protocol})

    def subscribe(self, process: str, outcome: str = OK, share: str | None = None) -> None:
        about: dict[str, Any] = {"kept": True, "protocol": "5", "share": share}
        self.op(process, INVOKE, "subscribe", about)
        self.op(process, outcome, "subscribe", {**about, "qos": 1} if outcome == OK else about,
                error="SUBACK 0x9e" if outcome == FAIL else None)

    def send(self, value: str, outcome: str = OK) -> None:
        publisher = value.split("-")[0]
        self.op(publisher, INVOKE, "send", value)
        self.op(publisher, outcome, "send", value)

    def receive(self, process: str, value: str, dup: bool = False) -> None:
        self.op(process, OK, "receive", value, redelivered=dup)

    def reconnect(self, process: str, present: bool) -> None:
        self.op(process, OK, "connect", {"present": present})


def publishers(b: Builder) -> None:
    b.open("q1p0", 1)
    b.open("q2p1", 2, "5")


def test_every_kept_subscriber_and_the_shared_group_get_every_value_and_the_history_is_valid() -> None:
    b = Builder()
    publishers(b)
    for name in ("k0", "k1"):
        b.subscribe(name)
    b.subscribe("s0", share="g")
    b.subscribe("s1", share="g")
    for i in range(3):
        for value in (f"q1p0-{i}", f"q2p1-{i}"):
            b.send(value)
            b.receive("k0", value)
            b.receive("k1", value)
            b.receive("s0" if i % 2 else "s1", value)  # competing consumers: one member each
    b.op("k0", OK, "detach", {"why": "crashed"})
    b.reconnect("k0", present=True)
    b.receive("k0", "q2p1-2", dup=True)  # unacknowledged when it crashed: again, flagged DUP
    result = check_mqtt(b.history.ops)
    assert result.valid, result.to_dict()
    assert (result.acknowledged, result.qos2_acknowledged, result.owed) == (6, 3, 18)
    assert (result.subscribers, result.shared_subscribers, result.resumed) == (2, 2, 1)
    assert result.redelivered == 1 and result.stored_duplicates == 0
    assert result.protocols == {"3.1.1": 3, "5": 3}


def test_a_kept_subscriber_is_owed_what_was_acknowledged_after_its_suback_and_a_loss_is_placed() -> None:
    b = Builder()
    publishers(b)
    b.send("q1p0-0")  # before the subscription was granted: not owed
    b.subscribe("k0")
    b.send("q1p0-1")
    b.receive("k0", "q1p0-1")
    b.op("k0", OK, "detach", {"why": "crashed"})
    b.send("q1p0-2")  # published while it was away: its session collects it, owed
    b.send("q1p0-3", INFO)  # unknown outcome: not owed
    b.reconnect("k0", present=True)
    b.send("q1p0-4")
    b.receive("k0", "q1p0-4")
    b.send("q2p1-0")  # completed, never delivered: owed and lost (before all of q2p1's it received: none)
    result = check_mqtt(b.history.ops)
    assert not result.valid and result.owed == 4
    assert (result.lost, result.lost_middle, result.lost_prefix) == (2, 1, 1)
    assert result.lost_values == ["k0:q1p0-2", "k0:q2p1-0"]


def test_a_shared_group_is_owed_each_value_once_by_its_members_as_a_whole() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("s0", share="g")
    b.subscribe("s1", share="g")
    for i in range(4):
        b.send(f"q1p0-{i}")
    b.receive("s0", "q1p0-0")
    b.receive("s1", "q1p0-1")
    b.receive("s1", "q1p0-3")
    result = check_mqtt(b.history.ops)
    assert not result.valid and result.owed == 4  # one group, not two members
    assert (result.lost, result.lost_values) == (1, ["$share/g:q1p0-2"])


def test_a_refused_shared_subscription_is_owed_nothing() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("k0")
    b.subscribe("s0", FAIL, share="g")  # SUBACK 0x9E: shared subscriptions not supported
    b.send("q1p0-0")
    b.receive("k0", "q1p0-0")
    result = check_mqtt(b.history.ops)
    assert result.valid and result.owed == 1
    assert (result.subscribers, result.shared_subscribers, result.shared_refused) == (1, 0, 1)


def test_a_completed_qos_2_value_received_twice_as_new_is_a_stored_duplicate() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("k0")
    b.subscribe("k1")
    b.send("q2p1-0")
    b.receive("k0", "q2p1-0")
    b.receive("k1", "q2p1-0")  # each subscriber its own copy: no duplicate
    b.receive("k0", "q2p1-0", dup=True)  # delivered again, flagged: allowed
    assert check_mqtt(b.history.ops).valid
    b.receive("k0", "q2p1-0")  # a second copy without DUP: stored twice (or a redelivery unflagged)
    result = check_mqtt(b.history.ops)
    assert not result.valid and result.stored_duplicates == 1
    assert result.duplicated_values == ["k0:q2p1-0"]


def test_qos_1_repeats_and_those_of_unfinished_qos_2_flows_are_counted_not_judged() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("k0")
    b.send("q1p0-0")
    b.send("q2p1-0", INFO)  # its PUBCOMP never came: MQTT promises nothing about its copies
    for _ in range(2):
        b.receive("k0", "q1p0-0")  # QoS 1: at least once
        b.receive("k0", "q2p1-0")
    result = check_mqtt(b.history.ops)
    assert result.valid, result.to_dict()
    assert (result.stored_duplicates, result.repeats_not_judged, result.recovered) == (0, 2, 1)


def test_values_never_sent_or_certainly_refused_are_unexpected() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("k0")
    b.send("q1p0-0", FAIL)  # a PUBACK with an error reason code: not stored
    b.receive("k0", "q1p0-0")
    b.receive("k0", "q9p9-9")
    result = check_mqtt(b.history.ops)
    assert not result.valid and result.unexpected == 2
    assert result.unexpected_values == ["k0:q1p0-0", "k0:q9p9-9"]


def test_a_kept_session_found_missing_is_a_session_lost() -> None:
    b = Builder()
    publishers(b)
    b.subscribe("k0")
    b.reconnect("k0", present=True)
    assert check_mqtt(b.history.ops).valid
    b.reconnect("k0", present=False)  # the group forgot the session (and its subscription)
    b.subscribe("k0")
    result = check_mqtt(b.history.ops)
    assert not result.valid and (result.sessions_lost, result.resumed) == (1, 1)
    b.reconnect("q2p1", present=False)  # a QoS 2 publisher's kept session, with its flows
    assert check_mqtt(b.history.ops).sessions_lost == 2


def test_a_session_not_yet_subscribed_may_be_absent() -> None:
    b = Builder()
    b.op("k0", INVOKE, "subscribe", {"kept": True, "share": None})
    b.op("k0", INFO, "subscribe", {"kept": True, "share": None})  # the connection broke before the SUBACK
    b.reconnect("k0", present=False)
    b.subscribe("k0")
    assert check_mqtt(b.history.ops).valid


def test_a_values_qos_is_its_publishers() -> None:
    opened = {"a": {"qos": 2}, "q1p3": {"qos": 1}}
    assert [qos_of(v, opened) for v in ("a-1", "q1p3-2", "q2p1-0", "q1p0-0", "x-1", 7)] == [2, 1, 2, 1, 1, 1]

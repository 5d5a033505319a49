"""Retained messages in the core (raftmq.core.retained): kept per topic by a SEND's
`mqtt-retain` header, copied into a subscription that asks (`Recover`), in snapshots as bytes."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import Connect, Recover, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver
from raftmq.core.snapshot import body_refs, journal_indexes
from raftmq.protocol.header_block import block_of, first


def send(broker: Broker, topic: str, body: bytes, retain: str | None = "true", now: int = 1, **headers: str) -> None:
    pairs = [*((("mqtt-retain", retain),) if retain else ()), *headers.items()]
    broker.apply(Send("p", topic, block_of(pairs), body, now))


def recovered(broker: Broker, session: str, sub_id: str, destination: str, now: int = 10,
              selector: str | None = None) -> list[tuple[str, bytes]]:
    broker.apply(Subscribe(session, sub_id, destination, now, selector=selector))
    effects = broker.apply(Recover(session, sub_id, now))
    delivered = [e for e in effects if isinstance(e, Deliver)]
    assert all(first(e.message.headers, "mqtt-retained") == "1" for e in delivered)
    return [(e.destination, bytes(e.message.body)) for e in delivered]


def broker_with_clients() -> Broker:
    broker = Broker()
    for session in ("p", "s", "t", "u"):
        broker.apply(Connect(session, 0))
    return broker


def test_the_last_retained_message_of_each_topic_goes_to_a_subscription_that_asks() -> None:
    broker = broker_with_clients()
    send(broker, "/topic/home.kitchen.temp", b"19")
    send(broker, "/topic/home.kitchen.temp", b"21")  # the newest replaces it
    send(broker, "/topic/home.hall.temp", b"18", colour="red")
    send(broker, "/topic/home.hall.light", b"on", retain=None)  # not retained
    assert recovered(broker, "s", "s1", "/topic/home.*.temp") == [
        ("/topic/home.kitchen.temp", b"21"), ("/topic/home.hall.temp", b"18")]
    red = recovered(broker, "t", "t1", "/topic/home.>", selector="colour = 'red'")
    assert red == [("/topic/home.hall.temp", b"18")]
    send(broker, "/topic/home.kitchen.temp", b"", retain="clear")  # MQTT's empty retained message
    assert recovered(broker, "u", "u1", "/topic/home.kitchen.temp") == []
    # A subscription that does not ask gets none; a queue or a temporary topic keeps none.
    effects = broker.apply(Subscribe("u", "u2", "/topic/home.hall.temp", 11))
    assert not [e for e in effects if isinstance(e, Deliver)]
    send(broker, "/queue/q", b"x")
    assert list(broker.state.retained) == ["/topic/home.hall.temp"]


def test_a_retained_message_that_expired_is_forgotten() -> None:
    broker = broker_with_clients()
    send(broker, "/topic/a", b"short", now=1, expires="5")
    send(broker, "/topic/b", b"long", now=1)
    assert recovered(broker, "s", "s1", "/topic/*", now=10) == [("/topic/b", b"long")]
    assert list(broker.state.retained) == ["/topic/b"]


def test_retained_messages_are_in_snapshots_as_bytes_and_pin_no_journal_segment() -> None:
    broker = Broker()
    broker.begin_entry(7)  # a group member: each Send's body becomes a body-journal reference
    broker.apply(Connect("p", 0))
    send(broker, "/topic/a", b"kept as bytes")
    dump = broker.snapshot()
    assert dump["retained"][0][0] == "/topic/a" and dump["retained"][0][1][3] == b"kept as bytes"
    assert list(body_refs(dump)) == list(broker.body_refs()) == [b"kept as bytes"]
    assert journal_indexes(dump) == set()  # so it keeps no segment of the body journal from collection
    again = Broker.restore(dump, CoreConfig())
    again.apply(Connect("s", 0))
    assert recovered(again, "s", "s1", "/topic/a") == [("/topic/a", b"kept as bytes")]
    assert "retained" not in Broker().snapshot()  # a broker without any writes what it always wrote

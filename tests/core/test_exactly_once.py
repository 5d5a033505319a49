"""QoS 2's exactly once in the core (raftmq.core.exactly_once): a SEND whose `mqtt-once` key is
kept is not stored again, until the key is released; keys are in snapshots."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import Connect, Release, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Receipt
from raftmq.protocol.header_block import block_of


def publish(broker: Broker, key: str, body: bytes, receipt: str) -> list[object]:
    return broker.apply(Send("p", "/topic/meter", block_of([("mqtt-qos", "2"), ("mqtt-once", key)]), body, 1, None,
                             receipt))


def test_a_key_kept_stores_a_publication_once_and_its_release_lets_the_id_be_used_again() -> None:
    broker = Broker()
    for session in ("p", "s"):
        broker.apply(Connect(session, 0))
    broker.apply(Subscribe("s", "s1", "/topic/meter", 0))
    first = publish(broker, "mqtt:1:d:7", b"one", "q7")
    again = publish(broker, "mqtt:1:d:7", b"one", "q7")  # the PUBLISH sent again (no PUBREC seen)
    assert [type(e) for e in first] == [Deliver, Receipt] and [type(e) for e in again] == [Receipt]
    delivered = [e for e in first if isinstance(e, Deliver)][0]
    assert "mqtt-once" not in delivered.message.headers  # not stored with the message
    snapshot = Broker.restore(broker.snapshot(), CoreConfig())
    assert [type(e) for e in publish(snapshot, "mqtt:1:d:7", b"one", "q7")] == [Receipt]  # the next leader too
    assert broker.apply(Release("p", "mqtt:1:d:7", 2, receipt="c7")) == [Receipt("p", "c7")]
    assert [type(e) for e in publish(broker, "mqtt:1:d:7", b"two", "q7")] == [Deliver, Receipt]
    publish(broker, "mqtt:1:d:8", b"three", "q8")
    broker.apply(Release("p", "mqtt:1:d:", 3, every=True))  # a session's end: each of its keys
    assert broker.state.once == {}

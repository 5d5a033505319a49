"""The node hands a SEND's receipt to its session before the deliveries the SEND caused."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Receipt
from raftmq.server.replica.state_machine import receipt_first as _receipt_first


def test_the_receipt_goes_first_unless_its_session_also_gets_a_delivery() -> None:
    broker = Broker(CoreConfig())
    for session in ("producer", "consumer"):
        broker.apply(Connect(session, 1))
    broker.apply(Subscribe("consumer", "s", "/queue/q", 1, ack="client-individual"))
    broker.apply(Subscribe("producer", "s", "/queue/mine", 1))

    effects = broker.apply(Send("producer", "/queue/q", "", b"m", 2, receipt="r1"))
    assert [type(e) for e in effects] == [Deliver, Receipt]  # the core's order
    reordered = _receipt_first(effects)
    assert reordered is effects  # in place: no list made per SEND
    assert [(type(e), e.session) for e in reordered] == [(Receipt, "producer"), (Deliver, "consumer")]

    # The producer's own delivery and its receipt keep their order: one session, one stream.
    effects = broker.apply(Send("producer", "/queue/mine", "", b"m", 3, receipt="r2"))
    assert _receipt_first(effects) == effects
    assert [type(e) for e in effects] == [Deliver, Receipt]

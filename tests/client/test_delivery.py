"""A failover subscription's `Delivery`: a Frame (compiled or not, raftmq.compiled) that also
says which connection delivered it."""

from __future__ import annotations

from raftmq.client import Delivery
from raftmq.protocol.frame import Frame


def test_a_delivery_is_its_frame_plus_the_connection() -> None:
    frame = Frame("MESSAGE", [("message-id", "m1"), ("ack", "a1"), ("ack", "second")], b"body")
    delivery = Delivery.of(frame, 3)
    assert isinstance(delivery, Frame)
    shown = (delivery.command, delivery.headers, delivery.body, delivery.connection)
    assert shown == ("MESSAGE", frame.headers, b"body", 3)
    assert delivery.get("ack") == "a1" and delivery.header_dict()["message-id"] == "m1"
    assert delivery == Delivery("MESSAGE", list(frame.headers), b"body", 3)
    assert delivery != Delivery("MESSAGE", list(frame.headers), b"body", 4)
    assert Delivery("MESSAGE").headers == [] and Delivery("MESSAGE").connection == 0
    assert repr(delivery).startswith("Delivery(command='MESSAGE'") and "connection=3" in repr(delivery)

"""raftmq's client drops a MESSAGE from a leader term older than one it has already seen
(raftmq.client.terms): a deposed leader's frame."""

from __future__ import annotations

import asyncio

import pytest

from raftmq.client import connect
from raftmq.client.terms import TermFloor
from raftmq.protocol.frame import Frame
from tests.helpers.fake_broker import FakeBroker, FakeConnection, default_handler


def message(body: bytes, term: str | None, subscription: str = "1") -> Frame:
    headers = [("subscription", subscription), ("message-id", body.decode()), ("destination", "/queue/q"),
               ("ack", body.decode())]
    return Frame("MESSAGE", headers + ([("raftmq-term", term)] if term is not None else []), body)


def test_a_floor_admits_frames_without_a_term_and_from_the_highest_one_seen() -> None:
    floor = TermFloor()
    assert floor.admits(message(b"a", "5")) and floor.highest == 5
    assert floor.admits(message(b"b", None))  # another broker's: no term
    assert floor.admits(message(b"c", "6")) and not floor.admits(message(b"d", "5"))
    assert floor.dropped == 1 and floor.admits(message(b"e", "6"))


@pytest.mark.integration
def test_a_message_from_an_older_term_than_the_connected_one_never_reaches_the_subscription() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "CONNECT":
            conn.send("CONNECTED", [("version", "1.2"), ("heart-beat", "0,0"), ("raftmq-term", "6")])
            return
        default_handler(conn, frame)
        if frame.command == "SUBSCRIBE":
            for body, term in ((b"stale", "5"), (b"fresh", "6")):
                stale = message(body, term, frame.get("id") or "")
                conn.send(stale.command, stale.headers, stale.body)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect("127.0.0.1", broker.port)
            subscription = client.subscribe("/queue/q", ack="client-individual")
            frame = await asyncio.wait_for(subscription.get(), 5)
            assert frame.body == b"fresh"  # the term-5 frame came first and was dropped
            assert client.terms.dropped == 1 and client.terms.highest == 6
            await client.disconnect()

    asyncio.run(asyncio.wait_for(scenario(), 10))

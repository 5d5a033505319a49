"""Session resumption in raftmq's client (raftmq.client.resume): what it keeps of its stream, and
the resume itself against scripted servers: a node that goes names the leader and the offset;
the client carries the session on there, sending again exactly what the node had not read, or
ends with the node's ERROR when the leader will not have it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.client import Address, FailoverClient, FailoverEvent, FailoverOptions, connect
from raftmq.client.resume import ReplayBuffer, resume_plan
from raftmq.errors import BrokerRefused
from raftmq.protocol.frame import (
    ADOPTED_HEADER,
    RESUME_HEADER,
    RESUME_MAC_HEADER,
    RESUME_OFFSET_HEADER,
    RESUMED_AT_HEADER,
    Frame,
)
from tests.helpers.fake_broker import FakeBroker, FakeConnection, default_handler

FAST = FailoverOptions(initial_reconnect_delay_ms=5, max_reconnect_delay_ms=20, randomize=False,
                       connect_timeout_ms=2000)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(10):
            return await coro

    return asyncio.run(bounded())


def test_the_buffer_keeps_what_no_receipt_confirmed_and_at_most_its_limit() -> None:
    replay = ReplayBuffer(limit=10)
    for chunk in (b"abc", b"defg", b"hi"):
        replay.record(chunk)
    assert (replay.start, replay.end, replay.since(4)) == (0, 9, b"efghi")
    replay.confirm(5)  # "abc" lies wholly before it; "defg" does not
    assert (replay.start, replay.since(3), replay.since(2)) == (3, b"defghi", None)
    replay.record(b"jklmn")  # 11 bytes kept would pass the limit: "defg" goes
    assert (replay.start, replay.end, replay.since(7)) == (7, 14, b"hijklmn")
    assert replay.since(15) is None and replay.since(14) == b""


@given(st.lists(st.binary(max_size=20), max_size=30), st.integers(0, 700), st.integers(1, 200))
def test_what_is_kept_is_always_the_stream_from_its_start(chunks: list[bytes], confirmed: int, limit: int) -> None:
    replay = ReplayBuffer(limit=limit)
    for chunk in chunks:
        replay.record(chunk)
    replay.confirm(min(confirmed, replay.end))
    stream = b"".join(chunks)
    assert replay.since(replay.start) == stream[replay.start:] and len(replay) <= limit
    assert replay.start >= min(confirmed, replay.end) - max((len(c) for c in chunks), default=0)


def farewell(conn: FakeConnection, leader: int, offset: int) -> None:
    conn.send("ERROR", [("message", "not the leader"), ("leader", f"127.0.0.1:{leader}"), (RESUME_HEADER, "n1:s:1"),
                        (RESUMED_AT_HEADER, "1"), (RESUME_MAC_HEADER, "signed"), (RESUME_OFFSET_HEADER, str(offset))])
    conn.close()


def test_an_error_without_a_full_request_plans_no_resume() -> None:
    headers = [("message", "not the leader"), ("leader", "h:1"), (RESUME_HEADER, "s"), (RESUMED_AT_HEADER, "1"),
               (RESUME_MAC_HEADER, "m"), (RESUME_OFFSET_HEADER, "12")]
    plan = resume_plan(Frame("ERROR", headers))
    assert plan is not None and plan.offset == 12 and plan.leader == "h:1"
    for dropped in range(len(headers) - 1):
        assert resume_plan(Frame("ERROR", headers[:dropped + 1] + headers[dropped + 2:])) is None
    assert resume_plan(Frame("ERROR", [*headers[:-1], (RESUME_OFFSET_HEADER, "x")])) is None


def adopting(conn: FakeConnection, frame: Frame) -> None:
    if frame.command == "CONNECT" and frame.get(RESUME_HEADER) is not None:
        conn.send("CONNECTED", [(ADOPTED_HEADER, frame.get(RESUME_HEADER) or ""), ("version", "1.2")])
        conn.send("MESSAGE", [("subscription", "s1"), ("message-id", "m9"), ("destination", "/queue/a"), ("ack", "a9")],
                  b"after")
        return
    default_handler(conn, frame)


def reading_until_unread(conn: FakeConnection, frame: Frame) -> None:
    if frame.body != b"unread":  # the node stopped reading before it
        default_handler(conn, frame)


@pytest.mark.integration
def test_the_session_carries_on_at_the_leader_sending_again_what_the_node_had_not_read() -> None:
    async def scenario() -> None:
        async with FakeBroker(reading_until_unread) as going, FakeBroker(adopting) as leader:
            client = await connect("127.0.0.1", going.port)
            subscription = client.subscribe("/queue/a", id="s1", ack="client-individual")
            await client.send("/queue/a", b"read", receipt=True)
            node = await going.connection()
            read = node.bytes_read  # CONNECT, SUBSCRIBE and the first SEND: the session read these
            pending = client.send_nowait("/queue/a", b"unread", receipt=True)  # on the wire, never answered
            assert pending is not None
            await going.wait_for_frames(node, 4)
            farewell(node, leader.port, read)
            assert (await asyncio.wait_for(subscription.get(), 5)).body == b"after"
            assert (await asyncio.wait_for(pending, 5)).command == "RECEIPT"
            await client.send("/queue/a", b"later", receipt=True)
            resumed = await leader.connection()
            assert [(frame.command, frame.body) for frame in resumed.frames] == [
                ("CONNECT", b""), ("SEND", b"unread"), ("SEND", b"later")]
            assert resumed.frames[0].get(RESUME_OFFSET_HEADER) == str(read)
            assert client.resumptions == 1 and not client.is_closed
            await client.disconnect()

    run(scenario())


@pytest.mark.integration
def test_a_refused_resume_ends_the_connection_with_the_nodes_error_naming_the_leader() -> None:
    def refusing(conn: FakeConnection, frame: Frame) -> None:
        conn.send("ERROR", [("message", "adoption refused")], b"no such parked session")
        conn.close()

    async def scenario() -> None:
        async with FakeBroker() as going, FakeBroker(refusing) as leader:
            client = await connect("127.0.0.1", going.port)
            await client.send("/queue/a", b"x", receipt=True)
            node = await going.connection()
            farewell(node, leader.port, node.bytes_read)
            cause = await asyncio.wait_for(client.closed, 5)
            assert isinstance(cause, BrokerRefused) and cause.headers["message"] == "not the leader"
            assert cause.headers["leader"] == f"127.0.0.1:{leader.port}" and client.resumptions == 0

    run(scenario())


@pytest.mark.integration
def test_a_leader_that_cannot_be_reached_ends_the_connection_within_the_resume_time() -> None:
    async def scenario() -> None:
        async with FakeBroker() as gone:
            port = gone.port  # closed when the client tries it
        async with FakeBroker() as going:
            client = await connect("127.0.0.1", going.port)
            node = await going.connection()
            await going.wait_for_frames(node, 1)
            farewell(node, port, node.bytes_read)
            cause = await asyncio.wait_for(client.closed, 3)
            assert isinstance(cause, BrokerRefused) and cause.headers["message"] == "not the leader"

    run(scenario())


@pytest.mark.integration
@pytest.mark.parametrize("resume", [True, False])
def test_a_failover_client_resumes_unless_told_not_to(resume: bool) -> None:
    """With resumption the failover client's connection moves without a break (`resumed`);
    without it, the connection breaks and the client reconnects where the ERROR points."""

    async def scenario() -> list[str]:
        async with FakeBroker() as going, FakeBroker(adopting) as leader:
            events: list[FailoverEvent] = []
            client = FailoverClient([[Address("127.0.0.1", going.port)]], FAST, resume=resume)
            client.events.append(events.append)
            await client.start()
            await client.send("/queue/a", b"x")
            node = await going.connection()
            farewell(node, leader.port, node.bytes_read)
            await until(lambda: any(event.kind in ("resumed", "connected") for event in events[1:]))
            await client.send("/queue/a", b"y")
            assert client.address == Address("127.0.0.1", leader.port)
            await client.close()
            return [event.kind for event in events]

    kinds = run(scenario())
    if resume:
        assert "resumed" in kinds and "disconnected" not in kinds, kinds
    else:
        assert "resumed" not in kinds and "disconnected" in kinds and kinds.count("connected") == 2, kinds

"""Client behaviour at the edges, against a scripted server (tests/helpers/fake_broker.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from raftmq.client import StompClient, SubscriptionEnded, connect, negotiate_heartbeat
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame
from tests.helpers.fake_broker import FakeBroker, FakeConnection, default_handler

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 10.0


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def test_connect_sends_the_handshake_and_negotiates() -> None:
    async def scenario() -> None:
        async with FakeBroker(version="1.2", heartbeat="0,0") as broker:
            client = await connect(
                "127.0.0.1", broker.port, login="u", passcode="p", vhost="/", headers={"client-id": "c1"}
            )
            conn = await broker.connection()
            connect_frame = conn.frames[0]
            assert connect_frame.command == "CONNECT"
            assert connect_frame.get("accept-version") == "1.0,1.1,1.2"
            assert connect_frame.get("host") == "/"
            assert (connect_frame.get("login"), connect_frame.get("passcode")) == ("u", "p")
            assert connect_frame.get("heart-beat") == "0,0"
            assert connect_frame.get("client-id") == "c1"
            assert client.version == "1.2"
            assert client.server_headers["version"] == "1.2"
            await client.disconnect()
            assert client.closed.result() is None
            assert conn.frames[-1].command == "DISCONNECT" and conn.frames[-1].get("receipt")

    run(scenario())


def test_host_header_defaults_to_the_host_name() -> None:
    async def scenario() -> None:
        async with FakeBroker(version="1.1") as broker:
            client = await connect("127.0.0.1", broker.port, version="1.1")
            conn = await broker.connection()
            assert conn.frames[0].get("host") == "127.0.0.1"
            assert conn.frames[0].get("accept-version") == "1.0,1.1"
            await client.disconnect()

    run(scenario())


def test_error_on_connect_raises_broker_refused() -> None:
    def refuse(conn: FakeConnection, frame: Frame) -> None:
        conn.send("ERROR", [("message", "not the leader"), ("leader", "127.0.0.1:1")])

    async def scenario() -> None:
        async with FakeBroker(refuse) as broker:
            with pytest.raises(BrokerRefused) as info:
                await connect("127.0.0.1", broker.port)
            assert str(info.value) == "not the leader"
            assert info.value.headers["leader"] == "127.0.0.1:1"

    run(scenario())


def test_connection_refused_and_version_mismatch_are_client_errors() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            port = broker.port
        with pytest.raises(ClientError, match="cannot connect"):
            await connect("127.0.0.1", port, timeout=2.0)
        async with FakeBroker(version="1.2") as broker:
            with pytest.raises(ClientError, match="chose STOMP 1.2"):
                await connect("127.0.0.1", broker.port, version="1.1")

    run(scenario())


def test_error_fails_its_receipt_with_broker_refused_and_closes() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SEND" and frame.get("destination") == "/queue/bad":
            conn.send("ERROR", [("message", "bad destination"), ("receipt-id", frame.get("receipt") or "")])
            return
        if frame.command == "SEND":
            return  # sit on receipts: they are pending when the ERROR arrives
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect("127.0.0.1", broker.port)
            pending = client.send_nowait("/queue/ok", b"a", receipt=True)
            with pytest.raises(BrokerRefused, match="bad destination"):
                await client.send("/queue/bad", b"b", receipt=True)
            assert pending is not None
            with pytest.raises(ClientError):
                await pending
            cause = await client.closed
            assert isinstance(cause, BrokerRefused)
            with pytest.raises(ClientError):
                client.send_nowait("/queue/ok", b"c")

    run(scenario())


def test_connection_loss_fails_pending_receipts_with_client_error() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SEND":
            conn.close()  # drop the line instead of answering
            return
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect("127.0.0.1", broker.port)
            subscription = client.subscribe("/queue/a")
            with pytest.raises(ClientError) as info:
                await client.send("/queue/a", b"x", receipt=True)
            assert not isinstance(info.value, BrokerRefused)
            cause = await client.closed
            assert isinstance(cause, ClientError)
            with pytest.raises(ClientError):
                await subscription.get()

    run(scenario())


def test_writes_of_one_loop_turn_are_coalesced() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect("127.0.0.1", broker.port)
            socket_transport = client._transport._transport
            assert socket_transport is not None
            writes = []
            original = socket_transport.write

            def counting_write(data: bytes) -> None:
                writes.append(len(data))
                original(data)

            socket_transport.write = counting_write  # type: ignore[method-assign]
            receipts = [client.send_nowait("/queue/a", b"x" * 100, receipt=True) for _ in range(200)]
            await asyncio.gather(*receipts)
            assert len(writes) == 1
            conn = await broker.connection()
            assert [f.get("receipt") for f in conn.frames[1:]] == [str(i) for i in range(1, 201)]
            await client.disconnect()

    run(scenario())


def test_heartbeats_are_sent_and_a_silent_broker_is_dropped() -> None:
    async def scenario() -> None:
        # The broker can send every 50 ms and wants one every 50 ms; it never sends any.
        async with FakeBroker(heartbeat="50,50") as broker:
            client = await connect("127.0.0.1", broker.port, heartbeat=(50, 50))
            conn = await broker.connection()
            cause = await asyncio.wait_for(client.closed, timeout=3.0)
            assert isinstance(cause, ClientError) and "heart-beat" in str(cause)
            assert conn.parser.heartbeats >= 1

    run(scenario())


def test_a_held_socket_is_not_mistaken_for_a_silent_broker() -> None:
    async def scenario() -> None:
        async with FakeBroker(heartbeat="50,50", beat_every_ms=20) as broker:
            client = await connect("127.0.0.1", broker.port, heartbeat=(50, 50))
            subscription = client.subscribe("/queue/a", id="s1", queue_size=1)
            conn = await broker.connection()
            await broker.wait_for_frames(conn, 2)
            for n in range(3):
                conn.send("MESSAGE", *_message("s1", n, b"y" * 1024))
            await asyncio.sleep(0.5)  # queue full, socket not read, for 10 receive intervals
            assert client._transport.reading_held
            assert not client.is_closed
            got = [(await subscription.get()).get("message-id") for _ in range(3)]
            assert got == ["m:0", "m:1", "m:2"]
            await client.disconnect()

    run(scenario())


def test_heartbeat_negotiation_rule() -> None:
    assert negotiate_heartbeat((0, 0), "1000,1000") == (0, 0)
    assert negotiate_heartbeat((100, 200), "0,0") == (0, 0)
    assert negotiate_heartbeat((100, 200), "300,50") == (100, 300)
    assert negotiate_heartbeat((500, 0), "300,1000") == (1000, 0)
    assert negotiate_heartbeat((500, 500), "garbage") == (0, 0)


def _message(sub_id: str, n: int, body: bytes = b"") -> tuple[list[tuple[str, str]], bytes]:
    headers = [
        ("destination", "/queue/a"),
        ("subscription", sub_id),
        ("message-id", f"m:{n}"),
        ("ack", f"a:{n}"),
    ]
    return headers, body


def test_messages_route_to_their_subscription_and_acks_use_the_ack_header() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect("127.0.0.1", broker.port)
            first = client.subscribe("/queue/a", id="s1", ack="client-individual")
            seen: list[Frame] = []
            client.subscribe("/queue/b", id="s2", callback=seen.append)
            conn = await broker.connection()
            await broker.wait_for_frames(conn, 3)
            for n in range(3):
                conn.send("MESSAGE", *_message("s1", n, b"one"))
                conn.send("MESSAGE", *_message("s2", n, b"two"))
            got = [await first.get() for _ in range(3)]
            assert [f.get("message-id") for f in got] == ["m:0", "m:1", "m:2"]
            assert [f.body for f in seen] == [b"two"] * 3
            await client.ack(got[0])
            await client.nack(got[1], receipt=True)
            frames = await broker.wait_for_frames(conn, 5)
            assert frames[3].command == "ACK" and frames[3].headers[0] == ("id", "a:0")
            assert frames[4].command == "NACK" and frames[4].get("id") == "a:1"
            await client.disconnect()

    run(scenario())


def test_stomp_11_acks_name_message_and_subscription_and_10_has_no_nack() -> None:
    async def scenario() -> None:
        for version in ("1.1", "1.0"):
            async with FakeBroker(version=version) as broker:
                client = await connect("127.0.0.1", broker.port, version=version)
                subscription = client.subscribe("/queue/a", id="s1", ack="client")
                conn = await broker.connection()
                await broker.wait_for_frames(conn, 2)
                conn.send("MESSAGE", *_message("s1", 7))
                frame = await subscription.get()
                await client.ack(frame, transaction="t1")
                frames = await broker.wait_for_frames(conn, 3)
                expected = [("message-id", "m:7")]
                if version == "1.1":
                    expected.append(("subscription", "s1"))
                assert frames[2].headers == expected + [("transaction", "t1")]
                if version == "1.0":
                    with pytest.raises(ClientError, match="NACK"):
                        client.nack_nowait(frame)
                await client.disconnect()

    run(scenario())


def test_a_full_subscription_queue_stops_reading_until_consumed() -> None:
    queue_size = 4
    total = 40
    body = b"z" * 64 * 1024

    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect("127.0.0.1", broker.port)
            subscription = client.subscribe("/queue/a", id="s1", queue_size=queue_size)
            conn = await broker.connection()
            await broker.wait_for_frames(conn, 2)
            for n in range(total):
                conn.send("MESSAGE", *_message("s1", n, body))
            await asyncio.sleep(0.3)
            # Reading stopped soon after the queue filled up: one socket read can complete a
            # few frames past the limit, never the whole burst.
            assert queue_size <= subscription.qsize() < total // 2
            got = [(await subscription.get()).get("message-id") for _ in range(total)]
            assert got == [f"m:{n}" for n in range(total)]
            await client.disconnect()

    run(scenario())


def test_unsubscribe_and_disconnect_end_iteration() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client = await connect("127.0.0.1", broker.port)
            subscription = client.subscribe("/queue/a", id="s1")
            conn = await broker.connection()
            await broker.wait_for_frames(conn, 2)
            conn.send("MESSAGE", *_message("s1", 1))
            await asyncio.sleep(0.05)
            await subscription.unsubscribe(receipt=True)
            assert [f.get("message-id") async for f in subscription] == ["m:1"]
            frames = await broker.wait_for_frames(conn, 3)
            assert frames[2].command == "UNSUBSCRIBE" and frames[2].get("id") == "s1"
            other = client.subscribe("/queue/b")
            await client.disconnect()
            with pytest.raises(SubscriptionEnded):
                await other.get()
            assert [f async for f in other] == []

    run(scenario())


def test_a_raising_callback_does_not_kill_the_connection() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        async with FakeBroker() as broker:
            client = await connect("127.0.0.1", broker.port)
            calls: list[str | None] = []

            def callback(frame: Frame) -> None:
                calls.append(frame.get("message-id"))
                raise RuntimeError("consumer bug")

            client.subscribe("/queue/a", id="s1", callback=callback)
            conn = await broker.connection()
            await broker.wait_for_frames(conn, 2)
            conn.send("MESSAGE", *_message("s1", 1))
            conn.send("MESSAGE", *_message("s1", 2))
            await client.send("/queue/a", b"x", receipt=True)
            assert calls == ["m:1", "m:2"]
            assert len(reported) == 2 and isinstance(reported[0]["exception"], RuntimeError)
            assert not client.is_closed
            await client.disconnect()

    run(scenario())


def test_transactions_frame_their_commands() -> None:
    async def scenario() -> None:
        async with FakeBroker() as broker:
            client: StompClient = await connect("127.0.0.1", broker.port)
            await client.begin("tx1")
            await client.send("/queue/a", b"in tx", transaction="tx1")
            await client.commit("tx1")  # waits for its receipt by default
            await client.abort("tx2", receipt=True)
            conn = await broker.connection()
            commands = [(f.command, f.get("transaction")) for f in conn.frames[1:]]
            assert commands == [("BEGIN", "tx1"), ("SEND", "tx1"), ("COMMIT", "tx1"), ("ABORT", "tx2")]
            await client.disconnect()

    run(scenario())

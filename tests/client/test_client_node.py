"""The client against a real broker: a `python -m raftmq node` subprocess (see conftest.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any

import pytest

from raftmq.client import StompClient, connect
from raftmq.errors import BrokerRefused, ClientError
from raftmq.protocol.frame import Frame

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 20.0


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def queue_name() -> str:
    return f"/queue/client-test-{uuid.uuid4().hex[:10]}"


async def _connect(broker: tuple[str, int], **kwargs: Any) -> StompClient:
    return await connect(broker[0], broker[1], timeout=5.0, **kwargs)


def test_send_with_receipt_then_receive_and_ack(broker: tuple[str, int]) -> None:
    destination = queue_name()
    tricky = "a:b\nc\\d"  # needs escaping both ways

    async def scenario() -> None:
        producer = await _connect(broker)
        receipt = await producer.send(destination, b"\x00binary\x00", {"x-tricky": tricky}, receipt=True)
        assert receipt is not None and receipt.command == "RECEIPT"
        consumer = await _connect(broker)
        subscription = consumer.subscribe(destination, ack="client-individual", receipt=True)
        assert subscription.receipt is not None
        await subscription.receipt
        frame = await subscription.get()
        assert frame.body == b"\x00binary\x00"
        assert frame.get("x-tricky") == tricky
        assert frame.get("destination") == destination
        await consumer.ack(frame, receipt=True)
        await consumer.disconnect()
        await producer.disconnect()
        assert consumer.closed.result() is None

    run(scenario())


def test_many_receipts_in_flight_arrive_in_order(broker: tuple[str, int]) -> None:
    destination = queue_name()
    count = 2000

    async def scenario() -> None:
        client = await _connect(broker)
        receipts = [client.send_nowait(destination, str(i).encode(), receipt=True) for i in range(count)]
        frames = await asyncio.gather(*receipts)
        assert len(frames) == count
        subscription = client.subscribe(destination, ack="client", prefetch=500)
        bodies = []
        for _ in range(count):
            frame = await subscription.get()
            bodies.append(int(frame.body))
            if len(bodies) % 100 == 0:
                # Cumulative in client mode; often enough for ActiveMQ too, which stops
                # dispatching at 200 unacknowledged messages whatever the prefetch.
                client.ack_nowait(frame)
        assert bodies == list(range(count))
        await client.disconnect()

    run(scenario())


def test_nack_redelivers_with_the_redelivered_flag(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        client = await _connect(broker)
        await client.send(destination, b"again", receipt=True)
        subscription = client.subscribe(destination, ack="client-individual")
        first = await subscription.get()
        assert first.get("redelivered") != "true"
        await client.nack(first, receipt=True)
        second = await subscription.get()
        assert second.body == b"again" and second.get("redelivered") == "true"
        await client.ack(second, receipt=True)
        await client.disconnect()

    run(scenario())


def test_transaction_delivers_on_commit_only(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        client = await _connect(broker)
        subscription = client.subscribe(destination, receipt=True)
        assert subscription.receipt is not None
        await subscription.receipt
        await client.begin("tx-a")
        await client.send(destination, b"aborted", transaction="tx-a")
        await client.abort("tx-a", receipt=True)
        await client.begin("tx-b")
        await client.send(destination, b"committed", transaction="tx-b")
        await asyncio.sleep(0.1)
        assert subscription.qsize() == 0
        await client.commit("tx-b")
        frame = await subscription.get()
        assert frame.body == b"committed"
        await client.send(destination, b"marker", receipt=True)
        assert (await subscription.get()).body == b"marker"  # nothing of tx-a in between
        await client.disconnect()

    run(scenario())


def test_callback_subscription_and_heartbeats(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        client = await _connect(broker, heartbeat=(100, 100))
        got: list[Frame] = []
        done = asyncio.Event()

        def on_message(frame: Frame) -> None:
            got.append(frame)
            if len(got) == 3:
                done.set()

        client.subscribe(destination, callback=on_message)
        for i in range(3):
            await client.send(destination, f"m{i}".encode(), receipt=True)
        await done.wait()
        assert [f.body for f in got] == [b"m0", b"m1", b"m2"]
        await asyncio.sleep(0.5)  # idle across several heart-beat intervals
        assert not client.is_closed
        await client.disconnect()

    run(scenario())


def test_broker_error_raises_broker_refused_and_closes(broker: tuple[str, int]) -> None:
    async def scenario() -> None:
        client = await _connect(broker)
        # A SEND without destination is refused by every STOMP broker.
        fut = client._send_frame(Frame("SEND", [], b"x"), receipt=True)
        assert fut is not None
        with pytest.raises(BrokerRefused):
            await fut
        cause = await client.closed
        assert isinstance(cause, BrokerRefused)
        with pytest.raises(ClientError):
            await client.send(queue_name(), b"y")

    run(scenario())


def test_stomp_11_session(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        client = await _connect(broker, version="1.1")
        assert client.version == "1.1"
        subscription = client.subscribe(destination, ack="client-individual")
        await client.send(destination, b"old", {"k": "v:1"}, receipt=True)
        frame = await subscription.get()
        assert frame.get("k") == "v:1"
        await client.ack(frame, receipt=True)
        await client.disconnect()

    run(scenario())


def test_disconnect_is_prompt_while_a_full_subscription_queue_holds_reading(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        producer = await _connect(broker)
        for n in range(6):
            await producer.send(destination, f"m{n}".encode(), receipt=True)
        consumer = await _connect(broker)
        subscription = consumer.subscribe(destination, ack="auto", queue_size=2, receipt=True)
        await subscription.receipt
        await asyncio.sleep(0.3)  # the queue fills and the client stops reading
        started = asyncio.get_running_loop().time()
        await consumer.disconnect(timeout=5.0)
        # The DISCONNECT receipt was read, not waited out.
        assert asyncio.get_running_loop().time() - started < 2.0
        assert consumer.closed.result() is None
        await producer.disconnect()

    run(scenario())


def test_ack_receipts_arrive_while_a_full_prefetch_window_is_buffered(broker: tuple[str, int]) -> None:
    destination = queue_name()

    async def scenario() -> None:
        producer = await _connect(broker)
        for n in range(12):
            await producer.send(destination, f"m{n}".encode(), receipt=True)
        consumer = await _connect(broker)
        subscription = consumer.subscribe(destination, ack="client-individual", prefetch=8, receipt=True)
        await subscription.receipt
        await asyncio.sleep(0.3)  # the whole window (8 messages) is now buffered in the client
        for _ in range(12):
            frame = await subscription.get()
            async with asyncio.timeout(3):
                await consumer.ack(frame, receipt=True)  # its RECEIPT must be read meanwhile
        await consumer.disconnect()
        await producer.disconnect()

    run(scenario())

"""Which ERRORs the FailoverClient retries, against scripted servers (tests/helpers/fake_broker.py):
transient ones are retried however often they come; any other fails the frame it refused, and
one that names no frame does so only after it came back for the same frame."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from raftmq.client import FailoverEvent, connect_failover
from raftmq.client.failover_outbox import UNNAMED_REFUSALS_TO_BLAME
from raftmq.errors import BrokerRefused
from raftmq.protocol.frame import Frame
from tests.helpers.fake_broker import FakeBroker, FakeConnection, default_handler

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 10.0


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def sends(conn: FakeConnection) -> list[Frame]:
    return [frame for frame in conn.frames if frame.command == "SEND"]


def url(broker: FakeBroker) -> str:
    return f"failover:(stomp://127.0.0.1:{broker.port})?randomize=false&initialReconnectDelay=5&maxReconnectAttempts=20"


def test_transient_errors_are_retried_however_often_and_whatever_they_name() -> None:
    # One per connection, in this order; the fifth connection takes the SEND.
    transient = [
        [("message", "command not committed")],
        [("message", "not connected"), ("receipt-id", "")],  # the core names the frame it could not apply
        [("message", "not the leader")],  # mid-election: no leader header
        [("message", "broker shutting down")],
    ]

    def handler(conn: FakeConnection, frame: Frame) -> None:
        number = conn.broker.connections.index(conn)
        if frame.command == "SEND" and number < len(transient):
            headers = [(name, value or frame.get("receipt") or "") for name, value in transient[number]]
            conn.send("ERROR", headers)
            conn.close()
            return
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect_failover(url(broker))
            events: list[FailoverEvent] = []
            client.events.append(events.append)
            receipt = await client.send("/queue/a", b"m")
            assert receipt is not None and receipt.command == "RECEIPT"
            written = [sends(conn) for conn in broker.connections]
            assert [len(frames) for frames in written] == [1] * 5
            assert len({frames[0].get("_AMQ_DUPL_ID") for frames in written}) == 1
            assert not [e for e in events if e.kind == "refused"]
            await client.close()

    run(scenario())


def test_an_unnamed_refusal_that_keeps_coming_fails_that_send_only() -> None:
    def handler(conn: FakeConnection, frame: Frame) -> None:
        if frame.command == "SEND" and frame.body == b"odd":
            conn.send("ERROR", [("message", "frame looks odd")], b"details\n")
            conn.close()
            return
        default_handler(conn, frame)

    async def scenario() -> None:
        async with FakeBroker(handler) as broker:
            client = await connect_failover(url(broker))
            events: list[FailoverEvent] = []
            client.events.append(events.append)
            odd = client.send_nowait("/queue/a", b"odd")
            fine = client.send_nowait("/queue/a", b"fine")
            with pytest.raises(BrokerRefused, match="^frame looks odd$") as refused:
                await odd
            assert refused.value.body == b"details\n"
            assert (await fine).command == "RECEIPT"
            assert len(broker.connections) == UNNAMED_REFUSALS_TO_BLAME + 1
            assert [[f.body for f in sends(conn)] for conn in broker.connections] == (
                [[b"odd", b"fine"]] * UNNAMED_REFUSALS_TO_BLAME + [[b"fine"]]
            )
            refusals = [e for e in events if e.kind == "refused"]
            assert len(refusals) == 1 and refusals[0].dupl_id == sends(broker.connections[0])[0].get("_AMQ_DUPL_ID")
            await client.close()

    run(scenario())

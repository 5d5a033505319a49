"""A FailoverClient against a real node with tiny limits: an ERROR that refuses one of the
client's frames fails that operation (not retried), while everything else goes on.

The node logs `client.connecting` for every CONNECT it accepts and `client.error` (with the
message) for every ERROR it sends; the tests read that JSON-lines log to count connections."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from raftmq.client import FailoverEvent, connect, connect_failover
from raftmq.errors import BrokerRefused
from raftmq.processes import free_ports

pytestmark = pytest.mark.integration

MAX_BODY = 1024
MAX_HEADERS = 16
READY_TIMEOUT = 20.0
TEST_TIMEOUT = 20.0
FAST = 3.0  # seconds a refused operation may take, reconnects included
OVERSIZE = 40 * 1024
BODY_LIMIT_MESSAGE = f"content-length {OVERSIZE} exceeds the body size limit"
_queues = iter(range(1, 1_000_000))


class TinyNode:
    """`python -m raftmq node` with a 1 KiB body limit, its JSON log in a file; killed by pid."""

    def __init__(self, tmp: Path) -> None:
        (self.port,) = free_ports(1)
        self.url = f"stomp://127.0.0.1:{self.port}"
        self.log_path = tmp / "node.log.jsonl"
        self.stdout_path = tmp / "node.out"
        config = tmp / "tiny.toml"
        config.write_text(
            f'[node]\nname = "tiny"\nhost = "127.0.0.1"\nport = {self.port}\n'
            f"[limits]\nmax_body_bytes = {MAX_BODY}\nmax_headers = {MAX_HEADERS}\n"
        )
        with open(self.stdout_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "raftmq", "node", "--config", str(config), "--log-file", str(self.log_path)],
                stdout=out,
                stderr=subprocess.DEVNULL,
                cwd=tmp,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            if f"raftmq node listening on 127.0.0.1:{self.port}" in self.stdout_path.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"tiny node not ready (exit code {self.proc.poll()})")

    def events(self, name: str) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("event") == name:
                records.append(record)
        return records

    def connects(self) -> int:
        return len(self.events("client.connecting"))

    def error_messages(self) -> list[str]:
        return [record["message"] for record in self.events("client.error")]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyNode]:
    tiny = TinyNode(tmp_path_factory.mktemp("tiny"))
    try:
        tiny.wait_ready()
        yield tiny
    finally:
        tiny.kill()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def fresh_queue() -> str:
    return f"/queue/refusals.{os.getpid()}.{next(_queues)}"


async def queued_bodies(node: TinyNode, queue: str) -> list[bytes]:
    """What the queue holds, read by a connection of its own (nothing consumed)."""
    client = await connect("127.0.0.1", node.port)
    try:
        result = await client.browse(queue, timeout=5)
    finally:
        await client.disconnect()
    assert not result.truncated
    return [message.body for message in result.messages]


def test_an_oversize_send_fails_fast_and_the_client_goes_on(node: TinyNode) -> None:
    queue = fresh_queue()

    async def scenario() -> None:
        client = await connect_failover(f"failover:({node.url})?maxReconnectAttempts=5")
        events: list[FailoverEvent] = []
        client.events.append(events.append)
        try:
            before, refusals_before = node.connects(), node.error_messages().count(BODY_LIMIT_MESSAGE)
            started = time.monotonic()
            with pytest.raises(BrokerRefused) as refused:
                await client.send(queue, b"x" * OVERSIZE)
            elapsed = time.monotonic() - started
            assert elapsed < FAST, elapsed
            assert str(refused.value) == BODY_LIMIT_MESSAGE
            assert refused.value.headers["message"] == BODY_LIMIT_MESSAGE
            await asyncio.wait_for(client.wait_connected(), FAST)
            # The ERROR names the SEND (receipt-id: the node read its headers before refusing
            # the body), so it was refused once, and the client reconnected once for the rest.
            assert node.error_messages().count(BODY_LIMIT_MESSAGE) - refusals_before == 1
            assert node.connects() - before == 1
            assert client.pending_sends == 0
            assert [e.kind for e in events if e.kind == "refused"] == ["refused"]

            receipt = await asyncio.wait_for(client.send(queue, b"small"), FAST)
            assert receipt is not None and receipt.command == "RECEIPT"
            assert await queued_bodies(node, queue) == [b"small"]
            assert node.connects() - before == 2  # + the browse's own
        finally:
            await client.close()

    run(scenario())


def test_only_the_refused_send_fails_while_pipelined_sends_and_a_subscription_go_on(node: TinyNode) -> None:
    queue, topic = fresh_queue(), f"/topic/refusals.{os.getpid()}.{next(_queues)}"

    async def scenario() -> None:
        client = await connect_failover(f"failover:({node.url})?maxReconnectAttempts=5")
        try:
            subscription = client.subscribe(topic)
            await asyncio.wait_for(subscription.receipt, FAST)
            first = client.send_nowait(queue, b"first")
            big = client.send_nowait(queue, b"y" * OVERSIZE)
            last = client.send_nowait(queue, b"last")
            news = client.send_nowait(topic, b"news")
            done = await asyncio.wait_for(asyncio.gather(first, big, last, news, return_exceptions=True), FAST)
            assert isinstance(done[1], BrokerRefused) and str(done[1]) == BODY_LIMIT_MESSAGE
            assert [frame.command for frame in (done[0], done[2], done[3])] == ["RECEIPT"] * 3
            delivery = await asyncio.wait_for(subscription.get(), FAST)
            assert delivery.body == b"news"
            assert subscription.active and client.is_connected
            # Resent after the refusals with their _AMQ_DUPL_ID: stored once each, in order.
            assert await queued_bodies(node, queue) == [b"first", b"last"]
            assert subscription.get_nowait() is None
        finally:
            await client.close()

    run(scenario())


def test_an_unreceipted_oversize_send_does_not_take_the_next_send_down(node: TinyNode) -> None:
    """The ERROR names no frame; the next SEND is the oldest waiting for its RECEIPT, but the
    culprit is never written again, so the refusal does not repeat and that SEND is stored."""
    queue = fresh_queue()

    async def scenario() -> None:
        client = await connect_failover(f"failover:({node.url})?maxReconnectAttempts=5")
        try:
            before = node.connects()
            written = client.send_nowait(queue, b"z" * OVERSIZE, receipt=False)
            innocent = client.send_nowait(queue, b"innocent")
            assert await asyncio.wait_for(written, FAST) is None
            receipt = await asyncio.wait_for(innocent, FAST)
            assert receipt is not None and receipt.command == "RECEIPT"
            assert node.connects() - before == 1
            assert await queued_bodies(node, queue) == [b"innocent"]
        finally:
            await client.close()

    run(scenario())


def test_an_error_naming_the_send_fails_it_on_the_first_refusal(node: TinyNode) -> None:
    async def scenario() -> None:
        client = await connect_failover(f"failover:({node.url})?maxReconnectAttempts=5")
        try:
            before = node.connects()
            with pytest.raises(BrokerRefused, match="^invalid destination$") as refused:
                await asyncio.wait_for(client.send("/queue/", b"nowhere"), FAST)
            assert "receipt-id" in refused.value.headers
            await asyncio.wait_for(client.wait_connected(), FAST)
            assert node.connects() - before == 1  # the reconnect for whatever comes next
        finally:
            await client.close()

    run(scenario())


def test_a_subscribe_the_node_cannot_parse_ends_that_subscription_only(node: TinyNode) -> None:
    queue = fresh_queue()

    async def scenario() -> None:
        client = await connect_failover(f"failover:({node.url})?maxReconnectAttempts=5")
        try:
            good = client.subscribe(queue)
            await asyncio.wait_for(good.receipt, FAST)
            headers = [(f"x-{i}", "v") for i in range(MAX_HEADERS + 1)]
            bad = client.subscribe(queue, headers=headers)
            with pytest.raises(BrokerRefused, match=f"more than {MAX_HEADERS} headers"):
                await asyncio.wait_for(bad.receipt, FAST)
            with pytest.raises(BrokerRefused):
                await bad.get()
            assert not bad.active and good.active
            await asyncio.wait_for(client.send(queue, b"for the good one"), FAST)
            delivery = await asyncio.wait_for(good.get(), FAST)
            assert delivery.body == b"for the good one"
        finally:
            await client.close()

    run(scenario())


def test_the_cli_send_of_an_oversize_file_exits_with_one_line(node: TinyNode, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"b" * OVERSIZE)
    queue = fresh_queue()
    before, refusals_before = node.connects(), node.error_messages().count(BODY_LIMIT_MESSAGE)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "raftmq", "send", "--url", node.url, "--timeout", "10", queue, "--file", str(big)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines == [f"Error: the broker refused: {BODY_LIMIT_MESSAGE}"], result.stderr
    assert result.stdout == ""
    assert elapsed < 8.0, elapsed  # the process start included; the --timeout is 10 s
    assert node.error_messages().count(BODY_LIMIT_MESSAGE) - refusals_before == 1  # named by receipt-id
    # The first connection, and maybe the reconnect after the refusal (the command closes the
    # client as soon as the send failed).
    assert 1 <= node.connects() - before <= 2
    assert run(queued_bodies(node, queue)) == []

"""Leader redirects and group order against real in-process nodes.

A follower is a `Node` whose commit log says it is not the leader and names another node's
client address (the way a Raft follower will), so CONNECT gets the server's real
`not the leader` ERROR with its `leader` header."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from raftmq import processes
from raftmq.client import Address, FailoverClient, FailoverEvent, FailoverExhausted, FailoverOptions, connect_failover
from raftmq.client.failover_connector import Connector, Whereabouts
from raftmq.config import NodeConfig
from raftmq.core.commands import Command
from raftmq.errors import NotLeader
from raftmq.replication.commit_log import CommitLog, LogStatus, StateMachine
from raftmq.server.node import Node

pytestmark = pytest.mark.integration

TEST_TIMEOUT = 15.0
FIRST = FailoverOptions(
    randomize=False, initial_reconnect_delay_ms=5, max_reconnect_delay_ms=20, connect_timeout_ms=2000
)


class FollowerLog(CommitLog):
    """Never the leader; names `hint` (settable, so two followers can point at each other)."""

    def __init__(self, hint: str | None = None) -> None:
        self.hint = hint

    async def start(self, machine: StateMachine) -> None:
        pass

    def status(self) -> LogStatus:
        return LogStatus(False, self.hint, 0, 0, 0, False, {})

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        future.set_exception(NotLeader(self.hint))
        return future

    async def stop(self) -> None:
        pass

    @property
    def is_leader(self) -> bool:
        return False

    @property
    def leader_hint(self) -> str | None:
        return self.hint


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(TEST_TIMEOUT):
            return await coro

    return asyncio.run(bounded())


def closed_port() -> Address:
    return Address("127.0.0.1", processes.free_port())  # never bound: nobody listens there


@asynccontextmanager
async def nodes(*logs: CommitLog | None) -> AsyncIterator[list[Address]]:
    """Nodes on this event loop, one per log (None: a leader with the in-memory log)."""
    started: list[Node] = []
    try:
        for log in logs:
            node = Node(NodeConfig(tick_interval_ms=0).with_address("127.0.0.1", 0), log)
            await node.start()
            started.append(node)
        yield [Address(*node.address) for node in started]
    finally:
        for node in started:
            await node.stop()


def test_a_follower_redirects_the_client_to_the_leader() -> None:
    async def scenario() -> None:
        follower_log = FollowerLog()
        async with nodes(None, follower_log) as (leader, follower):
            follower_log.hint = str(leader)
            # Only the follower is listed: the client must learn the leader from it.
            client = await connect_failover([[follower]], options=FIRST)
            assert client.address == leader and client.group == 0
            queue = f"/queue/redirect-{uuid.uuid4().hex[:8]}"
            subscription = client.subscribe(queue)
            await subscription.receipt
            assert (await client.send(queue, b"via the leader")).command == "RECEIPT"
            message = await subscription.get()
            assert message.body == b"via the leader" and message.get("_AMQ_DUPL_ID", "").startswith("raftmq-")
            await client.close()

    run(scenario())


def test_redirect_events_are_reported() -> None:
    async def scenario() -> None:
        follower_log = FollowerLog()
        async with nodes(None, follower_log) as (leader, follower):
            follower_log.hint = str(leader)
            events: list[FailoverEvent] = []
            client = FailoverClient([[follower, leader]], FIRST)
            client.events.append(events.append)
            await client.start()
            assert [(e.kind, e.address, e.target) for e in events] == [
                ("redirected", follower, leader),
                ("connected", leader, None),
            ]
            await client.close()

    run(scenario())


def test_a_follower_that_does_not_know_the_leader_sends_the_client_to_the_next_node() -> None:
    async def scenario() -> None:
        async with nodes(FollowerLog(hint=None), None) as (follower, leader):
            client = await connect_failover([[follower, leader]], options=FIRST)
            assert client.address == leader
            await client.close()

    run(scenario())


def test_a_redirect_loop_ends_with_an_error_after_max_redirects_hops() -> None:
    async def scenario() -> None:
        log_a, log_b = FollowerLog(), FollowerLog()
        async with nodes(log_a, log_b) as (a, b):
            log_a.hint, log_b.hint = str(b), str(a)
            events: list[FailoverEvent] = []
            options = FIRST.replace(max_redirects=3, max_reconnect_attempts=0)
            client = FailoverClient([[a, b]], options)
            client.events.append(events.append)
            with pytest.raises(FailoverExhausted) as info:
                await client.start()
            assert "more than 3 leader redirect(s)" in str(info.value)
            redirects = [(e.address, e.target) for e in events if e.kind == "redirected"]
            assert redirects == [(a, b), (b, a), (a, b)]
            assert isinstance(await client.closed, FailoverExhausted)

    run(scenario())


def test_the_client_moves_to_the_next_group_when_a_group_has_no_reachable_leader() -> None:
    async def scenario() -> None:
        log_a, log_b = FollowerLog(), FollowerLog()
        async with nodes(log_a, log_b, None) as (a, b, leader):
            log_a.hint, log_b.hint = str(b), str(a)  # group 0 is stuck in a redirect loop
            dead = [closed_port(), closed_port()]  # group 1: nobody listens
            groups = [[a, b], dead, [leader]]
            client = await connect_failover(groups, options=FIRST.replace(max_redirects=2))
            assert (client.group, client.address) == (2, leader)
            await client.close()

    run(scenario())


def test_a_successor_named_by_the_deposed_leader_is_tried_without_the_back_off() -> None:
    # A hand-over ends the old leader's connections with `not the leader` naming the new one:
    # nothing failed, so the first attempt goes at once instead of after initialReconnectDelay.
    slow = FailoverOptions(randomize=False, initial_reconnect_delay_ms=5000, max_reconnect_delay_ms=5000,
                           connect_timeout_ms=2000)

    async def scenario() -> None:
        async with nodes(None) as [leader]:
            connector = Connector(((leader,),), slow, {"timeout": 2.0}, random.Random(0), lambda event: None,
                                  lambda: False)
            loop = asyncio.get_running_loop()
            started = loop.time()
            client, _, address = await connector.establish(startup=False, known=Whereabouts(0, leader, leader))
            assert address == leader and loop.time() - started < 1.0
            await client.disconnect()
            unnamed = loop.create_task(connector.establish(startup=False, known=Whereabouts(0, leader, None)))
            await asyncio.sleep(0.5)
            assert not unnamed.done()  # a plain break waits its back-off first
            unnamed.cancel()
            await asyncio.gather(unnamed, return_exceptions=True)

    run(scenario())

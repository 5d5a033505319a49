"""The node's clock seam: the `now` of every command a node makes comes from its `Clock`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from raftmq.clock import ManualClock
from raftmq.config import NodeConfig
from raftmq.core.commands import Command, Connect, Send, Tick
from raftmq.replication.commit_log import InMemoryLog, Proposer
from raftmq.server.node import Node

pytestmark = pytest.mark.integration


class Recording(InMemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.proposed: list[Command] = []

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        self.proposed.extend(commands)
        return super().propose(commands)

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self.proposed.extend(commands)
        super().propose_for(commands, proposer, number)


def test_commands_carry_the_nodes_clock_not_the_machines() -> None:
    clock = ManualClock(now_ms=1_000_000)
    log = Recording()

    async def scenario() -> None:
        node = Node(NodeConfig(port=0, tick_interval_ms=10), log, clock=clock)
        await node.start()
        try:
            reader, writer = await asyncio.open_connection(*node.address)
            writer.write(b"CONNECT\naccept-version:1.2\n\n\0")
            await asyncio.wait_for(reader.readuntil(b"\0"), 5)
            clock.advance(5_000)
            # A message due 100 ms later gives the leader's ticker a Tick to propose (an idle one
            # proposes none): it sleeps 100 ms of the machine's time, then reads the node's.
            writer.write(b"SEND\ndestination:/queue/clocked\nreceipt:r1\nAMQ_SCHEDULED_DELAY:100\n\nx\0")
            await asyncio.wait_for(reader.readuntil(b"\0"), 5)
            clock.advance(100)
            while not any(isinstance(c, Tick) and c.now == 1_005_100 for c in log.proposed):
                await asyncio.sleep(0.01)
            writer.close()
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10))
    connect = next(c for c in log.proposed if isinstance(c, Connect))
    send = next(c for c in log.proposed if isinstance(c, Send))
    assert (connect.now, send.now) == (1_000_000, 1_005_000)
    assert {c.now for c in log.proposed if isinstance(c, Tick)} == {1_005_100}  # none while idle

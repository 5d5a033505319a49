"""The leader's ticker (raftmq.server.ticker) and the pulse it sleeps on (raftmq.server.seams.pulse):
an idle node proposes no Tick and looks at nothing; time-bound work still gets its Tick on time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from raftmq.config import NodeConfig
from raftmq.core.commands import Command, Tick
from raftmq.replication.commit_log import InMemoryLog, Proposer
from raftmq.server.node import Node
from raftmq.server.seams.pulse import Pulse


class Recording(InMemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[float] = []  # when each Tick was proposed (time.monotonic)

    def _note(self, commands: Sequence[Command]) -> None:
        self.ticks.extend(time.monotonic() for c in commands if isinstance(c, Tick))

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        self._note(commands)
        return super().propose(commands)

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self._note(commands)
        super().propose_for(commands, proposer, number)


def test_a_pulse_wakes_its_waiters_once_it_moves() -> None:
    async def scenario() -> None:
        pulse = Pulse()
        assert await pulse.wait(-1) == 0  # a count not seen yet: at once
        waiters = [asyncio.ensure_future(pulse.wait(0)) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert not any(w.done() for w in waiters)
        waiters[0].cancel()  # one waiter gone leaves the others waiting
        await asyncio.sleep(0.01)
        pulse.beat()
        assert await asyncio.gather(*waiters[1:]) == [1, 1]
        started = time.monotonic()
        assert await pulse.wait(1, timeout=0.05) == 1  # nothing moved: the timeout ends it
        assert time.monotonic() - started >= 0.05

    asyncio.run(scenario())


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_a_task_cancelled_while_it_waits_is_cancelled_even_when_a_beat_comes_with_the_cancel(
        timeout: float | None) -> None:
    # A node stops by cancelling its ticker and sampler and awaiting them: a wait that returned
    # instead of raising (asyncio.wait_for in 3.11, when what it awaits completes in the turn of
    # the cancel) left them running, and the stop waited for ever.
    async def scenario() -> None:
        pulse = Pulse()
        for _ in range(20):
            seen = pulse.count
            task = asyncio.ensure_future(pulse.wait(seen, timeout))
            await asyncio.sleep(0)
            pulse.beat()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(scenario())


@pytest.mark.integration
def test_an_idle_leader_proposes_no_tick_and_a_due_message_gets_one_on_time() -> None:
    log = Recording()

    async def scenario() -> None:
        node = Node(NodeConfig(port=0, tick_interval_ms=20), log)
        await node.start()
        try:
            await asyncio.sleep(0.5)
            assert log.ticks == []  # nothing due, nothing to watch: not one Tick in 25 intervals
            reader, writer = await asyncio.open_connection(*node.address)
            writer.write(b"CONNECT\naccept-version:1.2\n\n\0")
            await asyncio.wait_for(reader.readuntil(b"\0"), 5)
            sent = time.monotonic()
            writer.write(b"SEND\ndestination:/queue/later\nreceipt:r1\nAMQ_SCHEDULED_DELAY:300\n\nx\0")
            await asyncio.wait_for(reader.readuntil(b"\0"), 5)
            writer.write(b"SUBSCRIBE\ndestination:/queue/later\nid:s\n\n\0")
            frame = await asyncio.wait_for(reader.readuntil(b"\0"), 5)
            assert frame.startswith(b"MESSAGE")
            late = time.monotonic() - sent - 0.3
            assert -0.01 < late < 0.1, late  # its Tick came when it was due, not at a poll
            await asyncio.sleep(0.3)
            assert len(log.ticks) == 1, log.ticks  # and idle again: no more
            writer.close()
        finally:
            await node.stop()

    asyncio.run(asyncio.wait_for(scenario(), 20))

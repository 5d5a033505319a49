"""A node's hand-overs, adoptions and parkings under way are its own (`Underway`): a stopping
node waits for its own, not for those of another node in the same process."""

from __future__ import annotations

import asyncio

from raftmq.server.stomp.hand_over import Underway


def test_a_node_waits_for_its_own_hand_overs_only() -> None:
    async def scenario() -> tuple[float, float, bool]:
        mine, other = Underway(), Underway()
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        other.spawn(release.wait())  # another node's, never done while we wait
        mine.spawn(asyncio.sleep(0.05))
        began = loop.time()
        await mine.settled(timeout=5)
        waited_mine = loop.time() - began
        began = loop.time()
        await other.settled(timeout=0.2)  # bounded: it gives up at its timeout
        waited_other = loop.time() - began
        release.set()
        await other.settled(timeout=5)
        return waited_mine, waited_other, not other._running

    waited_mine, waited_other, other_done = asyncio.run(scenario())
    assert 0.04 <= waited_mine < 1.0  # its own 50 ms task, not the other node's
    assert 0.15 <= waited_other < 1.0
    assert other_done

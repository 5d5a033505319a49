"""A node's hand-overs, adoptions and parkings under way are its own (`Underway`): a stopping
node waits for its own, not for those of another node in the same process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from raftmq.server import takeover as takeover_module
from raftmq.server.stomp import hand_over
from raftmq.server.stomp.hand_over import Underway
from raftmq.server.takeover import Takeover


def test_a_node_waits_for_its_own_hand_overs_only() -> None:
    async def scenario() -> tuple[float, float, bool]:
        mine, other = Underway(), Underway()
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        other.spawn(release.wait())  # another node's, never done while we wait
        mine.spawn(asyncio.sleep(0.05))
        began = loop.time()
        await mine.settled(timeout=5)
        assert not mine._running  # its own task is done: that is what it waited for
        waited_mine = loop.time() - began
        began = loop.time()
        await other.settled(timeout=0.2)  # bounded: it gives up at its timeout
        waited_other = loop.time() - began
        release.set()
        await other.settled(timeout=5)
        return waited_mine, waited_other, not other._running

    waited_mine, waited_other, other_done = asyncio.run(scenario())
    assert waited_mine < 1.0  # its own 50 ms task, not the other node's (never done meanwhile)
    assert 0.15 <= waited_other < 3.0
    assert other_done


class Settling:
    """What `_settle` asks of a connection: whether proposals or output wait, and to be told."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.host = type("Host", (), {"loop": loop})()
        self.settling = True
        self.unsent = True
        self.on_settled: list[Callable[[], None]] = []
        self.on_flushed: list[Callable[[], None]] = []

    def when_settled(self, then: Callable[[], None]) -> None:
        self.on_settled.append(then)

    def when_flushed(self, then: Callable[[], None]) -> None:
        self.on_flushed.append(then)

    def tell(self, callbacks: list[Callable[[], None]]) -> None:
        waiting, callbacks[:] = list(callbacks), []
        for then in waiting:
            then()


def test_a_hand_over_waits_to_be_told_not_by_polling(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        told = Settling(loop)

        def settle_then_flush() -> None:
            told.settling = False
            told.tell(told.on_settled)  # the proposals settled: now it waits for the flush
            loop.call_later(0.03, flush)

        def flush() -> None:
            told.unsent = False
            flushed_at.append(loop.time())
            told.tell(told.on_flushed)

        flushed_at: list[float] = []
        loop.call_later(0.03, settle_then_flush)
        monkeypatch.setattr(hand_over, "SETTLE_SECONDS", 5.0)  # far: only being told ends this wait
        began = loop.time()
        await hand_over._settle(told, output=True)  # type: ignore[arg-type]
        assert flushed_at  # it went on only once the flush was told (not when the proposals settled)
        waited_told = loop.time() - began
        # Changed without a word: a poll would see it; an event-driven wait runs to its deadline.
        monkeypatch.setattr(hand_over, "SETTLE_SECONDS", 0.3)
        silent = Settling(loop)
        loop.call_later(0.03, lambda: setattr(silent, "settling", False))
        began = loop.time()
        await hand_over._settle(silent, output=False)  # type: ignore[arg-type]
        return waited_told, loop.time() - began

    waited_told, waited_silent = asyncio.run(scenario())
    assert waited_told < 4.0  # told at about 60 ms: not the 5 s deadline
    assert waited_silent >= 0.28  # nobody told it: it waited out its deadline


def test_a_claim_for_a_parked_session_is_woken_by_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The successor waits for a session still served here (its relay's half-close on its way):
    woken when the connection goes (the node says so), never by polling: unannounced, it waits
    out its deadline."""
    async def scenario() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        takeover = Takeover()
        served = {"n1:a:1"}

        def gone() -> None:
            served.clear()
            gone_at.append(loop.time())
            takeover.changed()  # as the node's connection_closed does

        gone_at: list[float] = []
        loop.call_later(0.03, gone)
        monkeypatch.setattr(takeover_module, "CLAIM_WAIT_SECONDS", 5.0)  # far: only the word ends this wait
        began = loop.time()
        assert await takeover.claim_parked("n1:a:1", served.__contains__, loop) == "no such session parked here"
        assert gone_at  # it answered only once the connection went
        announced = loop.time() - began
        served.add("n1:a:2")
        loop.call_later(0.03, served.clear)  # unannounced
        monkeypatch.setattr(takeover_module, "CLAIM_WAIT_SECONDS", 0.3)
        began = loop.time()
        await takeover.claim_parked("n1:a:2", served.__contains__, loop)
        return announced, loop.time() - began

    announced, unannounced = asyncio.run(scenario())
    assert announced < 4.0  # not the 5 s deadline
    assert unannounced >= 0.28

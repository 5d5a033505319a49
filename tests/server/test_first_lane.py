"""A bridge's forwards first (raftmq.server.links.first_lane): batches of what many connections
send, at most WINDOW in flight, exactly one outcome per SEND, told to its own connection in
order, and everything not confirmed falling back."""

from __future__ import annotations

import asyncio
from typing import Any

from raftmq.core.commands import Send
from raftmq.errors import BrokerRefused
from raftmq.routing.forward_batch import BATCH_DESTINATION, BATCH_INDEX_HEADER
from raftmq.server.links.first_lane import WINDOW, FirstLane, FirstSend


class Client:
    def __init__(self) -> None:
        self.sent: list[tuple[str, asyncio.Future[Any]]] = []

    def send_nowait(self, destination: str, body: bytes, headers: Any, receipt: bool) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.sent.append((destination, future))
        return future


def firsts(connection: str, count: int) -> list[FirstSend]:
    return [FirstSend(Send(connection, "/queue/q", "", b"x", 1, None, f"{connection}{i}"), "g2", f"f:{connection}{i}")
            for i in range(count)]


def told(outcomes: list[tuple[str, list[str], int]], connection: str) -> Any:
    def outcome(sends: list[FirstSend], confirmed: int) -> None:
        outcomes.append((connection, [first.send.receipt or "" for first in sends], confirmed))
    return outcome


def test_what_comes_in_one_turn_goes_in_one_batch_and_more_waits_for_the_window() -> None:
    async def run() -> None:
        lane, client = FirstLane("g1"), Client()
        outcomes: list[tuple[str, list[str], int]] = []
        lane.send(client, firsts("a", 2), told(outcomes, "a"))  # type: ignore[arg-type]
        lane.send(client, firsts("b", 1), told(outcomes, "b"))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert [destination for destination, _ in client.sent] == [BATCH_DESTINATION]
        for index in range(WINDOW + 2):  # one turn each: each its own batch while the window has room
            lane.send(client, firsts(f"c{index}-", 1), told(outcomes, "c"))  # type: ignore[arg-type]
            await asyncio.sleep(0)
        assert len(client.sent) == WINDOW
        client.sent[0][1].set_result(None)
        await asyncio.sleep(0)
        assert outcomes[:2] == [("a", ["a0", "a1"], 2), ("b", ["b0"], 1)]
        assert len(client.sent) == WINDOW + 1  # the waiting ones went together, as one batch
        assert lane.confirmed == 3

    asyncio.run(run())


def test_a_refusal_confirms_those_before_it_and_the_rest_fall_back_per_connection() -> None:
    async def run() -> None:
        lane, client = FirstLane("g1"), Client()
        outcomes: list[tuple[str, list[str], int]] = []
        lane.send(client, firsts("a", 2), told(outcomes, "a"))  # type: ignore[arg-type]
        lane.send(client, firsts("b", 2), told(outcomes, "b"))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        client.sent[0][1].set_exception(BrokerRefused("too large", {BATCH_INDEX_HEADER: "3"}))
        await asyncio.sleep(0)
        assert outcomes == [("a", ["a0", "a1"], 2), ("b", ["b0", "b1"], 1)]
        assert (lane.confirmed, lane.fell_back) == (3, 1)

    asyncio.run(run())


def test_a_lost_link_falls_back_what_is_in_flight_and_what_waits() -> None:
    async def run() -> None:
        lane, client = FirstLane("g1"), Client()
        outcomes: list[tuple[str, list[str], int]] = []
        for index in range(WINDOW + 1):
            lane.send(client, firsts(f"a{index}-", 1), told(outcomes, "a"))  # type: ignore[arg-type]
            await asyncio.sleep(0)
        assert len(client.sent) == WINDOW
        lane.fall_back_all()
        assert sorted(confirmed for _, _, confirmed in outcomes) == [0] * (WINDOW + 1)
        client.sent[0][1].set_result(None)  # answered after all: told once only (it fell back)
        await asyncio.sleep(0)
        assert len(outcomes) == WINDOW + 1 and lane.fell_back == WINDOW + 1 and lane.confirmed == 0

    asyncio.run(run())


def test_without_a_client_everything_falls_back_at_once() -> None:
    async def run() -> None:
        lane = FirstLane("g1")
        outcomes: list[tuple[str, list[str], int]] = []
        lane.send(None, firsts("a", 3), told(outcomes, "a"))
        await asyncio.sleep(0)
        assert outcomes == [("a", ["a0", "a1", "a2"], 0)]

    asyncio.run(run())


def test_an_answer_lets_one_batch_go_per_free_place_in_the_window() -> None:
    async def run() -> None:
        lane, client = FirstLane("g1"), Client()
        outcomes: list[tuple[str, list[str], int]] = []
        for index in range(WINDOW):
            lane.send(client, firsts(f"a{index}-", 1), told(outcomes, "a"))  # type: ignore[arg-type]
            await asyncio.sleep(0)
        lane.send(client, firsts("b", 150), told(outcomes, "b"))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert len(client.sent) == WINDOW
        client.sent[0][1].set_result(None)
        await asyncio.sleep(0)
        assert len(client.sent) == WINDOW + 1  # 100 of the 150; the other 50 wait for the next place
        client.sent[1][1].set_result(None)
        await asyncio.sleep(0)
        assert len(client.sent) == WINDOW + 2

    asyncio.run(run())

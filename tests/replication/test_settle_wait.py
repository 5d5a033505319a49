"""ACKs and NACKs that nobody waits on wait for company (`RaftTimings.settle_wait_ms`).

A leader's `RaftLog` driven through its member seam by a stand-in member that records what is
submitted and settles it when the test says: which proposals go out, when, and in which entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from raftmq.config import RaftTimings
from raftmq.core.commands import Ack, Command, Nack, Send, Subscribe, unawaited
from raftmq.protocol.header_block import block_of
from raftmq.replication.entry_codec import decode_entry
from raftmq.replication.pysyncobj.syncobj import SUCCESS
from raftmq.replication.raft_log import RaftLog
from raftmq.replication.raft_settings import RaftSettings

WAIT_MS = 5.0
# For a test whose wait is ended by the producer's next SEND, never by its expiry: a loaded
# machine (the whole suite in parallel) once took longer than 5 ms between two steps of one.
LONG_WAIT_MS = 2000.0
# For a test that looks before the wait is over and after: long enough that a loaded machine
# (CI once took over 5 ms between two steps) still looks before its end.
MEDIUM_WAIT_MS = 250.0


def send(ident: str) -> Send:
    return Send("s1", "/queue/q", block_of((("id", ident),)), b"body", 0)


def ack(ident: str, receipt: str | None = None) -> Ack:
    return Ack("s2", 0, ack_id=ident, receipt=receipt)


class Member:
    """Stands for the Raft member: leads, keeps each submitted entry and its commit callback."""

    is_leader = True

    def __init__(self) -> None:
        self.submitted: list[tuple[bytes, Callable[[Any, int], None]]] = []

    def submit(self, entry: bytes, callback: Callable[[Any, int], None]) -> None:
        self.submitted.append((entry, callback))

    def entries(self) -> list[list[str]]:
        """What each submitted entry holds: its commands' ids, in order."""
        return [[label(c) for c in decode_entry(entry)] for entry, _callback in self.submitted]

    def commit(self, n: int) -> None:
        """Entry `n` (0-based) committed and applied at index n + 1."""
        self.submitted[n][1](n + 1, SUCCESS)


def label(command: Command) -> str:
    if isinstance(command, Send):
        return f"send:{command.headers.partition(':')[2].strip()}"
    assert isinstance(command, Ack | Nack)
    return f"{type(command).__name__.lower()}:{command.ack_id}"


def run(tmp_path: Path, body: Callable[[RaftLog, Member], Awaitable[None]], settle_wait_ms: float = WAIT_MS) -> None:
    async def main() -> None:
        settings = RaftSettings("127.0.0.1:1", ("127.0.0.1:1",), str(tmp_path),
                                timings=RaftTimings(settle_wait_ms=settle_wait_ms))
        log, member = RaftLog(settings), Member()
        loop = asyncio.get_running_loop()
        # What `start` would do, without the member's threads and sockets.
        log._loop, log._syncobj, log._leading_on_loop = loop, member, True  # type: ignore[assignment]
        log._applier.handoff.start(loop)
        await body(log, member)

    asyncio.run(asyncio.wait_for(main(), 10))


async def turn() -> None:
    """Let the loop run what is due now (the pump, a settlement handed over)."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_only_acks_and_nacks_without_a_receipt_are_unawaited() -> None:
    assert unawaited([ack("a1"), Nack("s2", 0, ack_id="a2")])
    assert not unawaited([ack("a1", receipt="r1")])
    assert not unawaited([ack("a1"), send("m1")])
    assert not unawaited([Subscribe("s2", "sub-0", "/queue/q", 0)])
    assert not unawaited([])


def test_an_unawaited_ack_is_not_a_second_entry_in_flight_and_then_waits_for_the_producers_next_send(
        tmp_path: Path) -> None:
    async def body(log: RaftLog, member: Member) -> None:
        first = log.propose([send("m1")])
        await turn()
        assert member.entries() == [["send:m1"]]
        acked = log.propose([ack("a1")])
        await turn()
        assert member.entries() == [["send:m1"]], "an ACK nobody waits on went out beside the entry in flight"
        member.commit(0)
        await turn()
        assert first.done() and member.entries() == [["send:m1"]], "the ACK did not wait for the producer's next SEND"
        second = log.propose([send("m2")])
        await turn()
        assert member.entries() == [["send:m1"], ["ack:a1", "send:m2"]]
        member.commit(1)
        await asyncio.wait_for(asyncio.gather(acked, second), 1)

    run(tmp_path, body, LONG_WAIT_MS)


def test_an_unawaited_ack_goes_alone_once_the_wait_is_over(tmp_path: Path) -> None:
    async def body(log: RaftLog, member: Member) -> None:
        first = log.propose([send("m1")])
        await turn()
        member.commit(0)
        await first
        acked = log.propose([ack("a1")])
        await turn()
        assert member.entries() == [["send:m1"]]
        await asyncio.sleep(MEDIUM_WAIT_MS / 1000 * 4)
        assert member.entries() == [["send:m1"], ["ack:a1"]]
        member.commit(1)
        await asyncio.wait_for(acked, 1)

    run(tmp_path, body, MEDIUM_WAIT_MS)


def test_acks_alone_do_not_wait_for_company(tmp_path: Path) -> None:
    """A consumer draining a queue: an ACK entry settling answers no producer, so the ACKs that
    queued behind it go at once."""

    async def body(log: RaftLog, member: Member) -> None:
        log.propose([ack("a1")])
        await turn()
        assert member.entries() == [["ack:a1"]]
        log.propose([ack("a2")])
        log.propose([ack("a3")])
        await turn()
        assert member.entries() == [["ack:a1"]]
        member.commit(0)
        await turn()
        assert member.entries() == [["ack:a1"], ["ack:a2", "ack:a3"]]

    run(tmp_path, body)


@pytest.mark.parametrize("awaited", ["receipt", "setting off"])
def test_an_ack_someone_waits_on_goes_at_once(tmp_path: Path, awaited: str) -> None:
    """An ACK with a receipt (or any, with settle_wait_ms = 0) goes out as a second, small entry
    beside the one in flight, as any proposal."""

    async def body(log: RaftLog, member: Member) -> None:
        log.propose([send("m1")])
        await turn()
        log.propose([ack("a1", receipt="r1" if awaited == "receipt" else None)])
        await turn()
        assert member.entries() == [["send:m1"], ["ack:a1"]]

    run(tmp_path, body, settle_wait_ms=0 if awaited == "setting off" else WAIT_MS)

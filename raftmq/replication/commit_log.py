"""The commit-log seam: the shell proposes commands, the log commits them in one order, and the
state machine (the node) applies them.

A `CommitLog` takes batches of commands (`propose`), puts them in one total order, and hands
every committed batch to its `StateMachine` (`apply`), on the event loop, in commit order.
`InMemoryLog` commits at once (one node, no replication); `RaftLog`
(raftmq.replication.raft_log) replicates to a majority first. The log knows nothing of STOMP
or of the broker core: it moves `Command`s.

While `apply` runs, `position` names the batch it was given (Raft index and term), which is
what the same batch is called on every replica (the body journal's records carry it). A log
whose leadership can change reports each change to its role listener, on the event loop,
before it fails the proposals in flight, and answers `holds_lease()` with whether its
leadership is certainly current at this instant.

The order in which the shell executes one committed batch (etcd's Ready contract, here). This
is the one written statement of it; docs/architecture.md, `server/replica/state_machine.py` and
`server/replica/bodies.py` point here, and tests/server/test_apply_order.py records the order a real
group member executes and holds it to these steps, by name:

1. durable -- the batch is in the Raft journal and fdatasync'd on a majority of the group
   before the log hands it over (RaftLog; InMemoryLog commits at once, in memory);
2. references -- `BodyStore.begin` keeps each SEND's bytes in memory as a record of this
   batch, and `Broker.begin_entry` has the core hold each body as a body reference (raft
   index, ordinal, size), minted as it applies the SEND: nothing is written yet (a member
   without a body journal keeps the bodies in the core and skips steps 2 and 5);
3. core -- `Broker.apply`, one command at a time, each returning its effects;
4. effects -- each command's effects are executed on this node's sessions right after it, in
   the order the core returned them, except that a SEND's RECEIPT moves ahead of deliveries to
   *other* sessions (each session keeps its own order). Executing an effect formats the frame
   and queues it on the connection; nothing reaches a socket yet;
5. bodies -- `BodyStore.end` writes the batch's bodies and the pages its commands sealed to the
   body journal as one batch (not fsynced: until a snapshot covers the entry, the Raft journal
   holds the bodies, and a replay writes what the body journal lost);
6. socket -- on a later event-loop turn each connection writes what it queued, once per turn,
   and only while `holds_lease()` says the leadership is current (else it waits);
7. settled -- the proposal settles: the future `propose` returned completes, or the proposer
   of `propose_for` is told (success, or `NotLeader` / `CommitFailed` when the outcome is
   unknown). It follows step 5; against step 6 its order is not fixed (RaftLog settles
   through the tick thread's hand-off, InMemoryLog at once).

So a session sees a command's effects queued before its proposal settles, and a RECEIPT never
reaches a socket before its command is durable on a majority, applied by the core, and its
batch's bodies are in this member's body journal.

`snapshot()` and `restore()` run on the event loop too, in order with `apply`: a snapshot holds
exactly the batches applied before it.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from raftmq.core.commands import Command
from raftmq.errors import CommitFailed

log = structlog.get_logger("raftmq.replication.commit_log")

RoleListener = Callable[[bool], None]  # called with True on becoming leader, False on losing it


class Proposer(Protocol):
    """Who proposes many batches and hears their outcomes in one place (`propose_for`): a client
    connection, which numbers its proposals."""

    def settled(self, number: int, commands: Sequence[Command], error: Exception | None) -> None:
        """Proposal `number` (its `commands`) was applied (`error` None), or failed with
        `NotLeader` / `CommitFailed`. Called on the event loop."""


def tell(waiter: tuple[Proposer, int, Sequence[Command]], error: Exception | None) -> None:
    """A `propose_for` proposal's outcome to its proposer, now."""
    proposer, number, commands = waiter
    try:
        proposer.settled(number, commands, error)
    except Exception:  # one proposer's bug must not keep the others from hearing (as a future's callback would not)
        log.exception("commit_log.proposer_failed", proposer=type(proposer).__name__)


def ignore_outcome(future: asyncio.Future[None]) -> None:
    """A proposal's done-callback where nobody waits on its outcome: the outcome is retrieved, so
    asyncio does not warn of an exception never read."""
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True, slots=True)
class LogPosition:
    index: int  # of the committed batch (Raft index; InMemoryLog counts batches)
    term: int  # Raft term of that batch (0 without Raft)


class StateMachine(Protocol):
    """What a commit log drives. All three run on the event loop, in commit order."""

    def apply(self, commands: Sequence[Command]) -> None:
        """One committed batch; raising stops this replica (it must not diverge)."""

    def snapshot(self) -> bytes:
        """The whole state after the last applied batch."""

    def restore(self, data: bytes) -> asyncio.Future[None] | None:
        """Replace the state by a snapshot's (b"": the empty state). A future when the machine
        finishes later (fetching what the snapshot references from peers, off the loop): the
        log hands it nothing more until that future is done."""


@dataclass(frozen=True, slots=True)
class LogStatus:
    """A log's view of itself, the same shape for every log (admin /status shows it)."""

    is_leader: bool
    leader: str | None  # the leader's client address, when known and not this node
    term: int  # 0 without Raft
    commit_index: int
    applied_index: int
    replicated: bool  # False: one node, whatever is proposed commits at once
    details: dict[str, Any]  # log-specific counters (RaftLog: journal, fsyncs, apply errors...)


class CommitLog(ABC):
    @abstractmethod
    async def start(self, machine: StateMachine) -> None:
        """Begin committing; `machine.apply` runs on the event loop for each committed batch."""

    @abstractmethod
    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        """Submit commands (kept in order). The future completes after `apply` has run for
        them, or fails with `NotLeader` / `CommitFailed` when their outcome is unknown. An
        empty proposal completes after everything proposed before it."""

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        """`propose`, batch-shaped: the outcome goes to `proposer.settled(number, commands,
        error)`, exactly once, with no future per proposal. A proposer's proposals settle in the
        order proposed when they all succeed; `RaftLog` and `InMemoryLog` call it directly as
        an entry settles, this default through `propose`'s future."""
        def done(future: asyncio.Future[None]) -> None:
            error = CommitFailed("proposal cancelled") if future.cancelled() else future.exception()
            failure = error if error is None or isinstance(error, Exception) else CommitFailed(repr(error))
            proposer.settled(number, commands, failure)

        self.propose(commands).add_done_callback(done)

    @abstractmethod
    async def stop(self) -> None:
        """Stop committing; pending proposals fail with `CommitFailed`."""

    @abstractmethod
    def status(self) -> LogStatus:
        """Role, term and indexes, for /status and the logs."""

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def leader_hint(self) -> str | None:
        """The leader's client address when this node is not the leader, if known."""
        return None

    @property
    def position(self) -> LogPosition:
        """The batch `apply` is handling now (or handled last); while `snapshot` runs, the
        index and term the state is taken at."""
        return LogPosition(0, 0)

    def set_role_listener(self, listener: RoleListener | None) -> None:
        """Be told of leadership changes (a log that is always leader never calls it)."""

    def set_leader_listener(self, listener: Callable[[], None] | None) -> None:
        """Be told, on the event loop, whenever the leader this node knows of may have changed
        (`leader_hint`, this node's own role included); a log that always leads never calls it."""

    @property
    def snapshot_floor(self) -> int:
        """An index at or below that of the last durable snapshot (0: none): entries up to it
        may exist nowhere but in that snapshot."""
        return 0

    async def transfer_leadership(self, timeout: float = 1.0) -> bool:
        """Hand leadership to another member before a graceful stop; True once done."""
        return False

    @property
    def leader_term(self) -> int:
        """The Raft term this node leads in, or last led in (0 without terms, or if it never
        led): what its MESSAGE and CONNECTED frames carry (`raftmq-term`), so a client can tell
        a deposed leader's frames, written after it stepped down too."""
        return 0

    @property
    def won_by_hand_over(self) -> bool:
        """Whether this node's current (or last) leadership came from a transfer its predecessor
        asked for (Raft's TimeoutNow): that predecessor is alive and hands its clients over."""
        return False

    @property
    def handing_over(self) -> bool:
        """Whether this node, leading, is handing its leadership to another member right now
        (`transfer_leadership` under way): a successor may lead already without this node
        knowing it yet."""
        return False

    def holds_lease(self) -> bool:
        """May this node write deliveries and receipts to clients at this moment? A replicated
        log says yes only while its leader lease holds (raftmq.replication.leadership); asked
        at the moment of writing, since a pause can end a leadership between two lines."""
        return True


class InMemoryLog(CommitLog):
    """Commits whatever was proposed during one event-loop turn as one batch.

    Coalescing per loop turn is the same group commit the Raft log does per replication
    round: the cost of a commit is paid once for every command that arrived meanwhile.
    """

    def __init__(self) -> None:
        self._machine: StateMachine | None = None
        self._pending: list[Command] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._proposers: list[tuple[Proposer, int, Sequence[Command]]] = []
        self._scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self._batches = 0

    @property
    def position(self) -> LogPosition:
        return LogPosition(self._batches, 0)

    def status(self) -> LogStatus:
        return LogStatus(True, None, 0, self._batches, self._batches, False, {})

    async def start(self, machine: StateMachine) -> None:
        self._machine = machine
        self._loop = asyncio.get_running_loop()

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        assert self._loop is not None, "propose before start"
        future: asyncio.Future[None] = self._loop.create_future()
        if self._stopped:
            future.set_exception(CommitFailed("log stopped"))
            return future
        self._pending.extend(commands)
        self._waiters.append(future)
        self._schedule()
        return future

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        assert self._loop is not None, "propose before start"
        if self._stopped:
            self._loop.call_soon(tell, (proposer, number, commands), CommitFailed("log stopped"))
            return
        self._pending.extend(commands)
        self._proposers.append((proposer, number, commands))
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        pending, waiters, proposers = self._pending, self._waiters, self._proposers
        self._pending, self._waiters, self._proposers = [], [], []
        if self._stopped or not pending and not waiters and not proposers:
            return
        assert self._machine is not None
        self._batches += 1
        self._machine.apply(pending)
        for future in waiters:
            if not future.done():
                future.set_result(None)
        for proposer in proposers:
            tell(proposer, None)

    async def stop(self) -> None:
        self._stopped = True
        for future in self._waiters:
            if not future.done():
                future.set_exception(CommitFailed("log stopped"))
        proposers, self._proposers = self._proposers, []
        for proposer in proposers:
            tell(proposer, CommitFailed("log stopped"))
        self._pending, self._waiters = [], []

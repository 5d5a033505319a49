"""What a client connection proposes, and what it does with the outcomes (`Proposals`, owned by
raftmq.server.stomp.connection's `Connection`).

A connection numbers its proposals and hands each to the commit log with `propose_for`: the log
tells it `settled(number, commands, error)` as the entry settles, batch-shaped, with no future
and no callback per proposal (raftmq.replication.commit_log). Reading pauses while more than
`max_pending_commands` of its commands wait for the log. BLOCK (raftmq.server.seams.flow) holds
the first SEND that does not fit and everything after it, unproposed, until there is room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, Protocol

from raftmq.core.commands import Command, Send
from raftmq.errors import NotLeader
from raftmq.server.seams.host import ConnectionHost
from raftmq.server.stomp.decisions import Propose
from raftmq.server.stomp.session import StompSession

BUSY_WAIT_SECONDS = 0.05  # how long a SEND that may go first waits for its link's queue to go


class Proposing(Protocol):
    """What a connection's proposals see of it (raftmq.server.stomp.connection)."""

    host: ConnectionHost
    stomp: StompSession

    @property
    def held_for_redirect(self) -> bool: ...
    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, *, wait_for_log: bool = True,
             abort: bool = False, extra: dict[str, str] | None = None) -> None: ...
    def update_reading(self) -> None:
        """Pause or resume reading the client as what holds it back changed."""
    def receipt(self, receipt_id: str) -> None:
        """Write the RECEIPT of a command of this connection."""


class Proposals:
    """A connection's proposals and their outcomes; the commit log's `Proposer` for it."""

    def __init__(self, connection: Proposing, max_pending: int) -> None:
        self.connection = connection
        self.host = connection.host
        self._max_pending = max(1, max_pending)
        self._read_paused_for_log = False  # more than `max_pending` commands wait for the log
        self._read_paused_for_flow = False  # BLOCK: a destination this connection sends to is full
        self._pending = 0  # commands proposed, not yet settled
        self._proposals = 0  # proposals made: the next one's number
        self._unsettled = 0  # proposals not settled yet
        self._after_settled: list[Callable[[], None]] = []  # run once every proposal so far settled
        self._flow_sends: dict[int, list[tuple[str, int]]] = {}  # BLOCK's count of a proposal's SENDs, by number
        self._flow_held: list[list[Command]] = []  # proposals BLOCK holds, in order
        # Failed with NotLeader while held, by the order they were proposed in (a later proposal
        # can fail first: refused at once while an earlier one waited): a successor proposes them.
        self._unproposed: list[tuple[int, list[Command]]] = []
        self.outcome_unknown = False  # a command failed otherwise while held: the session cannot move
        # Forwards first (raftmq.server.links.forward_first): SENDs sent to another group before
        # being stored here, awaiting its word. What came after them and may not go first waits
        # for them (the client's order holds: a receipt, a DISCONNECT), never proposed before; a
        # SEND that may go first waits for what this connection proposed before it (a SEND stored
        # here may be bound for the same group). Both go once neither is in flight.
        self._forwarding = 0
        self._after_forwards: list[list[Command]] = []
        self._read_paused_for_forwards = False
        self._when_forwarded: list[Callable[[], None]] = []
        self._busy_since: float | None = None  # loop time a SEND first waited for its link's queue

    @property
    def paused(self) -> bool:
        """Reading is held back: too many commands wait for the log or their target group, or BLOCK holds some."""
        return self._read_paused_for_log or self._read_paused_for_flow or self._read_paused_for_forwards

    def propose(self, decision: Propose) -> None:
        self._propose(decision.commands)

    def _propose(self, commands: list[Command]) -> None:
        if self.host.forward_first is not None and not self.connection.stomp.cluster_connection:
            commands = self._first(commands)
            if not commands:
                return
        flow = self.host.flow
        if flow is None:
            return self._propose_now(commands)
        if not self._flow_held:
            at = flow.blocked_at(commands)
            if at is None:
                return self._propose_now(commands)
            if at:
                self._propose_now(commands[:at])
            commands = commands[at:]
        # Hold the first SEND that does not fit and everything after it, and read nothing more
        # until there is room.
        self._flow_held.append(commands)
        if not self._read_paused_for_flow:
            self._read_paused_for_flow = True
            self.connection.update_reading()
            flow.wait(self)

    def _first(self, commands: list[Command]) -> list[Command]:
        """Forward first the SENDs `commands` starts with that may go now; return the rest, or
        hold it (`_after_forwards`) while forwards are in flight, or when a SEND that may go first
        waits for this connection's proposals or for its link's queue."""
        if self._after_forwards:
            self._after_forwards.append(commands)
            return []
        forwarder = self.host.forward_first
        assert forwarder is not None
        planned = []
        waits = False  # a SEND that may go first, behind proposals of this connection or its link's queue
        for command in commands:
            plan = forwarder.plan(command) if isinstance(command, Send) else None
            if plan is not None and forwarder.busy(plan):
                # Messages wait in the link's queue: they go first. Waiting for them is brief
                # unless the link cannot keep up: then, after BUSY_WAIT_SECONDS, the store path.
                now = self.host.loop.time()
                if self._busy_since is None:
                    self._busy_since = now
                if now - self._busy_since >= BUSY_WAIT_SECONDS:
                    plan = None
                else:
                    waits = True
                    forwarder.when_free(plan, self._resume_waiting)
                    self.host.loop.call_later(BUSY_WAIT_SECONDS, self._resume_waiting)
                    break
            if plan is None:
                break
            if self._unsettled or self._flow_held:
                waits = True
                break
            self._busy_since = None
            planned.append(plan)
        rest = commands[len(planned):]
        if planned:
            self._forwarding += len(planned)
            forwarder.forward(planned, self._forwarded)  # may answer at once (the link just went)
        if rest and (self._forwarding or waits):
            self._after_forwards.append(rest)
            rest = []
        self._pause_for_forwards()
        return rest

    def _resume_waiting(self) -> None:
        """What waited may go on: nothing of this connection waits for the log (its link's queue went)."""
        if not self._unsettled:
            self._release()
            self._pause_for_forwards()
            self._check_forwarded()

    def _check_forwarded(self) -> None:
        if not self._forwarding and not self._after_forwards and self._when_forwarded:
            then, self._when_forwarded = self._when_forwarded, []
            for call in then:
                call()

    def _release(self) -> None:
        """Propose (or forward) what waited, once no forward is in flight (a SEND that may go
        first waits again while proposals are: `_first`)."""
        if self._after_forwards and not self._forwarding:
            held, self._after_forwards = self._after_forwards, []
            for commands in held:
                self._propose(commands)

    def _forwarded(self, sends: list[Any], confirmed: int) -> None:
        """A forward's outcome: the first `confirmed` were stored by their target (their RECEIPTs
        go now), the rest take the store path here (theirs go once that commits)."""
        self._forwarding -= len(sends)
        for first in sends[:confirmed]:
            if first.send.receipt is not None:
                self.connection.receipt(first.send.receipt)
        if confirmed < len(sends):
            self._propose_now([first.fallback() for first in sends[confirmed:]])
        self._release()
        self._pause_for_forwards()
        self._check_forwarded()
        self._run_after_settled()

    def _pause_for_forwards(self) -> None:
        paused = bool(self._after_forwards) or self._forwarding > self._max_pending
        if paused != self._read_paused_for_forwards:
            self._read_paused_for_forwards = paused
            self.connection.update_reading()

    def when_forwarded(self, then: Callable[[], None]) -> None:
        """Run `then` once no forward first is in flight and nothing waits for one (at once if
        so): what the client sent before closing is proposed or forwarded before its session ends."""
        if self._forwarding or self._after_forwards:
            self._when_forwarded.append(then)
        else:
            then()

    def flow_release(self) -> bool:
        """Propose what BLOCK held while its destinations have room; True once nothing is held."""
        flow = self.host.flow
        held = self._flow_held
        while held:
            if self.connection.stomp.state.ended:
                return True  # what it held goes with it (never proposed, never receipted)
            at = flow.blocked_at(held[0]) if flow is not None else None
            if at is not None:
                if at:
                    self._propose_now(held[0][:at])
                    held[0] = held[0][at:]
                return False
            self._propose_now(held.pop(0))
        self._read_paused_for_flow = False
        self.connection.update_reading()
        return True

    def _propose_now(self, commands: list[Command]) -> None:
        """The one place a connection proposes: its receipts go out once the commands commit."""
        number = self._proposals
        self._proposals += 1
        flow = self.host.flow
        if flow is not None:
            sends = flow.proposing(commands)
            if sends is not None:
                self._flow_sends[number] = sends
        self._pending += len(commands)
        self._unsettled += 1
        self.host.propose_for(commands, self, number)
        if self._pending > self._max_pending and not self._read_paused_for_log:
            self._read_paused_for_log = True
            self.connection.update_reading()

    def settled(self, number: int, commands: Sequence[Command], error: Exception | None) -> None:
        """The commit log's word on proposal `number` (raftmq.replication.commit_log.Proposer)."""
        self._pending -= len(commands)
        self._unsettled -= 1
        flow = self.host.flow
        if flow is not None:
            sends = self._flow_sends.pop(number, None)
            if sends is not None:
                flow.applied(sends)
            flow.poke()  # what this applied may make room for a blocked producer
        try:
            self._outcome(number, commands, error)
        finally:
            if self._after_forwards:
                self._resume_waiting()
            self._run_after_settled()

    def _run_after_settled(self) -> None:
        if not self._unsettled and not self._forwarding and self._after_settled:
            after, self._after_settled = self._after_settled, []
            for then in after:
                then()

    def _outcome(self, number: int, commands: Sequence[Command], error: Exception | None) -> None:
        connection = self.connection
        if error is not None and connection.held_for_redirect:  # the leadership left: never appended, or unknown
            if isinstance(error, NotLeader):
                self._unproposed.append((number, list(commands)))
            else:
                self.outcome_unknown = True
        elif error is not None and not connection.stomp.state.ended:
            if isinstance(error, NotLeader):
                connection.fail("not the leader", str(error), extra={"leader": error.leader} if error.leader else None)
            else:
                connection.fail("command not committed", f"{type(error).__name__}: {error}")
            return
        if self._read_paused_for_log and self._pending <= self._max_pending // 2:
            self._read_paused_for_log = False
            self.connection.update_reading()

    def when_settled(self, then: Callable[[], None]) -> None:
        """Run `then` once every proposal made so far has settled (at once if none waits)."""
        if self._unsettled or self._forwarding:
            self._after_settled.append(then)
        else:
            then()

    @property
    def settling(self) -> bool:  # commands proposed, or SENDs forwarded first, without an outcome yet
        return self._pending > 0 or self._forwarding > 0

    @property
    def unproposed(self) -> list[Command]:  # failed with NotLeader while held, in the order proposed
        return [command for _, commands in sorted(self._unproposed, key=itemgetter(0)) for command in commands]

    @property
    def flow_held(self) -> list[Command]:  # what BLOCK holds, never proposed
        return [command for commands in self._flow_held for command in commands]

    def forget_flow_held(self) -> None:
        if self._flow_held and self.host.flow is not None:
            self.host.flow.forget(self)
        self._flow_held.clear()

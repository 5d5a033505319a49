"""The successor's side of a leadership transfer: which of the old leader's sessions it may
adopt (raftmq.server.stomp.adoption), and what it keeps for them until they arrive.

A node that won its leadership from a transfer (the old leader's TimeoutNow: that leader is
alive and hands its clients over) waits up to `ADOPTION_WINDOW_SECONDS` before it sweeps the
sessions of earlier leaders (the Disconnect that returns their deliveries to the queues). Until
a session is adopted, or swept, an `AwaitingAdoption` stands in for it in the replica: what this
leader's own entries do for it (a delivery, say) is kept and handed to the connection that
adopts it, in order. Effects of the old leader's entries are not kept: the old leader applied
those entries before it handed over, and its clients got what they made from it.

After any other election there is no window: the sweep runs as soon as the earlier terms are
applied, and a ticket for a swept session is refused (its client gets the old leader's
`ERROR not the leader`, as without adoption).

A leader also parks sessions it serves: a relay that holds the client's socket half-closes its
connection to move closer (raftmq.server.stomp.adoption, "resume"). The parked session keeps
its ticket and an `AwaitingAdoption`, until the relay resumes it or `PARK_SECONDS` pass; then
it is disconnected, as the sweep would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raftmq.core.effects import Deliver
from raftmq.replication.commit_log import CommitLog
from raftmq.server.seams.host import ClientConnection
from raftmq.server.stomp.adoption import Ticket

ADOPTION_WINDOW_SECONDS = 1.0
# A ticket that reaches the successor before it has applied the earlier terms waits this long.
CLAIM_WAIT_SECONDS = 1.0
# A parked session waits this long for its relay to resume it, then is disconnected.
PARK_SECONDS = 1.0


class AwaitingAdoption:
    """Stands in the replica for a session of the old leader until it is adopted: keeps what
    the new leader's entries do for it."""

    def __init__(self, session_id: str, commit_log: CommitLog) -> None:
        self.session_id = session_id
        self._commit_log = commit_log
        self._kept: list[Callable[[ClientConnection], None]] = []

    @property
    def open_for_output(self) -> bool:
        return False  # a browse end is not kept (its frame needs the session's version)

    def _ours(self) -> bool:
        log = self._commit_log
        return log.position.term == log.leader_term  # an entry of this leadership, not the old one's

    def deliver(self, effect: Deliver, body: bytes | None = None) -> None:
        if self._ours():
            self._kept.append(lambda connection: connection.deliver(effect, body))

    def receipt(self, receipt_id: str) -> None:
        if self._ours():
            self._kept.append(lambda connection: connection.receipt(receipt_id))

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, **options: Any) -> None:
        if self._ours():
            self._kept.append(lambda connection: connection.fail(message, detail, receipt_id, **options))

    def write(self, data: bytes) -> None:
        pass  # only browse ends come here, and only while open_for_output

    def replay(self, connection: ClientConnection) -> int:
        """Hand what was kept to the connection that adopted the session; how many effects."""
        kept, self._kept = self._kept, []
        for effect in kept:
            effect(connection)
        return len(kept)


@dataclass
class Parked:
    ticket: Ticket
    unfinished: bytes  # a frame the client had begun: fed to the session before what follows
    timer: asyncio.TimerHandle


class Takeover:
    """A new leader's record of the earlier leaders' sessions: awaiting adoption, swept; and
    the sessions it parked."""

    def __init__(self) -> None:
        self.awaiting: dict[str, AwaitingAdoption] = {}
        self.swept: set[str] = set()  # Disconnect proposed: no longer adoptable
        self.done = asyncio.Event()  # earlier terms applied: claims may be answered
        self.adopted = 0
        self.parked: dict[str, Parked] = {}
        self.resumed = 0
        self._changed = asyncio.Event()  # set (and replaced) by `changed`

    def changed(self) -> None:
        """What a wait here looks at may have changed (a session parked, adopted, dropped or
        swept; a connection of this node closed): the waits look again. Nothing is polled."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, done: Callable[[], bool], deadline: float, loop: asyncio.AbstractEventLoop) -> None:
        """Until `done()` holds, looked at again at each `changed`, or `deadline` (loop time)."""
        while not done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return

    def reset(self) -> None:
        self.awaiting.clear()
        self.swept.clear()
        self.done.clear()
        for parked in self.parked.values():
            parked.timer.cancel()
        self.parked.clear()  # the next leader sweeps them
        self.changed()

    def end_window(self) -> None:
        """The adoption window closed: stop keeping for the sessions that did not come (parked ones stay)."""
        for session_id in [sid for sid in self.awaiting if sid not in self.parked]:
            del self.awaiting[session_id]
        self.changed()

    def park(self, ticket: Ticket, unfinished: bytes, commit_log: CommitLog, loop: asyncio.AbstractEventLoop,
             expire: Callable[[str], None]) -> None:
        session_id = ticket.session_id
        self.awaiting.setdefault(session_id, AwaitingAdoption(session_id, commit_log))  # parked on arrival: kept so far
        self.parked[session_id] = Parked(ticket, unfinished, loop.call_later(PARK_SECONDS, expire, session_id))
        self.changed()

    def unpark(self, session_id: str) -> bool:
        """Its time is up: forget it (the caller disconnects it); False if it was resumed meanwhile."""
        parked = self.parked.pop(session_id, None)
        self.awaiting.pop(session_id, None)
        self.changed()
        return parked is not None

    async def claim_parked(self, session_id: str, served: Callable[[str], bool],
                           loop: asyncio.AbstractEventLoop) -> Parked | str:
        """The parked session, or why not. A session still served here is waited for a while:
        the relay's half-close may still be on its way; so is one this leader awaits from its
        predecessor (a transfer): its ticket may still be on its way, and be parked here."""
        await self.until(lambda: session_id in self.parked or not (served(session_id) or session_id in self.awaiting),
                         loop.time() + CLAIM_WAIT_SECONDS, loop)
        parked = self.parked.pop(session_id, None)
        if parked is None:
            return "no such session parked here"
        parked.timer.cancel()
        self.resumed += 1
        return parked

    def expect(self, session_ids: list[str], served: Callable[[str], bool], commit_log: CommitLog) -> None:
        for session_id in session_ids:
            if not served(session_id) and session_id not in self.awaiting and session_id not in self.swept:
                self.awaiting[session_id] = AwaitingAdoption(session_id, commit_log)

    async def claim(self, session_id: str, leading: Callable[[], bool], served: Callable[[str], bool],
                    in_core: Callable[[str], bool]) -> str | None:
        """None when this node may adopt the session now, else why not."""
        if not self.done.is_set():
            try:
                await asyncio.wait_for(self.done.wait(), CLAIM_WAIT_SECONDS)
            except TimeoutError:
                return f"this node has not taken over within {CLAIM_WAIT_SECONDS:g} s"
        if not leading():
            return "this node does not lead its group any more"
        if served(session_id):
            return "the session is served here already"
        if session_id in self.swept or not in_core(session_id):
            return "no such session here (it ended, or was swept)"
        return None

    def adopt(self, session_id: str, connection: ClientConnection) -> int:
        """The session is served by `connection` now: what was kept for it goes there."""
        self.adopted += 1
        awaiting = self.awaiting.pop(session_id, None)
        self.changed()
        return 0 if awaiting is None else awaiting.replay(connection)

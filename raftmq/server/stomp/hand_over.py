"""A client's session moving with the leadership: the old leader hands it over, the successor
adopts it (the ticket and answer: raftmq.server.stomp.adoption; the successor's bookkeeping:
raftmq.server.takeover).

Old leader, `hand_over` (the connection stopped reading when the leadership left):
1. wait until every command the session proposed has an outcome. A leadership transfer lets
   the entries in flight commit and their receipts go out before it hands over, so what is
   left failed with NotLeader: never appended, safe to propose again. One whose outcome is
   unknown (the leadership was lost, not handed over) cannot be handed on: ERROR, as before;
2. write the ticket, with those commands and the bytes of a frame the client had begun, to the
   successor's client port, and relay the connection there (raftmq.server.stomp.relay). The
   session goes by a local name here from now on, and closing it proposes nothing.
   A session with output this node queued and could not send before its lease ended (a client
   slow to read) is not handed over either: those frames of the old term would reach the client
   after other clients had frames of the new one (stale, by docs/replication.md); it gets the
   ERROR, its Disconnect returns those deliveries to their queues, and the successor redelivers
   them;
3. once the successor answers, everything from the successor goes to the client. A refusal:
   ERROR `not the leader`.

Successor, `adopt`: claim the session (after its take-over; not swept, not served), take the
ticket's state and the session's id, answer, start the heart-beats, hand the connection what
this leadership's entries did for the session meanwhile, then propose the ticket's commands
and the frames that followed it.

Moving closer (raftmq.server.stomp.relay): the relay that holds the client's socket half-closes
towards the node serving an adopted session; `park` waits for the session's commands and
output as `hand_over` does, keeps its ticket (raftmq.server.takeover) and closes; `adopt` with no
ticket serves it again for the relay's resume request, or on the relay's own node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import structlog

from raftmq.core.commands import Command
from raftmq.server.seams.host import ClientConnection, ConnectionHost
from raftmq.server.stomp.adoption import Ticket, adopted_frame, ticket_frame
from raftmq.server.stomp.decisions import Decision
from raftmq.server.stomp.frames import error_frame
from raftmq.server.stomp.session import StompSession

log = structlog.get_logger("raftmq.server.hand_over")

# How long the old leader waits for the session's proposals to settle before it gives up on
# handing it over (a transfer settles them before it hands the leadership over).
SETTLE_SECONDS = 1.0


class Handing(ClientConnection, Protocol):
    """What a hand-over sees of the connection (raftmq.server.stomp.connection)."""

    host: ConnectionHost
    stomp: StompSession
    session_id: str
    peer: str
    hops: int
    stream_bytes: int
    client_gone: bool  # its relay said the client ended: a half-close is the client's own
    relay_goes: bool  # the follower relaying it goes: a half-close asks for a park
    @property
    def outcome_unknown(self) -> bool:
        """A command failed otherwise than NotLeader while held: the session cannot move."""

    @property
    def unproposed(self) -> list[Command]:
        """Failed with NotLeader once the leadership left, in the order proposed."""

    @property
    def closed(self) -> bool: ...
    @property
    def settling(self) -> bool:
        """Commands proposed without an outcome yet."""
    @property
    def unsent(self) -> bool:
        """Output queued, not yet handed to the socket."""
    def when_settled(self, then: Callable[[], None]) -> None:
        """Run `then` once every proposal made so far has settled."""
    def when_flushed(self, then: Callable[[], None]) -> None:
        """Run `then` once no output waits to be handed to the socket."""
    @property
    def flow_held(self) -> list[Command]:
        """What BLOCK holds, never proposed."""
    def forget_flow_held(self) -> None: ...
    def input_ended(self) -> None:
        """The client's side is closed: close ours once what is pending is out."""
    def data_received(self, data: bytes) -> None: ...
    def relay_to_successor(self, leader: str, session_id: str, prefix: bytes, refusal: bytes,
                           parked_at: int | None = None) -> None: ...
    def opened(self) -> None: ...
    def run(self, decisions: list[Decision]) -> None: ...


class Underway:
    """One node's hand-overs, adoptions and parkings under way: a stopping node waits for its
    own, never for another node's in the same process (tests and `EmbeddedBroker` run several)."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[None]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def settled(self, timeout: float) -> None:
        """Until those under way are done, at most `timeout`."""
        if self._running:
            await asyncio.wait(list(self._running), timeout=timeout)


async def _settle(connection: Handing, output: bool) -> None:
    """Wait (at most SETTLE_SECONDS) until the session's commands have outcomes and, with
    `output`, what it queued went to the socket: told by the connection as each happens (a
    proposal that settles, a flush), not polled."""
    settled: asyncio.Future[None] = connection.host.loop.create_future()

    def check() -> None:
        if settled.done():
            return
        if connection.settling:
            connection.when_settled(check)
        elif output and connection.unsent:
            connection.when_flushed(check)
        else:
            settled.set_result(None)

    check()
    try:
        await asyncio.wait_for(settled, SETTLE_SECONDS)
    except TimeoutError:
        pass  # what still waits is the caller's to judge (`settling`, `unsent`)


async def hand_over(connection: Handing, leader: str) -> None:
    host = connection.host
    await _settle(connection, output=False)
    stomp = connection.stomp
    secret = host.hand_over_secret
    commands = [*connection.unproposed, *connection.flow_held]
    ticket = None
    unsent = connection.unsent  # written under the old term: after the successor's frames reach others, stale
    # This node goes next, and holds the client's own socket: the successor parks the session and
    # the client resumes it there itself (a ticket with no hops); no relay from here is needed.
    parking = host.succession.going and connection.hops == 0 and not stomp.via_relay
    known = not connection.settling and not connection.outcome_unknown  # every command has its outcome
    if known and not unsent and secret is not None and not connection.closed:
        ticket = stomp.ticket(commands, connection.peer, host.clock.now_ms(), 0 if parking else connection.hops + 1)
    if ticket is None or secret is None:
        why = ("a command's outcome is unknown" if connection.settling or connection.outcome_unknown
               else "output of the old term not yet sent" if unsent else "not handed over")
        log.info("client.not_handed_over", session=connection.session_id, peer=connection.peer, reason=why)
        host.succession.refuse(connection, leader)
        return
    connection.forget_flow_held()  # what BLOCK held goes in the ticket: the successor proposes it
    session_id = ticket.session_id
    local_id = host.new_session_id("handed-")
    host.rename_session(session_id, local_id)
    stomp.handed_over(local_id)
    connection.session_id = local_id
    refusal = error_frame(
        "not the leader", f"this node is no longer the leader of its group; leader: {leader}", stomp.version, None,
        {"leader": leader},
    )
    unfinished = stomp.unfinished()
    log.info("client.handing_over", session=session_id, local=local_id, peer=connection.peer, leader=leader,
             commands=len(commands), parking=parking)
    if parking:  # the client sends the frame it had begun again, from the offset its ERROR names
        connection.relay_to_successor(leader, session_id, ticket_frame(ticket, secret), refusal,
                                      connection.stream_bytes - len(unfinished))
    else:
        connection.relay_to_successor(leader, session_id, ticket_frame(ticket, secret) + unfinished, refusal)


async def adopt(connection: Handing, ticket: Ticket | None, session_id: str, then: bytes | None = None,
                offset: int | None = None) -> None:
    """Serve the session handed over with `ticket`, or (None) the one parked here that a relay
    resumes; `then`: the relay is this node's own and gave the client's socket back (no answer
    is written; these bytes of the client's follow); `offset`: the client itself resumes it on
    a socket of its own, its stream going on from there (raftmq.client.resume)."""
    host = connection.host
    unfinished, resuming = b"", ticket is None
    try:
        if ticket is None:
            parked = await host.succession.claim_parked(session_id)
            if isinstance(parked, str):
                refusal = parked
            else:
                (ticket, unfinished), refusal = parked, None
        else:
            refusal = await host.succession.claim(session_id)
    except Exception as exc:  # a bug costs this hand-over, never the node
        refusal = f"{type(exc).__name__}: {exc}"
    if connection.closed:
        return
    if refusal is not None or ticket is None:
        log.info("client.adoption_refused", session=session_id, peer=connection.peer, reason=refusal)
        if then is not None:  # the client's own socket: it reconnects, here
            connection.stomp.authenticating = False
            connection.fail("not the leader", f"the session could not be moved here: {refusal}",
                            extra={"leader": host.leader_hint or ""})
        else:
            connection.run(connection.stomp.adopted(None, refusal or "", host.clock.now_ms()))
        return
    if ticket.hops == 0 and not resuming:  # its node goes: the client resumes the session itself
        host.succession.park(ticket, b"")
        connection.write(adopted_frame(session_id))
        log.info("client.parked", session=session_id, peer=ticket.peer, via=connection.peer)
        connection.input_ended()
        return
    host.rename_session(connection.session_id, session_id)
    connection.session_id = session_id
    via = connection.peer
    if offset is None:
        connection.peer, connection.hops = ticket.peer, ticket.hops
    else:  # the client's own socket, its stream going on from `offset`
        connection.hops, connection.stream_bytes = 0, offset
    if then is None:
        connection.write(adopted_frame(session_id))
    else:
        connection.hops = 0  # the client's own socket
    decisions = connection.stomp.adopted(ticket, "", host.clock.now_ms())
    connection.opened()
    kept = host.succession.adopt(session_id, connection)
    log.info("client.resumed" if resuming else "client.adopted", session=session_id, peer=connection.peer, via=via,
             hops=connection.hops, kept=kept, by="client" if offset is not None else "relay" if resuming else "member")
    connection.run(decisions)
    if unfinished or then:
        connection.data_received(unfinished + (then or b""))  # the frame the client had begun, then the rest
        connection.stream_bytes -= len(unfinished)  # counted when the client sent them


def released(connection: Handing, session_id: str, parks: bool = False) -> None:
    """The relay holding the client's socket of `session_id`, adopted here, says (on `connection`,
    a notice of its own: raftmq.server.stomp.adoption.release_frame) that its client ended its side:
    the half-close that follows is the client's own, so the session ends at once (its
    unacknowledged deliveries go back to their queues), not parked for a move that will not come.
    Answered once noted, so the relay half-closes after this. `parks`: the other way round, the
    follower relaying the session goes (it stops): the half-close that follows parks it, for
    its client to resume here (`park`, then `adopt` with the client's offset)."""
    found = connection.host.sessions.get(session_id)
    # The node's client connections are of this connection's class; a bridge session is not one.
    served = found if isinstance(found, type(connection)) else None
    if parks:  # the client's own socket on a follower (no hop): its relay asks for the park
        noted = served is not None and not served.hops and served.stomp.via_relay
        if served is not None and noted:
            served.relay_goes = True
    else:
        noted = served is not None and served.hops > 0  # adopted: a half-close there would park it
        if served is not None and noted:
            served.client_gone = True
    log.info("client.released", session=session_id, via=connection.peer, noted=noted, relay_goes=parks)
    connection.write(adopted_frame(session_id))
    connection.input_ended()


async def park(connection: Handing) -> None:
    """The relay that holds the client's socket half-closed this adopted session's connection
    to move closer (raftmq.server.stomp.adoption): once its commands have outcomes and its
    output is out, keep the session for the relay to resume and close. A session that cannot
    be parked ends as after any half-close."""
    host = connection.host
    await _settle(connection, output=True)
    ticket = None
    if (not connection.settling and not connection.unsent and not connection.closed and host.is_leader
            and not connection.client_gone):  # (its client's own end, said as the park began)
        ticket = connection.stomp.ticket(connection.unproposed, connection.peer, host.clock.now_ms(), 1)
    if ticket is None:
        log.info("client.not_parked", session=connection.session_id, peer=connection.peer)
        connection.input_ended()
        return
    local_id = host.new_session_id("parked-")
    host.rename_session(ticket.session_id, local_id)
    unfinished = connection.stomp.unfinished()
    connection.stomp.handed_over(local_id)
    connection.session_id = local_id
    host.succession.park(ticket, unfinished)
    log.info("client.parked", session=ticket.session_id, peer=connection.peer)
    connection.input_ended()

"""Any node serves any client: a follower relays a client's connection to its group's leader.

Only the leader runs sessions. A follower checks CONNECT as the leader would (first frame,
version, heart-beat, login); where it would answer `ERROR not the leader`, it connects to the
leader's client address, writes what the client sent so far (CONNECT marked `raftmq.relayed`),
then copies bytes both ways, never parsing them: the session is the leader's own. RabbitMQ does
so for a queue led elsewhere; it lets ordinary STOMP clients (stomp.py) use any member.

Modes (`follower_clients` in a group's [server] table): `relay` (the default, as above) or
`redirect` (`ERROR not the leader` with a `leader` header); a client that sends the CONNECT
header `raftmq.redirect:true` (ours) is redirected in relay mode too: no extra hop.

Back-pressure: a side is not read while the other's write buffer is above its high-water mark
(pause_writing / resume_writing): a slow reader costs the follower one buffer, never more.

Ends: when either side closes, the other is closed once what was read from it is written (an
ERROR from the leader reaches the client whole). A new leader: the relay moves (`Relay._move`),
stops reading the client and half-closes towards the old leader, which passes on a hand-over
(raftmq.server.stomp.hand_over); the successor parks the session and closes, and once all sent
before reached the client, the follower resumes the session at the new leader (a signed
`raftmq.resume`, raftmq.server.stomp.adoption) or serves it if it leads now. A deposed leader
that cannot hand over answers ERROR; one silent past a short grace (paused, cut off), or over
TLS (no half-close), has the relay closed; one killed resets its end, closing the client's.

A deposed leader relays the sessions it hands over the same way (`Relays.adopt`; the first bytes
are its ticket, whose answer is read here), moved again on a leader change if this node holds
the client's own socket. When this node goes (`farewell`) each client's ERROR carries the request
to resume at the successor (`farewell_frame`), and the node waits for those clients (`drained`).

No leader known yet: the follower waits up to `LEADER_WAIT_SECONDS`, then answers ERROR. TLS
(pinned to the group's certificate), what a relay counts as: docs/operations.md, "Any node serves any client".
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import structlog

from raftmq.config import split_address
from raftmq.errors import RelayRefused
from raftmq.server.seams.host import RelayedConnection, RelayHost
from raftmq.server.stomp.adoption import NotTaken, farewell_frame, read_answer, resume_frame
from raftmq.server.stomp.frames import error_frame
from raftmq.server.stomp.relay_sides import Adoption, ClientSide, UpstreamSide, abort, linger, mark_relayed, named_session, set_reading
from raftmq.tls import member_client_tls, pinned

log = structlog.get_logger("raftmq.server.relay")

# How long a follower looks for a reachable leader for a new client: past a leader election
# (300-600 ms timeouts by default, a split vote adds a round) with room to spare.
LEADER_WAIT_SECONDS = 2.0
LEADER_POLL_SECONDS = 0.02
# One attempt to open the connection to the leader (TCP, and TLS when the port uses it).
UPSTREAM_CONNECT_SECONDS = 1.0
# How often the follower compares the leader it relays to with the one it knows now, and how
# long a relay to a deposed leader stays open after the change was seen.
WATCH_SECONDS = 0.1
# How often it looks whether the leader changed (a change is acted on at once: relays move).
LEADER_CHANGE_POLL_SECONDS = 0.01
DEPOSED_GRACE_SECONDS = 0.5
# A closing side whose peer does not read what is left is dropped after this long.
CLOSE_GRACE_SECONDS = 5.0
# A deposed leader tries this long to reach its successor with a session's ticket.
ADOPT_CONNECT_SECONDS = 1.0


class Relays:
    """A node's relayed connections: starts them, counts them, and closes the ones whose
    leader was deposed."""

    def __init__(self, node: RelayHost) -> None:
        self._node = node
        self._active: set[Relay] = set()  # connecting to the leader, relaying, or refusing
        self.total = 0  # sessions relayed to a leader since start
        self.handed_over = 0  # of which sessions this node handed to its successor
        self.moved = 0  # relays that moved to a new leader (the session resumed there)
        self._watch: asyncio.TimerHandle | None = None
        self._watched: tuple[str | None, float] = (None, 0.0)  # (the leader, loop time) of the last look at every relay
        self._tls: tuple[ssl.SSLContext, bytes] | None = None
        self._none_left = asyncio.Event()  # set while no relay is active (`drained`)

    def __len__(self) -> int:
        """Sessions relayed to a leader now."""
        return sum(1 for relay in self._active if relay.leader is not None)

    def start(self, session: RelayedConnection, transport: asyncio.Transport, prefix: bytes) -> None:
        """Take over `transport` (the session's) and relay it to the leader."""
        self._begin(Relay(self, self._node, session, transport, mark_relayed(prefix)))

    def adopt(self, session: RelayedConnection, transport: asyncio.Transport, prefix: bytes, leader: str, session_id: str,
              refusal: bytes, hops: int, parked_at: int | None = None) -> None:
        """Relay `transport` to the successor at `leader`, which adopts the session (`prefix`: its
        ticket); `hops`: relays between the client and this node (0: the client's own socket);
        `parked_at`: the successor parks it instead, and the client resumes it from that offset."""
        self.handed_over += 1
        adoption = Adoption(leader, session_id, refusal)
        adoption.outermost, adoption.parked_at = hops == 0, parked_at
        self._begin(Relay(self, self._node, session, transport, prefix, adoption))

    def _begin(self, relay: Relay) -> None:
        self._active.add(relay)
        if self._watch is None:
            self._watch = self._node.loop.call_later(LEADER_CHANGE_POLL_SECONDS, self._check_leader)
        relay.start()

    def ended(self, relay: Relay) -> None:
        self._active.discard(relay)
        if not self._active:
            self._none_left.set()

    async def drained(self, grace: float) -> None:
        """Until every relay has ended, at most `grace` s: a client told where to resume closes its
        socket; a process that exits first resets it, and a client yet to read loses its ERROR."""
        if self._active:
            self._none_left.clear()  # `ended` sets it when the last one goes
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._none_left.wait(), grace)

    async def moved_away(self, grace: float) -> None:
        """The node stops after handing its sessions over: give the relays of other members
        (followers, deposed leaders) up to `grace` to move to the successor; what is left after
        it is this node's own clients'."""
        loop = self._node.loop
        deadline = loop.time() + grace
        while any(relay.carries_hand_over for relay in self._active) and loop.time() < deadline:
            await asyncio.sleep(LEADER_CHANGE_POLL_SECONDS)

    def farewell(self) -> None:
        """The node stops: each session it handed over leaves with its client (`Relay.farewell`)."""
        for relay in list(self._active):
            relay.farewell()

    def _check_leader(self) -> None:
        self._watch = None
        if not self._active:
            return
        leader = self._node.commit_log.leader_hint
        now = self._node.loop.time()
        if leader != self._watched[0] or now - self._watched[1] >= WATCH_SECONDS:
            self._watched = (leader, now)
            for relay in list(self._active):
                relay.check_leader(leader, now)
        self._watch = self._node.loop.call_later(LEADER_CHANGE_POLL_SECONDS, self._check_leader)

    def upstream_tls(self) -> tuple[ssl.SSLContext, bytes] | None:
        """(client context, the group's certificate in DER) when the client port uses TLS."""
        tls = self._node.config.security.tls
        if tls is None:
            return None
        if self._tls is None:
            self._tls = member_client_tls(tls)
        return self._tls


class Relay:
    """One client connection piped to the leader. `leader`: the client address relayed to."""

    def __init__(self, relays: Relays, node: RelayHost, session: RelayedConnection, client: asyncio.Transport, prefix: bytes,
                 adoption: Adoption | None = None) -> None:
        self._relays = relays
        self._node = node
        self._loop = node.loop
        self.session = session
        self._client = client
        self.client_tls = client.get_extra_info("ssl_object") is not None
        self._prefix = prefix
        self._upstream: asyncio.Transport | None = None
        self.leader: str | None = None
        self._client_eof = session.eof_pending  # a follower's relay moving, before this node knew
        self._ended = False
        self._deposed_at: float | None = None
        self._upstream_heard = 0.0  # loop time of the last bytes from the leader
        self._adoption = adoption
        self._task: asyncio.Task[None] | None = None
        # The session's id at the leader (an adoption's, or read from the leader's CONNECTED):
        # what a relay that moves closer resumes ("" : unknown, it does not move).
        self.session_id: str | None = None if adoption is None else adoption.session_id
        self._head = b""  # the start of the leader's CONNECTED, until it names the session
        self._moving: str | None = None  # half-closed towards a deposed leader; resuming at this one
        self._held = b""  # what the client sent meanwhile

    def start(self) -> None:
        # Nothing more is read from the client until the leader's connection can take it.
        self._client.pause_reading()
        self._client.set_protocol(ClientSide(self))
        self._task = self._loop.create_task(self._connect())

    # -- finding and opening the leader ------------------------------------------------------

    async def _connect(self) -> None:
        adoption = self._adoption
        deadline = self._loop.time() + (LEADER_WAIT_SECONDS if adoption is None else ADOPT_CONNECT_SECONDS)
        leader: str | None = None
        failure = ""
        while not self._ended:
            leader = self._node.commit_log.leader_hint if adoption is None else adoption.leader
            if leader is not None:
                try:
                    upstream = await self._open(leader)
                except (OSError, TimeoutError, ValueError, RelayRefused) as exc:  # ssl.SSLError is an OSError
                    failure = str(exc) or type(exc).__name__
                else:
                    self._connected(leader, upstream)
                    return
            if self._loop.time() >= deadline:
                break
            await asyncio.sleep(LEADER_POLL_SECONDS)
        if not self._ended:
            self._refuse(leader, failure)

    def _refuse_adoption(self, adoption: Adoption, why: str) -> None:
        session = self.session
        log.info("client.hand_over_failed", node=self._node.name, session=adoption.session_id, peer=session.peer,
                 leader=adoption.leader, detail=why)
        adoption.answered = True
        if not self._client.is_closing():
            self._client.write(adoption.refusal)
        self._close(self._client)
        if self._upstream is not None:
            self._close(self._upstream)

    async def _open(self, leader: str) -> asyncio.Transport:
        host, port = split_address(leader)
        tls = self._relays.upstream_tls()
        async with asyncio.timeout(UPSTREAM_CONNECT_SECONDS):
            if tls is None:
                transport, side = await self._loop.create_connection(lambda: UpstreamSide(self), host, port)
            else:
                transport, side = await self._loop.create_connection(
                    lambda: UpstreamSide(self), host, port, ssl=tls[0], server_hostname=host
                )
        upstream = transport
        if tls is not None:
            ssl_object = upstream.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if not pinned(certificate, tls[1]):
                upstream.abort()
                raise RelayRefused("its certificate is not this group's ([tls] cert_file)")
        if side.lost:
            raise ConnectionResetError("closed as soon as it was opened")
        return upstream

    def _connected(self, leader: str, upstream: asyncio.Transport) -> None:
        if self._ended:  # the client left while we connected
            upstream.close()
            return
        self.leader = leader
        self._upstream = upstream
        self._relays.total += 1
        prefix, self._prefix = self._prefix, b""
        adoption = self._adoption
        set_reading(self._client, adoption is None or not (adoption.resuming or adoption.parked_at is not None))
        upstream.write(prefix)  # may pause the client again at once (pause_writing)
        if self._client_eof:
            self._forward_eof()
        session = self.session
        log.info("client.relayed", node=self._node.name, session=session.session_id, peer=session.peer, leader=leader)

    def _refuse(self, leader: str | None, failure: str) -> None:
        if self._adoption is not None:
            return self._refuse_adoption(self._adoption, f"cannot reach the successor: {failure}")
        session = self.session
        if leader is None:
            detail = f"no leader known after {LEADER_WAIT_SECONDS:g} s (an election, or no quorum)"
        else:
            detail = f"cannot relay to the leader {leader}: {failure}"
        log.info("client.relay_failed", node=self._node.name, session=session.session_id, peer=session.peer,
                 leader=leader, detail=detail)
        frame = error_frame("not the leader", detail, session.version, None, {"leader": leader} if leader else None)
        if not self._client.is_closing():
            self._client.write(frame)
        self._close(self._client)

    # -- while relaying ----------------------------------------------------------------------

    def check_leader(self, leader: str | None, now: float) -> None:
        """The node's view of the leader now: a relay to another one moves to the new leader
        (`_move`) when it can, else is closed once that one has sent nothing for a grace (one that
        hands sessions over keeps talking); so is a move the deposed leader does not answer (a
        paused or cut-off one)."""
        if self._moving is None and (self.leader is None or leader is None or leader == self.leader):
            self._deposed_at = None
            return
        if self._deposed_at is None:
            self._deposed_at = now
        if self._moving is None and leader is not None and self._may_move():
            return self._move(leader)
        if self._moving is None and self._adoption is not None:
            return
        if now - max(self._deposed_at, self._upstream_heard) >= DEPOSED_GRACE_SECONDS:
            session = self.session
            log.info("client.relay_closed", node=self._node.name, session=session.session_id, peer=session.peer,
                     leader=self.leader, new_leader=leader)
            self._close(self._client)

    def client_data(self, data: bytes) -> None:
        self.session.stream_bytes += len(data)
        upstream = self._upstream
        if upstream is None or self._moving is not None:
            if not self._ended and not self._client.is_closing():  # reading is paused until then; a read under way lands here
                if self._moving is None:
                    self._prefix += data
                else:
                    self._held += data
        elif not upstream.is_closing():
            upstream.write(data)

    # -- moving closer: after a hand-over the session is served one relay away, not two -------

    def _may_move(self) -> bool:
        upstream, adoption = self._upstream, self._adoption
        return (upstream is not None and not upstream.is_closing() and upstream.can_write_eof() and not self._client_eof
                and bool(self.session_id) and self._node.hand_over_secret is not None
                and (adoption is None or (adoption.answered and adoption.outermost and not adoption.farewell)))

    def _move(self, leader: str) -> None:
        """Half-close towards the deposed leader: the node serving the session parks it once it
        has read everything the client sent, and closes once everything for the client is out
        (raftmq.server.stomp.hand_over); then `upstream_lost` resumes the session at `leader`."""
        assert self._upstream is not None
        self._moving = leader
        log.info("client.relay_moving", node=self._node.name, session=self.session_id, peer=self.session.peer,
                 leader=self.leader, new_leader=leader)
        self._client.pause_reading()
        self._upstream.write_eof()

    def _resume(self, leader: str) -> None:
        session_id, secret = self.session_id, self._node.hand_over_secret
        assert session_id and secret is not None
        if leader == self._node.own_client_address():  # this node leads now: it serves the session itself
            held, self._held, self._moving = self._held, b"", None
            self._end()
            self._relays.moved += 1
            log.info("client.relay_moved", node=self._node.name, session=session_id, peer=self.session.peer, leader=leader)
            self.session.connection_lost(None)  # the relayed connection ends here; its client's does not
            return self._node.resume_here(self._client, session_id, held, self.session.stream_bytes - len(held))
        refusal = error_frame("not the leader", f"the session could not be moved to the leader {leader}",
                              self.session.version, None, {"leader": leader})
        self._adoption = Adoption(leader, session_id, refusal)
        self._adoption.resuming = True
        self._upstream, self._prefix = None, resume_frame(session_id, secret, self._node.clock.now_ms())
        self._task = self._loop.create_task(self._connect())

    def client_eof(self) -> None:
        self._client_eof = True
        if self._upstream is not None:
            self._forward_eof()

    def _forward_eof(self) -> None:
        # The client stopped sending but still reads (its receipts): half-close towards the
        # leader too when the transport can (TLS cannot), else close it after the flush.
        upstream = self._upstream
        assert upstream is not None
        if upstream.can_write_eof():
            upstream.write_eof()
        else:
            self._close(upstream)

    def client_lost(self, exc: Exception | None) -> None:
        self._end()
        if self._upstream is not None:
            self._close(self._upstream)  # what the client sent still reaches the leader
        self.session.connection_lost(exc)  # the node forgets the session, like any other

    def upstream_data(self, data: bytes) -> None:
        self._upstream_heard = self._loop.time()
        adoption = self._adoption
        if self.session_id is None:
            self._learn_session(data)
        if adoption is not None and not adoption.answered:
            adoption.answer += data
            answer = read_answer(adoption.answer, adoption.session_id)
            if answer is None:
                return
            if isinstance(answer, NotTaken):
                return self._refuse_adoption(adoption, answer.why)
            adoption.answered = True
            data, adoption.answer = adoption.answer[answer.start:], b""
            if adoption.resuming:
                self._moved()
            else:
                log.info("client.handed_over", node=self._node.name, session=adoption.session_id, peer=self.session.peer,
                         leader=adoption.leader, parked=adoption.parked_at is not None)
            if adoption.parked_at is not None:
                return self._send_off(adoption, adoption.parked_at)
        if data and not self._client.is_closing():
            self._client.write(data)

    def _moved(self) -> None:
        log.info("client.relay_moved", node=self._node.name, session=self.session_id, peer=self.session.peer,
                 leader=self.leader)
        self._relays.moved += 1
        self._moving, held, self._held, self._deposed_at = None, self._held, b"", None
        if held and self._upstream is not None:
            self._upstream.write(held)
        set_reading(self._client, True)

    def _learn_session(self, data: bytes) -> None:
        """The session's id from the leader's CONNECTED (its first frame): what a move resumes."""
        head = self._head + data
        self.session_id = named_session(head)
        self._head = head if self.session_id is None else b""

    def farewell(self) -> None:
        """End the connection of a session this node handed over, at a frame boundary: stop
        sending to the successor (it parks the session once what it had is written, and closes),
        then the client gets the ERROR naming the leader (`farewell_frame`: with the request to
        resume it there, when it is its own socket), and the connection closes."""
        adoption, upstream = self._adoption, self._upstream
        if adoption is None:
            return  # a follower's relay: closed with the node's other connections
        if not adoption.answered or upstream is None or upstream.is_closing():
            return self._close(self._client)
        adoption.farewell = True
        self._client.pause_reading()
        if upstream.can_write_eof():
            adoption.parks = True
            upstream.write_eof()
        else:
            self._close(upstream)

    def upstream_lost(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None and transport is self._upstream:  # not an attempt that failed
            if self._moving is not None and not self._ended and not self._client.is_closing():
                return self._resume(self._moving)  # everything for the client is out: resume it
            adoption = self._adoption
            if adoption is not None and not adoption.answered:
                return self._refuse_adoption(adoption, "the successor closed the connection before it answered")
            if adoption is not None and adoption.farewell and not self._client.is_closing():
                return self._send_off(adoption, self._resume_offset(adoption))
            self._close(self._client)

    def _send_off(self, adoption: Adoption, offset: int | None) -> None:
        """This node goes: the client hears where the leader is and, with `offset`, where its
        session waits for it to resume (parked as the relay's side closed, or as it arrived)."""
        log.info("client.error", node=self._node.name, session=adoption.session_id, peer=self.session.peer,
                 message="not the leader", detail="the node goes (stopped, or removed from its group)",
                 leader=adoption.leader, resume_offset=offset)
        if not self._client.is_closing():
            self._client.write(adoption.refusal if offset is None else farewell_frame(
                adoption.session_id, adoption.leader, offset, self.session.version, self._node.hand_over_secret or "",
                self._node.clock.now_ms()))
        linger(self._client, self.client_lost, self._close)
        if self._upstream is not None:
            self._close(self._upstream)

    def _resume_offset(self, adoption: Adoption) -> int | None:
        """How much of the client's stream the session read, when the client may resume it (its own socket)."""
        if not (adoption.outermost and adoption.parks) or self._node.hand_over_secret is None:
            return None
        return self.session.stream_bytes - len(self._held)

    @property
    def carries_hand_over(self) -> bool:  # relays a session this node handed to a successor, not moved since
        return self._adoption is not None and not self._adoption.resuming

    @property
    def client(self) -> asyncio.Transport:
        return self._client

    @property
    def upstream(self) -> asyncio.Transport | None:
        return self._upstream

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self._relays.ended(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def _close(self, transport: asyncio.Transport) -> None:
        if transport.is_closing():
            return
        # A TLS transport reads the peer's close_notify as it closes: a paused one would hang.
        transport.resume_reading()
        transport.close()  # after its buffer is written...
        self._loop.call_later(CLOSE_GRACE_SECONDS, abort, transport)  # ...if the peer reads it

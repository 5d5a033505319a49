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
ERROR from the leader reaches the client whole). What a relay does when the leader changes (it
moves, resumes, hands over, says farewell) is decided by its `RelayMachine`
(raftmq.server.stomp.mobility: the states, the table and the story); this module is its shell:
it opens the connections, copies the bytes, watches the node's leader and carries out the
machine's decisions. A node that goes (`farewell`) waits for its clients (`drained`).

No leader known yet: the follower waits up to `mobility.LEADER_WAIT_SECONDS` for one, then
answers ERROR. TLS (pinned to the group's certificate), what a relay counts as:
docs/operations.md, "Any node serves any client".
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

import structlog

from raftmq.config import split_address
from raftmq.errors import RelayRefused
from raftmq.server.seams.host import RelayedConnection, RelayHost
from raftmq.server.stomp import relay_events as ev
from raftmq.server.stomp.adoption import release_frame
from raftmq.server.stomp.mobility import ANSWER_MAX_BYTES, Kind, RelayMachine
from raftmq.server.stomp.relay_sides import ClientSide, UpstreamSide, abort, linger, mark_relayed, set_reading
from raftmq.tls import member_client_tls, pinned

log = structlog.get_logger("raftmq.server.relay")

# One attempt to open the connection to the leader (TCP, and TLS when the port uses it).
UPSTREAM_CONNECT_SECONDS = 1.0
# A relay whose attempt failed tries again after this long (within its Connect's deadline).
RETRY_SECONDS = 0.02
# How long the notice of a client's end (`Release`) may take before the upstream closes anyway.
RELEASE_SECONDS = 0.5
# A closing side whose peer does not read what is left is dropped after this long.
CLOSE_GRACE_SECONDS = 5.0


class Relays:
    """A node's relayed connections: starts them, counts them, and tells each of them the leader
    this node knows of whenever it changes (`leader_changed`, from the commit log; nothing is
    polled) and when a relay's grace is up (`RelayMachine.recheck_at`)."""

    def __init__(self, node: RelayHost) -> None:
        self._node = node
        self._active: set[Relay] = set()  # connecting to the leader, relaying, or refusing
        self.total = 0  # sessions relayed to a leader since start
        self.handed_over = 0  # of which sessions this node handed to its successor
        self.moved = 0  # relays that moved to a new leader (the session resumed there)
        self._recheck: asyncio.TimerHandle | None = None  # the earliest grace of a relay to a deposed leader
        self._changed = asyncio.Event()  # set (and replaced) when the leader or the set of relays changes
        self._tls: tuple[ssl.SSLContext, bytes] | None = None
        self._none_left = asyncio.Event()  # set while no relay is active (`drained`)

    def __len__(self) -> int:
        """Sessions relayed to a leader now."""
        return sum(1 for relay in self._active if relay.leader is not None)

    def start(self, session: RelayedConnection, transport: asyncio.Transport, prefix: bytes) -> None:
        """Take over `transport` (the session's) and relay it to the leader."""
        node = self._node
        machine = RelayMachine(Kind.FOLLOWER, mark_relayed(prefix), version=session.version,
                               secret=node.hand_over_secret, own_address=node.own_client_address(),
                               stream_bytes=session.stream_bytes, client_eof=session.eof_pending)
        self._begin(Relay(self, node, session, transport, machine))

    def to_successor(self, session: RelayedConnection, transport: asyncio.Transport, prefix: bytes, leader: str,
                     session_id: str, refusal: bytes, hops: int, parked_at: int | None = None) -> None:
        """Relay `transport` to the successor at `leader`, which adopts the session (`prefix`: its
        ticket); `hops`: relays between the client and this node (0: the client's own socket);
        `parked_at`: the successor parks it instead, and the client resumes it from that offset."""
        self.handed_over += 1
        node = self._node
        machine = RelayMachine(Kind.HAND_OVER, prefix, version=session.version, secret=node.hand_over_secret,
                               own_address=node.own_client_address(), stream_bytes=session.stream_bytes,
                               client_eof=session.eof_pending, target=leader, session_id=session_id, refusal=refusal,
                               outermost=hops == 0, parked_at=parked_at,
                               own_socket=hops == 0 and not session.via_relay)
        self._begin(Relay(self, node, session, transport, machine))

    def _begin(self, relay: Relay) -> None:
        self._active.add(relay)
        relay.start()

    def ended(self, relay: Relay) -> None:
        self._active.discard(relay)
        if not self._active:
            self._none_left.set()
        self.changed()

    def changed(self) -> None:
        """The leader changed, a relay ended, or one no longer carries a hand-over: those waiting
        (`until`) look again."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def until(self, done: Callable[[], bool], seconds: float) -> None:
        """Until `done()` holds, looked at again at each change (the leader, a relay ended), or
        `seconds` have passed."""
        loop = self._node.loop
        deadline = loop.time() + seconds
        while not done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)

    def leader_changed(self) -> None:
        """The leader this node knows of may have changed: every relay is told."""
        self.changed()
        self.look()

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
        await self.until(lambda: not any(relay.carries_hand_over for relay in self._active), grace)

    def farewell(self) -> None:
        """The node stops: each session it handed over leaves with its client (`Relay.farewell`)."""
        for relay in list(self._active):
            relay.farewell()

    def look(self) -> None:
        """Tell every relay the leader as this node knows it now; then wait for the next change,
        or for the earliest grace of a relay to a deposed leader."""
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None
        leader, loop = self._node.commit_log.leader_hint, self._node.loop
        now = loop.time()
        for relay in list(self._active):
            relay.check_leader(leader, now)
        due = min((at for relay in self._active if (at := relay.machine.recheck_at) is not None), default=None)
        if due is not None:
            self._recheck = loop.call_at(due, self.look)

    def upstream_tls(self) -> tuple[ssl.SSLContext, bytes] | None:
        """(client context, the group's certificate in DER) when the client port uses TLS."""
        tls = self._node.config.security.tls
        if tls is None:
            return None
        if self._tls is None:
            self._tls = member_client_tls(tls)
        return self._tls




class Relay:
    """One client connection piped to another node: the asyncio shell of its `RelayMachine`
    (raftmq.server.stomp.mobility), which decides; this does the I/O. `leader`: the client
    address relayed to."""

    def __init__(self, relays: Relays, node: RelayHost, session: RelayedConnection, client: asyncio.Transport,
                 machine: RelayMachine) -> None:
        self._relays = relays
        self._node = node
        self._loop = node.loop
        self.session = session
        self._client = client
        self.client_tls = client.get_extra_info("ssl_object") is not None
        self.machine = machine
        self._upstream: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._lost: Exception | None = None  # how the client's connection ended
        self._releasing: set[asyncio.Task[None]] = set()  # a notice of the client's end on its way

    def start(self) -> None:
        # Nothing more is read from the client until the leader's connection can take it.
        self._client.set_protocol(ClientSide(self))
        self._run(self.machine.start())

    @property
    def leader(self) -> str | None:
        return self.machine.leader

    @property
    def carries_hand_over(self) -> bool:
        return self.machine.carries_hand_over

    @property
    def client(self) -> asyncio.Transport:
        return self._client

    @property
    def upstream(self) -> asyncio.Transport | None:
        return self._upstream

    # -- events in -----------------------------------------------------------------------------

    def check_leader(self, leader: str | None, now: float) -> None:
        self._handle(ev.LeaderSeen(leader, now))

    def client_data(self, data: bytes) -> None:
        self._handle(ev.ClientData(data))
        self.session.stream_bytes = self.machine.stream_bytes

    def client_eof(self) -> None:
        self._handle(ev.ClientEof())

    def client_lost(self, exc: Exception | None) -> None:
        self._lost = exc
        self._handle(ev.ClientLost())

    def upstream_data(self, data: bytes) -> None:
        self._handle(ev.UpstreamData(data, self._loop.time(), self._node.clock.now_ms()))

    def upstream_lost(self, transport: asyncio.BaseTransport | None) -> None:
        if transport is not None and transport is self._upstream:  # not an attempt that failed
            self._handle(ev.UpstreamLost(self._node.clock.now_ms()))

    def farewell(self) -> None:
        """The node stops: a session it handed over leaves with its client (raftmq.server.stomp.mobility, FAREWELL)."""
        self._handle(ev.Farewell(self._node.clock.now_ms()))
        if self.machine.parks:  # its connection leaves the client's socket to this relay (`Connection.shutdown`)
            self.session.parting = True

    def _handle(self, event: ev.Event) -> None:
        carried = self.machine.carries_hand_over
        self._run(self.machine.handle(event))
        if self.machine.carries_hand_over != carried:
            self._relays.changed()  # (`moved_away` waits for this)

    # -- decisions out ---------------------------------------------------------------------------

    def _run(self, decisions: list[ev.Decision]) -> None:
        for decision in decisions:
            if isinstance(decision, ev.ToUpstream):
                upstream = self._upstream
                if upstream is not None and not upstream.is_closing():
                    upstream.write(decision.data)
            elif isinstance(decision, ev.ToClient):
                if not self._client.is_closing():
                    self._client.write(decision.data)
            elif isinstance(decision, ev.ClientReading):
                set_reading(self._client, decision.on)
            elif isinstance(decision, ev.HalfCloseUpstream):
                if self._upstream is not None and not self._upstream.is_closing():
                    self._upstream.write_eof()
            elif isinstance(decision, ev.CloseUpstream):
                if self._upstream is not None:
                    self._close(self._upstream)
            elif isinstance(decision, ev.CloseClient):
                self._close(self._client)
            elif isinstance(decision, ev.Connect):
                self._upstream = None
                self._task = self._loop.create_task(self._connect(decision.leader, decision.seconds))
            elif isinstance(decision, ev.SendOff):
                if not self._client.is_closing():
                    self._client.write(decision.frame)
                linger(self._client, self.client_lost, self._close)
                if self._upstream is not None:
                    self._close(self._upstream)
            elif isinstance(decision, ev.Ended):
                self._end(decision.session_lost)
            elif isinstance(decision, ev.ResumeHere):
                self.session.connection_lost(None)  # the relayed connection ends here; its client's does not
                self._node.resume_here(self._client, decision.session_id, decision.held, decision.offset,
                                        decision.eof)
            elif isinstance(decision, ev.Release):
                task = self._loop.create_task(self._release(decision))
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)
            elif isinstance(decision, ev.Count):
                if decision.what == "moved":
                    self._relays.moved += 1
                else:
                    self._relays.total += 1
            else:
                fields = {"session": self.session.session_id, **decision.fields}
                log.info(decision.event, node=self._node.name, peer=self.session.peer, **fields)

    # -- finding and opening the node to pipe to ---------------------------------------------

    async def _connect(self, target: str | None, seconds: float) -> None:
        deadline = self._loop.time() + seconds
        leader: str | None = None
        failure = ""
        while True:
            leader = self._node.commit_log.leader_hint if target is None else target
            if leader is not None:
                try:
                    upstream = await self._open(leader)
                except (OSError, TimeoutError, ValueError, RelayRefused) as exc:  # ssl.SSLError is an OSError
                    failure = str(exc) or type(exc).__name__
                else:
                    self._upstream = upstream
                    self._handle(ev.Connected(leader, upstream.can_write_eof()))
                    return self._relays.look()  # the leader may have changed while it connected
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                break
            if leader is None:  # until the node learns of a leader
                await self._relays.until(lambda: self._node.commit_log.leader_hint is not None, remaining)
            else:
                await asyncio.sleep(min(RETRY_SECONDS, remaining))
        self._handle(ev.Unreachable(leader, failure))

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

    async def _release(self, release: ev.Release) -> None:
        """Tell the node serving the session that its client's side ended (a signed notice on a
        connection of its own; its answer says it was read), then half-close or close the upstream:
        that node then takes the half-close for the client's own, not a move. A node that does
        not answer within `RELEASE_SECONDS` parks the session as before (it expires)."""
        secret = self._node.hand_over_secret
        if secret is not None:
            try:
                async with asyncio.timeout(RELEASE_SECONDS):
                    host, port = split_address(release.leader)
                    reader, writer = await asyncio.open_connection(host, port)
                    try:
                        now_ms = self._node.clock.now_ms()
                        writer.write(release_frame(release.session_id, secret, now_ms, release.parks))
                        await reader.read(ANSWER_MAX_BYTES)  # its answer, or its close
                    finally:
                        writer.close()
            except (OSError, TimeoutError, ValueError) as exc:
                log.info("client.release_failed", node=self._node.name, session=release.session_id,
                         leader=release.leader, detail=str(exc) or type(exc).__name__)
        self._run([release.then])

    def _end(self, session_lost: bool) -> None:
        self._relays.ended(self)
        if self._task is not None and not self._task.done() and self._task is not asyncio.current_task():
            self._task.cancel()
        if session_lost:
            self.session.connection_lost(self._lost)  # the node forgets the session, like any other

    def _close(self, transport: asyncio.Transport) -> None:
        if transport.is_closing():
            return
        # A TLS transport reads the peer's close_notify as it closes: a paused one would hang.
        transport.resume_reading()
        transport.close()  # after its buffer is written...
        self._loop.call_later(CLOSE_GRACE_SECONDS, abort, transport)  # ...if the peer reads it

"""The node: a STOMP listener in front of one broker core, joined by the commit log.

Sessions append commands to the `CommitLog`; the log calls `Node.on_commit` with committed
commands in order; the node applies each to the `Broker` and executes the effects on the
sessions of this node (effects for sessions that are elsewhere or gone are dropped: the
Disconnect a closing session appends returns its deliveries to their queues).

In a group (`raftmq.server.group` builds it) the log is a `RaftLog` and every member runs
`on_commit`: bodies go to the body journal (`BodyStore`), the core holds references, and the
node's `snapshot_state` / `restore_state` are the Raft snapshot. Only the leader runs client
sessions and appends Ticks; a follower relays its clients' connections to the leader
(raftmq.server.relay) or, in redirect mode, refuses them naming the leader. Losing
leadership closes every client connection with an ERROR naming the new leader; gaining it
appends a Disconnect for every session the core still knows from earlier leaders, so their
unacknowledged deliveries return to their queues.

`serve(config)` is the foreground entry point the CLI calls: it runs a `Node` until SIGINT or
SIGTERM, logging as `raftmq.logs` sets up.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import resource
import secrets
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import structlog

from raftmq.config import NodeConfig
from raftmq.core.broker import Broker
from raftmq.core.commands import Command, Connect, Disconnect, Tick
from raftmq.core.effects import BrowseEnd, Deliver, Receipt, SessionError
from raftmq.logs import configure_logging
from raftmq.security import Security
from raftmq.server.bodies import BodyStore, BodyUnavailable, IndexRecords, iter_snapshot_refs
from raftmq.server.dispatcher import browse_end_frame
from raftmq.server.log import CommitLog, InMemoryLog
from raftmq.server.rates import SAMPLE_SECONDS, RateSampler
from raftmq.server.relay import Relays
from raftmq.server.session import DISCONNECTING, FAILED, Session

log = structlog.get_logger("raftmq.server.node")

# How long a stopping node waits for the Disconnects of its closed sessions to commit.
STOP_DRAIN_SECONDS = 2.0
# A node that lost leadership waits this long to learn the new leader before it closes its
# clients (so the ERROR can name it); meanwhile whatever they send fails with NotLeader.
LEADER_HINT_WAIT_SECONDS = 1.0
STATE_FORMAT = 1  # of snapshot_state()
# A committed batch whose commands were stamped longer ago than this is a replay (restart,
# catch-up), not live traffic: enqueue/dequeue rates restart from the counters after it.
REPLAY_AGE_MS = 5_000
BodyFetcher = Callable[[Sequence[int]], list[IndexRecords]]
ReadyCallback = Callable[[str, int], None]  # (host, port), once the node serves clients

GC_GEN0_THRESHOLD = 20_000  # allocations between young collections (Python's default: 700)
_gc_tuned = False


class Node:
    """One broker node; in-process usable: `await node.start()`, `node.address`, `await node.stop()`."""

    def __init__(
        self,
        config: NodeConfig,
        commit_log: CommitLog | None = None,
        *,
        name: str | None = None,
        bodies: BodyStore | None = None,
        fetch_bodies: BodyFetcher | None = None,
    ) -> None:
        self.config = config
        self.commit_log = commit_log if commit_log is not None else InMemoryLog()
        self.broker = Broker(config.core)
        self.security = Security(config.security)  # logins, ACL, TLS; sessions ask it
        self.bodies = bodies  # None: bodies stay in the core (single node, InMemoryLog)
        self.fetch_bodies = fetch_bodies  # from peers, after a snapshot that references more
        self.name = name or config.name
        self.sessions: dict[str, Session] = {}
        self.relays = Relays(self)  # sessions of this follower's clients, piped to the leader
        self._boot = secrets.token_hex(4)  # session ids stay unique across restarts
        self._session_numbers = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self._sample_task: asyncio.Task[None] | None = None
        self.rates = RateSampler()  # enqueue/dequeue msg/s for status(); the core has no clock
        self._rates_stale = False  # set by a replay or restore: the counters jumped, rates restart
        self._loop: asyncio.AbstractEventLoop | None = None
        self._address: tuple[str, int] | None = None
        self._stopping = False
        self.apply_failures = 0  # commands the core raised on (a bug; logged and skipped)
        self.internal_errors = 0  # connections closed because handling their input raised
        self.unfinished_frame_bytes = 0  # buffered by all sessions' parsers (max_unfinished_frame_bytes)
        self.body_failures = 0  # deliveries refused because the body was missing or corrupt
        self.sessions_swept = 0  # Disconnects appended for sessions of earlier leaders
        self.leader_changes = 0
        self.failure: str | None = None  # set when the node must stop (journal unwritable)
        self.failed = asyncio.Event()
        self._leader_epoch = 0
        self._background: set[asyncio.Task[None]] = set()
        self._logged_leader: str | None = None  # the leader last reported as raft.leader_changed
        self._connected_at: dict[str, float] = {}  # session id -> loop time its CONNECT committed

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "node not started"
        return self._loop

    @property
    def address(self) -> tuple[str, int]:
        assert self._address is not None, "node not started"
        return self._address

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        _tune_gc()
        self.commit_log.set_role_listener(self._role_changed)
        await self.commit_log.start(self.on_commit)
        self._server = await self._loop.create_server(
            self._new_session, self.config.host, self.config.port, reuse_address=True, backlog=1024,
            ssl=self.security.server_ssl_context(),  # None: plain TCP
        )
        sockname = self._server.sockets[0].getsockname()
        self._address = (sockname[0], sockname[1])
        if self.config.tick_interval_ms > 0:
            self._tick_task = self._loop.create_task(self._tick_forever())
        self._sample_task = self._loop.create_task(self._sample_forever())
        log.info("node.started", node=self.name, host=self._address[0], port=self._address[1])

    async def stop(self) -> None:
        """Stop accepting; a group's leader first hands leadership over and sends its clients
        to the new leader; tell every remaining client the broker is shutting down, let their
        Disconnects commit (bounded), then stop the log."""
        if self._stopping or self._loop is None:
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in (self._tick_task, self._sample_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        if self.commit_log.is_leader and await self._hand_over():
            await self._close_for_new_leader()
        for session in list(self.sessions.values()):
            session.shutdown()
        deadline = self.loop.time() + STOP_DRAIN_SECONDS
        while self.sessions and self.loop.time() < deadline:
            await asyncio.sleep(0.01)  # closing transports flush, then call connection_lost
        for session in list(self.sessions.values()):
            session.abort()  # a client that does not read is not waited for
        await asyncio.sleep(0)
        # An empty append completes after everything appended before it (the Disconnects).
        drain = self.commit_log.append([])
        try:
            await asyncio.wait_for(drain, max(0.1, deadline - self.loop.time()))
        except Exception:
            pass
        await self.commit_log.stop()
        log.info("node.stopped", node=self.name)

    async def _hand_over(self) -> bool:
        """Graceful stop of a group's leader: let what was appended commit, then hand
        leadership to a caught-up follower before any client is closed. True once handed over."""
        try:
            await asyncio.wait_for(self.commit_log.append([]), 1.0)
        except Exception:
            pass
        try:
            handed = await self.commit_log.transfer_leadership(timeout=1.0)
        except Exception:
            log.exception("node.transfer_failed", node=self.name)
            return False
        if handed:
            log.info("node.leadership_transferred", node=self.name, leader=self.commit_log.leader_hint)
        return handed

    # -- leadership ------------------------------------------------------------------------

    def _role_changed(self, leader: bool) -> None:
        self.leader_changes += 1
        self._leader_epoch += 1
        self._note_leader(force=True)
        if not leader and self._new_leader() is not None:
            # Before the log fails the appends in flight, so clients read where to go.
            self._send_clients_to(self._new_leader())
            return
        if not leader:
            for session in self.sessions.values():
                session.hold_for_redirect()
        task = self.loop.create_task(self._take_over(self._leader_epoch) if leader else self._close_for_new_leader())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _take_over(self, epoch: int) -> None:
        """New leader: once everything of earlier terms is applied (an empty entry of ours has
        committed), disconnect the sessions the core still knows but this node does not
        serve; they belonged to an earlier leader."""
        try:
            await self.commit_log.append([])
        except Exception:
            return  # lost leadership again; the next leader sweeps
        if epoch != self._leader_epoch or not self.commit_log.is_leader:
            return
        stale = [session_id for session_id in self.broker.session_ids() if session_id not in self.sessions]
        if not stale:
            return
        now = int(time.time() * 1000)
        try:
            await self.commit_log.append([Disconnect(session_id, now) for session_id in stale])
        except Exception:
            return
        self.sessions_swept += len(stale)
        log.info("node.sessions_swept", node=self.name, sessions=len(stale))

    async def _close_for_new_leader(self) -> None:
        """Not the leader any more: close every client connection with an ERROR naming the
        new leader, once it is known (bounded wait)."""
        deadline = self.loop.time() + LEADER_HINT_WAIT_SECONDS
        while self._new_leader() is None and self.sessions and self.loop.time() < deadline:
            if self.commit_log.is_leader:
                break  # leader again: the held sessions may have lost commands silently, so they go too
            await asyncio.sleep(0.02)
        self._send_clients_to(self._new_leader(), held_only=self.commit_log.is_leader)

    def _note_leader(self, force: bool = False) -> None:
        """Log `raft.leader_changed` when the leader this node knows of is not the one it last
        reported (a follower learns of a new leader without a role change of its own)."""
        leader = self.commit_log.leader_hint  # a client address, this node's own when it leads
        if leader == self._logged_leader and not force:
            return
        self._logged_leader = leader
        log.info("raft.leader_changed", node=self.name, role="leader" if self.commit_log.is_leader else "follower",
                 leader=leader, term=self._raft_term())

    def _raft_term(self) -> int | None:
        raft_status = getattr(self.commit_log, "status", None)  # RaftLog; InMemoryLog has no terms
        if not callable(raft_status):
            return None
        try:
            return int(raft_status().term)
        except Exception:  # not started yet, or already stopped
            return None

    def _new_leader(self) -> str | None:
        """The leader's client address if known and not this node's own."""
        hint = self.commit_log.leader_hint
        if hint is None or self._address is None:
            return hint
        return None if hint == f"{self.config.host}:{self._address[1]}" else hint

    def _send_clients_to(self, hint: str | None, held_only: bool = False) -> None:
        for session in list(self.sessions.values()):
            if held_only and not session.held_for_redirect:
                continue
            session.fail(
                "not the leader",
                f"this node is no longer the leader of its group; leader: {hint or 'unknown'}",
                extra={"leader": hint} if hint else None,
            )

    def _new_session(self) -> Session:
        session_id = f"{self.name}:{self._boot}:{next(self._session_numbers)}"
        session = Session(self, session_id)
        self.sessions[session_id] = session
        return session

    def session_closed(self, session: Session) -> None:
        self.sessions.pop(session.session_id, None)
        connected_at = self._connected_at.pop(session.session_id, None)
        if connected_at is None:  # never got CONNECTED (a port probe, a refused CONNECT)
            log.debug("client.disconnected", node=self.name, session=session.session_id, peer=session.peer, connected=False)
        else:
            log.info("client.disconnected", node=self.name, session=session.session_id, peer=session.peer,
                     connected_s=round(self.loop.time() - connected_at, 3))

    def on_commit(self, commands: Sequence[Command]) -> None:
        """Apply committed commands in order and execute their effects on local sessions."""
        bodies = self.bodies
        if bodies is not None:
            position = self.commit_log.position
            try:
                commands = bodies.store(position.index, position.term, commands, cache=self.commit_log.is_leader)
            except Exception as exc:
                # Applying without the bodies would leave this member unable to serve what it
                # acknowledged: stop (fail-stop); on restart the Raft journal replays the entry.
                self._fail(f"cannot write the body journal at raft index {position.index}: {exc}")
                raise
        if commands and _wall_ms() - getattr(commands[-1], "now", 1 << 62) > REPLAY_AGE_MS:
            self._rates_stale = True  # old commands: a replay, not traffic to show as a rate
        apply = self.broker.apply
        sessions = self.sessions
        for command in commands:
            try:
                effects = apply(command)
            except Exception:
                # A core bug must not stop the node; the command is logged and skipped.
                self.apply_failures += 1
                log.exception("broker.apply_failed", command=type(command).__name__)
                continue
            if len(effects) > 1 and type(effects[-1]) is Receipt:
                effects = _receipt_first(effects)
            for effect in effects:
                session = sessions.get(effect.session)
                if session is None:
                    continue
                kind = type(effect)
                if kind is Deliver:
                    if bodies is None:
                        session.deliver(effect)  # type: ignore[arg-type]
                    else:
                        body = self._body_of(effect, session)  # type: ignore[arg-type]
                        if body is not None:
                            session.deliver(effect, body)  # type: ignore[arg-type]
                elif kind is Receipt:
                    session.receipt(effect.receipt_id)  # type: ignore[union-attr]
                elif kind is SessionError:
                    session.fail(
                        effect.message,  # type: ignore[union-attr]
                        effect.detail,  # type: ignore[union-attr]
                        effect.receipt_id,  # type: ignore[union-attr]
                        wait_for_log=False,
                    )
                elif kind is BrowseEnd:
                    if session.state < FAILED:  # after a missing body's ERROR nothing more goes out
                        session.write(browse_end_frame(effect, session.version))  # type: ignore[arg-type]
            kind = type(command)
            if kind is Connect or kind is Disconnect:
                session = sessions.get(command.session)  # type: ignore[union-attr]
                if session is not None:
                    if kind is Connect:
                        session.connect_committed()
                        self._connected_at[session.session_id] = self.loop.time()
                        # The passcode never reaches the core's Connect command, so it cannot be logged here.
                        log.info("client.connected", node=self.name, session=session.session_id, peer=session.peer,
                                 login=command.login, client_id=command.client_id, version=session.version)  # type: ignore[union-attr]
                    elif session.state < DISCONNECTING and not self.commit_log.is_leader:
                        # Not the client's own Disconnect: a new leader swept the sessions of
                        # this one before it could tell its clients where to go. Tell them now.
                        hint = self._new_leader()
                        session.fail(
                            "not the leader", f"this node is no longer the leader of its group; leader: {hint or 'unknown'}",
                            extra={"leader": hint} if hint else None, wait_for_log=False,
                        )
                    else:
                        session.disconnect_committed()

    def _body_of(self, effect: Deliver, session: Session) -> bytes | None:
        """The body bytes behind the reference the core holds (the session writes them in
        its place, with no copy of the effect). A body that is missing or fails its checksum
        is never sent: the session is closed, so the delivery returns to its queue (its
        Disconnect) for a member that has it."""
        message = effect.message
        try:
            return self.bodies.body(message.body)  # type: ignore[union-attr]
        except BodyUnavailable as exc:
            self.body_failures += 1
            log.error("node.body_unavailable", node=self.name, message_id=message.message_id, error=str(exc))
            session.fail("message body unavailable", f"{message.message_id}: not readable on this node", wait_for_log=False)
            return None

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            log.critical("node.failed", node=self.name, reason=reason)
            self.failed.set()

    # -- snapshots (a group's Raft log calls these on the event loop, in order with on_commit)

    def snapshot_state(self) -> bytes:
        """The replicated state for a Raft snapshot: the core's, with body references."""
        dump = self.broker.snapshot()
        index = self.commit_log.position.index
        if self.bodies is not None:
            # Bodies durable before pysyncobj may drop the entries that carried them.
            self.bodies.sync()
            self.bodies.collect(self.commit_log.snapshot_floor)
            self.bodies.snapshot_taken(index, dump)
        return msgpack.packb({"format": STATE_FORMAT, "index": index, "broker": dump}, use_bin_type=True)

    def restore_state(self, data: bytes) -> None:
        """Replace the state by a snapshot's (ours after a restart, or the leader's when this
        member fell behind a compaction); fetch from peers the bodies it references that
        this member lacks."""
        self._rates_stale = True  # the counters are replaced wholesale
        if not data:
            self.broker = Broker(self.config.core)
            return
        try:
            state = msgpack.unpackb(data, raw=False)
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                raise ValueError(f"not a raftmq state snapshot of format {STATE_FORMAT}")
            self.broker = Broker.restore(state["broker"], self.config.core)
        except Exception as exc:
            # Going on with the previous state would diverge from the group: stop instead.
            self._fail(f"cannot restore the Raft snapshot: {type(exc).__name__}: {exc}")
            raise
        if self.bodies is None:
            return
        missing = self.bodies.restored(int(state["index"]), state["broker"])
        if missing and self.fetch_bodies is not None:
            try:
                added = self.bodies.add_fetched(self.fetch_bodies(sorted(missing)))
            except Exception:
                log.exception("node.body_fetch_failed", node=self.name, missing=len(missing))
                added = 0
            log.info("node.bodies_fetched", node=self.name, wanted=len(missing), added=added)
        self.bodies.sync()
        if self.bodies.missing:
            log.error("node.bodies_missing", node=self.name, indexes=len(self.bodies.missing))

    def verify_bodies(self) -> dict[str, int]:
        """Read every body the core references from the journal (checksums included): how
        many there are and how many cannot be served from this node."""
        if self.bodies is None:
            return {"references": 0, "unreadable": 0}
        refs = {(int(ref[0]), int(ref[1])) for ref in iter_snapshot_refs(self.broker.snapshot())}
        unreadable = 0
        for ref in refs:
            try:
                self.bodies.body(ref, cached=False)
            except BodyUnavailable:
                unreadable += 1
        return {"references": len(refs), "unreadable": unreadable}

    async def _tick_forever(self) -> None:
        interval = self.config.tick_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            if self.commit_log.is_leader:
                future = self.commit_log.append([Tick(int(time.time() * 1000))])
                future.add_done_callback(_ignore_outcome)
            else:
                self._note_leader()

    async def _sample_forever(self) -> None:
        while True:
            self._sample_rates(self.broker.stats()["destinations"])
            await asyncio.sleep(SAMPLE_SECONDS)

    def _sample_rates(self, destinations: dict[str, Any]) -> None:
        if self._rates_stale:
            self._rates_stale = False
            self.rates.restart(time.monotonic(), destinations)
        else:
            self.rates.sample(time.monotonic(), destinations)

    def _rates(self, destinations: dict[str, Any]) -> dict[str, Any]:
        if self._rates_stale:
            self._sample_rates(destinations)
        return self.rates.rates(time.monotonic(), destinations)

    def stats(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "apply_failures": self.apply_failures,
            "internal_errors": self.internal_errors,
            "broker": self.broker.stats(),
        }

    def status(self) -> dict[str, Any]:
        """Role, term, commit / applied index, counters and rates (JSON-able), for /status.

        `sessions` counts this node's client connections; `broker` is the replicated state's
        counters (the same on every member that applied as much), among them `broker.sessions`,
        the sessions the group knows. `rates` is this node's view of how fast they move:
        enqueue / dequeue msg/s in all and per destination (see `raftmq.server.rates`)."""
        commit_log = self.commit_log
        broker = self.broker.stats()
        status: dict[str, Any] = {
            "node": self.name,
            "pid": os.getpid(),
            "role": "leader" if commit_log.is_leader else "follower",
            "leader": None if commit_log.is_leader else commit_log.leader_hint,
            "applied_index": commit_log.position.index,
            "sessions": len(self.sessions),
            "relayed_sessions": len(self.relays),
            "relayed_total": self.relays.total,
            "apply_failures": self.apply_failures,
            "internal_errors": self.internal_errors,
            "body_failures": self.body_failures,
            "sessions_swept": self.sessions_swept,
            "leader_changes": self.leader_changes,
            "failure": self.failure,
            "broker": broker,
            "rates": self._rates(broker["destinations"]),
        }
        raft_status = getattr(commit_log, "status", None)  # RaftLog
        if callable(raft_status):
            raft = raft_status()
            status["raft"] = {name: getattr(raft, name) for name in raft.__slots__}
            status["term"] = raft.term
            status["commit_index"] = raft.commit_index
        else:  # one node: whatever is appended is committed and applied at once
            status["commit_index"] = status["applied_index"]
        if self.bodies is not None:
            status["bodies"] = self.bodies.stats()
        return status


def _tune_gc() -> None:
    # Every message allocates a few dozen short-lived container objects (frames, commands,
    # effects); at the default gen-0 threshold (700) the collector ran thousands of times a
    # second (~11 % of a 3-node leader's busy CPU, py-spy --native) and its full collections
    # walk every long-lived object. Freeze what exists at the first start (imports, config)
    # and collect young objects less often. Once per process: nodes started in-process (tests)
    # must not freeze each other's garbage.
    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.freeze()
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(GC_GEN0_THRESHOLD, first), second, third)


def _receipt_first(effects: list[Any]) -> list[Any]:
    """A SEND's receipt ahead of the deliveries it caused, when they go to other sessions
    (each session keeps its own order). Frames leave in the order sessions were first written
    to, so the producer hears first and its next SEND tends to reach the leader before the
    consumer's ACK: it then goes out as an entry at once instead of queueing behind the ACK's
    entry on every follower (1P×1C receipt p50 about 0.1 ms lower)."""
    receipt = effects[-1]
    for effect in effects[:-1]:
        if effect.session == receipt.session:
            return effects
    return [receipt, *effects[:-1]]


def _wall_ms() -> int:
    return int(time.time() * 1000)


def _ignore_outcome(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one: every client costs a descriptor, and a
    1024 soft limit (the usual default) locks new clients out long before max_connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:
            log.warning("node.fd_limit_unchanged", soft=soft, hard=hard, error=str(exc))
            return soft, hard
        log.info("node.fd_limit_raised", soft=soft, to=hard)
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def setup_logging(who: str, log_file: str | os.PathLike[str] | None, log_level: str | None) -> None:
    """`configure_logging`, with a bad level or an unwritable log file a one-line error."""
    try:
        configure_logging(json_path=log_file, level=log_level)
    except ValueError as exc:
        raise SystemExit(f"{who}: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"{who}: cannot write the log file {log_file}: {exc.strerror or exc}") from None


def announce_ready(node: Node, on_ready: ReadyCallback | None) -> None:
    """The node serves clients: log it and tell the caller (the CLI prints the readiness line
    `raftmq node listening on HOST:PORT` that scripts and `raftmq up` wait for)."""
    host, port = node.address
    log.info("node.listening", node=node.name, host=host, port=port, pid=os.getpid())
    if on_ready is not None:
        on_ready(host, port)


async def run_until_stopped(node: Node, on_ready: ReadyCallback | None) -> None:
    """Announce the started node, then wait for SIGINT / SIGTERM or for the node to fail."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    announce_ready(node, on_ready)
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(node.failed.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


async def _run(config: NodeConfig, on_ready: ReadyCallback | None) -> None:
    node = Node(config)
    try:
        await node.start()
    except OSError as exc:
        log.error("node.start_failed", host=config.host, port=config.port, error=str(exc))
        raise SystemExit(f"raftmq node: cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    admin = await _start_admin(node)
    try:
        await run_until_stopped(node, on_ready)
    finally:
        log.info("node.stopping", node=node.name)
        if admin is not None:
            await admin.stop()
        await node.stop()


async def _start_admin(node: Node) -> Any:
    """The `admin` port of a single node (/status, /metrics, /health), if configured."""
    if node.config.admin is None:
        return None
    from raftmq.config import split_address
    from raftmq.server.admin import AdminServer

    host, port = split_address(node.config.admin)
    admin = AdminServer(node.status, None, None, host, port)
    try:
        await admin.start()
    except OSError as exc:
        await node.stop()
        raise SystemExit(f"raftmq node: cannot listen on {node.config.admin} (admin): {exc.strerror or exc}") from None
    return admin


def serve(
    config: NodeConfig,
    *,
    on_ready: ReadyCallback | None = None,
    log_file: str | os.PathLike[str] | None = None,
    log_level: str | None = None,
) -> None:
    """Run a node in the foreground until SIGINT/SIGTERM. Logs go to stderr, and as JSON lines
    to `log_file` if given; `log_level` None: `$RAFTMQ_LOG_LEVEL` or info."""
    setup_logging("raftmq node", log_file, log_level)
    raise_fd_limit()
    with asyncio.Runner(loop_factory=_new_event_loop) as runner:
        runner.run(_run(config, on_ready))

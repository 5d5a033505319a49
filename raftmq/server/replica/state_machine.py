"""This member's replica of the group's state: the broker core plus the body journal, driven by
the commit log as its `StateMachine` (raftmq.replication.commit_log).

`apply` runs the steps of the commit log's contract for one committed batch, in the order
written in raftmq.replication.commit_log: body references (`BodyStore.begin`,
`Broker.begin_entry`), then per command the core and its effects on the sessions this node
serves (effects for sessions that are elsewhere or gone are dropped: the Disconnect a closing
session proposes returns its deliveries to their queues; a member that serves none has its
core build no deliveries or receipts at all), then the batch's bodies to the body journal
(`BodyStore.end`).
`snapshot` / `restore` are the Raft snapshot: the core's state with body references, and,
after a restore, the bodies this member lacks fetched from its peers.

A core that raises stops the node (fail-stop): replicas apply the same commands, so skipping
one here could only hide a bug, and a broken invariant must be loud.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import structlog

from raftmq.core.broker import Broker
from raftmq.core.commands import Command, Connect, Disconnect
from raftmq.core.effects import BrowseEnd, Deliver, Effect, Managed, Receipt, Reject
from raftmq.core.snapshot import journal_refs
from raftmq.errors import BodyUnavailable
from raftmq.server.replica.bodies import BodyStore, IndexRecords
from raftmq.server.seams.host import ClientConnection, ReplicaHost
from raftmq.server.seams.pulse import Pulse
from raftmq.server.stomp.frames import browse_end_frame

log = structlog.get_logger("raftmq.server.replica")

STATE_FORMAT = 1  # of snapshot()
# A committed batch whose commands were stamped longer ago than this is a replay (restart,
# catch-up), not live traffic: enqueue/dequeue rates restart from the counters after it.
REPLAY_AGE_MS = 5_000
# Fetching the bodies a snapshot references (a member that fell behind, or a new one): rounds
# of `fetch_bodies`, 0.2 s apart when one brought nothing, doubling to 5 s; given up after two
# minutes without progress.
FETCH_RETRY_SECONDS = 0.2
FETCH_RETRY_MAX_SECONDS = 5.0
FETCH_PATIENCE_SECONDS = 120.0
BodyFetcher = Callable[[Sequence[int]], list[IndexRecords]]


class Replica:
    def __init__(self, host: ReplicaHost, bodies: BodyStore | None, fetch_bodies: BodyFetcher | None) -> None:
        self._host = host
        self.broker = Broker(host.config.core, bodies)
        self.bodies = bodies  # None: bodies stay in the core (single node, InMemoryLog)
        self.fetch_bodies = fetch_bodies  # from peers, after a snapshot that references more
        self.apply_failures = 0  # commands the core raised on (then the node stops)
        self.failed = False  # an entry could not be applied: nothing after it ever is (fail-stop)
        self.body_failures = 0  # deliveries refused because the body was missing or corrupt
        self.applied = Pulse()  # beaten after every applied batch (raftmq.server.seams.pulse)

    # -- StateMachine

    def apply(self, commands: Sequence[Command]) -> None:
        """Apply committed commands in order and execute their effects on local sessions."""
        host = self._host
        if self.failed:
            # Applying later entries without the one that failed would give this member a state
            # no other has: its deliveries' ack ids would name other messages, and an ACK sent
            # for one would settle another (found by the chaos disk-full nemesis: a message
            # acknowledged away that no consumer ever received). The node is stopping.
            return
        bodies = self.bodies
        sessions = host.sessions
        awaiting = host.awaiting_adoption  # after a transfer: the old leader's sessions, until adopted
        # No client here (a follower): the core builds no Deliver or Receipt, and only an admin
        # request's answer can concern this member. Applying the batch adds no session here.
        quiet = not sessions and not awaiting
        if bodies is not None:
            position = host.commit_log.position
            try:
                bodies.begin(position.index, position.term, commands, cache=host.commit_log.is_leader)
                self.broker.begin_entry(position.index, quiet=quiet)
            except Exception as exc:
                # Applying without the bodies would leave this member unable to serve what it
                # acknowledged: stop (fail-stop); on restart the Raft journal replays the entry.
                self.failed = True
                host.fail(f"cannot write the body journal at raft index {position.index}: {exc}")
                raise
        if commands and host.clock.now_ms() - getattr(commands[-1], "now", 1 << 62) > REPLAY_AGE_MS:
            host.replayed()  # old commands: a replay, not traffic to show as a rate
        if quiet:
            self._apply_quietly(commands)
        else:
            self._apply_serving(commands)
        if bodies is not None:
            self._end_entry(bodies)
        self.applied.beat()

    def _apply_quietly(self, commands: Sequence[Command]) -> None:
        """No session of the batch is served here: the whole batch in one call into the core;
        of its effects only an admin request's answer concerns this member."""
        try:
            effects = self.broker.apply_all(commands)
        except Exception as exc:
            self._core_raised(self.broker.applying, exc)
            raise
        for effect in effects:
            if type(effect) is Managed:
                self._host.managed(effect)

    def _apply_serving(self, commands: Sequence[Command]) -> None:
        """Each command, then its effects on the sessions this member serves."""
        host, bodies = self._host, self.bodies
        sessions = host.sessions
        awaiting = host.awaiting_adoption
        apply = self.broker.apply
        for command in commands:
            try:
                effects = apply(command)
            except Exception as exc:
                self._core_raised(command, exc)
                raise
            if len(effects) > 1 and type(effects[-1]) is Receipt:
                receipt_first(effects)
            for effect in effects:
                session = sessions.get(effect.session)
                if session is None:
                    if type(effect) is Managed:  # an admin request's answer (no session)
                        host.managed(effect)
                    if not awaiting or (session := awaiting.get(effect.session)) is None:
                        continue
                if type(effect) is Deliver:  # the common cases inline: per message
                    if bodies is None:
                        session.deliver(effect)
                    elif (body := self._body_of(effect, session)) is not None:
                        session.deliver(effect, body)
                elif type(effect) is Receipt:
                    session.receipt(effect.receipt_id)
                else:
                    self._execute(effect, session)
            if isinstance(command, Connect):
                session = sessions.get(command.session)
                if session is not None:
                    host.connected(session, command)
            elif isinstance(command, Disconnect):
                session = sessions.get(command.session)
                if session is not None:
                    host.disconnected(session)

    def _core_raised(self, command: Command | None, exc: Exception) -> None:
        self.failed = True
        self.apply_failures += 1
        name = type(command).__name__
        log.exception("broker.apply_failed", command=name)
        self._host.fail(f"the broker core raised on a committed {name}: {type(exc).__name__}: {exc}")

    def _end_entry(self, bodies: BodyStore) -> None:
        """Write the entry's bodies and the pages its commands sealed, as one journal batch."""
        try:
            bodies.end()
        except Exception as exc:
            # Its deliveries went out from the bodies in memory; without them on disk this member
            # cannot serve what it holds: stop (fail-stop); on restart the Raft journal replays it.
            self.failed = True
            index = self._host.commit_log.position.index
            self._host.fail(f"cannot write the body journal at raft index {index}: {exc}")
            raise

    def _execute(self, effect: Effect, session: ClientConnection) -> None:
        """The effects that are not per message (`apply` hands out deliveries and receipts)."""
        if isinstance(effect, Reject):
            session.fail(effect.message, effect.detail, effect.receipt_id, wait_for_log=False)
        elif isinstance(effect, BrowseEnd):
            if session.open_for_output:  # after a missing body's ERROR nothing more goes out
                session.write(browse_end_frame(effect, session.version))

    def _body_of(self, effect: Deliver, session: ClientConnection) -> bytes | None:
        """The body bytes behind the reference the core holds (the session writes them in
        its place, with no copy of the effect). A body that is missing or fails its checksum
        is never sent: the session is closed, so the delivery returns to its queue (its
        Disconnect) for a member that has it."""
        message = effect.message
        assert self.bodies is not None
        if isinstance(message.body, (bytes, bytearray)):  # made by the core itself (journal_refs)
            return bytes(message.body)
        try:
            return self.bodies.body(message.body)
        except BodyUnavailable as exc:
            self.body_failures += 1
            log.error("node.body_unavailable", node=self._host.name, message_id=message.message_id, error=str(exc))
            session.fail("message body unavailable", f"{message.message_id}: not readable on this node",
                         wait_for_log=False)
            return None

    def snapshot(self) -> bytes:
        """The replicated state for a Raft snapshot: the core's, with body references."""
        dump = self.broker.snapshot()
        commit_log = self._host.commit_log
        index = commit_log.position.index
        if self.bodies is not None:
            # Bodies durable before pysyncobj may drop the entries that carried them.
            self.bodies.sync()
            self.bodies.collect(commit_log.snapshot_floor)
            self.bodies.snapshot_taken(index, dump)
        state = {"format": STATE_FORMAT, "index": index, "broker": dump}
        return msgpack.packb(state, use_bin_type=True)  # type: ignore[no-any-return]

    def restore(self, data: bytes) -> asyncio.Future[None] | None:
        """Replace the state by a snapshot's (ours after a restart, or the leader's when this
        member fell behind a compaction); fetch from peers the bodies it references that
        this member lacks."""
        host = self._host
        host.replayed()  # the counters are replaced wholesale
        if not data:
            self.broker = Broker(host.config.core, self.bodies)
            return None
        try:
            state = msgpack.unpackb(data, raw=False)
            if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
                raise ValueError(f"not a raftmq state snapshot of format {STATE_FORMAT}")
            self.broker = Broker.restore(state["broker"], host.config.core, self.bodies)
        except Exception as exc:
            # Going on with the previous state would diverge from the group: stop instead.
            host.fail(f"cannot restore the Raft snapshot: {type(exc).__name__}: {exc}")
            raise
        if self.bodies is None:
            return None
        missing = self.bodies.restored(int(state["index"]), state["broker"])
        self.bodies.sync()
        if missing and self.fetch_bodies is not None:
            # Fetching waits on peers' admin ports for up to seconds: a worker thread does it
            # while the loop serves on; the log applies nothing more until it is done (the body
            # journal only grows, so what is fetched must land before later entries).
            return asyncio.get_running_loop().create_task(self._fetch(sorted(missing)))
        if self.bodies.missing:
            log.error("node.bodies_missing", node=host.name, indexes=len(self.bodies.missing))
        return None

    async def _fetch(self, missing: list[int]) -> None:
        """Fetch until nothing is missing: each round asks the peers for what is still missing
        (bounded in time: `fetch_bodies`' budget); a round that brings nothing waits longer
        before the next (peers down or busy), and after `FETCH_PATIENCE_SECONDS` without
        progress the member gives up and says so (`node.bodies_missing`, and status
        `bodies.missing_indexes`). Until then the log applies nothing more: a member is not
        caught up while it cannot serve what it holds."""
        bodies, fetch, name = self.bodies, self.fetch_bodies, self._host.name
        assert bodies is not None and fetch is not None
        loop = asyncio.get_running_loop()
        wanted, rounds, total = missing, 0, len(missing)
        progress_at, pause = loop.time(), FETCH_RETRY_SECONDS
        while wanted:
            try:
                records = await asyncio.to_thread(fetch, wanted)
                added = bodies.add_fetched(records)
            except Exception:
                log.exception("node.body_fetch_failed", node=name, missing=len(wanted))
                added = 0
            rounds += 1
            last = bodies.journal.last_index
            # The body journal only grows: an index below its end can no longer be added.
            wanted = sorted(i for i in bodies.missing if last is None or i > last)
            if added:
                progress_at, pause = loop.time(), FETCH_RETRY_SECONDS
            elif not wanted or loop.time() - progress_at > FETCH_PATIENCE_SECONDS:
                break
            else:
                await asyncio.sleep(pause)
                pause = min(pause * 2, FETCH_RETRY_MAX_SECONDS)
        bodies.sync()
        log.info("node.bodies_fetched", node=name, wanted=total, added=total - len(bodies.missing), rounds=rounds)
        if bodies.missing:
            log.error("node.bodies_missing", node=name, indexes=len(bodies.missing))

    def verify_bodies(self) -> dict[str, int]:
        """Read every body the core references from the journal (checksums included): how
        many there are and how many cannot be served from this node."""
        if self.bodies is None:
            return {"references": 0, "unreadable": 0}
        refs = {(int(ref[0]), int(ref[1])) for ref in journal_refs(self.broker.snapshot(), self.bodies.get)}
        unreadable = 0
        for ref in refs:
            try:
                self.bodies.body(ref, cached=False)
            except BodyUnavailable:
                unreadable += 1
        return {"references": len(refs), "unreadable": unreadable}


def receipt_first(effects: list[Any]) -> list[Any]:
    """A SEND's receipt ahead of the deliveries it caused, when they go to other sessions
    (each session keeps its own order), in place. Frames leave in the order sessions were first
    written to, so the producer hears first and its next SEND tends to reach the leader before
    the consumer's ACK: it then goes out as an entry at once instead of queueing behind the
    ACK's entry on every follower (1P×1C receipt p50 about 0.1 ms lower)."""
    session = effects[-1].session
    for i in range(len(effects) - 1):
        if effects[i].session == session:
            return effects
    effects.insert(0, effects.pop())
    return effects

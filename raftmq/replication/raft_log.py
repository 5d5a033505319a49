"""`RaftLog`: the CommitLog of a group member, replicated with (hardened) pysyncobj.

Group commit: `propose` queues commands on the event loop. With nothing in flight they go out
at once; a further entry (up to `max_in_flight_entries`) goes out at once only while the
entries in flight are small (`light_load_bytes`); otherwise everything that arrives meanwhile
is coalesced into the next entry, up to `max_entry_bytes` of encoded commands, lz4-compressed.
ACKs and NACKs nobody waits on (no receipt) never go as a further entry, and on an idle log wait
up to `settle_wait_ms` after a producer was answered, for its next SEND to take them along.
The leader applies its own entries from the commands it built them from (no second decode). One
Raft entry is therefore one `apply` call, and one fdatasync per replication message covers all
of it.

Threads: pysyncobj's tick thread applies committed entries on every member and hands them to
the event loop with `call_soon_threadsafe`, so `apply` runs on the loop, in log order. The
leader's proposals settle (futures complete, proposers are told: `propose_for`) after `apply`
ran for their entry; they fail with `NotLeader` (never submitted) or `CommitFailed` (leadership
lost, timeout, apply error) and never report success for an entry whose outcome is unknown.

`position` is the (index, term) of the entry `apply` is handling (raftmq.replication.applier
carries entries, snapshots and restores across); the role listener (`set_role_listener`) hears
of every leadership change on the loop, a lost leadership before the proposals in flight fail,
and the leader listener (`set_leader_listener`) of every change of the leader this member knows;
`snapshot_floor` bounds the index of the last durable snapshot.

Snapshots: the state machine's `snapshot() -> bytes` and `restore(bytes)` run on the loop, in
order with `apply` (a restore that finishes later holds what follows until it has). The tick
thread waits (bounded) for the snapshot, so it reflects exactly the entries applied so far.
Compaction is triggered by journal bytes (`compact_after_bytes`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from pysyncobj import _RAFT_STATE

from raftmq.core.commands import Command, unawaited
from raftmq.errors import CommandCodecError, CommitFailed, NotLeader, RaftmqError
from raftmq.replication.applier import Applier
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.commit_log import CommitLog, LogPosition, LogStatus, Proposer, RoleListener, StateMachine
from raftmq.replication.entry_codec import (
    ENTRY_FORMAT_LISTS,
    ROWS_VERSION,
    batch_of_rows,
    encode_entry,
    encode_entry_lists,
)
from raftmq.replication.in_flight import (
    FAIL_REASONS,
    InFlightEntries,
    PendingEntry,
    Waiter,
    fail_waiters,
    settle_waiters,
)
from raftmq.replication.leadership_transfer import transfer
from raftmq.replication.proposals import ProposalQueue
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.pysyncobj.syncobj import SUCCESS, HardenedSyncObj
from raftmq.replication.raft_settings import RaftSettings, RaftStatus
from raftmq.tls import raft_tls_contexts

log = structlog.get_logger("raftmq.replication.raft_log")

# The tick thread shares the GIL with the event loop. Each time it comes back from a system call
# (poll, send, fdatasync) while the loop is busy applying an entry it waits for the loop to
# give the GIL up: up to 5 ms at Python's default switch interval, several times per round
# trip. 0.5 ms keeps a replication round trip at ~1-3 ms under load.
GIL_SWITCH_INTERVAL = 0.0005


def _first_index(journal: RaftJournal) -> int:
    """Index of the journal's first entry, 0 if none (read from the loop while the tick
    thread may be replacing the entries: a snapshot install empties them for an instant)."""
    try:
        return int(journal[0][1])
    except IndexError:
        return 0


class RaftLog(CommitLog):
    def __init__(self, settings: RaftSettings, *, client_addresses: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self._client_addresses = dict(client_addresses or {})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._syncobj: HardenedSyncObj | None = None
        self._queue = ProposalQueue()
        self._company_timer: asyncio.TimerHandle | None = None  # while unawaited settlements wait for company
        self._handing_over = False  # proposals wait in the queue (transfer_leadership)
        self._leader_term = 0  # the term of our latest leadership
        self._won_by_hand_over = False  # that leadership came from a transfer (TimeoutNow)
        self._in_flight = InFlightEntries()
        self._applier = Applier(self._in_flight, settings.timings.snapshot_timeout_ms / 1000)
        self._next_token = 0
        self._pump_scheduled = False
        self._stopped = False
        self._role_listener: RoleListener | None = None
        # The loop's word on our role (the tick thread flips pysyncobj's first): until the loop
        # hears, proposals wait for `_lost_leadership`, which fails them after the role listener.
        self._leading_on_loop = False
        self._members_listener: Callable[[tuple[str, ...]], None] | None = None
        self._leader_listener: Callable[[], None] | None = None

    # -- CommitLog

    async def start(self, machine: StateMachine) -> None:
        s = self.settings
        self._loop = asyncio.get_running_loop()
        self._applier.handoff.start(self._loop)
        self._applier.machine = machine
        if sys.getswitchinterval() > GIL_SWITCH_INTERVAL:
            sys.setswitchinterval(GIL_SWITCH_INTERVAL)
        os.makedirs(s.data_dir, exist_ok=True)
        journal = await asyncio.to_thread(RaftJournal, os.path.join(s.data_dir, "raft.journal"))
        # Constructed on the loop's thread: pysyncobj's tick thread stops when its creator exits.
        try:
            self._syncobj = self._make_syncobj(journal)
        except BaseException:
            journal._destroy()
            raise
        try:
            await asyncio.to_thread(self._syncobj.waitBinded)
        except Exception as exc:
            await asyncio.to_thread(self._syncobj.destroy_synchronous)
            raise RaftmqError(f"cannot bind the Raft port {s.self_address}: {exc}") from None

    def _make_syncobj(self, journal: RaftJournal) -> HardenedSyncObj:
        s = self.settings
        return HardenedSyncObj(
            s.self_address, list(s.peers), data_dir=s.data_dir, journal=journal,
            on_apply=self._applier.apply_in_tick_thread,
            snapshot=self._applier.snapshot_in_tick_thread,
            restore=self._applier.restore_in_tick_thread,
            on_state_changed=self._state_changed_in_tick_thread,
            on_members_changed=lambda members: self._call_on_loop(self._members_changed, members),
            on_leader_changed=lambda: self._call_on_loop(self._leader_changed),
            password=s.password, secret=s.secret, timings=s.timings, bind_host=s.bind_host,
            tls=None if s.tls is None else raft_tls_contexts(s.tls),
        )

    def propose(self, commands: Sequence[Command]) -> asyncio.Future[None]:
        assert self._loop is not None, "propose before start"
        future: asyncio.Future[None] = self._loop.create_future()
        self._enqueue(commands, future)
        return future

    def propose_for(self, commands: Sequence[Command], proposer: Proposer, number: int) -> None:
        self._enqueue(commands, (proposer, number, commands))

    def _enqueue(self, commands: Sequence[Command], waiter: Waiter) -> None:
        error: Exception | None = None
        if self._stopped:
            error = CommitFailed("log stopped")
        elif not self.is_leader and not self._leading_on_loop:
            error = NotLeader(self.leader_hint)
        else:
            timings = self.settings.timings
            awaited = not (timings.settle_wait_ms and unawaited(commands))
            try:
                self._queue.append(encode_rows(commands, ROWS_VERSION[timings.entry_format]), commands, waiter, awaited)
            except CommandCodecError as exc:
                error = exc
        if error is None:
            self._schedule_pump()
        elif isinstance(waiter, tuple):  # on a later loop turn, as a future's callback would hear it
            assert self._loop is not None
            self._loop.call_soon(fail_waiters, (waiter,), lambda: error)
        else:
            waiter.set_exception(error)

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._fail_queued(lambda: CommitFailed("log stopped"))
        syncobj = self._syncobj
        if syncobj is None:
            return
        if self._in_flight:  # let entries already sent settle rather than report them unknown
            assert self._loop is not None
            await asyncio.wait([self._in_flight.drained(self._loop)], timeout=0.5)
        if syncobj.is_leader:
            await self.transfer_leadership(timeout=0.5)
        self._fail_in_flight(lambda: CommitFailed("log stopped before the outcome was known"))
        await asyncio.to_thread(syncobj.destroy_synchronous)

    @property
    def is_leader(self) -> bool:
        return self._syncobj is not None and not self._stopped and self._syncobj.is_leader

    @property
    def leader_term(self) -> int:
        return self._leader_term  # kept after a step-down: what a deposed leader writes is marked old

    @property
    def won_by_hand_over(self) -> bool:
        return self._won_by_hand_over

    @property
    def handing_over(self) -> bool:
        return self._handing_over

    def holds_lease(self) -> bool:
        syncobj = self._syncobj
        return syncobj is not None and not self._stopped and syncobj.lease_holds(time.monotonic())

    @property
    def leader_hint(self) -> str | None:
        leader = self._syncobj.leader_address if self._syncobj is not None else None
        return None if leader is None else self._client_addresses.get(leader)

    @property
    def position(self) -> LogPosition:
        return self._applier.position

    def set_role_listener(self, listener: RoleListener | None) -> None:
        self._role_listener = listener

    @property
    def snapshot_floor(self) -> int:
        # After a snapshot at applied index A succeeds, pysyncobj trims its journal to start at
        # A - 1; before that trim (or with no snapshot) this stays at or below the durable one.
        syncobj = self._syncobj
        if syncobj is None or not os.path.exists(syncobj.snapshot_path):
            return 0
        first = _first_index(syncobj.durable_journal)
        return first + 1 if first else 0

    # -- extras for the node

    @property
    def member(self) -> HardenedSyncObj:
        """The Raft member (after start): membership changes go through it (raftmq.replication.membership_change)."""
        assert self._syncobj is not None, "not started"
        return self._syncobj

    def set_client_addresses(self, addresses: Mapping[str, str]) -> None:
        """Raft address -> client address, for `leader_hint` (new members join the book). Called
        on the loop; a leader whose client address was not known until now is a leader changed."""
        before = self.leader_hint
        self._client_addresses = dict(addresses)
        if self.leader_hint != before:
            self._leader_changed()

    def set_leader_listener(self, listener: Callable[[], None] | None) -> None:
        self._leader_listener = listener

    def _leader_changed(self) -> None:
        if self._leader_listener is not None and not self._stopped:
            try:
                self._leader_listener()
            except Exception:
                log.exception("raft.leader_listener_failed")

    def set_members_listener(self, listener: Callable[[tuple[str, ...]], None] | None) -> None:
        """Called on the loop with the members' Raft addresses whenever the configuration changes."""
        self._members_listener = listener

    def _members_changed(self, members: tuple[str, ...]) -> None:
        if self._members_listener is not None:
            self._members_listener(members)

    async def transfer_leadership(self, timeout: float = 1.0) -> bool:
        """Hand leadership to the most caught-up follower (graceful stop). True once done.

        As the Raft dissertation's leadership transfer (3.10): new proposals wait in the queue
        (no entry is appended, so a follower catches up with the next append-entries), the
        follower whose log then matches ours is told to stand at once (pysyncobj's TimeoutNow),
        and the queue resumes if it has not won within an election timeout; rounds repeat
        until `timeout`. Appends made meanwhile would leave the successor with a shorter log
        than its voters', and elections would fail (seen under load: up to 1.4 s leaderless)."""
        syncobj, loop = self._syncobj, self._loop
        assert syncobj is not None and loop is not None
        round_seconds = self.settings.timings.election_timeout_max_ms / 1000
        return await transfer(syncobj, loop, timeout, round_seconds, self._in_flight, self._hold_proposals)

    def _hold_proposals(self, held: bool) -> None:
        self._handing_over = held
        if not held:
            self._schedule_pump()  # resume (or, no longer leading, fail the queue: NotLeader)

    def status(self) -> LogStatus:
        raft = self.raft_status()
        return LogStatus(
            is_leader=raft.is_leader, leader=None if raft.is_leader else raft.leader_client, term=raft.term,
            commit_index=raft.commit_index, applied_index=self._applier.position.index, replicated=True,
            details={name: getattr(raft, name) for name in raft.__slots__},
        )

    def raft_status(self) -> RaftStatus:
        syncobj = self._syncobj
        assert syncobj is not None
        journal = syncobj.durable_journal
        leader = syncobj.leader_address
        return RaftStatus(
            node=self.settings.self_address, leader=leader,
            leader_client=None if leader is None else self._client_addresses.get(leader),
            is_leader=syncobj.is_leader, term=syncobj.raftCurrentTerm, commit_index=syncobj.raftCommitIndex,
            last_applied=syncobj.raftLastApplied, delivered_index=self._applier.delivered_index,
            journal_entries=len(journal), journal_first_index=_first_index(journal),
            journal_bytes=journal.size_bytes, fsyncs=journal.fsyncs,
            apply_errors=syncobj.apply_errors + self._applier.apply_errors,
            last_apply_error=self._applier.last_apply_error or syncobj.last_apply_error,
            in_flight_entries=len(self._in_flight), queued_appends=len(self._queue), members=syncobj.members,
        )

    # -- group commit (loop thread)

    def _schedule_pump(self) -> None:
        if not self._pump_scheduled:
            self._pump_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self._pump)  # whatever else arrives in this loop turn joins

    def _pump(self) -> None:
        self._pump_scheduled = False
        if not self._queue:
            return
        if not self.is_leader:
            if self._leading_on_loop and not self._stopped:
                return  # the loss is on its way (`_lost_leadership`)
            hint = self.leader_hint
            self._fail_queued(lambda: NotLeader(hint))
            return
        s = self.settings
        loop = self._loop
        assert loop is not None
        if not self._in_flight and self._queue.waits_for_company(loop.time()):
            # Only settlements nobody waits on, just after a producer was answered: its next SEND
            # (on its way) takes them along, one entry for both (RaftTimings.settle_wait_ms).
            if self._company_timer is None:
                self._company_timer = loop.call_at(self._queue.company_until, self._company_waited)
            return
        while self._queue and self._may_submit():
            pending = self._queue.take(s.timings.max_entry_bytes)
            if pending is not None:
                self._submit(pending)

    def _company_waited(self) -> None:
        self._company_timer = None
        self._pump()

    def _may_submit(self) -> bool:
        if self._handing_over:
            return False  # a leadership transfer: nothing is appended until it ends
        s = self.settings
        in_flight = len(self._in_flight)
        if in_flight and not self._queue.awaited:
            return False  # settlements nobody waits on join the next entry rather than go alone
        return in_flight == 0 or (
            in_flight < s.timings.max_in_flight_entries and self._in_flight.bytes <= s.light_load_bytes
        )

    def _submit(self, pending: PendingEntry) -> None:
        assert self._syncobj is not None and self._loop is not None
        form = self.settings.timings.entry_format
        entry = encode_entry(pending.rows, form) if form != ENTRY_FORMAT_LISTS else \
            encode_entry_lists([batch_of_rows(rows) for rows in pending.rows])
        token = self._next_token
        self._next_token += 1
        try:
            self._syncobj.submit(entry, lambda result, error: self._settle_from_tick_thread(token, result, error))
        except ValueError as exc:
            message = str(exc)  # the name `exc` ends with this block; the error factory may run later
            fail_waiters(pending.waiters, lambda: CommitFailed(message))
            return
        pending.entry = entry
        self._in_flight.add(token, pending)
        pending.timer = self._loop.call_later(self.settings.timings.commit_timeout_ms / 1000, self._expire, token)

    def _settle_from_tick_thread(self, token: int, result: Any, error: int) -> None:
        self._applier.handoff.send(self._settle, token, result, error)

    def _settle(self, token: int, result: Any, error: int) -> None:
        pending = self._in_flight.pop(token)
        if pending is None:
            return  # already failed (leadership lost, timeout, stop)
        if pending.timer is not None:
            pending.timer.cancel()
        if error == SUCCESS and result is not None and result not in self._applier.failed_deliveries:
            if pending.awaited and self._loop is not None:
                self._queue.company_until = self._loop.time() + self.settings.timings.settle_wait_ms / 1000
            settle_waiters(pending.waiters)
        else:
            self._applier.failed_deliveries.discard(result)
            if error == SUCCESS:
                # Committed, but this node could not apply it (its body journal failed): the
                # group has it, so "not committed" would be a lie a client might act on.
                message = "committed, but this node could not apply it; outcome unknown to the client"
            else:
                message = f"not committed: {FAIL_REASONS.get(error, f'error {error}')}"
            fail_waiters(pending.waiters, lambda: CommitFailed(message))
        self._schedule_pump()

    def _expire(self, token: int) -> None:
        pending = self._in_flight.pop(token)
        if pending is not None:
            timeout = self.settings.timings.commit_timeout_ms / 1000
            fail_waiters(pending.waiters, lambda: CommitFailed(f"not committed within {timeout:g}s; outcome unknown"))
            self._schedule_pump()

    def _fail_queued(self, error: Callable[[], Exception]) -> None:
        fail_waiters(self._queue.clear(), error)

    def _fail_in_flight(self, error: Callable[[], Exception]) -> None:
        for pending in self._in_flight.clear():
            if pending.timer is not None:
                pending.timer.cancel()
            fail_waiters(pending.waiters, error)

    def _gained_leadership(self) -> None:
        self._leading_on_loop = True
        if self._syncobj is not None:
            self._leader_term = self._syncobj.raftCurrentTerm
            self._won_by_hand_over = self._syncobj.won_by_hand_over
        if self._role_listener is not None and not self._stopped:
            self._role_listener(True)

    def _lost_leadership(self) -> None:
        self._leading_on_loop = False
        # The listener first: it tells clients where the leader went before their appends fail.
        if self._role_listener is not None:
            try:
                self._role_listener(False)
            except Exception:
                log.exception("raft.role_listener_failed")
        self._fail_in_flight(lambda: CommitFailed("leadership lost before commit; outcome unknown"))
        hint = self.leader_hint
        self._fail_queued(lambda: NotLeader(hint))

    # -- tick thread -> loop

    def _call_on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn, *args)

    def _state_changed_in_tick_thread(self, old: int, new: int) -> None:
        if old == _RAFT_STATE.LEADER and new != _RAFT_STATE.LEADER:
            self._call_on_loop(self._lost_leadership)
        elif new == _RAFT_STATE.LEADER and old != _RAFT_STATE.LEADER:
            self._call_on_loop(self._gained_leadership)

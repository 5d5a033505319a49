"""`HardenedSyncObj`: one Raft member with every fix applied and one replicated method.

It overrides `_onTick`, `_checkCommandsToApply` and pysyncobj's private `__applyLogEntries` and
`__generateRaftTimeout` (each calls the original), runs pre-vote, stickiness and the lease
(decisions in raftmq.replication.leadership), compacts by journal bytes, and hands snapshots to
the caller through pysyncobj's serializer hooks.
"""

from __future__ import annotations

import collections
import os
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import pysyncobj.syncobj as pso_syncobj
import structlog
from pysyncobj import _RAFT_STATE, FAIL_REASON, SyncObj, SyncObjConf, replicated

from raftmq.config import RaftTimings
from raftmq.replication.group_secret import group_secret
from raftmq.replication.leadership import Leadership, LogTip
from raftmq.replication.pysyncobj.dynamic_membership import DynamicMembership, MembersListener
from raftmq.replication.pysyncobj.patches import (
    CANDIDATE_ROUND_MAX,
    CANDIDATE_ROUND_MIN,
    PREVOTE_LOOKAHEAD,
    WakeOnce,
    apply_module_fixes,
    check_raft_address,
    close_notifier,
    never_raise,
)
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.pysyncobj.raft_journal_format import Entry
from raftmq.replication.pysyncobj.snapshot_file import read_snapshot_file, write_snapshot_file
from raftmq.replication.pysyncobj.tick_wait import poll_timeout
from raftmq.replication.pysyncobj.transport import DurableTransport
from raftmq.replication.wire import RaftTls

log = structlog.get_logger("raftmq.replication.pysyncobj")


DNS_CACHE_SECONDS = 5.0
DNS_FAIL_CACHE_SECONDS = 1.0

OnApply = Callable[[int, int, bytes], Any]  # (raft index, term, entry) -> result for callbacks
Snapshotter = Callable[[int, int], bytes]  # (raft index, term) the state is taken at -> state
Restorer = Callable[[bytes, int], None]  # (state, raft index it reflects)


def pysyncobj_timings(timings: RaftTimings) -> dict[str, Any]:
    """`SyncObjConf`'s timing and size arguments for `timings`: the one place Raft's settings
    turn from the config's milliseconds into pysyncobj's seconds."""

    def seconds(ms: int) -> float:
        return ms / 1000

    fallback = timings.leader_fallback_timeout_ms
    if fallback is None:
        fallback = timings.election_timeout_min_ms
    return {
        "autoTickPeriod": seconds(timings.tick_period_ms),
        "appendEntriesPeriod": seconds(timings.heartbeat_ms),
        "raftMinTimeout": seconds(timings.election_timeout_min_ms),
        "raftMaxTimeout": seconds(timings.election_timeout_max_ms),
        "leaderFallbackTimeout": seconds(fallback),
        "connectionTimeout": seconds(max(timings.connection_timeout_ms, timings.election_timeout_max_ms)),
        "connectionRetryTime": seconds(timings.connection_retry_ms),
        "appendEntriesBatchSizeBytes": timings.append_entries_batch_bytes,
    }


class HardenedSyncObj(DynamicMembership, SyncObj):
    """One Raft member with every fix of this module applied and one replicated method, which
    takes one `bytes` entry. `on_apply(index, term, entry)` runs for every committed entry, on
    every member, in log order, in the tick thread; what it returns reaches the submitter's
    callback.

    Timings default to the tuned values (docs/replication.md: 5 ms tick, 99 ms heartbeats,
    0.3-0.6 s election timeouts). Shorter timeouts fail over faster but elect spuriously when a
    member stalls (GC, fsync, a busy CPU) for longer than the minimum timeout.
    """

    # pysyncobj's private state this class reads and writes (typed here: its base is untyped).
    _SyncObj__newAppendEntriesTime: float
    _SyncObj__raftLeader: Any

    transport_class: type[DurableTransport] = DurableTransport

    def __init__(
        self,
        self_address: str,
        peers: Sequence[str],
        *,
        data_dir: str,
        on_apply: OnApply,
        snapshot: Snapshotter | None = None,
        restore: Restorer | None = None,
        on_state_changed: Callable[[int, int], None] | None = None,
        on_members_changed: MembersListener | None = None,
        on_leader_changed: Callable[[], None] | None = None,
        password: str | None = None,
        timings: RaftTimings = RaftTimings(),
        journal: RaftJournal | None = None,
        secret: str | None = None,
        bind_host: str | None = None,  # bind here rather than on self_address's host
        tls: RaftTls | None = None,  # TLS under the wire (raftmq.tls.raft_tls_contexts)
    ) -> None:
        self.raft_tls = tls  # read by the transport's connections
        self._patch_pysyncobj()
        bind_address = self_address if bind_host is None else f"{bind_host}:{self_address.rpartition(':')[2]}"
        self._check_addresses([self_address, bind_address, *peers], password)
        os.makedirs(data_dir, exist_ok=True)
        # Members keep their files in <group dir>/<id>/; the group's secret sits beside them.
        self.wire_secret = secret or group_secret(password, os.path.dirname(os.path.abspath(data_dir)))
        self.answering_mark: float | None = None  # `lm` of the append-entries being answered
        self._handover_election = False  # this tick's election was asked for by the leader
        self._handover_term = -1  # the term of the last election the leader asked us to stand in
        self.won_by_hand_over = False  # our leadership came from the leader's TimeoutNow (a transfer)
        self._on_state_changed = on_state_changed
        self._on_members_changed = on_members_changed
        self._on_leader_changed = on_leader_changed  # the leader this member knows of changed (tick thread)
        self._leader_known: Any = None
        self.apply_errors = 0
        self.last_apply_error: str | None = None
        self._on_apply = on_apply
        self._snapshot = snapshot
        self._restore = restore
        self._compact_after_bytes = timings.compact_after_bytes if snapshot is not None else None
        self._compaction_retry_at = 0.0
        self._tick_tasks: collections.deque[Callable[[], None]] = collections.deque()
        self.durable_journal = journal if journal is not None else RaftJournal(os.path.join(data_dir, "raft.journal"))
        self.snapshot_path = os.path.join(data_dir, "raft.snapshot")
        snapshot_cluster: list[str] | None = None
        snapshot_index = 0
        if os.path.exists(self.snapshot_path):
            # Read (and checksum) it now: pysyncobj would log a bad snapshot and start empty.
            last, previous, snapshot_cluster, _state = read_snapshot_file(self.snapshot_path)
            snapshot_index = last[1]
            self.durable_journal.align_to_snapshot(last, previous)
        # The configured peers only until the log says otherwise (membership changes).
        members = self._starting_members(frozenset({self_address, *peers}), snapshot_cluster, snapshot_index)
        if self_address not in members:
            log.warning("raft.not_a_member", node=self_address, members=sorted(members))
        peers = sorted(members - {self_address})
        conf = self._pysyncobj_conf(timings, bind_address)
        self.entry_limit_bytes = conf.appendEntriesBatchSizeBytes - 4096
        self.leadership = Leadership(len(peers) + 1, conf.raftMinTimeout)
        self._commit_notice_delay = conf.autoTickPeriod
        self._alone = not peers
        super().__init__(self_address, peers, conf=conf, transportClass=self.transport_class)
        self._install_wake_once()
        self._stand_at_once_alone()

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        return SyncObjConf(
            password=None,  # our wire encrypts; pysyncobj's Fernet is not used
            **pysyncobj_timings(timings),
            # Our group commit coalesces; pysyncobj sends each entry at once (the low-latency path).
            appendEntriesUseBatch=False,
            sendBufferSize=2**21,
            recvBufferSize=2**21,
            bindAddress=bind_address,
            journalFile=self.durable_journal,
            # Always a snapshot file beside the journal: without one a restart after compaction loses the state.
            fullDumpFile=self.snapshot_path,
            serializer=self._write_snapshot,
            deserializer=self._read_snapshot,
            # Compaction is ours, by journal bytes (see _onTick), not by entry count or time.
            logCompactionMinEntries=2**62,
            logCompactionMinTime=10**9,
            logCompactionBatchSize=2**18,
            commandsWaitLeader=False,
            onStateChanged=self._guard(self._state_changed, "onStateChanged"),
            dynamicMembershipChange=True,  # made safe by DynamicMembership
            # Peers by DNS name: a restarted pod or host comes back at a new address, and a name
            # not resolvable yet (pods starting together) is asked again soon; pysyncobj's stock
            # 600 s / 30 s would keep a member away from a moved peer for up to ten minutes.
            dnsCacheTime=DNS_CACHE_SECONDS,
            dnsFailCacheTime=DNS_FAIL_CACHE_SECONDS,
            maxBindRetries=5,
            bindRetryTime=0.2,
        )

    def _patch_pysyncobj(self) -> None:
        """pysyncobj's module-level names swapped for ours (`apply_module_fixes`)."""
        apply_module_fixes()

    @staticmethod
    def _check_addresses(addresses: Sequence[str], password: str | None) -> None:
        """Off loopback a password is required (`check_raft_address`)."""
        for address in addresses:
            check_raft_address(address, password)

    def _install_wake_once(self) -> None:
        """pysyncobj's pipe notifier replaced by `WakeOnce` (one wake-up per wait, not per entry)."""
        stock = getattr(self, "_SyncObj__pipeNotifier", None)  # absent where pysyncobj has no pipes
        if stock is not None:
            self._SyncObj__pipeNotifier = notifier = WakeOnce(self._poller)
            notifier.install(self._poller, self._poll_timeout)
            close_notifier(stock, self._poller)

    def _poll_timeout(self, tick: float) -> float:
        """How long this tick's poll waits: until the first deadline a tick keeps (`poll_timeout`)."""
        return poll_timeout(self, tick, time.monotonic())

    def _stand_at_once_alone(self) -> None:
        """Nobody else can lead a group of one: it stands at its first tick, not an election timeout later."""
        if self._alone:
            self._SyncObj__raftElectionDeadline = 0.0

    @staticmethod
    def _guard(fn: Callable[..., Any], what: str,
               on_error: Callable[[BaseException], None] | None = None) -> Callable[..., Any]:
        """What pysyncobj calls in its tick thread, made never to raise (`never_raise`)."""
        return never_raise(fn, what, on_error)

    # -- the one replicated method

    @replicated
    def _apply_entry(self, entry: bytes) -> Any:
        index = self.raftLastApplied + 1  # pysyncobj counts an entry applied after this returns
        log = self.durable_journal
        term = log[index - log[0][1]][2]
        return self._guard(self._on_apply, "replicated apply", self._apply_failed)(index, term, entry)

    def submit(self, entry: bytes, callback: Callable[[Any, int], None]) -> None:
        """Queue one entry (thread-safe). `callback(result, FAIL_REASON)` runs in the tick thread."""
        if len(entry) > self.entry_limit_bytes:
            raise ValueError(f"Raft entry of {len(entry)} bytes exceeds {self.entry_limit_bytes}")
        self._apply_entry(entry, callback=self._guard(callback, "commit callback"))

    def transfer_when_appended(self, callback: Callable[[Any, int], None]) -> None:
        """pysyncobj's transferLeadership (tick thread), denied while submitted entries still
        wait in its command queue: our tick tasks run before the tick appends them, so a
        TimeoutNow sent then would leave the successor one entry short of its voters, and its
        election would fail (seen: 2 of 20 hand-overs under load took a second election)."""
        if len(self._SyncObj__commandsQueue._FastQueue__queue):
            callback(None, FAIL_REASON.REQUEST_DENIED)
            return
        self.transferLeadership(callback=callback)

    def run_in_tick_thread(self, fn: Callable[[], None]) -> None:
        """Run `fn` in the tick thread at its next tick, which this wakes (pysyncobj is not thread-safe)."""
        self._tick_tasks.append(self._guard(fn, "tick task"))
        notifier = getattr(self, "_SyncObj__pipeNotifier", None)
        if notifier is not None:
            notifier.notify()

    def _apply_failed(self, exc: BaseException) -> None:
        self.apply_errors += 1
        self.last_apply_error = f"{type(exc).__name__}: {exc}"

    # -- overridden ticks: durability before counting, compaction by bytes

    def _onTick(self, timeToWait: float = 0.0) -> None:
        try:
            self._tick(timeToWait)
        finally:
            self._handover_election = False
        leader = self._SyncObj__raftLeader
        if leader is not self._leader_known:  # learned in this tick (an append-entries, a vote, a timeout)
            self._leader_known = leader
            if self._on_leader_changed is not None:
                self._on_leader_changed()

    def _tick(self, timeToWait: float) -> None:
        # Entries added since the last tick (the no-op of a new leader, appends received while
        # polling) are durable before this tick's commit count includes us.
        self.make_durable()
        journal = self.durable_journal
        while self._tick_tasks:
            self._tick_tasks.popleft()()
        limit = self._compact_after_bytes
        if limit is not None and journal.size_bytes > limit and time.monotonic() >= self._compaction_retry_at:
            self.forceLogCompaction()
        journal.store_meta_when_due()  # here, not in pysyncobj's tick: no fsync between the two checks below
        if not self.leadership.alone:
            # Last thing before pysyncobj looks at the election deadline in this tick, so it
            # cannot pass unseen in between and let pysyncobj stand without a pre-vote.
            self._before_election()
        super()._onTick(timeToWait)

    def _checkCommandsToApply(self) -> None:
        last = self._last_index()
        super()._checkCommandsToApply()
        if (
            isinstance(getattr(self, "_SyncObj__pipeNotifier", None), WakeOnce)
            and len(self._SyncObj__commandsQueue._FastQueue__queue)
        ):
            self._SyncObj__pipeNotifier.notify()  # left for the next tick (a time budget): its poll does not wait
        # The leader appended (and sent) new entries: its own fdatasync overlaps the followers'.
        self.make_durable()
        self._commit_at_once_alone(last)

    def make_durable(self) -> None:
        """fdatasync the journal: what it holds is durable before the leader counts it or this
        member answers an append-entries or votes (the transport calls this before those)."""
        self.durable_journal.sync()

    def _commit_at_once_alone(self, appended_after: int) -> None:
        if self._alone and self._last_index() > appended_after:
            # A group of one commits at the top of a tick, and nothing (no follower's answer)
            # wakes this tick's poll: what was just appended would wait a whole tick period.
            self._SyncObj__pipeNotifier.notify()

    def _SyncObj__applyLogEntries(self) -> bool:
        # With appendEntriesUseBatch off, pysyncobj answers every commit with an append-entries
        # to each follower that carries nothing but the new commit index, and each follower
        # answers it: at one client message in flight that doubles the Raft traffic every
        # member handles (on 2 shared cores the CPU it costs shows in the latency). Under traffic
        # the next entry's append-entries carries the index anyway; otherwise it goes out
        # within a tick. Followers only apply later; what a client is told does not change.
        send_now = SyncObj._SyncObj__applyLogEntries(self)
        if send_now:
            notice_at = pso_syncobj.monotonicTime() + self._commit_notice_delay
            if notice_at < float(self._SyncObj__newAppendEntriesTime):
                self._SyncObj__newAppendEntriesTime = notice_at
            return False
        return send_now

    def _SyncObj__setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        """Store the term and vote, then believe them (pysyncobj believed first). If the store
        fails the member stays in the term it stored: the error ends this tick's step before
        any message of the new term leaves, and it tries again at the next one."""
        self._SyncObj__raftLog.setCurrentTerm(term, votedForNodeId)
        self._SyncObj__raftCurrentTerm = term
        self._SyncObj__votedForNodeId = votedForNodeId

    def _SyncObj__generateRaftTimeout(self) -> float:
        # pysyncobj draws the same timeout for "no leader heard from" (follower) and "this
        # election round failed" (candidate); it asks for the latter exactly when the deadline
        # has passed and it is about to stand (again). A shorter round after a split vote
        # keeps the follower timeout's protection against needless elections.
        deadline = getattr(self, "_SyncObj__raftElectionDeadline", None)  # unset while __init__ runs
        if deadline is not None and deadline < pso_syncobj.monotonicTime():
            return CANDIDATE_ROUND_MIN + (CANDIDATE_ROUND_MAX - CANDIDATE_ROUND_MIN) * random.random()
        return SyncObj._SyncObj__generateRaftTimeout(self)

    def _last_index(self) -> int:
        journal = self.durable_journal
        return journal[-1][1] if len(journal) else 0

    # -- pre-vote, stickiness, lease (decisions in raftmq.replication.leadership)

    def _state_changed(self, old: int, new: int) -> None:
        if new == _RAFT_STATE.LEADER:
            self.leadership.became_leader(time.monotonic())
            self.won_by_hand_over = self._SyncObj__raftCurrentTerm == self._handover_term
        elif old == _RAFT_STATE.LEADER:
            self.leadership.stepped_down()
        if self._on_state_changed is not None:
            self._on_state_changed(old, new)

    def _before_election(self) -> None:
        """pysyncobj stands for election (raising its term) in this tick when the election
        deadline has passed. Unless the leader asked for it or a pre-vote round was just won,
        run a pre-vote round instead and push the deadline past it."""
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return
        # pysyncobj's deadlines are on its own clock (CLOCK_MONOTONIC_RAW, which is not
        # time.monotonic: 0.25 s apart on this machine); ours (leadership) on time.monotonic.
        now = pso_syncobj.monotonicTime()
        if self._SyncObj__raftElectionDeadline >= now + PREVOTE_LOOKAHEAD or not self._SyncObj__connectedToAnyone():
            return
        if self._SyncObj__transferInProgress:
            self._handover_election = True  # our request_vote says so: voters waive stickiness
            self._handover_term = self._SyncObj__raftCurrentTerm + 1  # pysyncobj stands at the next term
            return
        leader = self._SyncObj__raftLeader
        if leader is not None:  # once per loss, not per round
            log.info("raft.leader_lost", leader=str(leader.id), term=self._SyncObj__raftCurrentTerm, asking="pre-vote")
            self._SyncObj__raftLeader = None  # not heard from for an election timeout: unknown
        if not self.leadership.take_prevote_win():
            self._start_prevote(now)

    def _start_prevote(self, now: float) -> None:
        """Ask the others whether we could win, instead of standing now: the election deadline
        moves past the round; a round won makes us stand (`on_election_message`)."""
        term = self.leadership.start_prevote(self._SyncObj__raftCurrentTerm)
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        tip = self._log_tip()
        for node in self._SyncObj__otherNodes:
            self._SyncObj__transport.send(node, {"type": "pre_vote", "term": term, "last_log_term": tip.term,
                                                 "last_log_index": tip.index})

    def _log_tip(self) -> LogTip:
        return LogTip(self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex())

    def on_election_message(self, node: Any, message: dict[str, Any]) -> None:
        """A pre-vote request or answer (tick thread)."""
        term = message.get("term")
        if not isinstance(term, int):
            return
        if message["type"] == "higher_term":
            if term > self._SyncObj__raftCurrentTerm:
                # Raft: a reply with a higher term makes a leader a follower of that term.
                log.info("raft.stepped_down_for_higher_term", term=self._SyncObj__raftCurrentTerm, new_term=term)
                self._SyncObj__setCurrentTerm(term, None)
                self._SyncObj__raftLeader = None
                self._SyncObj__setState(_RAFT_STATE.FOLLOWER)
        elif message["type"] == "pre_vote":
            theirs = LogTip(int(message.get("last_log_term", 0)), int(message.get("last_log_index", 0)))
            granted = self.leadership.grants_prevote(
                time.monotonic(), self._SyncObj__raftCurrentTerm, self._log_tip(), term, theirs
            )
            if granted and self._SyncObj__raftState != _RAFT_STATE.LEADER:
                self.leadership.stand_aside()
                self._SyncObj__raftElectionDeadline = (
                    pso_syncobj.monotonicTime() + SyncObj._SyncObj__generateRaftTimeout(self)
                )
            self._SyncObj__transport.send(node, {"type": "pre_vote_response", "term": term, "granted": granted})
        elif (
            self._SyncObj__raftState != _RAFT_STATE.LEADER
            and self.leadership.prevote_answer(node, term, message.get("granted") is True)
        ):
            self._SyncObj__raftElectionDeadline = 0.0  # stand in the next tick

    def ignores_vote_request(self, message: dict[str, Any]) -> bool:
        return self.leadership.ignores_vote_request(time.monotonic(), message.get("handover") is True)

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        term = message.get("term", -1)
        if term >= self._SyncObj__raftCurrentTerm:
            self.leadership.heard_from_leader(time.monotonic())
            self.answering_mark = message.get("lm")
        else:
            # pysyncobj drops an append-entries of an older term without a word. A member whose
            # term got ahead (it won a pre-vote round, then lost the election it stood in) would
            # then never hear of a leader, and stickiness keeps it from standing again: tell
            # the leader our term, as Raft's reply would.
            self._SyncObj__transport.send(node, {"type": "higher_term", "term": self._SyncObj__raftCurrentTerm})

    def on_answer(self, node: Any, message: dict[str, Any]) -> None:
        mark = message.get("lm")
        if isinstance(mark, float) and self._SyncObj__raftState == _RAFT_STATE.LEADER:
            self.leadership.echoed(node, mark)

    def outgoing(self, kind: str, message: dict[str, Any]) -> dict[str, Any]:
        """Stamp what the lease and stickiness need on a message about to be sent."""
        if kind == "append_entries":
            return {**message, "lm": time.monotonic()}
        if kind == "next_node_idx" and self.answering_mark is not None:
            return {**message, "lm": self.answering_mark}
        if kind == "request_vote" and self._handover_election:
            return {**message, "handover": True}
        if kind == "timeout_now":
            self.leadership.handing_over()
        return message

    def lease_holds(self, now: float) -> bool:
        """May this member, as leader, write to clients now? (any thread: one float read)"""
        return now < self.leadership.lease_expiry

    # -- snapshot hooks

    def _write_snapshot(self, path: str, raft_data: tuple[Any, ...]) -> None:
        # pysyncobj catches what this raises, keeps the journal and reports a failed snapshot.
        try:
            last, previous, log_end_cluster = raft_data
            state = self._snapshot(last[1], last[2]) if self._snapshot is not None else b""
            cluster = self._snapshot_configuration(last[1], log_end_cluster)
            write_snapshot_file(path, tuple(last), tuple(previous), cluster, state)
        except Exception:
            log.exception("raft.snapshot_failed", retry_in_s=1.0)  # the journal is kept
            self._compaction_retry_at = time.monotonic() + 1.0
            raise

    def _read_snapshot(self, path: str) -> tuple[Entry, Entry, list[str]]:
        last, previous, cluster, state = read_snapshot_file(path)
        if self._restore is not None:
            self._guard(self._restore, "snapshot restore", self._apply_failed)(state, last[1])
        return last, previous, cluster

    # -- status (plain attribute reads: safe from any thread)

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.id)


SUCCESS = FAIL_REASON.SUCCESS

"""Regression tests of the pysyncobj wing: elections, commits and the lease of HardenedSyncObj
(raftmq/replication/pysyncobj/syncobj.py). Each fails with its fix undone (`fallback`,
`solo_commit`, `piggyback_commit`, `short_candidate_round`, `pre_vote`, `lease`, `durable_term`,
`wake_once`, `sleep_until_due`, `quiet_connections`; planted by tests/helpers/unfixed.py):
`RAFTMQ_TEST_DISABLE_FIX=pre_vote pytest tests/replication/test_pysyncobj_syncobj.py`. Members run
in this process (tests/helpers/raft_members.py).
"""

from __future__ import annotations

import functools
import os
import select
import threading
import time
from typing import Any

import pysyncobj.pipe_notifier as pso_pipe_notifier
import pytest
from pysyncobj import FAIL_REASON
from pysyncobj.transport import TCPTransport

from raftmq.config import RaftTimings
from raftmq.replication.pysyncobj.patches import CANDIDATE_ROUND_MAX, CANDIDATE_ROUND_MIN, WakeOnce, close_notifier
from raftmq.replication.pysyncobj.syncobj import SUCCESS
from tests.helpers.raft_members import Partition, commit, leader_of, term_of, wait_until

pytestmark = pytest.mark.integration


# -- durable_term ---------------------------------------------------------------------------


def test_a_term_that_cannot_be_stored_is_not_believed(group: Any) -> None:
    # Regression (found by the chaos disk-full nemesis): pysyncobj set a new term in memory,
    # then stored it; on a full disk the store failed and the member went on in the unstored
    # term. A leader asked to vote in a higher term kept leading with that term stamped on its
    # append-entries, deposing the real leader of that term and truncating what it had applied.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    obj = leader.obj
    assert obj is not None
    os.mkdir(obj.durable_journal._meta_path + ".tmp")  # the store of term and vote now fails, as on a full disk
    term = obj._SyncObj__raftCurrentTerm
    failures: list[BaseException] = []
    done = threading.Event()

    def ask_for_a_higher_term() -> None:
        try:
            obj._SyncObj__setCurrentTerm(term + 5, None)
        except OSError as exc:
            failures.append(exc)
        done.set()

    obj.run_in_tick_thread(ask_for_a_higher_term)
    assert done.wait(5)
    assert failures, "the store was expected to fail"
    assert obj._SyncObj__raftCurrentTerm == term  # it did not believe a term it could not store
    os.rmdir(obj.durable_journal._meta_path + ".tmp")
    assert obj.is_leader
    commit(leader, b"y")  # and goes on leading in the term it stored


# -- leader without quorum (fallback) ---------------------------------------------------------


def test_a_leader_without_quorum_steps_down_within_an_election_timeout(group: Any) -> None:
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    for member in members:
        if member is not leader:
            member.stop()
    started = time.monotonic()
    assert wait_until(lambda: leader.obj is not None and not leader.obj.is_leader, 2.0)
    assert time.monotonic() - started < 1.5


# -- wake_once ---------------------------------------------------------------------------------


def test_the_tick_thread_is_woken_once_per_wake_not_once_per_submitted_entry(group: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Stock pysyncobj writes a byte to its pipe (a system call) for every submitted entry; the
    # loop thread submits many while the tick thread is awake anyway. Every entry still commits,
    # in order, with no entry left waiting for a tick period.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"warm-up", timeout=5.0)
    writes: list[int] = []
    real_os = pso_pipe_notifier.os

    class CountingOs:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_os, name)

        def write(self, fd: int, data: bytes) -> int:
            writes.append(fd)
            return real_os.write(fd, data)

    monkeypatch.setattr(pso_pipe_notifier, "os", CountingOs())
    outcomes: list[int] = []
    done = threading.Event()

    def heard(result: Any, error: int) -> None:
        outcomes.append(error)
        if len(outcomes) == 200:
            done.set()

    for i in range(200):
        leader.submit(b"entry %d" % i, heard)
    assert done.wait(10.0), f"{len(outcomes)} of 200 entries heard"
    assert outcomes == [SUCCESS] * 200
    assert leader.applied[-200:] == [b"entry %d" % i for i in range(200)]
    assert len(writes) <= 50, f"{len(writes)} wake-ups written for 200 entries"


# -- sleep_until_due, quiet_connections ---------------------------------------------------------


def _count_ticks(obj: Any) -> list[int]:
    """A counter of `obj`'s ticks (the tick thread looks `_onTick` up on the instance each time)."""
    ticks = [0]
    tick = obj._onTick

    def counted(time_to_wait: float = 0.0) -> None:
        ticks[0] += 1
        tick(time_to_wait)

    obj._onTick = counted
    return ticks


def test_an_idle_member_sleeps_until_something_is_due(group: Any) -> None:
    # Stock pysyncobj ticks every tick period (5 ms: 200 rounds of Python a second per member)
    # whatever is due. An idle follower now wakes for the leader's heart-beats (99 ms apart),
    # the leader for those and their answers; commits still come at once.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"warm-up", timeout=5.0)
    counters = {member.address: _count_ticks(member.obj) for member in members}
    time.sleep(2.0)
    rates = {address: ticks[0] / 2.0 for address, ticks in counters.items()}
    assert rates[leader.address] < 60, rates
    assert all(rate < 30 for address, rate in rates.items() if address != leader.address), rates
    started = time.monotonic()
    commit(leader, b"after a sleep", timeout=5.0)
    assert time.monotonic() - started < 0.05


def test_a_tick_task_wakes_a_sleeping_member(group: Any) -> None:
    # The tick thread sleeps until the next heart-beat (here 500 ms apart); a task handed to it
    # (a leadership transfer, a test's probe) wakes it rather than waiting for that.
    timings = RaftTimings(append_entries_period_ms=500, election_timeout_min_ms=1600, election_timeout_max_ms=2000)
    members = group(3, timings=timings)
    leader = leader_of(members, timeout=10.0)
    commit(leader, b"warm-up", timeout=5.0)
    follower = next(member for member in members if member is not leader)
    assert follower.obj is not None
    waits = []
    for _ in range(5):
        time.sleep(0.15)
        ran = threading.Event()
        started = time.monotonic()
        follower.obj.run_in_tick_thread(ran.set)
        assert ran.wait(2.0)
        waits.append(time.monotonic() - started)
    assert max(waits) < 0.1, waits


def test_a_connection_nobody_asks_anything_on_stays_open(group: Any) -> None:
    # Two followers of a working leader say nothing to each other. Stock closed such a
    # connection after `connectionTimeout` (1.5 s) of silence and the pair connected again, a
    # handshake each time, for nothing; a peer that leaves a request unanswered is still dropped
    # (the fallback test above: a leader whose followers stopped).
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"warm-up", timeout=5.0)
    drops: list[str] = []
    for member in members:
        transport = member.obj._SyncObj__transport
        dropped = transport._onDisconnected

        def counted(conn: Any, dropped: Any = dropped, address: str = member.address) -> None:
            drops.append(address)
            dropped(conn)

        transport._onDisconnected = counted
        for conn in transport._connections.values():  # pysyncobj bound the old method into each
            conn.setOnDisconnectedCallback(functools.partial(counted, conn))
    time.sleep(4.0)
    assert drops == []  # (who leads meanwhile is not asked: a full suite on two cores may move it)


class _Poller:
    def __init__(self) -> None:
        self.subscribed: dict[int, Any] = {}

    def subscribe(self, fd: int, callback: Any, _events: int) -> None:
        self.subscribed[fd] = callback

    def unsubscribe(self, fd: int) -> None:
        self.subscribed.pop(fd, None)


def test_a_submission_while_the_tick_thread_drains_the_pipe_never_silences_later_wake_ups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop thread may notify while the tick thread drains the pipe. Had that notify marked a
    # wake as pending and its byte been drained, no later notify would write again: every entry
    # submitted while the tick thread sleeps then waited for its poll timeout (1P×1C receipts
    # took 2-6 ms instead of 1.8).
    poller = _Poller()
    notifier = WakeOnce(poller)
    ((fd, on_readable),) = poller.subscribed.items()
    real_os = pso_pipe_notifier.os

    class SubmittingWhileDraining:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_os, name)

        def read(self, descr: int, size: int) -> bytes:
            data = real_os.read(descr, size)
            if data:
                notifier.notify()  # the loop thread submits an entry meanwhile
            return data

    woken: list[bool] = []

    def poll_draining(timeout: float) -> None:
        monkeypatch.setattr(pso_pipe_notifier, "os", SubmittingWhileDraining())
        on_readable(fd, 0)  # the tick thread wakes and drains
        monkeypatch.undo()

    def poll_sleeping(timeout: float) -> None:
        notifier.notify()  # the loop thread submits an entry while the tick thread sleeps
        woken.append(timeout == 0 or select.select([fd], [], [], 0)[0] == [fd])

    try:
        notifier.notify()  # the loop thread submits an entry
        notifier.wait(poll_draining, 5.0)
        notifier.wait(lambda timeout: None, 5.0)  # the tick that reads what came during the drain
        notifier.wait(poll_sleeping, 5.0)
        assert woken == [True], (
            "the notify of an entry submitted during the wait wrote no byte: the tick thread sleeps on"
        )
    finally:
        close_notifier(notifier, poller)


def test_a_submission_while_the_tick_thread_is_awake_writes_nothing_and_its_next_poll_does_not_wait() -> None:
    poller = _Poller()
    notifier = WakeOnce(poller)
    ((fd, on_readable),) = poller.subscribed.items()
    timeouts: list[float] = []

    def poll(timeout: float) -> None:
        timeouts.append(timeout)
        if select.select([fd], [], [], 0)[0]:
            on_readable(fd, 0)

    try:
        notifier.notify()  # before the tick thread's first wait: a byte
        notifier.wait(poll, 5.0)
        assert not select.select([fd], [], [], 0)[0] and notifier.awake
        notifier.notify()  # the tick thread is ticking: no system call, no byte
        notifier.notify()
        assert not select.select([fd], [], [], 0)[0]
        notifier.wait(poll, 5.0)  # it reads the queue before it waits: a poll that does not wait
        notifier.wait(poll, 5.0)  # nothing came since: it waits
        assert timeouts == [0.0, 0.0, 5.0]
    finally:
        close_notifier(notifier, poller)


# -- solo_commit, piggyback_commit, short_candidate_round -------------------------------------


def test_a_group_of_one_commits_without_waiting_for_its_next_tick(group: Any) -> None:
    # A long tick makes the stock behaviour unmistakable: each append committed one whole tick
    # later (nothing but the tick wakes a member that has no followers to answer it).
    (solo,) = group(1, timings=RaftTimings(tick_period_ms=500, append_entries_period_ms=500,
                                           election_timeout_min_ms=1600, election_timeout_max_ms=1700))
    leader_of([solo], timeout=10.0)
    commit(solo, b"warm-up", timeout=5.0)
    for i in range(3):
        started = time.monotonic()
        commit(solo, b"entry %d" % i, timeout=5.0)
        assert time.monotonic() - started < 0.25, f"entry {i} waited for the tick"


def test_a_group_of_one_commits_an_entry_submitted_late_in_a_tick_at_once(group: Any) -> None:
    # An entry submitted after a tick read the command queue (here from an on-tick callback,
    # which pysyncobj runs just before the tick thread waits) is appended by the next tick, whose
    # poll nothing then wakes in a group of one: its commit waited another whole tick period.
    timings = RaftTimings(tick_period_ms=500, append_entries_period_ms=500, election_timeout_min_ms=1600,
                          election_timeout_max_ms=1700)
    (solo,) = group(1, timings=timings)
    leader_of([solo], timeout=10.0)
    commit(solo, b"warm-up", timeout=5.0)
    obj = solo.obj
    assert obj is not None
    due: list[bytes] = []  # what the next on-tick callback submits
    latencies: list[float] = []

    def submit_late_in_the_tick() -> None:
        if due:
            submitted = time.monotonic()
            obj.submit(due.pop(), lambda result, error: latencies.append(time.monotonic() - submitted))

    obj.addOnTickCallback(submit_late_in_the_tick)
    try:
        for i in range(3):
            due.append(b"late %d" % i)
            assert wait_until(lambda: len(latencies) == i + 1, 5.0), "the entry never committed"
    finally:
        obj.removeOnTickCallback(submit_late_in_the_tick)
    assert max(latencies) < 0.25, f"an entry submitted late in a tick waited for the next one: {latencies}"


def test_a_commit_index_rides_on_the_next_append_entries(group: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Heartbeats 0.5 s apart: any append-entries beyond one per entry per follower is the
    # commit-index-only message this fix removes, and a follower that learns the last commit
    # quickly learned it from the one-tick notice, not from a heartbeat.
    sent: dict[str, int] = {}
    original_send = TCPTransport.send

    def counting_send(transport: Any, node: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "append_entries" and message.get("entries"):
            sent[transport._selfNode.address] = sent.get(transport._selfNode.address, 0) + 1
        elif isinstance(message, dict) and message.get("type") == "append_entries":
            sent["empty " + transport._selfNode.address] = sent.get("empty " + transport._selfNode.address, 0) + 1
        return original_send(transport, node, message)

    members = group(3, timings=RaftTimings(append_entries_period_ms=500, election_timeout_min_ms=1600,
                                           election_timeout_max_ms=1700))
    leader = leader_of(members, timeout=10.0)
    commit(leader, b"warm-up")
    monkeypatch.setattr(TCPTransport, "send", counting_send)
    count = 40
    for k in range(count):
        commit(leader, b"one-at-a-time %d" % k)
    followers = [m for m in members if m is not leader]
    learned = wait_until(lambda: all(len(m.applied) == count + 1 for m in followers), 0.25)
    assert learned, "followers did not learn the last commit"
    monkeypatch.setattr(TCPTransport, "send", original_send)
    empty = sent.get("empty " + leader.address, 0)
    assert sent.get(leader.address, 0) >= 2 * count
    # Stock: one per commit per follower (~2 * count). Left: heartbeats, the last notice, and a
    # notice whenever the next entry came more than a tick later (a loaded machine).
    assert empty <= count // 2, f"{empty} commit-index-only append-entries for {count} commits"


def test_a_candidate_retries_a_failed_round_sooner_than_an_election_timeout(group: Any) -> None:
    # A split vote: both survivors stand at once and neither gets a majority. Stock pysyncobj
    # waits a whole election timeout (0.3-0.6 s here) before the next round.
    members = group(3)
    obj = leader_of(members).obj  # a leader's tick ignores the election deadline set below
    assert obj is not None
    obj._SyncObj__raftElectionDeadline = 0.0  # passed: what the tick sees when it stands again
    rounds = [obj._SyncObj__generateRaftTimeout() for _ in range(200)]
    assert all(CANDIDATE_ROUND_MIN <= t <= CANDIDATE_ROUND_MAX for t in rounds)
    obj._SyncObj__raftElectionDeadline = time.monotonic() + 10  # a follower hearing its leader
    assert all(0.3 <= obj._SyncObj__generateRaftTimeout() <= 0.6 for _ in range(200))


# -- pre-vote and stickiness; the leader lease ------------------------------------------------


def test_a_healed_partition_does_not_depose_a_healthy_leader(group: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stock pysyncobj: the cut-off follower stands again and again (its term climbs); when the
    # partition heals its higher term makes the healthy leader step down.
    # Election timeouts of 0.6-0.9 s: wide enough that a loaded machine's thread scheduling
    # does not cost the leader its quorum while the one follower is cut off.
    partition = Partition(monkeypatch)
    members = group(3, timings=RaftTimings(election_timeout_min_ms=600, election_timeout_max_ms=900))
    leader = leader_of(members)
    commit(leader, b"before")
    assert wait_until(lambda: all(b"before" in m.applied for m in members), 3)  # start-up elections are over
    term = term_of(leader)
    follower = next(m for m in members if m is not leader)
    partition.isolated = {follower.address}
    time.sleep(3.0)  # several election timeouts
    assert leader.obj is not None and leader.obj.is_leader and term_of(leader) == term
    partition.isolated = set()
    deposed = wait_until(lambda: leader.obj is None or not leader.obj.is_leader or term_of(leader) != term, 1.5)
    assert not deposed, f"the healthy leader lost its leadership (term {term} -> {term_of(leader)})"
    commit(leader, b"after")
    assert wait_until(lambda: b"after" in follower.applied, 3) and term_of(follower) == term


def test_a_cut_off_member_does_not_raise_its_term(group: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    partition = Partition(monkeypatch)
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"settled")  # every member follows this leader: start-up elections are over
    assert wait_until(lambda: all(b"settled" in m.applied for m in members), 3)
    term = term_of(leader)
    assert {term_of(m) for m in members} == {term}
    follower = next(m for m in members if m is not leader)
    partition.isolated = {follower.address}
    time.sleep(2.0)
    assert term_of(follower) == term  # it asked (pre-vote), nobody agreed, it never stood


def test_a_majority_elects_a_new_leader_when_the_old_one_is_cut_off(group: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Liveness with pre-vote: the followers stop hearing from the leader, agree, and elect.
    partition = Partition(monkeypatch)
    members = group(3)
    old = leader_of(members)
    partition.isolated = {old.address}
    others = [m for m in members if m is not old]
    started = time.monotonic()
    assert wait_until(lambda: any(m.obj is not None and m.obj.is_leader for m in others), 3.0)
    assert time.monotonic() - started < 2.0
    assert wait_until(lambda: old.obj is not None and not old.obj.is_leader, 2.0)  # check-quorum


def test_leadership_transfer_still_works_with_stickiness(group: Any) -> None:
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    assert leader.obj is not None
    outcome: list[int] = []
    leader.obj.run_in_tick_thread(
        lambda: leader.obj.transferLeadership(callback=lambda _r, error: outcome.append(error))
    )
    assert wait_until(lambda: outcome == [SUCCESS], 2.0), outcome
    assert wait_until(lambda: any(m is not leader and m.obj is not None and m.obj.is_leader for m in members), 2.0)
    assert not leader.obj.lease_holds(time.monotonic())


def test_a_leader_that_stalled_past_its_lease_knows_it_at_once(group: Any) -> None:
    # The tick thread stalls (as in a SIGSTOP of the process) for longer than the election
    # timeout; the followers elect someone else. The moment it runs again, before it has read
    # a single message, it must not consider itself free to write to clients.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    obj = leader.obj
    assert obj is not None
    assert wait_until(lambda: obj.lease_holds(time.monotonic()), 1.0)  # a healthy leader holds it
    assert all(m.obj is not None and not m.obj.lease_holds(time.monotonic()) for m in members if m is not leader)
    seen: list[tuple[bool, bool]] = []

    def stall() -> None:
        time.sleep(1.0)
        seen.append((obj.is_leader, obj.lease_holds(time.monotonic())))

    obj.run_in_tick_thread(stall)
    assert wait_until(lambda: bool(seen), 3.0)
    still_leader, lease = seen[0]
    assert still_leader, "pysyncobj had already noticed (the test proves nothing)"
    assert not lease, "a leader stalled past its lease believed it could still write"
    assert wait_until(lambda: any(m is not leader and m.obj is not None and m.obj.is_leader for m in members), 3.0)


def test_a_member_whose_term_got_ahead_is_not_left_behind(group: Any) -> None:
    # At start-up two members can win pre-vote rounds at once; one wins the election, the other
    # has by then stood at a higher term and lost. pysyncobj ignores the leader's older-term
    # append-entries without a reply and stickiness keeps the member from standing: stuck for
    # good (seen as a group start that never settled). Made here on purpose.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"before")
    follower = next(m for m in members if m is not leader)
    assert follower.obj is not None
    ahead = term_of(leader) + 2
    follower.obj.run_in_tick_thread(lambda: follower.obj._SyncObj__setCurrentTerm(ahead, None))
    assert wait_until(lambda: term_of(follower) == ahead, 1.0)
    def elected_since(m: Any) -> bool:
        return m.obj is not None and m.obj.is_leader and term_of(m) > ahead - 1

    assert wait_until(lambda: any(elected_since(m) for m in members), 5.0)
    # The old leader may not have heard of the new term yet and still call itself leader.
    new = next(m for m in members if elected_since(m))
    commit(new, b"after")
    assert wait_until(lambda: all(b"after" in m.applied for m in members), 5.0), "a member was left behind"


# -- peers found by DNS name --------------------------------------------------------------------


def test_a_peer_that_moved_to_another_address_is_found_within_seconds(group: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # A restarted pod (or host) comes back under its name at another address. pysyncobj caches
    # a resolved name for 600 s (and a failed lookup for 30 s): a member would keep calling
    # the old address for ten minutes. Its resolver is the process's one; ours asks again.
    import socket

    from pysyncobj.dns_resolver import globalDnsResolver

    from raftmq.replication.pysyncobj.syncobj import DNS_CACHE_SECONDS

    group(1)  # a member sets the process's resolver up
    answers = {"peer.rehearsal.test": "10.0.0.1"}
    real = socket.getaddrinfo

    def getaddrinfo(host: str, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    now = [1000.0]
    monkeypatch.setattr("pysyncobj.dns_resolver.monotonicTime", lambda: now[0])
    resolver = globalDnsResolver()
    assert resolver.resolve("peer.rehearsal.test") == "10.0.0.1"
    answers["peer.rehearsal.test"] = "10.0.0.2"  # the peer moved
    now[0] += DNS_CACHE_SECONDS + 0.1
    assert resolver.resolve("peer.rehearsal.test") == "10.0.0.2"
    assert DNS_CACHE_SECONDS <= 10


# -- leadership transfer ------------------------------------------------------------------------


def test_no_timeout_now_while_a_submitted_entry_waits_to_be_appended(group: Any) -> None:
    # Our tick tasks run before pysyncobj appends what was submitted: a TimeoutNow sent from one
    # would leave the successor an entry short of its voters, and its election would fail (2 of
    # 20 hand-overs under load took a second election). Denied then; granted once appended.
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    obj = leader.obj
    assert obj is not None
    assert wait_until(
        lambda: all(m.obj is not None and m.obj.raftLastApplied == obj.raftLastApplied for m in members), 5
    )
    answers: list[int] = []
    done = threading.Event()

    def submit_then_transfer() -> None:
        obj.submit(b"y", lambda result, error: None)
        obj.transfer_when_appended(lambda _result, error: (answers.append(error), done.set()))

    obj.run_in_tick_thread(submit_then_transfer)
    assert done.wait(5)
    assert answers == [FAIL_REASON.REQUEST_DENIED]
    assert obj.is_leader

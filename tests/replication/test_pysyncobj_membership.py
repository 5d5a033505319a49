"""Membership changes of HardenedSyncObj (raftmq/replication/pysyncobj/dynamic_membership.py), members in
this process (tests/helpers/raft_members.py). The snapshot restart test fails with the fix
undone (tests/helpers/unfixed.py):
`RAFTMQ_TEST_DISABLE_FIX=membership pytest tests/replication/test_pysyncobj_membership.py`
(the journal restart test passes either way: pysyncobj re-applies committed changes in its
first ticks, before an election could start; the fix also covers the uncommitted tail).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from raftmq.config import RaftTimings
from raftmq.processes import free_port
from raftmq.replication.membership import ADD, REMOVE, Change
from raftmq.replication.pysyncobj.syncobj import SUCCESS
from tests.helpers.raft_members import Member, commit, leader_of, wait_until

pytestmark = pytest.mark.integration


def change(leader: Member, op: str, address: str, timeout: float = 5.0) -> int:
    """Ask until the leader accepts (it refuses while its no-op or a change is uncommitted)."""
    assert leader.obj is not None
    error = -1
    for _ in range(50):
        done = threading.Event()
        outcome: list[int] = []
        leader.obj.change_membership(Change(op, address), lambda _result, err: (outcome.append(err), done.set()))
        assert done.wait(timeout), "the change never settled"
        error = outcome[0]
        if error == SUCCESS:
            return error
        threading.Event().wait(0.05)
    return error


def newcomer(group: Any, members: list[Member]) -> Member:
    """A member not yet in the group, configured with everyone (itself included)."""
    address = f"127.0.0.1:{free_port()}"
    member = Member(address, [m.address for m in members] + [address], str(group.directory / f"new{len(group.made)}"),
                    syncobj_class=group.syncobj_class)
    group.made.append(member)
    return member.start()


def others_of(member: Member) -> set[str]:
    assert member.obj is not None
    return {str(node.id) for node in member.obj._SyncObj__otherNodes}


def test_an_added_member_catches_up_and_counts_in_majorities(group: Any) -> None:
    members = group(3)
    leader = leader_of(members)
    for i in range(20):
        commit(leader, f"before-{i}".encode())
    joining = newcomer(group, members)
    assert change(leader, ADD, joining.address) == SUCCESS
    commit(leader, b"after")
    assert wait_until(lambda: joining.applied[-1:] == [b"after"], 5.0)
    assert joining.applied == leader.applied
    # (each member applies the change as the commit index reaches it: an old follower may learn
    # of it a heart-beat after the newcomer applied "after"; seen once in a CI run)
    everyone = {m.address for m in (*members, joining)}
    for member in (*members, joining):
        assert wait_until(lambda member=member: member.obj is not None and member.obj.leadership.members == 4, 5.0)
        assert member.obj is not None and set(member.obj.members) == everyone
    # Four members: a majority is three. With two of the old followers gone, nothing commits.
    for member in members:
        if member is not leader:
            member.stop()
    done = threading.Event()
    leader.submit(b"needs-three", lambda _r, _e: done.set())
    assert not wait_until(lambda: b"needs-three" in joining.applied, 1.0)


def test_a_removed_member_gets_nothing_more_and_no_longer_counts(group: Any) -> None:
    members = group(3)
    leader = leader_of(members)
    commit(leader, b"x")
    gone, kept = [m for m in members if m is not leader]
    assert change(leader, REMOVE, gone.address) == SUCCESS
    assert leader.obj is not None and leader.obj.leadership.members == 2
    commit(leader, b"y")
    assert wait_until(lambda: kept.applied[-1:] == [b"y"], 5.0)
    assert b"y" not in gone.applied
    # A change that would do nothing is refused, as is removing the leader itself.
    assert change(leader, REMOVE, gone.address) != SUCCESS
    assert change(leader, REMOVE, leader.address) != SUCCESS
    # The removed member cannot disturb the group: it never wins an election again.
    assert not wait_until(lambda: gone.obj is not None and gone.obj.is_leader, 2.0)
    assert leader.obj.is_leader
    commit(leader, b"z")


def test_a_restarted_member_keeps_the_configuration_its_journal_holds(group: Any) -> None:
    # Two members of a group of four, restarted with a config file that still lists three,
    # must not elect a leader (two of "three") and commit without the majority of four.
    members = group(3, timings=RaftTimings(compact_after_bytes=2**40))
    leader = leader_of(members)
    joining = newcomer(group, members)
    assert change(leader, ADD, joining.address) == SUCCESS
    commit(leader, b"x")
    for member in (*members, joining):
        member.stop()
    two = members[:2]
    for member in two:  # configured with the three of the start, as a stale config file
        member.start()
    elected = wait_until(lambda: any(m.obj is not None and m.obj.is_leader for m in two), 2.0)
    assert not elected, "two of four elected a leader"
    for member in two:
        assert member.obj is not None and member.obj.leadership.members == 4, member.obj.members
    members[2].start()
    leader = leader_of(members, timeout=10.0)
    commit(leader, b"y")


def test_a_member_restarted_from_a_snapshot_does_not_count_itself_twice(group: Any) -> None:
    # Regression: loading a snapshot, pysyncobj filtered the member itself out of the snapshot's
    # configuration comparing a string with a node: it became its own peer.
    members = group(3)
    leader = leader_of(members)
    for i in range(5):
        commit(leader, f"e{i}".encode())
    follower = next(m for m in members if m is not leader)
    assert follower.obj is not None
    follower.obj.forceLogCompaction()
    assert wait_until(lambda: follower.obj is not None and os.path.exists(follower.obj.snapshot_path), 5.0)
    follower.stop()
    follower.start()
    assert wait_until(lambda: follower.obj is not None and follower.obj.raftLastApplied >= 6, 5.0)
    assert follower.address not in others_of(follower)
    assert follower.obj is not None and follower.obj.leadership.members == 3
    assert sorted(follower.obj.members) == sorted(m.address for m in members)

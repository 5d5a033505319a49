"""Regression tests of the pysyncobj wing: the Raft journal and snapshot files
(raftmq/replication/pysyncobj/raft_journal.py, snapshot_file.py). Each fails with its fix undone
(`dump_always`, `dump_journal_race`; planted by tests/helpers/unfixed.py):
`RAFTMQ_TEST_DISABLE_FIX=dump_always pytest tests/replication/test_pysyncobj_raft_journal.py`.
Members run in this process (tests/helpers/raft_members.py).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from raftmq.errors import RaftJournalError
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.pysyncobj.raft_journal_format import JOURNAL_RESERVE_BYTES
from tests.helpers.raft_members import commit, leader_of, wait_until

pytestmark = pytest.mark.integration


# -- the journal itself -----------------------------------------------------------------------


def test_journal_round_trip_truncation_and_torn_tail(tmp_path: Any) -> None:
    path = str(tmp_path / "j")
    journal = RaftJournal(path)
    for idx in range(1, 8):
        journal.add(b"cmd%d" % idx, idx, 1 + idx // 4)
    journal.deleteEntriesFrom(5)  # drop 6, 7
    journal.add(b"new6", 6, 3)
    journal.deleteEntriesTo(2)  # compaction: keep 3..6
    journal.sync()
    journal._destroy()
    with open(path, "ab") as f:
        f.write(b"\x10\x00\x00\x00torn")  # a record header cut short by a crash
    reopened = RaftJournal(path)
    assert list(reopened[:]) == [(b"cmd3", 3, 1), (b"cmd4", 4, 2), (b"cmd5", 5, 2), (b"new6", 6, 3)]
    assert reopened.size_bytes == os.path.getsize(path)
    reopened._destroy()


def test_a_damaged_record_below_the_stored_commit_index_is_corruption(tmp_path: Any) -> None:
    # Regression: a bit flipped in a committed record was cut off as a "torn tail", silently
    # dropping entries this member had acknowledged (found by the chaos corrupt nemesis).
    path = str(tmp_path / "j")
    journal = RaftJournal(path)
    for idx in range(1, 6):
        journal.add(b"cmd%d" % idx, idx, 1)
    journal.sync()
    journal.setRaftCommitIndex(5)
    journal._destroy()
    data = bytearray(open(path, "rb").read())
    data[data.index(b"cmd5")] ^= 0x01  # the last record, committed
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(RaftJournalError, match="below the stored commit index 5"):
        RaftJournal(path)
    with open(path, "r+b") as f:  # the same damage past the commit index is a torn tail, cut off
        f.write(data)
    meta = tmp_path / "j.meta"
    meta.unlink()
    reopened = RaftJournal(path)
    assert [entry[1] for entry in reopened[:]] == [1, 2, 3, 4]
    reopened._destroy()


def test_a_commit_index_that_cannot_be_stored_waits_without_stopping_the_tick(tmp_path: Any) -> None:
    # Regression (found by the chaos disk-full nemesis): on a full disk the periodic store of
    # the commit index raised ENOSPC in every tick, before pysyncobj's own work, so the node
    # committed nothing and answered no one. A directory where the temporary file goes makes
    # the write fail for real, as ENOSPC did.
    path = str(tmp_path / "j")
    journal = RaftJournal(path)
    for idx in range(1, 4):
        journal.add(b"cmd%d" % idx, idx, 1)
    journal.setRaftCommitIndex(3)
    os.mkdir(path + ".meta.tmp")
    journal.onOneSecondTimer()
    journal.store_meta_when_due()  # must not raise
    assert not os.path.exists(path + ".meta") and journal.durable_index == 3  # the entries were still synced
    os.rmdir(path + ".meta.tmp")
    journal.onOneSecondTimer()
    journal.store_meta_when_due()
    journal._destroy()
    assert RaftJournal(path).getRaftCommitIndex() == 3
    os.mkdir(path + ".meta.tmp")
    journal = RaftJournal(path)
    journal.setRaftCommitIndex(4)
    journal._destroy()  # a stop on a full disk ends quietly
    with pytest.raises(OSError):  # a term and vote must be durable before anything leaves
        RaftJournal(path).setCurrentTerm(2, "127.0.0.1:1")


def test_journal_reserves_space_that_reads_as_its_end(tmp_path: Any) -> None:
    path = str(tmp_path / "j")
    journal = RaftJournal(path)
    for idx in range(1, 6):
        journal.add(b"cmd%d" % idx, idx, 1)
    journal.sync()
    assert os.path.getsize(path) > journal.size_bytes + JOURNAL_RESERVE_BYTES // 2
    journal.deleteEntriesFrom(3)  # drop 4, 5; then a 4 of the same size at a later term
    journal.add(b"new4", 4, 2)
    journal.sync()
    end = journal.size_bytes
    journal._destroy()

    reopened = RaftJournal(path)  # the reserved zeros are no torn tail: nothing is cut
    assert list(reopened[:]) == [(b"cmd1", 1, 1), (b"cmd2", 2, 1), (b"cmd3", 3, 1), (b"new4", 4, 2)]
    assert reopened.size_bytes == end < os.path.getsize(path)
    reopened._destroy()

    fd = os.open(path, os.O_WRONLY)  # a crash in the middle of writing record 5
    os.pwrite(fd, b"\x40\x00\x00\x00half a record", end)
    os.close(fd)
    reopened = RaftJournal(path)
    assert [e[1] for e in reopened[:]] == [1, 2, 3, 4]
    assert reopened.size_bytes == end == os.path.getsize(path)
    reopened.add(b"cmd5", 5, 2)
    reopened.sync()
    reopened._destroy()
    assert [e[0] for e in RaftJournal(path)[:]] == [b"cmd1", b"cmd2", b"cmd3", b"new4", b"cmd5"]


# -- journal without snapshot file (dump_always) ----------------------------------------------


def test_state_survives_compaction_and_restart(group: Any) -> None:
    (member,) = group(1)
    leader_of([member])
    for k in range(10):
        commit(member, b"e%d" % k)
    assert member.obj is not None
    member.obj.forceLogCompaction()
    assert wait_until(lambda: member.obj is not None and len(member.obj.durable_journal) <= 3, 5), "no compaction"
    commit(member, b"e10")
    member.stop()
    member.applied = []
    member.start()
    assert wait_until(lambda: len(member.applied) == 11, 5), member.applied
    assert member.applied == [b"e%d" % k for k in range(11)]


# -- dump/journal load race (dump_journal_race) -----------------------------------------------


def test_journal_tail_past_the_snapshot_survives_a_crash_before_the_trim(group: Any) -> None:
    (member,) = group(1)
    leader_of([member])
    for k in range(10):
        commit(member, b"a%d" % k)
    assert member.obj is not None
    journal = member.obj.durable_journal
    journal.deleteEntriesTo = lambda entry_to: None  # type: ignore[method-assign]  # "crash" before the trim
    member.obj.forceLogCompaction()
    assert wait_until(lambda: os.path.exists(member.obj.snapshot_path), 5)  # type: ignore[union-attr]
    for k in range(5):
        commit(member, b"b%d" % k)
    member.stop()
    member.applied = []
    member.start()
    expected = [b"a%d" % k for k in range(10)] + [b"b%d" % k for k in range(5)]
    assert wait_until(lambda: member.applied == expected, 5), member.applied

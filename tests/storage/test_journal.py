"""The journal on real files: round trips, rotation, recovery, corruption, fsync discipline."""

from __future__ import annotations

import os
import random
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.errors import JournalCorrupt, RaftmqError
from raftmq.storage import journal as journal_module
from raftmq.storage.journal import Journal, RecordLocation
from raftmq.storage.records import BATCH_HEADER_SIZE, Record


@pytest.fixture
def captured_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict]]:
    # A fresh proxy: a logger cached by an earlier structlog.configure would bypass capture_logs.
    with structlog.testing.capture_logs() as logs:
        monkeypatch.setattr(journal_module, "log", structlog.get_logger("raftmq.storage.journal"))
        yield logs


def make_batches(count: int, per_batch: int = 3, size: int = 40, start: int = 1) -> list[list[Record]]:
    """One batch per raft index; payloads are incompressible so batch sizes are predictable."""
    rng = random.Random(count * 1000 + size)
    batches = []
    for n in range(count):
        index = start + n
        batches.append([Record(index, 1 + n // 4, k, rng.randbytes(size)) for k in range(per_batch)])
    return batches


def fill(directory: Path, batches: list[list[Record]], **options: int) -> list[list[RecordLocation]]:
    with Journal(directory, **options) as journal:
        refs = []
        for batch in batches:
            refs.append(journal.append_batch(batch))
            journal.sync()
    return refs


def all_records(directory: Path, **options: int) -> list[Record]:
    with Journal(directory, **options) as journal:
        return [record for _, record in journal.records()]


def flip_bit(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x04]))


batch_lists = st.lists(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9), st.integers(0, 3), st.binary(max_size=200)),
             min_size=0, max_size=6),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(batch_lists, st.sampled_from([64, 300, 2000, 2**20]))
def test_round_trip_through_reopen(rows: list[list[tuple[int, int, int, bytes]]], segment_bytes: int) -> None:
    index = 1
    batches = []
    for row in rows:
        batch = []
        for step, term, kind, payload in row:
            index += step
            batch.append(Record(index, term, kind, payload))
        batches.append(batch)
    with tempfile.TemporaryDirectory() as tmp:
        refs = fill(Path(tmp), batches, segment_bytes=segment_bytes)
        expected = [record for batch in batches for record in batch]
        with Journal(tmp, segment_bytes=segment_bytes, cache_bytes=4096) as journal:
            assert [journal.read_record(ref) for batch_refs in refs for ref in batch_refs] == expected
            assert [record for _, record in journal.records()] == expected
            assert [ref for _, ref in zip(expected, (r for r, _ in journal.records()))] == [
                ref for batch_refs in refs for ref in batch_refs
            ]
            assert journal.last_index == (expected[-1].raft_index if expected else None)
            ordinals: dict[int, int] = {}
            for record, ref in zip(expected, (ref for batch_refs in refs for ref in batch_refs)):
                ordinal = ordinals.get(record.raft_index, 0)
                ordinals[record.raft_index] = ordinal + 1
                assert journal.locate(record.raft_index, ordinal) == ref
            for raft_index, count in ordinals.items():
                with pytest.raises(KeyError):
                    journal.locate(raft_index, count)


def test_rotation_names_segments_by_first_raft_index(tmp_path: Path) -> None:
    batches = make_batches(30, size=100)
    refs = fill(tmp_path, batches, segment_bytes=1024)
    with Journal(tmp_path, segment_bytes=1024) as journal:
        infos = journal.segments()
        assert len(infos) > 3
        assert sorted(os.listdir(tmp_path)) == [os.path.basename(info.path) for info in infos]
        for info in infos:
            assert os.path.basename(info.path) == f"{info.first_index:020d}.seg"
            assert info.segment_id == info.first_index
            assert info.size == os.path.getsize(info.path)
            # a batch may overflow its segment, but a full segment gets no further batch
            assert info.size <= 1024 or info.batches == 1
        assert [(a.last_index < b.first_index) for a, b in zip(infos, infos[1:])] == [True] * (len(infos) - 1)
        assert journal.read(refs[17][2]) == batches[17][2].payload


def test_batch_larger_than_a_segment_and_same_index_never_reuses_a_name(tmp_path: Path) -> None:
    with Journal(tmp_path, segment_bytes=100) as journal:
        journal.append_batch([Record(5, 1, 0, b"a" * 500)])
        journal.append_batch([Record(5, 1, 0, b"b" * 500)])  # same first index: stays in segment 5
        journal.append_batch([Record(6, 1, 0, b"c")])
        journal.sync()
        assert [(s.segment_id, s.batches) for s in journal.segments()] == [(5, 2), (6, 1)]
        assert journal.read(journal.locate(5, 1)) == b"b" * 500


def test_reopen_after_clean_close_continues_the_last_segment(tmp_path: Path) -> None:
    fill(tmp_path, make_batches(5))
    with Journal(tmp_path) as journal:
        assert journal.last_index == 5
        assert journal.first_index == 1
        ref = journal.append_batch([Record(6, 2, 0, b"after reopen")])[0]
        assert ref.segment == 1
    with Journal(tmp_path) as journal:
        assert journal.last_index == 6
        assert journal.read(ref) == b"after reopen"
        assert len(journal.segments()) == 1


def test_empty_journal(tmp_path: Path) -> None:
    directory = tmp_path / "new" / "journal"
    with Journal(directory) as journal:
        assert journal.last_index is None
        assert journal.segments() == []
        assert list(journal.records()) == []
        assert journal.append_batch([]) == []
        with pytest.raises(KeyError):
            journal.read(RecordLocation(1, 0, 0))
    assert os.listdir(directory) == []


def test_raft_index_must_not_go_back(tmp_path: Path) -> None:
    with Journal(tmp_path) as journal:
        journal.append_batch([Record(10, 1, 0, b"x")])
        journal.append_batch([Record(10, 1, 0, b"same index is fine")])
        with pytest.raises(ValueError):
            journal.append_batch([Record(9, 1, 0, b"y")])


def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path: Path, captured_logs: list[dict]) -> None:
    batches = make_batches(4, size=60)  # about 300 bytes per batch: two batches per segment
    fill(tmp_path, batches, segment_bytes=700)
    with Journal(tmp_path) as journal:
        last = journal.segments()[-1]
    assert last.batches >= 2
    original = Path(last.path).read_bytes()
    with Journal(tmp_path) as journal:
        last_batch_offset = max(ref.offset for ref, _ in journal.records() if ref.segment == last.segment_id)
    kept = [record for batch in batches[:-1] for record in batch]
    for length in range(last_batch_offset, len(original)):
        Path(last.path).write_bytes(original[:length])
        captured_logs.clear()
        with Journal(tmp_path) as journal:
            assert [record for _, record in journal.records()] == kept, length
            assert journal.last_index == batches[-2][0].raft_index
        events = [entry for entry in captured_logs if entry["event"] == "journal.torn_tail_truncated"]
        if length == last_batch_offset:
            assert events == []
        else:
            assert len(events) == 1 and events[0]["log_level"] == "warning"
            assert events[0]["path"] == last.path and events[0]["offset"] == last_batch_offset
        assert os.path.getsize(last.path) == last_batch_offset
    # the truncated journal takes the lost batch again and reads it back after a reopen
    fill(tmp_path, batches[-1:])
    assert all_records(tmp_path) == [record for batch in batches for record in batch]


def test_torn_first_batch_of_a_new_segment_removes_the_file(tmp_path: Path, captured_logs: list[dict]) -> None:
    batches = make_batches(6, size=100)  # over 300 bytes per batch: one batch per segment
    fill(tmp_path, batches, segment_bytes=300)
    with Journal(tmp_path) as journal:
        infos = journal.segments()
    assert infos[-1].batches == 1
    Path(infos[-1].path).write_bytes(Path(infos[-1].path).read_bytes()[:BATCH_HEADER_SIZE + 3])
    with Journal(tmp_path, segment_bytes=300) as journal:
        assert len(journal.segments()) == len(infos) - 1
        assert journal.last_index == batches[-2][0].raft_index
        journal.append_batch(batches[-1])
    assert not any(e["event"] != "journal.torn_tail_truncated" for e in captured_logs)
    assert all_records(tmp_path) == [record for batch in batches for record in batch]


def test_zero_filled_tail_is_torn(tmp_path: Path, captured_logs: list[dict]) -> None:
    fill(tmp_path, make_batches(3))
    path = tmp_path / f"{1:020d}.seg"
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(bytes(4096))  # power loss can leave allocated but unwritten pages as zeros
    assert len(all_records(tmp_path)) == 9
    assert path.stat().st_size == size
    assert [e["event"] for e in captured_logs] == ["journal.torn_tail_truncated"]


def test_bit_flip_in_a_middle_batch_names_file_and_offset(tmp_path: Path) -> None:
    refs = fill(tmp_path, make_batches(5))
    path = str(tmp_path / f"{1:020d}.seg")
    middle = refs[2][0].offset
    flip_bit(path, middle + BATCH_HEADER_SIZE + 5)
    with pytest.raises(JournalCorrupt) as caught:
        Journal(tmp_path)
    assert caught.value.path == path and caught.value.offset == middle
    assert path in str(caught.value) and f"offset {middle}" in str(caught.value)
    assert os.path.getsize(path) > middle  # nothing truncated


def test_bad_magic_in_the_middle_is_corruption(tmp_path: Path) -> None:
    refs = fill(tmp_path, make_batches(4))
    path = str(tmp_path / f"{1:020d}.seg")
    flip_bit(path, refs[1][0].offset)
    with pytest.raises(JournalCorrupt, match="bad magic") as caught:
        Journal(tmp_path)
    assert caught.value.offset == refs[1][0].offset


def test_damage_in_an_earlier_segment_is_never_a_torn_tail(tmp_path: Path) -> None:
    fill(tmp_path, make_batches(10, size=100), segment_bytes=500)
    first = tmp_path / f"{1:020d}.seg"
    data = first.read_bytes()
    first.write_bytes(data[:-1])  # the end of a closed segment is gone: not legal
    with pytest.raises(JournalCorrupt) as caught:
        Journal(tmp_path)
    assert caught.value.path == str(first)


def test_unknown_format_in_the_last_batch_is_not_truncated(tmp_path: Path) -> None:
    import struct

    from crc32c import crc32c

    refs = fill(tmp_path, make_batches(3))
    path = tmp_path / f"{1:020d}.seg"
    data = bytearray(path.read_bytes())
    offset = refs[-1][0].offset
    struct.pack_into("<H", data, offset + 4, 2)
    struct.pack_into("<I", data, offset + 40, crc32c(bytes(data[offset : offset + 40])))
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match="unsupported format version"):
        Journal(tmp_path)
    assert path.stat().st_size == len(data)


def test_segment_name_must_match_its_first_batch(tmp_path: Path) -> None:
    fill(tmp_path, make_batches(2))
    os.rename(tmp_path / f"{1:020d}.seg", tmp_path / f"{7:020d}.seg")
    with pytest.raises(JournalCorrupt, match="file name says 7"):
        Journal(tmp_path)


def test_bit_flip_detected_on_read(tmp_path: Path) -> None:
    refs = fill(tmp_path, make_batches(4))
    path = str(tmp_path / f"{1:020d}.seg")
    with Journal(tmp_path) as journal:  # opened clean; the disk goes bad afterwards
        assert journal.read(refs[0][0]) == make_batches(4)[0][0].payload
        flip_bit(path, refs[2][0].offset + BATCH_HEADER_SIZE + 10)
        with pytest.raises(JournalCorrupt) as caught:
            journal.read(refs[2][1])
        assert (caught.value.path, caught.value.offset) == (path, refs[2][0].offset)
        with pytest.raises(JournalCorrupt):
            list(journal.records())
        assert journal.read(refs[0][1]) == make_batches(4)[0][1].payload  # other batches still served


def test_new_segment_syncs_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[bool, int]] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        st_info = os.fstat(fd)
        synced.append((stat.S_ISDIR(st_info.st_mode), st_info.st_ino))
        real_fsync(fd)

    directory_inode = tmp_path.stat().st_ino
    with Journal(tmp_path, segment_bytes=200) as journal:
        monkeypatch.setattr(os, "fsync", recording_fsync)
        journal.append_batch([Record(1, 1, 0, b"a" * 150)])
        assert synced == []  # the caller decides when to sync
        journal.sync()
        assert (True, directory_inode) in synced
        first_file = (False, os.stat(journal.segments()[0].path).st_ino)
        assert synced.index(first_file) < synced.index((True, directory_inode))  # data, then the entry

        synced.clear()
        journal.append_batch([Record(2, 1, 0, b"b")])
        journal.sync()
        assert synced == [first_file]  # no new segment: one fsync, no directory

        synced.clear()
        journal.sync()
        assert synced == []  # nothing appended: nothing to do

        journal.append_batch([Record(3, 1, 0, b"c" * 150)])
        # rotating: the segment left behind is made whole on disk before the next one exists
        assert synced == [first_file]
        journal.sync()
        second_file = (False, os.stat(journal.segments()[1].path).st_ino)
        assert synced == [first_file, second_file, (True, directory_inode)]
        monkeypatch.setattr(os, "fsync", real_fsync)


def test_delete_segments_before(tmp_path: Path) -> None:
    batches = make_batches(20, size=100)
    refs = fill(tmp_path, batches, segment_bytes=600)
    with Journal(tmp_path, segment_bytes=600) as journal:
        infos = journal.segments()
        cut = infos[2].first_index
        for ref in refs[0]:
            journal.read(ref)  # cached batches of deleted segments must go too
        deleted = journal.delete_segments_before(cut)
        assert deleted == [infos[0].segment_id, infos[1].segment_id]
        assert not os.path.exists(infos[0].path) and os.path.exists(infos[2].path)
        assert journal.first_index == cut
        with pytest.raises(KeyError):
            journal.read(refs[0][0])
        with pytest.raises(KeyError):
            journal.locate(1)
        # never the last segment, even when everything is older than the cut
        journal.delete_segments_before(10**9)
        assert [s.segment_id for s in journal.segments()] == [infos[-1].segment_id]
        assert journal.last_index == 20
        with pytest.raises(ValueError):
            journal.delete_segment(infos[-1].segment_id)
    assert all_records(tmp_path) == [record for batch in batches if batch[0].raft_index >= infos[-1].first_index
                                     for record in batch]


def test_a_second_journal_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    with Journal(tmp_path):
        with pytest.raises(RaftmqError, match="in use"):
            Journal(tmp_path)
    Journal(tmp_path).close()


def test_failed_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pwrite = os.pwrite
    with Journal(tmp_path) as journal:
        journal.append_batch([Record(1, 1, 0, b"first")])

        def half_then_fail(fd: int, data: memoryview, offset: int) -> int:
            real_pwrite(fd, data[: len(data) // 2], offset)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "pwrite", half_then_fail)
        with pytest.raises(OSError):
            journal.append_batch([Record(2, 1, 0, b"second" * 50)])
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        ref = journal.append_batch([Record(2, 1, 0, b"retried")])[0]
        assert journal.read(ref) == b"retried"
    assert all_records(tmp_path) == [Record(1, 1, 0, b"first"), Record(2, 1, 0, b"retried")]


def test_failed_fsync_makes_the_journal_unusable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = Journal(tmp_path)
    journal.append_batch([Record(1, 1, 0, b"x")])

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        journal.sync()
    with pytest.raises(JournalCorrupt, match="fsync failed"):
        journal.append_batch([Record(2, 1, 0, b"y")])
    journal.close()  # releases descriptors without trying to sync again


def test_reads_from_another_thread_while_appending(tmp_path: Path) -> None:
    published: list[tuple[RecordLocation, bytes]] = []
    errors: list[BaseException] = []
    done = threading.Event()
    with Journal(tmp_path, segment_bytes=4096, cache_bytes=2048) as journal:

        def reader() -> None:
            try:
                for step in range(5000):
                    if done.is_set() and step > 50:
                        return
                    if published:
                        ref, payload = published[step % len(published)]
                        assert journal.read(ref) == payload
                        raft_index = int.from_bytes(payload[:4], "little")
                        assert journal.locate(raft_index) == ref
                        assert journal.last_index >= raft_index
            except BaseException as exc:  # surfaced by the assertion below
                errors.append(exc)

        thread = threading.Thread(target=reader)
        thread.start()
        for n in range(1, 301):
            payload = n.to_bytes(4, "little") * 20
            ref = journal.append_batch([Record(n, 1, 0, payload)])[0]
            published.append((ref, payload))
            if n % 50 == 0:
                journal.delete_segments_before(0)  # exercises the lock without removing anything
        done.set()
        thread.join(timeout=20)
        assert not thread.is_alive()
    assert errors == []


def test_open_makes_found_batches_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A process killed before its sync() leaves batches in the page cache only; the restarted
    # node must not report them in last_index until they are on disk.
    journal = Journal(tmp_path, segment_bytes=200)
    for batch in make_batches(3, per_batch=1, size=150):
        journal.append_batch(batch)
    paths = [info.path for info in journal.segments()]
    # simulate kill -9: descriptors go away, nothing is synced
    for fd in [journal._dir_fd, journal._writer[1], *journal._readers.values()]:
        os.close(fd)
    journal._closed = True
    synced: set[int] = set()
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    with Journal(tmp_path) as reopened:
        assert reopened.last_index == 3
        assert {os.stat(path).st_ino for path in paths} | {tmp_path.stat().st_ino} <= synced


def test_body_ref_survives_msgpack(tmp_path: Path) -> None:
    import msgpack

    with Journal(tmp_path) as journal:
        ref = journal.append_batch([Record(2**40, 3, 1, b"body")])[0]
        packed = msgpack.packb(ref)
        assert len(packed) <= 16
        assert journal.read(RecordLocation(*msgpack.unpackb(packed))) == b"body"
        assert journal.read(msgpack.unpackb(packed)) == b"body"  # a plain list works too


def test_a_batch_written_without_caching_is_read_from_disk_then_cached(tmp_path: Path) -> None:
    # A follower's batches: written, hardly ever read back (only after it takes over).
    with Journal(tmp_path) as journal:
        ref = journal.append_batch([Record(1, 1, 0, b"follower's")], cache=False)[0]
        cached = journal.append_batch([Record(2, 1, 0, b"leader's")])[0]
        assert len(journal._cache) == 1
        assert journal.read(ref) == b"follower's" and journal.read(cached) == b"leader's"
        assert len(journal._cache) == 2


@settings(max_examples=30, deadline=None)
@given(batch_lists, st.booleans())
def test_rows_as_plain_tuples_are_written_and_read_back_as_records(rows: list[list[tuple[int, int, int, bytes]]],
                                                                   cache: bool) -> None:
    """A writer may hand plain tuples (`records.new_rows`): the same bytes on disk as Records,
    and every read, through the cache or not, gives Records."""
    index = 1
    batches: list[list[tuple[int, int, int, bytes]]] = []
    for row in rows:
        batch = []
        for step, term, kind, payload in row:
            index += step
            batch.append((index, term, kind, payload))
        batches.append(batch)
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as named:
        with Journal(plain, cache_bytes=2**20) as by_rows, Journal(named, cache_bytes=2**20) as by_records:
            for batch in batches:
                by_rows.append_batch(batch, cache=cache)
                by_records.append_batch([Record(*fields) for fields in batch], cache=cache)
            expected = [Record(*fields) for batch in batches for fields in batch]
            read = [record for _, record in by_rows.records()]
            assert read == expected and all(type(record) is Record for record in read)
        assert sorted(os.listdir(plain)) == sorted(os.listdir(named))
        for name in os.listdir(plain):
            assert Path(plain, name).read_bytes() == Path(named, name).read_bytes()

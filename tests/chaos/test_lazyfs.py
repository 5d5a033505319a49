"""The power-loss filesystem (chaos.lazyfs): a power loss drops exactly the un-fsynced writes and
nothing fsynced, the backing directory never holds un-fsynced data, and a real raftmq node on
the mount keeps every message it receipted across kill -9 plus power loss."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.lazyfs import LazyFS, available
from chaos.lazyfs_fs import Extents
from raftmq import processes
from raftmq.client import connect_failover

pytestmark = pytest.mark.integration

NODE_READY = "raftmq node listening on "


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFS]:
    reason = available()
    if reason is not None:
        pytest.skip(f"lazyfs not usable here: {reason}")
    fs = LazyFS(tmp_path / "backing", tmp_path / "mnt", tmp_path / "lazyfs.log")
    try:
        fs.mount()
        yield fs
    finally:
        fs.unmount()
    assert not os.path.ismount(tmp_path / "mnt")


def fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def test_dirty_extents_match_a_plain_buffer() -> None:
    """The in-memory overlay against a bytearray model: random writes (overlapping, adjacent,
    past the end), truncates, reads."""
    rng = random.Random(7)
    for _ in range(50):
        extents, model, dirty = Extents(), bytearray(), set[int]()
        for _ in range(40):
            if rng.random() < 0.15:
                length = rng.randrange(0, len(model) + 50)
                extents.truncate(length)
                model = model[:length] + bytes(max(0, length - len(model)))
                dirty = {i for i in dirty if i < length}
            else:
                offset, data = rng.randrange(0, 300), rng.randbytes(rng.randrange(1, 60))
                extents.write(offset, data)
                model.extend(bytes(max(0, offset + len(data) - len(model))))
                model[offset:offset + len(data)] = data
                dirty.update(range(offset, offset + len(data)))
            assert extents.nbytes == len(dirty)
            assert all(a + len(r) < b for a, r, b in zip(extents.starts, extents.runs, extents.starts[1:]))
            offset = rng.randrange(0, 320)
            view = bytearray(len(model[offset:offset + 80]))
            extents.overlay(view, offset)
            expected = bytes(model[i] if i in dirty else 0 for i in range(offset, offset + len(view)))
            assert bytes(view) == expected


def test_power_loss_drops_exactly_the_unsynced_writes(lazyfs: LazyFS) -> None:
    mnt, backing = lazyfs.mountpoint, lazyfs.backing
    a, b = b"A" * 5000, b"B" * 3000
    with open(mnt / "log", "wb") as f:
        f.write(a)
        f.flush()
        os.fsync(f.fileno())
        f.write(b)  # past the synced end: the size grows in memory only
        f.flush()
        f.seek(10)
        f.write(b"b" * 20)  # over synced bytes
    (mnt / "fresh").write_bytes(b"F" * 700)  # created durably, its data never synced
    fd = os.open(mnt / "holey", os.O_CREAT | os.O_RDWR)
    try:
        os.pwrite(fd, b"H" * 100, 0)
        os.fsync(fd)
        os.pwrite(fd, b"h" * 50, 10_000)  # a hole between 100 and 10_000
        assert os.fstat(fd).st_size == 10_050
        assert os.pread(fd, 200, 9_950) == bytes(50) + b"h" * 50
    finally:
        os.close(fd)
    with open(mnt / "cut", "wb") as f:
        f.write(b"C" * 400)
        f.flush()
        os.fsync(f.fileno())
        f.write(b"c" * 600)
        f.flush()
        f.truncate(200)  # a size is metadata: durable; the cut-off dirty bytes are just gone
        f.seek(0, os.SEEK_END)
        f.write(b"x" * 10)
    fd = os.open(mnt / "appended", os.O_CREAT | os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"1234")
        os.fsync(fd)
        os.write(fd, b"5678")
    finally:
        os.close(fd)

    assert (mnt / "log").read_bytes() == b"A" * 10 + b"b" * 20 + a[30:] + b
    assert (mnt / "cut").stat().st_size == 210 and (mnt / "appended").read_bytes() == b"12345678"
    # Only fsynced data in the backing directory, whatever the mount shows.
    assert (backing / "log").read_bytes() == a
    assert (backing / "fresh").read_bytes() == b""
    assert (backing / "holey").read_bytes() == b"H" * 100
    assert (backing / "cut").read_bytes() == b"C" * 200
    assert (backing / "appended").read_bytes() == b"1234"

    unsynced = 3000 + 20 + 700 + 50 + 10 + 4
    assert lazyfs.dirty_bytes() == unsynced
    assert lazyfs.lose_unsynced() == unsynced

    assert (mnt / "log").read_bytes() == a
    assert (mnt / "fresh").stat().st_size == 0
    assert (mnt / "holey").read_bytes() == b"H" * 100
    assert (mnt / "cut").read_bytes() == b"C" * 200
    assert (mnt / "appended").read_bytes() == b"1234"
    assert lazyfs.lose_unsynced() == 0
    for name in ("log", "fresh", "holey", "cut", "appended"):
        assert (mnt / name).read_bytes() == (backing / name).read_bytes()


def test_fsynced_data_and_a_synced_rename_survive(lazyfs: LazyFS) -> None:
    mnt = lazyfs.mountpoint
    (mnt / "dir").mkdir()
    target = mnt / "dir" / "meta"
    fsync_write(target, b"version 1")
    fsync_write(target.with_suffix(".tmp"), b"version 2")
    os.replace(target.with_suffix(".tmp"), target)
    dir_fd = os.open(mnt / "dir", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    fsync_write(mnt / "dir" / "journal", b"x" * 100_000)
    with open(mnt / "dir" / "journal", "ab") as f:
        f.write(b"y" * 10)  # appended without fsync
    fd = os.open(mnt / "dir" / "reserved", os.O_CREAT | os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)  # sizes are metadata: durable at once
        os.pwrite(fd, b"r" * 10, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    assert lazyfs.lose_unsynced() == 10
    assert target.read_bytes() == b"version 2"
    assert sorted(os.listdir(mnt / "dir")) == ["journal", "meta", "reserved"]
    assert (mnt / "dir" / "journal").read_bytes() == b"x" * 100_000
    assert (mnt / "dir" / "reserved").read_bytes() == b"r" * 10 + bytes((1 << 20) - 10)
    os.unlink(mnt / "dir" / "journal")
    (mnt / "dir" / "reserved").unlink()
    target.unlink()
    os.rmdir(mnt / "dir")
    assert os.listdir(mnt) == [] and os.listdir(lazyfs.backing) == []
    stats = os.statvfs(mnt)
    assert stats.f_blocks > 0


def test_a_node_on_the_mount_keeps_what_it_receipted(lazyfs: LazyFS, tmp_path: Path) -> None:
    port = processes.free_port()
    argv = [sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(lazyfs.mountpoint / "n1")]
    destination = "/queue/lazyfs.durable"
    bodies = [f"message {i}".encode() for i in range(20)]
    url = f"failover:(stomp://127.0.0.1:{port})"

    async def produce() -> None:
        client = await connect_failover(url)
        try:
            for body in bodies:
                await asyncio.wait_for(client.send(destination, body, receipt=True), 10)
        finally:
            await client.close()

    async def consume() -> list[bytes]:
        client = await connect_failover(url)
        try:
            subscription = client.subscribe(destination, ack="auto")
            return [(await asyncio.wait_for(subscription.get(), 10)).body for _ in bodies]
        finally:
            await client.close()

    def start(run: int) -> subprocess.Popen[bytes]:
        out, err = tmp_path / f"node{run}.out", tmp_path / f"node{run}.err"
        node = processes.spawn(argv, out, err)
        try:
            processes.wait_for_line(node, out, NODE_READY, 15, errors=err)
        except BaseException:
            processes.kill(node)
            raise
        return node

    node = start(1)
    try:
        asyncio.run(produce())
        processes.kill(node)
        dropped = lazyfs.lose_unsynced()
        node = start(2)
        received = asyncio.run(consume())
    finally:
        processes.kill(node)
    assert received == bodies, f"{dropped} un-fsynced bytes dropped at the power loss"
    assert dropped > 0, "the node left nothing un-fsynced: this power loss tested nothing"
    assert list((lazyfs.backing / "n1").rglob("raft.journal")), "the journal went around the mount"

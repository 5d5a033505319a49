"""Disk-full faults (chaos.disk): a small tmpfs fills to ENOSPC and frees again, and what a real
durable raftmq node on one does when its data dir fills under load: what it acknowledged
survives, and it answers again once there is room (after a restart when the fault stopped it).
What does not hold yet (silence instead of an ERROR while only the Raft metadata cannot be
written) is in the chaos report, not asserted here."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.disk import FILLER, SmallDisk, available
from raftmq import processes
from tests.helpers.stomp_raw import RawClient, frame_bytes, unique

pytestmark = pytest.mark.integration

REASON = available()
needs_mount = pytest.mark.skipif(REASON is not None, reason=f"small disks unavailable: {REASON}")

MiB = 1024 * 1024
ANSWER_SECONDS = 3.0


@needs_mount
def test_a_filled_disk_refuses_writes_until_freed_and_unmounts(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path / "disk", 2 * MiB)
    try:
        disk.mount()
        disk.mount()  # idempotent
        assert disk.mounted and disk.free_bytes() > MiB
        written = disk.fill(leave_bytes=256 * 1024)
        assert 256 * 1024 - 8192 < disk.free_bytes() <= 256 * 1024 and written > MiB  # tmpfs counts in pages
        assert disk.fill() > 0 and disk.free_bytes() == 0
        with pytest.raises(OSError) as raised:
            (disk.mountpoint / "one-more").write_bytes(b"x" * 8192)
        assert raised.value.errno == errno.ENOSPC
        disk.free()
        assert not (disk.mountpoint / FILLER).exists()
        (disk.mountpoint / "one-more").write_bytes(b"x" * 8192)
        held = open(disk.mountpoint / "held", "wb")  # a busy mount: unmounted lazily
        try:
            disk.unmount()
        finally:
            held.close()
        assert not disk.mounted
        disk.unmount()  # idempotent
        assert not any(disk.mountpoint.iterdir())
    finally:
        disk.unmount()


class Node:
    """A durable single node whose data dir is on the small disk."""

    def __init__(self, tmp_path: Path, data_dir: Path) -> None:
        self.port = processes.free_port()
        self.argv = [sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"127.0.0.1:{self.port}",
                     "--data-dir", str(data_dir)]
        self.tmp_path = tmp_path
        self.incarnation = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def stderr(self) -> Path:
        return self.tmp_path / f"stderr-{self.incarnation}"

    def start(self) -> None:
        self.incarnation += 1
        stdout = self.tmp_path / f"stdout-{self.incarnation}"
        self.proc = processes.spawn(self.argv, stdout, self.stderr, cwd=self.tmp_path)
        processes.wait_for_line(self.proc, stdout, f"raftmq node listening on 127.0.0.1:{self.port}", 30,
                                errors=self.stderr)

    def stop(self) -> None:
        if self.proc is not None:
            processes.kill(self.proc)

    def client(self) -> RawClient:
        client = RawClient(("127.0.0.1", self.port))
        client.connect()
        return client


def send(client: RawClient, destination: str, tag: str, body: bytes) -> str:
    """One SEND with a receipt: RECEIPT, ERROR <message>, silence, or closed."""
    try:
        client.send(frame_bytes("SEND", {"destination": destination, "receipt": tag}, body + tag.encode()))
        frame = client.read_frame(ANSWER_SECONDS)
    except TimeoutError:
        return "closed" if client.closed else "silence"
    except OSError:
        return "closed"
    return "RECEIPT" if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == tag else \
        f"{frame.command} {frame.headers.get('message')}"


def delivered(client: RawClient, destination: str, body_size: int) -> set[str]:
    client.send(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "all", "ack": "auto"}))
    tags: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            frame = client.read_frame(ANSWER_SECONDS)
        except TimeoutError:
            break
        if frame.command == "MESSAGE":
            tags.add(frame.body[body_size:].decode())
    return tags


@needs_mount
def test_a_node_whose_data_dir_fills_keeps_what_it_acknowledged_and_serves_again_once_freed(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path / "disk", 64 * MiB)
    node = Node(tmp_path, disk.mountpoint / "data")
    body = b"b" * (64 * 1024)  # large bodies go to the body journal, whose segments are not preallocated
    queue = unique("/queue/full")
    acknowledged: list[str] = []
    outcomes: dict[str, str] = {}
    try:
        disk.mount()
        node.start()
        client = node.client()
        for i in range(10):
            outcome = send(client, queue, f"before-{i}", body)
            assert outcome == "RECEIPT", outcome
            acknowledged.append(f"before-{i}")
        disk.fill()
        # Under load on a full disk: send until the node stops acknowledging (bounded).
        for i in range(200):
            tag = f"full-{i}"
            outcomes[tag] = send(client, queue, tag, body)
            if outcomes[tag] == "RECEIPT":
                acknowledged.append(tag)
            else:
                break
        assert any(o != "RECEIPT" for o in outcomes.values()), f"the full disk never showed: {outcomes}"
        client.close()
        assert node.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.proc.wait(timeout=5)  # a node that failed is stopping: let it finish
        log = node.stderr.read_text(errors="replace")
        if node.proc.poll() is not None:
            # It stopped: not a crash without a word. The reason names the full disk.
            assert node.proc.returncode != 0
            failed = [line for line in log.splitlines() if "event='node.failed'" in line]
            assert failed and "No space left on device" in failed[0], log[-3000:]
        disk.free()
        node.stop()
        node.start()  # once space is free it comes back, and kept every acknowledged message
        client = node.client()
        assert send(client, queue, "after", body) == "RECEIPT"
        acknowledged.append("after")
        client.close()
        here = delivered(node.client(), queue, len(body))
        assert set(acknowledged) <= here, sorted(set(acknowledged) - here)
        # Nothing that was never sent appears (an ERROR'd or unanswered send may: outcome unknown).
        assert here <= set(acknowledged) | set(outcomes), sorted(here - set(acknowledged) - set(outcomes))
    finally:
        node.stop()
        disk.unmount()

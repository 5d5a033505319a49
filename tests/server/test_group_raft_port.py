"""Strangers on a member's Raft port get nothing (real group processes, default configuration:
no password configured, so the group runs on its generated secret).

To see these fail, turn the `wire` fix off (pysyncobj's own connection): the pickle creates
its directory, the 64 MiB stream stalls the member into elections."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from raftmq.client import connect
from raftmq.replication.group_secret import SECRET_FILE, group_secret
from raftmq.replication.wire import HANDSHAKE_SECONDS, MAX_UNAUTHENTICATED
from tests.helpers.group_harness import READY_LINE, Group

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


class Mkdir:
    """Unpickling this makes a directory: proof that a stranger's bytes ran as code."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple:
        return (os.mkdir, (self.path,))


def raft_address(group: Group, node_id: str) -> tuple[str, int]:
    member = group.members[node_id]
    return member.host, member.raft_port


def send_raw(address: tuple[str, int], data: bytes, linger: float = 0.3) -> bool:
    """Send `data`; True when the member closed the connection on us."""
    with socket.create_connection(address, timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            return True
        sock.settimeout(linger)
        try:
            return sock.recv(1 << 16) == b"" or True
        except TimeoutError:
            return False
        except OSError:
            return True


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def assert_group_unchanged(group: Group, leader: str, term: int) -> None:
    statuses = {i: group.status(i) for i in group.members}
    assert all(s is not None for s in statuses.values()), statuses
    assert statuses[leader]["role"] == "leader", statuses[leader]
    assert {s["term"] for s in statuses.values()} == {term}, {i: s["term"] for i, s in statuses.items()}


async def send_and_receive(group: Group, leader: str, destination: str) -> None:
    member = group.members[leader]
    client = await connect(member.host, member.client_port)
    await client.send(destination, b"still working", receipt=True)
    frames = []
    client.subscribe(destination, callback=frames.append)
    deadline = time.monotonic() + 5
    while not frames and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert frames and frames[0].body == b"still working"
    await client.disconnect()


def test_a_pickle_sent_to_the_raft_port_never_runs(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        leader = group.leader()
        term = group.status(leader)["term"]
        marker = tmp_path / "pwned"
        payload = pickle.dumps(Mkdir(marker), protocol=2)
        stock_frame = struct.pack("i", len(zlib.compress(payload))) + zlib.compress(payload)  # pysyncobj's framing
        for node_id in group.members:
            for data in (stock_frame, payload, struct.pack(">I", len(payload)) + payload):
                send_raw(raft_address(group, node_id), data)
        time.sleep(1.0)
        assert not marker.exists(), "a stranger's pickle ran inside a member"
        assert_group_unchanged(group, leader, term)
        asyncio.run(send_and_receive(group, leader, "/queue/after-pickle"))
        refused = "".join(group.members[i].stderr() for i in group.members)
        assert "raft.peer_refused" in refused
    finally:
        group.close()


def test_a_64_mib_stream_is_cut_off_and_elects_no_one(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        leader = group.leader()
        before = group.status(leader)
        term, changes = before["term"], before["leader_changes"]
        pid = group.members[leader].proc.pid
        before = rss_kib(pid)
        chunk = os.urandom(1 << 20)
        sent = 0
        cut_off = False
        with socket.create_connection(raft_address(group, leader), timeout=5) as sock:
            sock.sendall(b"\x00\x00\x10\x00")  # "a 1 MiB frame follows": a stranger may not send one
            try:
                while sent < 64 * (1 << 20):
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                cut_off = True
        assert cut_off, f"the member read all {sent} bytes of a stranger's stream"
        time.sleep(1.0)
        assert_group_unchanged(group, leader, term)
        assert group.status(leader)["leader_changes"] == changes
        assert rss_kib(pid) - before < 32 * 1024, (before, rss_kib(pid))
    finally:
        group.close()


def test_silent_strangers_are_capped_and_closed_by_the_handshake_deadline(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start()
        leader = group.leader()
        term = group.status(leader)["term"]
        address = raft_address(group, leader)
        socks = [socket.create_connection(address, timeout=5) for _ in range(3 * MAX_UNAUTHENTICATED)]
        try:
            time.sleep(0.5)
            closed_at_once = sum(1 for s in socks if _closed(s, 0.05))
            assert closed_at_once >= len(socks) - MAX_UNAUTHENTICATED - 2, closed_at_once  # over the cap: refused
            time.sleep(HANDSHAKE_SECONDS + 1.0)
            still_open = [s for s in socks if not _closed(s, 0.05)]
            assert not still_open, f"{len(still_open)} silent connections outlived the handshake deadline"
        finally:
            for s in socks:
                s.close()
        assert_group_unchanged(group, leader, term)
    finally:
        group.close()


def _closed(sock: socket.socket, wait: float) -> bool:
    """True once the member closed it (after its HELLO, which a stranger may read)."""
    sock.settimeout(wait)
    for _ in range(64):
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def test_the_generated_secret_is_private_and_a_member_without_it_cannot_join(tmp_path: Path) -> None:
    group = Group(tmp_path)
    stranger: subprocess.Popen[bytes] | None = None
    try:
        group.start("n1", "n2")
        leader = group.leader(("n1", "n2"))
        secret_file = group.data_dir / SECRET_FILE
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        assert group_secret(None, tmp_path / "another-group") != group_secret(None, group.data_dir)
        # n3, configured with another secret (a password), is refused by both members.
        another_secret = '[group]\npassword = "not-the-group-secret-at-all"\n'
        config = group.config_path.read_text().replace('[group]\n', another_secret, 1)
        wrong = tmp_path / "wrong.toml"
        wrong.write_text(config)
        with open(tmp_path / "n3-wrong.stdout", "wb") as out, open(tmp_path / "n3-wrong.stderr", "wb") as err:
            command = [sys.executable, "-m", "raftmq", "node", "--config", str(wrong), "--node", "n3"]
            stranger = subprocess.Popen(command, stdout=out, stderr=err)
        deadline = time.monotonic() + 15
        while READY_LINE not in (tmp_path / "n3-wrong.stdout").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)
        n3 = group.status("n3")
        assert n3 is not None and n3["role"] != "leader" and n3["raft"]["leader"] is None, n3
        assert n3["applied_index"] == 0
        assert "wrong group secret" in group.members["n1"].stderr() + group.members["n2"].stderr()
        assert group.status(leader)["role"] == "leader"
    finally:
        if stranger is not None and stranger.poll() is None:
            os.kill(stranger.pid, signal.SIGKILL)
            stranger.wait(10)
        group.close()

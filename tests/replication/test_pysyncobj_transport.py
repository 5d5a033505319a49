"""Regression tests of the pysyncobj wing: durable before it speaks, whole entries, the bound port,
our wire, no spurious truncation (raftmq/replication/pysyncobj/transport.py). Each fails with its
fix undone (`fsync`, `entry_size`, `bind`, `wire`, `no_spurious_truncation`; planted by
tests/helpers/unfixed.py): `RAFTMQ_TEST_DISABLE_FIX=fsync pytest tests/replication/test_pysyncobj_transport.py`.
Members run in this process (tests/helpers/raft_members.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

import pysyncobj.pickle as pso_pickle
import pytest
from pysyncobj.transport import TCPTransport

from raftmq.replication.pysyncobj.patches import apply_module_fixes
from tests.helpers.raft_members import Member, commit, leader_of, wait_until
from tests.helpers.unfixed import STOCK

pytestmark = pytest.mark.integration


# -- fsync ------------------------------------------------------------------------------------


def test_journal_is_durable_before_acks_votes_and_the_leaders_own_count(group: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    violations: list[str] = []
    replies: dict[str, int] = {}
    original_send = TCPTransport.send

    def checked_send(transport: Any, node: Any, message: Any) -> bool:
        if isinstance(message, dict) and message.get("type") == "next_node_idx" and message["success"]:
            journal = transport._syncObj.durable_journal
            address = transport._selfNode.address
            replies[address] = replies.get(address, 0) + 1
            if message["next_node_idx"] - 1 > journal.durable_index:
                violations.append(f"{address} acked {message['next_node_idx'] - 1}, durable {journal.durable_index}")
        if isinstance(message, dict) and message.get("type") in ("request_vote", "response_vote"):
            journal = transport._syncObj.durable_journal
            if journal.durable_index < journal[-1][1]:  # the log the vote compared must be durable
                violations.append(
                    f"{transport._selfNode.address} voted with log {journal[-1][1]}, durable {journal.durable_index}"
                )
        return original_send(transport, node, message)

    monkeypatch.setattr(TCPTransport, "send", checked_send)
    members = group(3)

    def durable_when_applied(member: Member) -> Callable[[int, bytes], None]:
        def check(index: int, entry: bytes) -> None:
            assert member.obj is not None
            if member.obj.is_leader and member.obj.durable_journal.durable_index < index:
                violations.append(f"leader {member.address} committed {index} before it was durable")
        return check

    for member in members:
        member.apply_hook = durable_when_applied(member)
    leader = leader_of(members)
    for k in range(20):
        commit(leader, b"one-at-a-time %d" % k)
    assert leader.obj is not None
    fsyncs_before = leader.obj.durable_journal.fsyncs
    burst = [threading.Event() for _ in range(200)]
    for k, done in enumerate(burst):
        leader.submit(b"burst %d" % k, lambda result, error, done=done: done.set())
    assert all(done.wait(5) for done in burst)
    assert not violations, violations[:5]
    # Group commit: the leader fsyncs per tick, not per entry.
    assert leader.obj.durable_journal.fsyncs - fsyncs_before < 50
    for member in members:
        assert member.obj is not None
        if member is not leader:  # at most one fsync per append-entries reply
            assert member.obj.durable_journal.fsyncs <= replies[member.address] + 10


# -- entries above the chunking threshold (entry_size) ----------------------------------------


def size_whose_pickle_crosses_a_chunk_boundary(chunk: int = STOCK.appendEntriesBatchSizeBytes) -> int:
    """An entry whose stored command is under 2 chunks while the pickled append-entries entry is
    over: pysyncobj's chunker (which measures the command, not the pickle) then sends 'finish'
    one chunk early and the follower fails to unpickle."""
    apply_module_fixes()
    for size in range(2 * chunk - 200, 2 * chunk):
        command = b"\x00" + pso_pickle.dumps((0, (b"x" * size,)))
        if len(command) < 2 * chunk <= len(pso_pickle.dumps((command, 10**6, 3))):
            return size
    raise AssertionError("no such size")


@pytest.mark.parametrize("size", [100_000, size_whose_pickle_crosses_a_chunk_boundary()])
def test_large_entries_replicate_whole(group: Any, size: int, monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
    chunked: list[str] = []
    original_send = TCPTransport.send

    def recording_send(transport: Any, node: Any, message: Any) -> bool:
        if isinstance(message, dict) and "transmission" in message:
            chunked.append(message["transmission"])
        return original_send(transport, node, message)

    monkeypatch.setattr(TCPTransport, "send", recording_send)
    members = group(3)
    leader = leader_of(members)
    entry = os.urandom(size)
    with caplog.at_level(logging.ERROR, logger="pysyncobj"):
        commit(leader, entry, timeout=3)
        assert wait_until(lambda: all(entry in m.applied for m in members), 3)
    assert not chunked, f"entry sent through the chunking path: {chunked}"
    assert not [r for r in caplog.records if r.name.startswith("pysyncobj")], "a member failed to unpickle"


def test_entries_over_the_limit_are_refused(group: Any) -> None:
    (member,) = group(1)
    assert member.obj is not None
    with pytest.raises(ValueError):
        member.submit(b"x" * (member.obj.entry_limit_bytes + 1))


# -- bind address -----------------------------------------------------------------------------


def listening_addresses(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, _remote, state = line.split()[1:4]
                address, hex_port = local.rsplit(":", 1)
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


def test_the_raft_port_is_bound_to_its_address(group: Any) -> None:
    (member,) = group(1)
    assert member.obj is not None
    member.obj.waitBinded()
    port = int(member.address.rsplit(":", 1)[1])
    assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, not 0.0.0.0


# -- the wire (wire) ---------------------------------------------------------------------------


class RunsWhenUnpickled:
    """Unpickled, it creates the directory `path`: proof that a stranger's bytes ran as code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def test_a_strangers_pickle_sent_to_the_raft_port_never_runs(group: Any, tmp_path: Any) -> None:
    # Stock pysyncobj unpickles the first frame of any connection to its port (without a
    # password nothing comes before it): whoever reaches the port runs code in the member. Our
    # wire decodes nothing before the peer proved the group secret, and never with pickle.
    (member,) = group(1)
    assert member.obj is not None
    member.obj.waitBinded()
    ran = tmp_path / "ran"
    frame = zlib.compress(pickle.dumps(RunsWhenUnpickled(str(ran))))  # as pysyncobj's TcpConnection sends
    host, port = member.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        sock.sendall(struct.pack("i", len(frame)) + frame)
        assert not wait_until(ran.exists, 1.0), "the Raft port unpickled a stranger's frame"


# -- spurious truncation (no_spurious_truncation) ---------------------------------------------


def test_followers_never_delete_entries_they_already_hold(group: Any) -> None:
    truncated: list[tuple[str, int]] = []

    def record_truncations(member: Member) -> None:
        assert member.obj is not None
        journal = member.obj.durable_journal
        original = journal.deleteEntriesFrom

        def recording(entry_from: int) -> None:
            if entry_from < len(journal):
                truncated.append((member.address, len(journal) - entry_from))
            original(entry_from)

        journal.deleteEntriesFrom = recording  # type: ignore[method-assign]

    members = group(3, start=False)
    first, second, late = members
    for member in (first, second):
        member.start()
        record_truncations(member)
    leader = leader_of([first, second])
    for k in range(30):
        commit(leader, b"early %d" % k)
    streaming = True
    committed: list[bytes] = []

    def stream() -> None:  # one entry at a time while the late member catches up
        k = 0
        while streaming and k < 2000:
            committed.append(b"late %d" % k)
            commit(leader, committed[-1])
            k += 1

    streamer = threading.Thread(target=stream)
    streamer.start()
    try:
        time.sleep(0.05)
        late.start()
        record_truncations(late)
        time.sleep(1.0)
    finally:
        streaming = False
        streamer.join(10)
    assert wait_until(lambda: committed[-1] in late.applied, 5)
    # One leader, one term: nothing ever conflicts, so no deletion is legitimate.
    assert len({m.obj.raftCurrentTerm for m in members if m.obj is not None}) == 1
    assert not truncated, truncated[:5]

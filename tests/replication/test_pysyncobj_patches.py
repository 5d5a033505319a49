"""Regression tests of the pysyncobj wing: the version pin, the fix switches and the module-level swaps (raftmq/replication/pysyncobj/patches.py). Each fails with its fix turned off
(`durable_rename`, `pickle`, `never_raise`, `bind`): `RAFTMQ_TEST_DISABLE_FIX=pickle pytest tests/replication/test_pysyncobj_patches.py`. Members run in this
process (tests/helpers/raft_members.py).
"""

from __future__ import annotations

import os
from typing import Any

import pysyncobj.serializer as pso_serializer
import pysyncobj.tcp_connection as pso_tcp
import pytest

import raftmq.replication.pysyncobj as package
from raftmq.core.commands import Send
from raftmq.errors import ConfigError
from raftmq.protocol.header_block import block_of
from raftmq.replication import wire
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.entry_codec import encode_entry
from raftmq.replication.pysyncobj.patches import ALL_FIXES, FIX_NAMES, PINNED_VERSION, Fixes, apply_module_fixes, check_raft_address
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from tests.helpers.raft_members import commit, leader_of

pytestmark = pytest.mark.integration


def test_version_is_pinned() -> None:
    assert PINNED_VERSION == "0.3.17"
    from pysyncobj.version import VERSION

    assert VERSION == PINNED_VERSION


def test_every_fix_is_on_in_the_product_and_named_in_the_table() -> None:
    assert all(getattr(ALL_FIXES, name) for name in FIX_NAMES)
    assert len(FIX_NAMES) == 19
    table = package.__doc__ or ""
    assert all(f"| `{name}`" in table for name in FIX_NAMES), [n for n in FIX_NAMES if f"| `{n}`" not in table]


def test_fixes_are_frozen_and_turned_off_by_name() -> None:
    fewer = ALL_FIXES.without("fsync", "lease")
    assert not fewer.fsync and not fewer.lease and fewer.wire and ALL_FIXES.fsync
    with pytest.raises(AttributeError):
        fewer.fsync = True  # type: ignore[misc]
    with pytest.raises(ValueError, match="no such fix: fsnyc"):
        ALL_FIXES.without("fsnyc")


# -- durable_rename ---------------------------------------------------------------------------


def test_snapshot_rename_and_metadata_are_fsynced(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, fixes: Fixes) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    apply_module_fixes(fixes)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    tmp, dump = tmp_path / "raft.snapshot.tmp", tmp_path / "raft.snapshot"
    tmp.write_bytes(b"snapshot")
    pso_serializer.atomicReplace(str(tmp), str(dump))  # the name pysyncobj's Serializer calls
    assert str(tmp) in synced and str(tmp_path) in synced
    synced.clear()
    journal = RaftJournal(str(tmp_path / "raft.journal"))
    journal.setCurrentTerm(3, "127.0.0.1:1")
    assert str(tmp_path / "raft.journal.meta.tmp") in synced and str(tmp_path) in synced
    journal._destroy()
    assert RaftJournal(str(tmp_path / "raft.journal")).getCurrentTerm() == 3


# -- pickle inflation -------------------------------------------------------------------------


def test_a_1kib_command_is_not_inflated_on_the_wire(group: Any, monkeypatch: pytest.MonkeyPatch, fixes: Fixes) -> None:
    members = group(2)
    leader = leader_of(members)
    wire_sizes: list[int] = []
    if fixes.wire:  # our frames: the command as pysyncobj pickles it into the log, msgpack, GCM tag
        original = wire.RaftConnection._send_frame

        def recording_send_frame(conn: Any, frame: bytes) -> None:
            wire_sizes.append(len(frame))
            original(conn, frame)

        monkeypatch.setattr(wire.RaftConnection, "_send_frame", recording_send_frame)
    else:
        installed = pso_tcp.zlib

        class RecordingZlib:
            @staticmethod
            def compress(data: bytes, level: int = -1) -> bytes:
                out = installed.compress(data, level)
                wire_sizes.append(len(out))
                return out

            decompress = staticmethod(installed.decompress)

        monkeypatch.setattr(pso_tcp, "zlib", RecordingZlib)
    command = Send("s1", "/queue/a", block_of((("receipt", "r1"),)), os.urandom(1024), 1_700_000_000_000)
    entry = encode_entry([encode_rows([command])])
    commit(leader, entry)
    on_wire = max(wire_sizes)
    print(f"1 KiB-body command: entry {len(entry)} B, largest message on the wire {on_wire} B")
    assert on_wire <= len(entry) + 400


# -- raising apply / callback (never_raise) ---------------------------------------------------


def test_a_raising_apply_is_applied_once_and_the_log_goes_on(group: Any) -> None:
    (member,) = group(1)
    leader_of([member])

    def poison(index: int, entry: bytes) -> None:
        if entry == b"poison":
            raise RuntimeError("bug in apply")

    member.apply_hook = poison
    member.submit(b"poison")
    commit(member, b"after", timeout=2)
    assert member.applied == [b"after"]
    assert member.apply_calls == 2
    assert member.obj is not None and member.obj.apply_errors == 1


def test_a_raising_callback_does_not_apply_twice(group: Any) -> None:
    (member,) = group(1)
    leader_of([member])
    calls = []

    def raising_callback(result: Any, error: int) -> None:
        calls.append(result)
        raise RuntimeError("bug in callback")

    member.submit(b"once", raising_callback)
    commit(member, b"next", timeout=2)
    assert member.applied.count(b"once") == 1
    assert len(calls) == 1


# -- password off loopback (bind) -------------------------------------------------------------


def test_a_password_is_required_off_loopback() -> None:
    with pytest.raises(ConfigError, match="password"):
        check_raft_address("10.1.2.3:7000", None)
    with pytest.raises(ConfigError, match="password"):
        check_raft_address("node2.example:7000", None)
    assert check_raft_address("10.1.2.3:7000", "s3cret") == ("10.1.2.3", 7000)
    assert check_raft_address("127.0.0.1:7000", None) == ("127.0.0.1", 7000)
    with pytest.raises(ConfigError):
        check_raft_address("7000", None)

"""Regression tests of the pysyncobj wing: the version pin, the table of fixes, the module-level
swaps and helpers (raftmq/replication/pysyncobj/patches.py), and no test switch in the product.
Each fails with its fix undone (`durable_rename`, `pickle`, `never_raise`, `bind`; planted by
tests/helpers/unfixed.py): `RAFTMQ_TEST_DISABLE_FIX=pickle pytest tests/replication/test_pysyncobj_patches.py`.
Members run in this process (tests/helpers/raft_members.py).
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

import pysyncobj.serializer as pso_serializer
import pysyncobj.tcp_connection as pso_tcp
import pytest

import raftmq.replication.pysyncobj as package
from raftmq.core.commands import Send
from raftmq.errors import ConfigError
from raftmq.processes import free_port
from raftmq.protocol.header_block import block_of
from raftmq.replication import wire
from raftmq.replication.command_codec import encode_rows
from raftmq.replication.entry_codec import encode_entry
from raftmq.replication.pysyncobj.patches import PINNED_VERSION, check_raft_address
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.pysyncobj.syncobj import HardenedSyncObj
from tests.helpers.raft_members import Member, commit, leader_of
from tests.helpers.unfixed import FIX_NAMES, NoFsync, NoLease, module_names, syncobj_class, unfixed_from_environment

pytestmark = pytest.mark.integration


def test_version_is_pinned() -> None:
    assert PINNED_VERSION == "0.3.17"
    from pysyncobj.version import VERSION

    assert VERSION == PINNED_VERSION


FIX_ENTRY = re.compile(r"^- `(\w+)`: (.*?)(?=^- |\n\n)", re.MULTILINE | re.DOTALL)  # the package docstring's list


def test_every_fix_is_listed_with_the_tests_that_show_it() -> None:
    doc = package.__doc__ or ""
    fixes = doc[doc.index("Each fix, the hole"):]
    entries = {name: re.findall(r"`(test_\w+)\.py::(\w+)`", text) for name, text in FIX_ENTRY.findall(fixes)}
    assert list(entries) == list(FIX_NAMES)
    for name, tests in entries.items():
        assert tests, f"{name}: no test named"
        for module, test in tests:
            found = getattr(importlib.import_module(f"tests.replication.{module}"), test, None)
            assert callable(found), f"{name}: no test {module}.py::{test}"


def test_fixes_are_undone_by_name_from_the_test_side_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert syncobj_class() is HardenedSyncObj
    fewer = syncobj_class(["fsync", "lease"])
    assert issubclass(fewer, NoFsync) and issubclass(fewer, NoLease) and issubclass(fewer, HardenedSyncObj)
    assert all(syncobj_class([name]) is not HardenedSyncObj for name in FIX_NAMES)
    monkeypatch.setenv("RAFTMQ_TEST_DISABLE_FIX", "fsync,lease")
    assert unfixed_from_environment() == {"fsync", "lease"}
    monkeypatch.setenv("RAFTMQ_TEST_DISABLE_FIX", "fsnyc")
    with pytest.raises(ValueError, match="no such fix: fsnyc"):
        unfixed_from_environment()


PRODUCTION = Path(__file__).resolve().parents[2] / "raftmq"
# What a switch for tests looks like in a module: the environment variable, or a fix read from a
# switch object (`fixes.fsync`, `self.fixes.lease`) or such an object defined.
TEST_SWITCH = re.compile(r"RAFTMQ_TEST_DISABLE_FIX|\b_?fixes\.[a-z_]|\bclass Fixes\b|\bALL_FIXES\b|\bFIX_NAMES\b")


def switch_violations(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{number}: {line.strip()}" for path in sorted(root.rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1) if TEST_SWITCH.search(line)]


def test_the_product_has_no_switch_that_undoes_a_fix() -> None:
    # The stock behaviour each regression test needs is planted from tests/helpers/unfixed.py.
    assert switch_violations(PRODUCTION) == []


def test_the_switch_check_names_a_module_with_a_switch(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text("def apply_module_fixes() -> None: ...\n# our fixes. The end\n")
    (tmp_path / "switched.py").write_text("if self.fixes.fsync:\n    pass\n")
    (tmp_path / "env.py").write_text('DISABLED = os.environ.get("RAFTMQ_TEST_DISABLE_FIX")\n')
    (tmp_path / "private.py").write_text("        if self._fixes.wire:\n")
    assert switch_violations(tmp_path) == ['env.py:1: DISABLED = os.environ.get("RAFTMQ_TEST_DISABLE_FIX")',
                                           "private.py:1: if self._fixes.wire:", "switched.py:1: if self.fixes.fsync:"]


# -- durable_rename ---------------------------------------------------------------------------


def test_snapshot_rename_and_metadata_are_fsynced(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                  unfixed: frozenset[str]) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    tmp, dump = tmp_path / "raft.snapshot.tmp", tmp_path / "raft.snapshot"
    tmp.write_bytes(b"snapshot")
    with module_names(unfixed):
        pso_serializer.atomicReplace(str(tmp), str(dump))  # the name pysyncobj's Serializer calls
    assert str(tmp) in synced and str(tmp_path) in synced
    synced.clear()
    journal = RaftJournal(str(tmp_path / "raft.journal"))
    journal.setCurrentTerm(3, "127.0.0.1:1")
    assert str(tmp_path / "raft.journal.meta.tmp") in synced and str(tmp_path) in synced
    journal._destroy()
    assert RaftJournal(str(tmp_path / "raft.journal")).getCurrentTerm() == 3


# -- pickle inflation -------------------------------------------------------------------------


def test_a_1kib_command_is_not_inflated_on_the_wire(group: Any, monkeypatch: pytest.MonkeyPatch,
                                                    unfixed: frozenset[str]) -> None:
    members = group(2)
    leader = leader_of(members)
    wire_sizes: list[int] = []
    if "wire" not in unfixed:  # our frames: the command as pysyncobj pickles it into the log, msgpack, GCM tag
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


def test_a_member_off_loopback_needs_a_password(group: Any, tmp_path: Path) -> None:
    member = Member(f"0.0.0.0:{free_port()}", [], str(tmp_path / "off-loopback"), syncobj_class=group.syncobj_class)
    group.made.append(member)  # stopped at the end if it started
    with pytest.raises(ConfigError, match="password"):
        member.start()


def test_a_password_is_required_off_loopback() -> None:
    with pytest.raises(ConfigError, match="password"):
        check_raft_address("10.1.2.3:7000", None)
    with pytest.raises(ConfigError, match="password"):
        check_raft_address("node2.example:7000", None)
    assert check_raft_address("10.1.2.3:7000", "s3cret") == ("10.1.2.3", 7000)
    assert check_raft_address("127.0.0.1:7000", None) == ("127.0.0.1", 7000)
    with pytest.raises(ConfigError):
        check_raft_address("7000", None)

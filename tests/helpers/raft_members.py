"""Hardened pysyncobj members in one process, for the regression tests of the pysyncobj wing
(tests/replication/test_pysyncobj_*.py): each member has its own tick thread and real TCP on
127.0.0.1, which is honest for everything but process faults (tests/replication/test_raft_log_faults.py
covers those with real processes).

A group's members are built from the class it is given: `HardenedSyncObj`, or one with fixes
undone (tests/helpers/unfixed.py, where `RAFTMQ_TEST_DISABLE_FIX` is read), so a fix's
regression test can be shown to fail without its fix:
`RAFTMQ_TEST_DISABLE_FIX=fsync pytest tests/replication/test_pysyncobj_transport.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from raftmq.processes import free_port
from raftmq.replication.pysyncobj.syncobj import SUCCESS, HardenedSyncObj
from raftmq.replication.pysyncobj.transport import DurableTransport
from tests.helpers.waiting import wait_until

__all__ = ["wait_until"]  # the tests of raft members import it from here


class Member:
    """A HardenedSyncObj whose state machine is the list of entries it applied."""

    def __init__(self, address: str, addresses: list[str], data_dir: str,
                 syncobj_class: type[HardenedSyncObj] = HardenedSyncObj, **kwargs: Any) -> None:
        self.address, self.addresses, self.data_dir, self.kwargs = address, addresses, data_dir, kwargs
        self.syncobj_class = syncobj_class
        self.applied: list[bytes] = []
        self.apply_calls = 0
        self.apply_hook: Callable[[int, bytes], None] | None = None
        self.obj: HardenedSyncObj | None = None

    def on_apply(self, index: int, term: int, entry: bytes) -> int:
        self.apply_calls += 1
        if self.apply_hook is not None:
            self.apply_hook(index, entry)
        self.applied.append(entry)
        return index

    def snapshot(self, index: int, term: int) -> bytes:
        return bytes(msgpack.packb(self.applied))

    def restore(self, state: bytes, index: int) -> None:
        self.applied = list(msgpack.unpackb(state))

    def start(self, with_snapshots: bool = True) -> Member:
        extra = {"snapshot": self.snapshot, "restore": self.restore} if with_snapshots else {}
        self.obj = self.syncobj_class(self.address, self.addresses, data_dir=self.data_dir, on_apply=self.on_apply,
                                      **extra, **self.kwargs)
        return self

    def stop(self) -> None:
        if self.obj is not None:
            self.obj.destroy_synchronous()
            self.obj = None

    def submit(self, entry: bytes, callback: Callable[[Any, int], None] | None = None) -> None:
        assert self.obj is not None
        self.obj.submit(entry, callback or (lambda result, error: None))


class Members:
    """Makes groups of members in a directory and stops all of them at the end of a test."""

    def __init__(self, directory: Any, syncobj_class: type[HardenedSyncObj] = HardenedSyncObj) -> None:
        self.directory, self.syncobj_class = directory, syncobj_class
        self.made: list[Member] = []

    def __call__(self, size: int, start: bool = True, **kwargs: Any) -> list[Member]:
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
        kwargs.setdefault("syncobj_class", self.syncobj_class)
        members = [
            Member(a, addresses, str(self.directory / f"m{len(self.made) + i}"), **kwargs)
            for i, a in enumerate(addresses)
        ]
        self.made.extend(members)
        if start:
            for member in members:
                member.start()
        return members

    def stop_all(self) -> None:
        for member in self.made:
            member.stop()


def leader_of(members: list[Member], timeout: float = 5.0) -> Member:
    assert wait_until(lambda: any(m.obj is not None and m.obj.is_leader for m in members), timeout), "no leader"
    return next(m for m in members if m.obj is not None and m.obj.is_leader)


def commit(member: Member, entry: bytes, timeout: float = 5.0) -> int:
    done = threading.Event()
    outcome: list[Any] = []
    member.submit(entry, lambda result, error: (outcome.append((result, error)), done.set()))
    assert done.wait(timeout), "entry not committed"
    result, error = outcome[0]
    assert error == SUCCESS, error
    return int(result)


def term_of(member: Member) -> int:
    assert member.obj is not None
    return int(member.obj.raftCurrentTerm)


class Partition:
    """Drops every Raft message between `isolated` and the rest (in both directions), at the
    transport: the TCP connections stay up, as they do through a short real partition."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.isolated: set[str] = set()
        original_send = DurableTransport.send
        original_receive = DurableTransport._onMessageReceived

        def cut(transport: Any, node: Any) -> bool:
            return (transport._selfNode.address in self.isolated) != (str(node.id) in self.isolated)

        def send(transport: Any, node: Any, message: Any) -> bool:
            return True if cut(transport, node) else original_send(transport, node, message)

        def receive(transport: Any, node: Any, message: Any) -> None:
            if not cut(transport, node):
                original_receive(transport, node, message)

        monkeypatch.setattr(DurableTransport, "send", send)
        monkeypatch.setattr(DurableTransport, "_onMessageReceived", receive)

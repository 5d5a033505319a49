"""Raft members with some of raftmq's fixes to pysyncobj 0.3.17 undone, for the regression tests of
the pysyncobj wing (tests/replication/test_pysyncobj_*.py): each of those tests must fail with
the stock behaviour its fix replaces.

The product has no switch for any fix: raftmq/replication/pysyncobj/ always runs all of them.
The stock behaviour is planted here, from the test side, as tests/helpers/unsafe_node.py plants
its bugs: one subclass of `HardenedSyncObj` (and, where the fix lives in the transport, of
`DurableTransport`) per fix, which calls pysyncobj's own method instead of ours or leaves out
what the fix adds; for the module-level swaps (`pickle`, `durable_rename`), pysyncobj's own names
put back. `syncobj_class(names)` composes the subclasses of the fixes named.

`RAFTMQ_TEST_DISABLE_FIX=name[,name]` undoes the fixes named for the members the tests under
tests/replication build (the `unfixed` fixture, tests/replication/conftest.py):
`RAFTMQ_TEST_DISABLE_FIX=fsync pytest tests/replication/test_pysyncobj_transport.py`.
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pysyncobj.atomic_replace as pso_atomic_replace
import pysyncobj.pickle as pso_pickle
import pysyncobj.serializer as pso_serializer
import pysyncobj.tcp_connection as pso_tcp
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.transport import TCPTransport

from raftmq.config import RaftTimings
from raftmq.replication.pysyncobj.patches import apply_module_fixes
from raftmq.replication.pysyncobj.raft_journal import RaftJournal
from raftmq.replication.pysyncobj.raft_journal_format import Entry
from raftmq.replication.pysyncobj.syncobj import HardenedSyncObj
from raftmq.replication.pysyncobj.transport import DurableTransport
from raftmq.replication.wire import RaftConnection

ENVIRONMENT = "RAFTMQ_TEST_DISABLE_FIX"

# The fixes, in the order of the table in raftmq/replication/pysyncobj/__init__.py.
FIX_NAMES = ("fsync", "durable_rename", "dump_always", "dump_journal_race", "entry_size", "pickle", "never_raise",
             "fallback", "bind", "no_spurious_truncation", "solo_commit", "short_candidate_round", "piggyback_commit",
             "pre_vote", "wire", "durable_term", "membership", "wake_once", "lease", "sleep_until_due",
             "quiet_connections")

STOCK = SyncObjConf()  # pysyncobj's defaults: 2**16-byte append-entries batches, a 30 s leader fallback
STOCK_PICKLE_PROTOCOL = 2  # pysyncobj 0.3.17's `pysyncobj.pickle.__protocol`


def checked(names: Iterable[str]) -> frozenset[str]:
    chosen = frozenset(name.strip() for name in names if name.strip())
    unknown = sorted(chosen - set(FIX_NAMES))
    if unknown:
        raise ValueError(f"no such fix: {', '.join(unknown)} (fixes: {', '.join(FIX_NAMES)})")
    return chosen


def unfixed_from_environment() -> frozenset[str]:
    """The fixes named in RAFTMQ_TEST_DISABLE_FIX (comma-separated)."""
    return checked(os.environ.get(ENVIRONMENT, "").split(","))


# -- pysyncobj's module-level names ------------------------------------------------------------


def plant_stock_module_names(names: Iterable[str]) -> None:
    """Put pysyncobj's own module-level names back where raftmq swaps them (process-wide)."""
    names = set(names)
    if "pickle" in names:  # pickle protocol 2 (bytes inflated), zlib level 3 on the wire
        pso_pickle.__dict__["__protocol"] = STOCK_PICKLE_PROTOCOL
        pso_tcp.zlib = zlib
    if "durable_rename" in names:  # a rename of the snapshot file, nothing fsynced
        pso_serializer.atomicReplace = pso_atomic_replace.atomicReplace


@contextmanager
def module_names(unfixed: Iterable[str]) -> Iterator[None]:
    """raftmq's module-level names, less those of the fixes in `unfixed`, until the end."""
    apply_module_fixes()
    plant_stock_module_names(unfixed)
    try:
        yield
    finally:
        apply_module_fixes()


# -- one subclass per fix ----------------------------------------------------------------------


class NoFsync(HardenedSyncObj):
    """`fsync` undone: nothing fsynced before an append-entries answer, a vote or the leader's count."""

    def make_durable(self) -> None:
        pass


class StockPickle(HardenedSyncObj):
    """`pickle` undone: pickle protocol 2 and zlib level 3 on the wire."""

    def _patch_pysyncobj(self) -> None:
        super()._patch_pysyncobj()
        plant_stock_module_names(["pickle"])


class StockRename(HardenedSyncObj):
    """`durable_rename` undone: snapshot files renamed without fsync."""

    def _patch_pysyncobj(self) -> None:
        super()._patch_pysyncobj()
        plant_stock_module_names(["durable_rename"])


class NoDumpFile(HardenedSyncObj):
    """`dump_always` undone: a journal without a snapshot file."""

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        conf = super()._pysyncobj_conf(timings, bind_address)
        conf.fullDumpFile = conf.serializer = conf.deserializer = None
        return conf


class UnalignedJournal(RaftJournal):
    def align_to_snapshot(self, last: Entry, previous: Entry) -> bool:
        return False


class NoJournalAlignment(HardenedSyncObj):
    """`dump_journal_race` undone: a journal not yet trimmed after its snapshot is left as it is
    (pysyncobj then discards it)."""

    def __init__(self, self_address: str, peers: Sequence[str], *, data_dir: str, journal: RaftJournal | None = None,
                 **kwargs: Any) -> None:
        if journal is None:
            os.makedirs(data_dir, exist_ok=True)
            journal = UnalignedJournal(os.path.join(data_dir, "raft.journal"))
        super().__init__(self_address, peers, data_dir=data_dir, journal=journal, **kwargs)


class StockEntrySize(HardenedSyncObj):
    """`entry_size` undone: pysyncobj's 64 KiB append-entries batches, and no entry refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entry_limit_bytes = sys.maxsize

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        conf = super()._pysyncobj_conf(timings, bind_address)
        conf.appendEntriesBatchSizeBytes = STOCK.appendEntriesBatchSizeBytes
        return conf


class MayRaise(HardenedSyncObj):
    """`never_raise` undone: the replicated apply and the callbacks raise into the tick thread."""

    @staticmethod
    def _guard(fn: Any, what: str, on_error: Any = None) -> Any:
        return fn


class StockFallback(HardenedSyncObj):
    """`fallback` undone: a leader without quorum steps down after 30 s."""

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        conf = super()._pysyncobj_conf(timings, bind_address)
        conf.leaderFallbackTimeout = STOCK.leaderFallbackTimeout
        return conf


class AnyBindTransport(DurableTransport):
    def _listen_address(self) -> str:
        return "0.0.0.0:" + str(self._selfNode.address).rsplit(":", 1)[1]


class StockBind(HardenedSyncObj):
    """`bind` undone: the Raft port bound to 0.0.0.0, and no password asked for off loopback."""

    transport_class = AnyBindTransport

    @staticmethod
    def _check_addresses(addresses: Sequence[str], password: str | None) -> None:
        pass

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        conf = super()._pysyncobj_conf(timings, bind_address)
        conf.bindAddress = None
        return conf


class TruncatingTransport(DurableTransport):
    def _trim_known_entries(self, message: dict[str, Any]) -> dict[str, Any] | None:
        return message


class StockTruncation(HardenedSyncObj):
    """`no_spurious_truncation` undone: a follower deletes what follows `prevLogIdx` before it appends."""

    transport_class = TruncatingTransport


class StockSoloCommit(HardenedSyncObj):
    """`solo_commit` undone: a group of one stands after an election timeout and commits at its next tick."""

    def _stand_at_once_alone(self) -> None:
        pass

    def _commit_at_once_alone(self, appended_after: int) -> None:
        pass


class StockCandidateRound(HardenedSyncObj):
    """`short_candidate_round` undone: a candidate waits a whole election timeout for its votes."""

    def _SyncObj__generateRaftTimeout(self) -> float:
        return float(SyncObj._SyncObj__generateRaftTimeout(self))


class StockCommitNotice(HardenedSyncObj):
    """`piggyback_commit` undone: every commit sends an append-entries to each follower at once."""

    def _SyncObj__applyLogEntries(self) -> bool:
        return bool(SyncObj._SyncObj__applyLogEntries(self))


class NoPreVote(HardenedSyncObj):
    """`pre_vote` undone: a member stands (raising its term) as soon as its deadline passes, votes
    while it hears from a leader, and ignores an append-entries of an older term."""

    def _start_prevote(self, now: float) -> None:
        pass

    def ignores_vote_request(self, message: dict[str, Any]) -> bool:
        return False

    def on_append_entries(self, node: Any, message: dict[str, Any]) -> None:
        if message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
            super().on_append_entries(node, message)

    def on_election_message(self, node: Any, message: dict[str, Any]) -> None:
        if message["type"] != "higher_term":
            super().on_election_message(node, message)


class StockWireTransport(DurableTransport):
    def _createServer(self) -> None:
        TCPTransport._createServer(self)

    def addNode(self, node: Any) -> None:
        TCPTransport.addNode(self, node)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        TCPTransport._onNewIncomingConnection(self, conn)

    def _onTick(self) -> None:
        TCPTransport._onTick(self)


class StockWire(HardenedSyncObj):
    """`wire` undone: pysyncobj's server and connections (pickle, zlib; Fernet with a password)."""

    transport_class = StockWireTransport

    def __init__(self, *args: Any, password: str | None = None, **kwargs: Any) -> None:
        self.stock_password = password
        super().__init__(*args, password=password, **kwargs)

    def _pysyncobj_conf(self, timings: RaftTimings, bind_address: str) -> SyncObjConf:
        conf = super()._pysyncobj_conf(timings, bind_address)
        conf.password = self.stock_password
        return conf


class StockTerm(HardenedSyncObj):
    """`durable_term` undone: a new term and vote believed before they are stored."""

    def _SyncObj__setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        SyncObj._SyncObj__setCurrentTerm(self, term, votedForNodeId)


class StockMembership(HardenedSyncObj):
    """`membership` undone: pysyncobj's own handling of a configuration change (it counts itself
    twice after a snapshot, applies a change again at commit, snapshots the configuration of the
    log's end, and starts with the configured peers)."""

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        return SyncObj._SyncObj__doApplyCommand(self, command)

    def _SyncObj__updateClusterConfiguration(self, newNodes: Any) -> None:
        SyncObj._SyncObj__updateClusterConfiguration(self, newNodes)
        self._members_changed()

    def _starting_members(self, configured: frozenset[str], snapshot_cluster: Sequence[str] | None,
                          snapshot_index: int) -> frozenset[str]:
        return configured

    def _snapshot_configuration(self, index: int, log_end_cluster: Iterable[Any]) -> list[str]:
        return sorted(str(node) for node in log_end_cluster)


class StockWake(HardenedSyncObj):
    """`wake_once` undone: pysyncobj's pipe notifier writes a byte per submitted entry."""

    def _install_wake_once(self) -> None:
        pass


class StockTickWait(HardenedSyncObj):
    """`sleep_until_due` undone: the tick thread's poll waits one tick period, due or not."""

    def _poll_timeout(self, tick: float) -> float:
        return tick


class StockIdleConnection(RaftConnection):
    def check_deadlines(self, now: float) -> None:
        if self.authenticated and now - self._last_read > self._timeout:
            self.disconnect()
        else:
            super().check_deadlines(now)


class StockIdleTransport(DurableTransport):
    connection_class = StockIdleConnection


class StockConnectionSilence(HardenedSyncObj):
    """`quiet_connections` undone: a connection is closed after `connectionTimeout` without a
    read, whether or not anything on it waits for an answer."""

    transport_class = StockIdleTransport


class NoLease(HardenedSyncObj):
    """`lease` undone: a leader writes to clients whenever it believes it leads."""

    def lease_holds(self, now: float) -> bool:
        return True


UNDOING: dict[str, type[HardenedSyncObj]] = {
    "fsync": NoFsync, "durable_rename": StockRename, "dump_always": NoDumpFile, "dump_journal_race": NoJournalAlignment,
    "entry_size": StockEntrySize, "pickle": StockPickle, "never_raise": MayRaise, "fallback": StockFallback,
    "bind": StockBind, "no_spurious_truncation": StockTruncation, "solo_commit": StockSoloCommit,
    "short_candidate_round": StockCandidateRound, "piggyback_commit": StockCommitNotice, "pre_vote": NoPreVote,
    "wire": StockWire, "durable_term": StockTerm, "membership": StockMembership, "wake_once": StockWake,
    "lease": NoLease, "sleep_until_due": StockTickWait, "quiet_connections": StockConnectionSilence,
}
assert set(UNDOING) == set(FIX_NAMES)


def syncobj_class(unfixed: Iterable[str] = ()) -> type[HardenedSyncObj]:
    """`HardenedSyncObj` with the fixes named in `unfixed` undone (itself when none is)."""
    names = checked(unfixed)
    if not names:
        return HardenedSyncObj
    undoing = [UNDOING[name] for name in FIX_NAMES if name in names]
    transports = [cls.transport_class for cls in undoing if cls.transport_class is not DurableTransport]
    namespace: dict[str, Any] = {}
    if len(transports) > 1:
        namespace["transport_class"] = type("UnfixedTransport", (*transports,), {})
    return type("Unfixed_" + "_".join(sorted(names)), (*undoing,), namespace)

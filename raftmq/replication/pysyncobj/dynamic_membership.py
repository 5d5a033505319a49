"""`DynamicMembership`: pysyncobj's single-member changes, made safe (mixed into
`HardenedSyncObj`, ahead of `SyncObj`). raftmq.replication.membership says what pysyncobj
gets wrong and decides what is right; this module wires it into pysyncobj's private methods:

- `__parseChangeClusterRequest` reads our JSON encoding (never pickle);
- `__doChangeCluster` ignores what is not a valid add or remove and reports every change;
- `__doApplyCommand` does not apply a change a second time at commit: a member's
  configuration is its log's (and its snapshot's), changed when entries are appended or
  truncated, as Raft has it;
- `__updateClusterConfiguration` (a snapshot loaded) re-applies the changes the log holds
  past the snapshot;
- `initial_members` gives a restarting member the configuration of its snapshot and journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import structlog
from pysyncobj import SyncObj

from raftmq.replication.membership import (
    COMMAND_MEMBERSHIP,
    Change,
    apply_changes,
    change_of_entry,
    decode_change,
    undo_changes,
)
from raftmq.replication.pysyncobj.raft_journal import RaftJournal

log = structlog.get_logger("raftmq.replication.pysyncobj")

MembersListener = Callable[[tuple[str, ...]], None]


def journal_changes(journal: RaftJournal, after_index: int) -> list[Change]:
    """The membership changes of the journal's entries past `after_index`, in log order (read
    from the end back: the snapshot writes this in the tick thread)."""
    changes = []
    for position in range(len(journal) - 1, -1, -1):
        command, index, _term = journal[position]
        if index <= after_index:
            break
        if command and command[0] == COMMAND_MEMBERSHIP:
            change = change_of_entry(bytes(command))
            if change is not None:
                changes.append(change)
    changes.reverse()
    return changes


def initial_members(configured: Iterable[str], snapshot_cluster: Sequence[str] | None, snapshot_index: int,
                    journal: RaftJournal) -> frozenset[str]:
    """What a member starts with: its snapshot's configuration (else the configured one), then
    every change its journal holds past the snapshot."""
    base = snapshot_cluster if snapshot_cluster is not None else configured
    return apply_changes(base, journal_changes(journal, snapshot_index))


class DynamicMembership:
    """The membership half of `HardenedSyncObj` (which provides `leadership`, `durable_journal`
    and `_on_members_changed`)."""

    _on_members_changed: MembersListener | None
    durable_journal: RaftJournal
    leadership: Any
    _alone: bool

    def change_membership(self, change: Change, callback: Callable[[Any, int], None]) -> None:
        """Append a change (leader only; thread-safe). `callback(None, FAIL_REASON)` runs in
        the tick thread once it committed, or was refused: another change not yet committed,
        this leader's no-op not yet committed, or nothing would change."""
        sync: Any = self
        sync._applyCommand(change.encode(), callback, COMMAND_MEMBERSHIP)

    @property
    def members(self) -> tuple[str, ...]:
        """The Raft addresses of the configuration this member uses (itself included)."""
        sync: Any = self
        return tuple(sorted({sync.selfNode.address, *(node.address for node in sync._SyncObj__otherNodes)}))

    def _SyncObj__parseChangeClusterRequest(self, command: bytes) -> list[str] | None:
        if not command or command[0] != COMMAND_MEMBERSHIP:
            return None
        change = decode_change(bytes(command[1:]))
        return ["invalid", "", ""] if change is None else change.request()

    def _SyncObj__doChangeCluster(self, request: list[Any], reverse: bool = False) -> bool:
        if not isinstance(request, list) or len(request) < 3 or request[0] not in ("add", "rem"):
            log.warning("raft.membership_entry_ignored", entry=repr(request)[:200])
            return False
        changed = bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        if changed:
            self._members_changed()
        return changed

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:
        if command and command[0] == COMMAND_MEMBERSHIP:
            return None  # the configuration changed when the entry was appended
        return SyncObj._SyncObj__doApplyCommand(self, command)

    def _SyncObj__updateClusterConfiguration(self, newNodes: Any) -> None:
        # pysyncobj filters itself out of a snapshot's members with `node != selfNode`, a
        # string against a Node, which never matches: it would count itself twice.
        sync: Any = self
        own = sync.selfNode.address
        SyncObj._SyncObj__updateClusterConfiguration(self, [node for node in newNodes if str(node) != own])
        journal = self.durable_journal
        # The snapshot's two entries head the log; what follows is past the snapshot.
        snapshot_index = journal[1][1] if len(journal) > 1 else 0
        for change in journal_changes(journal, snapshot_index):
            SyncObj._SyncObj__doChangeCluster(self, change.request())
        self._members_changed()

    def _starting_members(self, configured: frozenset[str], snapshot_cluster: Sequence[str] | None,
                          snapshot_index: int) -> frozenset[str]:
        """The configuration a (re)starting member uses: its snapshot's and journal's, not the
        configured one (`initial_members`); pysyncobj used the configured peers until its first
        ticks re-applied the committed changes."""
        return initial_members(configured, snapshot_cluster, snapshot_index, self.durable_journal)

    def _snapshot_configuration(self, index: int, log_end_cluster: Iterable[Any]) -> list[str]:
        """The configuration a snapshot taken at `index` stores: pysyncobj passes the one of the
        log's end (`log_end_cluster`)."""
        return self.configuration_at(index)

    def configuration_at(self, index: int) -> list[str]:
        """The configuration as of log index `index` (for a snapshot taken there)."""
        later = journal_changes(self.durable_journal, index)
        return sorted(undo_changes(self.members, reversed(later)))

    def _members_changed(self) -> None:
        sync: Any = self
        others = set(sync._SyncObj__otherNodes)
        self.leadership.reconfigure(others)
        self._alone = not others
        members = self.members
        log.info("raft.membership_changed", members=list(members), term=sync.raftCurrentTerm)
        if self._on_members_changed is not None:
            try:
                self._on_members_changed(members)
            except Exception:
                log.exception("raft.callback_failed", callback="members changed")

"""Who is in a group: the Raft configuration as the log and the snapshot define it (pure).

A membership change is one Raft entry that adds or removes one member (Raft's single-server
change, thesis §4.1): a member uses the configuration of the newest change entry its log
holds, committed or not, and the leader starts no second change before the first commits.
pysyncobj 0.3.17 implements the entries but (a) pickles a node object into them, which a
follower unpickles, (b) applies a change again when its entry commits, so a follower that
received an add and a later remove of the same member before either committed re-adds it
for a while, (c) snapshots the configuration of the log's end, not of the snapshot's index,
(d) on a restart, starts from the configured peers and learns its journal's changes only as
its first ticks apply the committed ones (never those past its commit index), and (e) loading
a snapshot, counts the member itself among its peers.
`raftmq.replication.pysyncobj.dynamic_membership` closes those with what this module decides:
our own encoding (JSON, one address), the configuration at any index of a log, and the
configuration a restarting member starts with.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from raftmq.errors import ConfigError

ADD = "add"
REMOVE = "rem"  # pysyncobj's own spelling, which its rollback of a truncated log reads
COMMAND_MEMBERSHIP = 2  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP: the entry's first byte
MAX_ENCODED_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Change:
    op: str  # ADD or REMOVE
    address: str  # the member's Raft address, its identity in the group

    def encode(self) -> bytes:
        """The entry's bytes after the type byte."""
        return json.dumps({"op": self.op, "node": self.address}, separators=(",", ":")).encode()

    def request(self) -> list[str]:
        """What pysyncobj's membership code takes: [op, node id, node address]."""
        return [self.op, self.address, self.address]

    def undo(self) -> Change:
        return Change(REMOVE if self.op == ADD else ADD, self.address)


def decode_change(payload: bytes) -> Change | None:
    """A change from the bytes after the type byte; None when they are not one of ours (never
    raises: an entry is data from a peer, and pysyncobj calls this in its tick thread)."""
    if len(payload) > MAX_ENCODED_BYTES:
        return None
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or set(data) != {"op", "node"}:
        return None
    op, address = data["op"], data["node"]
    if op not in (ADD, REMOVE) or not isinstance(address, str) or not valid_address(address):
        return None
    return Change(op, address)


def change_of_entry(command: bytes) -> Change | None:
    """The change a whole Raft journal command carries, None for any other command."""
    if not command or command[0] != COMMAND_MEMBERSHIP:
        return None
    return decode_change(command[1:])


def valid_address(address: str) -> bool:
    host, sep, port = address.rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)


def apply_changes(members: Iterable[str], changes: Iterable[Change]) -> frozenset[str]:
    """The configuration after `changes`, in log order."""
    current = set(members)
    for change in changes:
        if change.op == ADD:
            current.add(change.address)
        else:
            current.discard(change.address)
    return frozenset(current)


def undo_changes(members: Iterable[str], changes_newest_first: Iterable[Change]) -> frozenset[str]:
    """The configuration before `changes` (given newest first): the snapshot at index I must
    record the configuration as of I, not of the log's end."""
    return apply_changes(members, (change.undo() for change in changes_newest_first))


def check_change(members: frozenset[str], change: Change) -> None:
    """Refuse a change that would do nothing or leave no one (ConfigError, for the operator)."""
    if change.op == ADD and change.address in members:
        raise ConfigError(f"{change.address} is already a member")
    if change.op == REMOVE and change.address not in members:
        raise ConfigError(f"{change.address} is not a member (members: {', '.join(sorted(members))})")
    if change.op == REMOVE and len(members) == 1:
        raise ConfigError("cannot remove the last member of a group")

"""Test shorthand for a body store: one entry's `begin` and `end` at once, with no core between
(the order a member really runs them in is the commit log's contract, raftmq.replication.commit_log)."""

from __future__ import annotations

from collections.abc import Sequence

from raftmq.core.commands import Command
from raftmq.server.replica.bodies import BodyStore


def store_entry(store: BodyStore, index: int, term: int, commands: Sequence[Command], *, cache: bool = True) -> None:
    """The entry's batch written (its bodies' records), as a member's apply writes it."""
    store.begin(index, term, commands, cache=cache)
    store.end()

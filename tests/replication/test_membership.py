"""The pure membership decisions (raftmq/replication/membership.py): the entry encoding, which
never unpickles and refuses what is not a change, and configurations at any index."""

from __future__ import annotations

import pickle

import pytest

from raftmq.errors import ConfigError
from raftmq.replication.membership import (
    ADD,
    COMMAND_MEMBERSHIP,
    REMOVE,
    Change,
    apply_changes,
    change_of_entry,
    check_change,
    decode_change,
    undo_changes,
)


def test_a_change_round_trips_and_speaks_pysyncobjs_request() -> None:
    change = Change(ADD, "127.0.0.1:62616")
    assert decode_change(change.encode()) == change
    assert change_of_entry(bytes([COMMAND_MEMBERSHIP]) + change.encode()) == change
    assert change.request() == ["add", "127.0.0.1:62616", "127.0.0.1:62616"]
    assert change.undo() == Change(REMOVE, "127.0.0.1:62616")


@pytest.mark.parametrize("payload", [
    b"", b"{", b"[]", b'{"op": "add"}', b'{"op": "add", "node": "nohost"}', b'{"op": "drop", "node": "h:1"}',
    b'{"op": "add", "node": "h:70000"}', b'{"op": "add", "node": "h:1", "extra": 1}', b"\xff\xfe",
    pickle.dumps(["add", "h:1", "h:1"]), b"x" * 5000,
])
def test_anything_but_a_change_decodes_to_nothing(payload: bytes) -> None:
    assert decode_change(payload) is None


def test_a_regular_entry_is_not_a_change() -> None:
    assert change_of_entry(b"\x00" + Change(ADD, "h:1").encode()) is None
    assert change_of_entry(b"") is None


def test_configurations_forward_and_back() -> None:
    start = {"a:1", "b:1", "c:1"}
    changes = [Change(ADD, "d:1"), Change(REMOVE, "a:1"), Change(ADD, "e:1")]
    after = apply_changes(start, changes)
    assert after == {"b:1", "c:1", "d:1", "e:1"}
    assert undo_changes(after, reversed(changes)) == start
    assert undo_changes(after, reversed(changes[1:])) == {"a:1", "b:1", "c:1", "d:1"}


def test_changes_that_make_no_sense_are_refused_with_a_reason() -> None:
    members = frozenset({"a:1", "b:1"})
    with pytest.raises(ConfigError, match="already a member"):
        check_change(members, Change(ADD, "a:1"))
    with pytest.raises(ConfigError, match="is not a member"):
        check_change(members, Change(REMOVE, "z:1"))
    with pytest.raises(ConfigError, match="last member"):
        check_change(frozenset({"a:1"}), Change(REMOVE, "a:1"))
    check_change(members, Change(REMOVE, "a:1"))

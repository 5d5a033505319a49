"""The members file `raftmq group add-node / remove-node` keep (raftmq/ops/member_changes.py): what
is written reads back, it takes the place of the group file's [[node]] tables, and a damaged
one is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.group_file import MEMBERS_FILE, GroupMember, load_group_config
from cluster.topology import load_topology
from raftmq.errors import ConfigError, DeploymentError
from raftmq.ops import member_changes as membership_module
from raftmq.ops.member_changes import MembershipChanger, caught_up, write_members
from raftmq.replication.membership import ADD, Change


def test_the_members_file_replaces_the_group_files_nodes(tmp_path: Path) -> None:
    path = tmp_path / "g1.toml"
    nodes = [f'[[node]]\nid = "n{i}"\nclient = "127.0.0.1:{61000 + i}"\nraft = "127.0.0.1:{62000 + i}"\n'
             f'admin = "127.0.0.1:{63000 + i}"\n' for i in (1, 2, 3)]
    path.write_text(f'[group]\nname = "g1"\ndata_dir = "{tmp_path / "g1"}"\n' + "".join(nodes))
    group = load_group_config(path)
    new = GroupMember("n4", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")
    written = write_members(group, (*group.members[1:], new))
    assert written == Path(group.data_dir) / MEMBERS_FILE
    again = load_group_config(path)
    assert again.members == (*group.members[1:], new)
    written.write_text('[[node]]\nid = "n1"\n')
    with pytest.raises(ConfigError, match=f"{MEMBERS_FILE}: node\\[0\\].client is required"):
        load_group_config(path)


def test_caught_up_means_applied_and_no_body_missing() -> None:
    assert caught_up({"applied_index": 10, "bodies": {"missing_indexes": 0}}, 10)
    assert not caught_up({"applied_index": 9, "bodies": {"missing_indexes": 0}}, 10)
    assert not caught_up({"applied_index": 10, "bodies": {"missing_indexes": 3}}, 10)
    assert not caught_up({"raft": {"last_applied": 10}}, 10)  # the Raft log alone is not the state machine
    assert not caught_up(None, 0)


def test_a_refused_signature_is_reported_at_once_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "g1.toml"
    path.write_text(f'[group]\nname = "g1"\ndata_dir = "{tmp_path / "g1"}"\n[[node]]\nid = "n1"\n'
                    'client = "127.0.0.1:61001"\nraft = "127.0.0.1:62001"\nadmin = "127.0.0.1:63001"\n')
    calls: list[Change] = []

    def post(host: str, port: int, change: Change, password: str, timeout: float = 15.0,
             tls: object = None) -> tuple[int, dict[str, str]]:
        calls.append(change)
        return 403, {"error": "bad or missing signature"}

    monkeypatch.setattr(membership_module, "post_membership", post)
    leader = {"role": "leader", "raft": {"members": ["127.0.0.1:62001"]}, "commit_index": 1}
    changer = MembershipChanger(load_topology(path), "g1", lambda _line: None, timeout=30, fetch=lambda _admin: leader)
    with pytest.raises(DeploymentError, match="refused the request's signature"):
        changer._commit(Change(ADD, "127.0.0.1:62002"))
    assert len(calls) == 1

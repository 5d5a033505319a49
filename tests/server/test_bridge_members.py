"""A bridge follows its neighbour's members as `raftmq group add-node / remove-node` change
them (raftmq.server.links.bridge.current_members): it reads the neighbour's members file each time it
connects, and keeps what it knew when the file is absent or damaged."""

from __future__ import annotations

from pathlib import Path

from cluster.group_file import GroupMember
from raftmq.ops.member_changes import members_file_text
from raftmq.routing.cluster_connection import PeerGroup
from raftmq.server.links.bridge import current_members


def test_a_bridge_reads_the_members_its_neighbour_has_now(tmp_path: Path) -> None:
    path = tmp_path / "members.toml"
    peer = PeerGroup("g2", ("127.0.0.1:1", "127.0.0.1:2"), str(path))
    assert current_members(peer) == peer  # no file: the topology's members
    members = (GroupMember("n2", "127.0.0.1:2", "127.0.0.1:12", "127.0.0.1:22"),
               GroupMember("n4", "127.0.0.1:4", "127.0.0.1:14", "127.0.0.1:24"))
    path.write_text(members_file_text(members))
    assert current_members(peer).clients == ("127.0.0.1:2", "127.0.0.1:4")
    path.write_text("[[node]]\nid = 'n2'\n")  # damaged: keep what we knew
    assert current_members(peer) == peer
    assert current_members(PeerGroup("g3", ("127.0.0.1:9",))) == PeerGroup("g3", ("127.0.0.1:9",))

"""A hub for edges in one process: a group of one whose cluster connection accepts edges, as a
topology's `[[cluster_connection]] accept_edges` makes it (docs/topologies.md)."""

from __future__ import annotations

from pathlib import Path

from cluster.group_file import GroupConfig, GroupMember
from raftmq.config import NodeConfig
from raftmq.core.config import CoreConfig
from raftmq.processes import free_ports
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView
from raftmq.security import SecurityConfig, TlsConfig


def hub_group(data: Path, cluster_user: str | None = None, cluster_password: str | None = None,
              tls: TlsConfig | None = None) -> GroupConfig:
    """A group of one that accepts edges, as a topology's `accept_edges` makes it (only those
    logged in as `cluster_user`, when given; its client port speaks TLS with `tls`)."""
    client, raft, admin = free_ports(3)
    edges = ClusterConnection(name="edges", links=(), edge_hubs=("hub",), cluster_user=cluster_user,
                              cluster_password=cluster_password)
    view = ClusterView("hub", (edges,))
    member = GroupMember(id="h1", client=f"127.0.0.1:{client}", raft=f"127.0.0.1:{raft}", admin=f"127.0.0.1:{admin}")
    return GroupConfig(name="hub", data_dir=str(data), members=(member,),
                       server=NodeConfig(core=CoreConfig(cluster=view), security=SecurityConfig(tls=tls)))

"""What one node of a cluster takes from the topology file: its group's place in the cluster
(`ClusterView`, part of the broker core's configuration, the same on every member) and the
client addresses of the groups its leader's bridges connect to, set into its group's
`[server]` settings. `raftmq node --topology` and `raftmq up` (which starts every node with it)
use `with_cluster`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from cluster.group_file import MEMBERS_FILE, GroupConfig
from cluster.topology import Topology, load_topology
from raftmq.errors import ConfigError
from raftmq.routing.cluster_connection import ClusterView, PeerGroup, cluster_view


def node_cluster_settings(topology: Topology, group: str) -> tuple[ClusterView | None, tuple[PeerGroup, ...]]:
    """`group`'s view of the cluster (None when no connection links it) and its neighbours."""
    names = [spec.name for spec in topology.groups]
    if group not in names:
        where = topology.source or "the topology"
        raise ConfigError(f"{where}: no group named {group!r} (groups: {', '.join(names)})")
    view = cluster_view(group, topology.cluster_connections)
    if view is None:
        return None, ()
    specs = {spec.name: spec for spec in topology.groups}
    peers = tuple(
        PeerGroup(name, tuple(member.client for member in specs[name].config.members),
                  str(Path(specs[name].config.data_dir) / MEMBERS_FILE),
                  tuple(member.admin for member in specs[name].config.members if member.admin is not None))
        for name in view.neighbours
    )
    return view, peers


def with_cluster(config: GroupConfig, config_path: str | Path, topology_path: str | Path) -> GroupConfig:
    """`config` (read from `config_path`) as a group of the cluster `topology_path` describes."""
    topology = load_topology(topology_path)
    spec = next((spec for spec in topology.groups if spec.name == config.name), None)
    if spec is None:
        raise ConfigError(f"{topology_path}: no [[group]] is group {config.name!r} of {config_path}")
    if spec.config_path.resolve() != Path(config_path).resolve():
        raise ConfigError(f"{topology_path}: group {config.name!r} is {spec.config_path}, not {config_path}")
    view, peers = node_cluster_settings(topology, config.name)
    if view is None:
        return config
    server = config.server
    core = dataclasses.replace(server.core, cluster=view)
    return dataclasses.replace(config, server=dataclasses.replace(
        server, core=core, cluster_peers=peers, cluster_broadcast=topology.broadcast_groups,
        cluster_group_clients=tuple(m.client for m in config.members)))

"""Where the everyday commands (`raftmq send`, `receive`, `queue`) connect to.

In order: `--url`; else the running local cluster, from the state file `raftmq up` writes
(under `./.raftmq/`, or the data directory of `--config`); else the members a `--config` file
names (nodes started by hand with `raftmq node`); else `stomp://127.0.0.1:61613`.
`queue stat` reads the leader's admin `/status`: from `--admin`, or the same state or topology.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raftmq.client.failover_url import parse_failover_url
from raftmq.config import split_address
from raftmq.errors import ConfigError
from raftmq.ops.status_view import NodeAddress

if TYPE_CHECKING:
    from cluster.topology import Topology

DEFAULT_URL = "stomp://127.0.0.1:61613"
EXPLICIT_ADMIN_GROUP = "cluster"  # --admin addresses are taken as the members of one group


@dataclass(frozen=True, slots=True)
class Endpoints:
    url: str  # what clients connect to (a stomp:// or failover: URL)
    admin: tuple[NodeAddress, ...]  # whose /status `queue stat` reads; () when unknown
    source: str  # where they came from, for messages: "--url", "cluster state <path>", ...


def failover_url(groups: list[list[str]]) -> str:
    """`failover:(stomp://a,stomp://b)` for one group; nested parentheses for several."""
    urls = [",".join(f"stomp://{client}" for client in clients) for clients in groups]
    if len(urls) == 1:
        return f"failover:({urls[0]})"
    return "failover:(" + ",".join(f"({url})" for url in urls) + ")"


def resolve(url: str | None, config_path: str | None, admin: tuple[str, ...] = ()) -> Endpoints:
    """Raises `ConfigError` (an unusable URL, config or --admin address) or `DeploymentError`
    (an unreadable state file), each naming what is wrong."""
    explicit_admin = tuple(_admin_address(address) for address in admin)
    if url is not None:
        parse_failover_url(url)  # InvalidFailoverUrl (a ConfigError) names the bad part
        return Endpoints(url, explicit_admin, "--url")
    found = _local_cluster(config_path)
    if found is None:
        return Endpoints(DEFAULT_URL, explicit_admin, "default")
    return Endpoints(found.url, explicit_admin or found.admin, found.source)


def _local_cluster(config_path: str | None) -> Endpoints | None:
    from cluster.topology import DEFAULT_DATA_DIR, default_topology
    from raftmq.ops.launcher import read_state, running_nodes, state_path

    topology = _load(config_path) if config_path else default_topology(DEFAULT_DATA_DIR)
    state = read_state(topology.state_dir)
    if state is not None and running_nodes(state):
        groups: dict[str, list[str]] = {}
        for node in state.nodes:
            groups.setdefault(node.group, []).append(node.client)
        admin = tuple(node.address() for node in state.nodes if node.admin)
        return Endpoints(failover_url(list(groups.values())), admin, f"cluster state {state_path(topology.state_dir)}")
    if config_path is None:
        return None
    clients = [[member.client for member in group.config.members] for group in topology.groups]
    admin = tuple(
        NodeAddress(group.name, member.id, member.client, group.config.admin_endpoint(member) or "", mqtt=member.mqtt)
        for group, member in topology.members() if member.admin is not None
    )
    return Endpoints(failover_url(clients), admin, f"topology {Path(config_path)}")


def _load(config_path: str) -> Topology:
    """A topology file, or a group file; unlike `raftmq up` we need no admin addresses."""
    from cluster.group_file import is_group_file, load_group_config
    from cluster.topology import GroupSpec, Topology, load_topology

    path = Path(config_path)
    if not is_group_file(path):
        return load_topology(path)
    group = load_group_config(path)
    return Topology(group.name, Path(group.data_dir).resolve(), (GroupSpec(group, path.resolve()),), path)


def _admin_address(address: str) -> NodeAddress:
    try:
        split_address(address.removeprefix("https://"))
    except ValueError as exc:
        raise ConfigError(f"--admin: {exc}") from None
    return NodeAddress(EXPLICIT_ADMIN_GROUP, address, "", address)

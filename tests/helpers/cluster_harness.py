"""Real clusters of groups for the cluster-connection tests: each group a `Group` of member
processes (`python -m raftmq node --config <group> --node ID --topology <topology>`), all
described by one topology file with a `[[cluster_connection]]`; killed by pid."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from raftmq.client import StompClient
from tests.helpers.group_harness import Group, connect_leader


class Cluster:
    def __init__(self, tmp_path: Path, groups: list[str], size: int = 1, *, links: Any = "mesh",
                 network: list[dict[str, Any]] | None = None, raft: dict[str, Any] | None = None,
                 mqtt: bool = False, **connection: Any) -> None:
        """One [[cluster_connection]] with `links` and the `connection` keys; or, given
        `network`, [[network_connector]] tables instead: each dict's "to" (a group name, or a
        list of them) becomes its `uri` of those groups' members."""
        self.dir = tmp_path
        timings = {"election_timeout_min_ms": 300, **(raft or {})}
        self.groups = {}
        for name in groups:  # free_ports never hands a port out twice: the groups' ports differ
            self.groups[name] = Group(tmp_path, size, name=name, raft=timings, mqtt=mqtt)
        lines = ["[topology]", 'name = "test-cluster"', f'data_dir = "{tmp_path / "state"}"']
        for name in groups:
            lines += ["[[group]]", f'file = "{name}.toml"']
        discovery = connection.pop("discovery", None)  # a [[discovery_group]] table's keys: groups are found
        broadcast = connection.pop("broadcast", None)  # a [[broadcast_group]] table's keys
        if broadcast is not None:
            lines += ["[[broadcast_group]]", 'name = "bg"'] + [f"{k} = {json.dumps(v)}" for k, v in broadcast.items()]
        if discovery is not None:
            lines += ["[[discovery_group]]", 'name = "dg"'] + [f"{k} = {json.dumps(v)}" for k, v in discovery.items()]
            lines += ["[[cluster_connection]]", 'name = "test"', 'discovery_group = "dg"']
            lines += [f"{key} = {json.dumps(value)}" for key, value in connection.items()]
        elif network is None:
            lines += ["[[cluster_connection]]", 'name = "test"', f"groups = {json.dumps(groups)}",
                      f"links = {json.dumps(links)}"]
            lines += [f"{key} = {json.dumps(value)}" for key, value in connection.items()]
        for entry in network or []:
            options = dict(entry)
            targets = options.pop("to")
            targets = [targets] if isinstance(targets, str) else targets
            uri = ",".join(f"stomp://{h}:{p}" for target in targets for h, p in self.groups[target].client_addresses())
            lines += ["[[network_connector]]", f'uri = "static:({uri})"']
            lines += [f"{key} = {json.dumps(value)}" for key, value in options.items()]
        self.topology = tmp_path / "topology.toml"
        self.topology.write_text("\n".join(lines) + "\n")
        for group in self.groups.values():
            group.extra_args = ["--topology", str(self.topology)]

    def start(self) -> None:
        for group in self.groups.values():
            group.start(wait=False)
        for group in self.groups.values():
            for node_id in group.members:
                group.wait_ready(node_id)

    def close(self) -> None:
        for group in self.groups.values():
            group.close()

    def addresses(self, group: str) -> list[tuple[str, int]]:
        return self.groups[group].client_addresses()

    async def client(self, group: str) -> StompClient:
        return await connect_leader(self.addresses(group))

    def cluster_status(self, group: str) -> dict[str, Any] | None:
        """The `cluster` section of the group leader's /status."""
        g = self.groups[group]
        for node_id in g.members:
            status = g.status(node_id, timeout=1.0)
            if status and status.get("role") == "leader":
                cluster: dict[str, Any] | None = status.get("cluster")
                return cluster
        return None

    def queue_depths(self, destination: str) -> dict[str, int]:
        """Ready plus in-flight messages of `destination` on each group's leader."""
        depths = {}
        for name, g in self.groups.items():
            for node_id in g.members:
                status = g.status(node_id, timeout=1.0)
                if status and status.get("role") == "leader":
                    entry = status["broker"]["destinations"].get(destination, {})
                    depths[name] = int(entry.get("depth", 0)) + int(entry.get("in_flight", 0))
        return depths

    def wait_links(self, timeout: float = 20.0, learners: Any = None) -> None:
        """Until every group's leader has every link connected and each of `learners` (default:
        every group; those that forward somewhere) knows every other group it can reach (its
        neighbours' first adverts arrived)."""
        deadline = time.monotonic() + timeout
        pending: dict[str, Any] = {}
        learners = set(self.groups if learners is None else learners)
        while time.monotonic() < deadline:
            pending = {}
            for name in self.groups:
                cluster = self.cluster_status(name)
                links = cluster["links"] if cluster else []
                if not cluster or not links or any(link["state"] != "connected" for link in links) \
                        or (name in learners and not cluster["reachable"]):
                    pending[name] = cluster
            if not pending:
                return
            time.sleep(0.1)
        raise AssertionError(f"links not up within {timeout}s: {pending}")


async def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(interval)
    return bool(predicate())


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test function in its own event loop (fixtures and parameters pass through)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run

"""`raftmq group drain GROUP [--to G,...]`: scale a cluster down by one group, safely.

The command tells the group's leader (a SEND to the control destination, as the cluster's own
connection) to drain; from that committed moment the group (raftmq.core.cluster_routing) advertises
nothing, so no group routes to it any more, turns clients away (`ERROR group draining` naming
the other groups' addresses; failover clients with the whole cluster's URL go elsewhere) and
ends the sessions it had (their unacknowledged deliveries return to their queues), and on each
Tick moves what it holds — queues, dead letters, inactive durable subscriptions — to the other
groups as committed moves with duplicate-detection ids, while its bridges forward what waits
in its store-and-forward queues. The command waits until the group's leader reports nothing
left (every destination's depth and in-flight zero), printing progress; then the group can be
stopped (`raftmq down`, or its nodes) with nothing left behind. `--cancel` stops a drain.
A group that is not in a cluster of groups has nowhere to drain to: the command says so before
it sends anything (its members' /status has no `cluster`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cluster.topology import Topology
from raftmq.client.failover import connect_failover
from raftmq.errors import BrokerRefused, ClientError, DeploymentError
from raftmq.ops.status_view import fetch_status, held
from raftmq.routing.route import BRIDGE_CONNECT_HEADER, CONTROL_DESTINATION, DRAIN_HEADER

POLL_SECONDS = 0.5


@dataclass
class DrainResult:
    seconds: float
    moved: int  # the group's `drained` counter at the end


def _group(topology: Topology, name: str) -> Any:
    for spec in topology.groups:
        if spec.name == name:
            return spec
    raise DeploymentError(f"{topology.source or 'the topology'}: no group {name!r} "
                          f"(groups: {', '.join(g.name for g in topology.groups)})")


def _credentials(topology: Topology, name: str) -> tuple[str | None, str | None]:
    for connection in topology.cluster_connections:
        if name in connection.groups and connection.cluster_user is not None:
            return connection.cluster_user, connection.cluster_password
    return None, None


async def _tell(addresses: list[str], value: str, login: str | None, passcode: str | None) -> None:
    url = "failover:(" + ",".join(f"stomp://{a}" for a in addresses) + ")?randomize=false&maxReconnectAttempts=10"
    client = await connect_failover(url, login=login, passcode=passcode,
                                    connect_headers=[(BRIDGE_CONNECT_HEADER, "drain")])
    try:
        await client.send(CONTROL_DESTINATION, b"", [(DRAIN_HEADER, value)], receipt=True)
    finally:
        await client.close()


def _lone(name: str) -> DeploymentError:
    return DeploymentError(f"group {name!r} is not in a cluster of groups: a lone group has nowhere to drain to "
                           "(a drain moves what a group holds to the other groups of its cluster)")


def check_clustered(name: str, statuses: list[dict[str, Any] | None]) -> None:
    """Raise when the members that answered say the group is in no cluster of groups (their
    /status has no `cluster`); nothing is known when none answered."""
    answered = [status for status in statuses if status is not None]
    if answered and not any(isinstance(status.get("cluster"), dict) for status in answered):
        raise _lone(name)


def remaining(status: dict[str, Any]) -> int:
    """Messages a group's leader still holds: every destination's ready and in-flight ones."""
    return held(status)


def _holding(status: dict[str, Any]) -> str:
    destinations = status.get("broker", {}).get("destinations", {})
    held = {name: int(d.get("depth", 0)) + int(d.get("in_flight", 0)) for name, d in destinations.items()}
    return ", ".join(f"{name}: {count}" for name, count in sorted(held.items()) if count) or "nothing"


def drain_group(topology: Topology, name: str, to: tuple[str, ...], *, cancel: bool = False, wait: bool = True,
                timeout: float = 600.0, report: Callable[[str], None] = print,
                login: str | None = None, passcode: str | None = None) -> DrainResult:
    spec = _group(topology, name)
    admins = [admin for admin in map(spec.config.admin_endpoint, spec.config.members) if admin]
    if not admins:
        raise DeploymentError(f"group {name!r} has no admin addresses: the drain cannot be followed")
    if login is None:
        login, passcode = _credentials(topology, name)
    check_clustered(name, [fetch_status(admin) for admin in admins])
    value = "-" if cancel else ",".join(to)
    started = time.monotonic()
    try:
        asyncio.run(_tell([m.client for m in spec.config.members], value, login, passcode))
    except BrokerRefused as exc:
        detail = exc.body.decode(errors="replace").strip()
        if str(exc).startswith("reserved destination") and detail == CONTROL_DESTINATION:
            raise _lone(name) from None  # a group without cluster routing (its /status was not read)
        raise DeploymentError(f"group {name!r} refused: {exc}" + (f": {detail}" if detail else "")) from None
    except ClientError as exc:
        raise DeploymentError(f"cannot reach group {name!r}: {exc}") from None
    if cancel:
        report(f"{name}: drain stopped")
        return DrainResult(time.monotonic() - started, 0)
    report(f"{name}: draining to {', '.join(to) or 'every other group it reaches'}")
    deadline = started + timeout
    last = None
    leader: dict[str, Any] | None = None
    while True:
        leader = next((s for s in (fetch_status(a) for a in admins) if s and s.get("role") == "leader"), None)
        if leader is not None:
            left = remaining(leader)
            moved = int(leader.get("cluster", {}).get("drained", 0))
            if (left, moved) != last:
                report(f"{name}: moved {moved}, {left} left")
                last = (left, moved)
            if left == 0 and leader.get("cluster", {}).get("draining") is not None:
                return DrainResult(time.monotonic() - started, moved)
        if not wait:
            return DrainResult(time.monotonic() - started, 0)
        if time.monotonic() > deadline:
            held = _holding(leader) if leader is not None else "its leader does not answer"
            raise DeploymentError(f"{name} still holds messages after {timeout:g} s ({held}); it keeps draining "
                                  f"(`raftmq group drain {name} --cancel` stops it)")
        time.sleep(POLL_SECONDS)

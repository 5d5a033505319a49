"""Edges and hubs: embedded brokers in the network (raftmq.embedded, ActiveMQ's "embedded
brokers" topology), as leader services.

An **edge** (a group whose connection has a `Hub`: an embedded broker's `static:(...)` network
connector) knows its hub only by address. `HubLink` connects there once to learn the hub's group
name from its CONNECTED (`raftmq-group`), keeps the name in `hubs_file` (so an edge restarted
while the hub is away still knows where what waits for the hub goes), then runs an ordinary
bridge to it (raftmq.server.links.bridge) that opens the link's only connection: it pushes the
edge's messages and, on the same connection, pulls the hub's traffic for the edge back
(raftmq.server.links.passive_link). With `duplex` it advertises the edge's consumers, so the
hub's messages may come to them; without, none do. While the hub is unreachable the bridge
retries with the connection's back-off and what is bound for it waits in the edge's
store-and-forward queue; before the edge ever reached it, nothing is bound for it and messages
wait in their own queues, which redistribution moves once the hub advertises consumers.

A **hub** (a group of a topology whose `[[cluster_connection]]` says `accept_edges`) lists its
edges nowhere. `EdgeLinks` runs a passive link (raftmq.server.links.passive_link) for each group
that shows itself: one whose bridge subscribed to its store-and-forward queue here, or whose
advert this group committed. Who may do either is the core's check (the cluster user).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import structlog

from raftmq.client.stomp_client import connect
from raftmq.config import split_address
from raftmq.errors import ClientError
from raftmq.protocol.frame import GROUP_HEADER
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView, PeerGroup
from raftmq.routing.route import BRIDGE_CONNECT_HEADER, SF_PREFIX
from raftmq.server.links.bridge import Bridge
from raftmq.server.links.passive_link import PassiveLink
from raftmq.server.seams.leader_task import LeaderTask

log = structlog.get_logger("raftmq.server.hub_links")

PROBE_TIMEOUT_SECONDS = 5.0
EDGE_CHECK_SECONDS = 1.0


def hub_key(connection: ClusterConnection) -> str:
    """How `hubs_file` knows a hub: its addresses."""
    assert connection.hub is not None
    return ",".join(connection.hub.addresses)


def read_hub_names(path: str | None) -> dict[str, str]:
    if path is None or not os.path.exists(path):
        return {}
    try:
        names = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        log.warning("hub.names_unreadable", file=path, error=str(exc))
        return {}
    return {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {}


def write_hub_name(path: str | None, key: str, name: str) -> None:
    if path is None:
        return
    names = read_hub_names(path)
    names[key] = name
    temporary = f"{path}.{os.getpid()}.tmp"
    Path(temporary).write_text(json.dumps(names, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)


class HubLink(LeaderTask):
    """An edge's link to one hub: learn its name, then run the bridge to it."""

    def __init__(self, host: Any, own: str, connection: ClusterConnection, links: list[Any],
                 hubs_file: str | None) -> None:
        assert connection.hub is not None
        self.name = f"hub link of {own} to {', '.join(connection.hub.addresses)}"
        self._host, self._own, self._connection = host, own, connection
        self._links = links  # the node's list of links (its status shows them)
        self._hubs_file = hubs_file
        self.bridge: Bridge | None = None
        self.hub_name: str | None = read_hub_names(hubs_file).get(hub_key(connection))
        self.state = "connecting"  # until the hub's name is known; then the bridge's status shows
        self.last_error: str | None = None
        self.retry_at: float | None = None

    async def start(self) -> None:
        if self.hub_name is None:
            self._links.append(self)  # shown as the link until the bridge takes its place
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        if self in self._links:
            self._links.remove(self)
        bridge, self.bridge = self.bridge, None
        if bridge is not None:
            await bridge.stop()
            if bridge in self._links:
                self._links.remove(bridge)

    async def run(self) -> None:
        connection = self._connection
        assert connection.hub is not None
        attempt = 0
        while self.hub_name is None:
            try:
                self.hub_name = await self._probe()
            except (ClientError, OSError, TimeoutError) as exc:
                delay = connection.retry.delay_ms(attempt) / 1000
                attempt += 1
                self.state, self.last_error = "retrying", str(exc)
                self.retry_at = asyncio.get_running_loop().time() + delay
                log.warning("hub.unreachable", group=self._own, hub=list(connection.hub.addresses), error=str(exc),
                            retry_in_s=delay)
                await asyncio.sleep(delay)
                continue
            write_hub_name(self._hubs_file, hub_key(connection), self.hub_name)
            log.info("hub.found", group=self._own, hub=self.hub_name, addresses=list(connection.hub.addresses))
        peer = PeerGroup(self.hub_name, connection.hub.addresses)
        bridge = self.bridge = Bridge(self._host, self._own, peer, connection, advertises=connection.hub.duplex,
                                      pulls=True)
        if self in self._links:
            self._links.remove(self)
        self._links.append(bridge)
        await bridge.start()
        await asyncio.Event().wait()  # the bridge runs until this service stops

    def status(self) -> dict[str, Any]:
        """The link while the hub's name is unknown (its group is shown as its addresses)."""
        assert self._connection.hub is not None
        retry_at = self.retry_at
        retry_in = None if retry_at is None else max(0.0, round(retry_at - asyncio.get_running_loop().time(), 1))
        return {"from": self._own, "to": f"hub at {','.join(self._connection.hub.addresses)}", "state": self.state,
                "retry_in_s": retry_in if self.state == "retrying" else None, "forwarded": 0, "refused": 0,
                "waiting": 0, "in_flight": 0, "adverts_sent": 0, "last_error": self.last_error}

    async def _probe(self) -> str:
        """The hub's group name, from the CONNECTED of a member (any: a follower answers too)."""
        connection = self._connection
        assert connection.hub is not None
        problems = []
        for address in connection.hub.addresses:  # a follower relays the CONNECT to its leader
            host, port = split_address(address)
            try:
                client = await connect(
                    host, port, login=connection.cluster_user, passcode=connection.cluster_password,
                    headers=[(BRIDGE_CONNECT_HEADER, self._own)], timeout=PROBE_TIMEOUT_SECONDS,
                    ca_file=connection.tls_ca_file)
            except ClientError as exc:
                problems.append(f"{address}: {exc}")
                continue
            try:
                name = client.server_headers.get(GROUP_HEADER)
            finally:
                await client.disconnect(PROBE_TIMEOUT_SECONDS)
            if not name:
                raise ClientError(f"{address} answered, but names no group: is it a raftmq group of a cluster "
                                  "(a topology whose [[cluster_connection]] accepts edges)?")
            return name
        raise ClientError("; ".join(problems) or "no address")


def _to(link: Any) -> str:
    """The group a link of the node's list goes to (a bridge's neighbour is a PeerGroup)."""
    neighbour = link.neighbour
    return neighbour if isinstance(neighbour, str) else str(neighbour.name)


class EdgeLinks(LeaderTask):
    """A hub's passive links to the edges that showed themselves."""

    name = "edge links"

    def __init__(self, host: Any, view: ClusterView, links: list[Any]) -> None:
        self._host, self._view = host, view
        self._links = links
        self.passive: dict[str, PassiveLink] = {}

    async def stop(self) -> None:
        await super().stop()
        for link in self.passive.values():
            await link.stop()
            if link in self._links:
                self._links.remove(link)
        self.passive.clear()

    def edges_now(self) -> set[str]:
        """Groups listed nowhere that pull from this group, or whose advert it committed."""
        view = self._view
        ours = set(self.passive.values())
        listed = set(view.neighbours) | {view.group} | {_to(link) for link in self._links if link not in ours}
        found = {queue[len(SF_PREFIX):] for queue, store in self._host.broker.state.queues.items()
                 if queue.startswith(SF_PREFIX) and store.consumers}
        routing = self._host.broker.routing
        if routing is not None:
            found |= set(routing.cluster_state.adverts)
        return {group for group in found if group and group not in listed}

    async def run(self) -> None:
        # Looked for once a second, not on every applied batch: the look scans the queues.
        while True:
            for edge in sorted(self.edges_now() - set(self.passive)):
                log.info("hub.edge_found", group=self._view.group, edge=edge)
                link = PassiveLink(self._host, self._view.group, edge, advertises=True)
                self.passive[edge] = link
                self._links.append(link)
                await link.start()
            await asyncio.sleep(EDGE_CHECK_SECONDS)

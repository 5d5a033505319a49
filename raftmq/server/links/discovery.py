"""Finding the other groups at run time (raftmq.routing.discovery has the settings and the pure parts).

Two leader services of a group's leader:
- `Announcer`: every `broadcast_period_ms`, a UDP datagram to each broadcast group's multicast
  address naming this group and its members' STOMP addresses, with the time and a sequence
  number (signed with the cluster password, when there is one), once per cluster connection
  with discovery it is part of. A group is announced while it has a leader, since only a leader
  serves. The listeners take each announcement once, while it is fresh (`Freshness`).
- `DiscoveredLinks`: listens on a discovery group's multicast address (or re-reads its file),
  and opens a bridge (raftmq.server.links.bridge) to every group it hears of, without a restart;
  one whose addresses change gets a new bridge. One not heard of for `refresh_timeout_ms` keeps
  its bridge, which retries with its back-off, and is shown down (`presence` in the link's
  status) until it is heard of again: its messages wait in the store-and-forward queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import structlog

from raftmq.routing.cluster_connection import ClusterConnection, PeerGroup
from raftmq.routing.discovery import (
    Announcement,
    BroadcastGroup,
    DiscoveryGroup,
    DiscoveryTable,
    Freshness,
    decode_announcement,
    encode_announcement,
    parse_members,
)
from raftmq.server.links.bridge import Bridge
from raftmq.server.seams.leader_task import LeaderTask

log = structlog.get_logger("raftmq.server.discovery")

RECONCILE_SECONDS = 0.5
MULTICAST_TTL = 1  # announcements never leave the local network segment


def _sender(group: BroadcastGroup) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, MULTICAST_TTL)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)  # other groups on this host hear it
    if group.local_bind_address is not None:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(group.local_bind_address))
    sock.setblocking(False)
    return sock


def _listener(group: DiscoveryGroup) -> socket.socket:
    assert group.group_address is not None and group.group_port is not None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    with contextlib.suppress(AttributeError, OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # every group on this host listens
    sock.bind((group.group_address, group.group_port))  # this multicast group's datagrams only
    interface = socket.inet_aton(group.local_bind_address or "0.0.0.0")
    membership = struct.pack("4s4s", socket.inet_aton(group.group_address), interface)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
    sock.setblocking(False)
    return sock


class Announcer(LeaderTask):
    name = "discovery announcer"

    def __init__(self, group: str, clients: tuple[str, ...], broadcast: tuple[BroadcastGroup, ...],
                 connections: tuple[ClusterConnection, ...], wall: Callable[[], float] = time.time) -> None:
        self._group, self._clients = group, clients
        self._broadcast = broadcast
        self._connections = connections
        self._wall = wall
        self.sent = 0
        self.seq = 0

    async def run(self) -> None:
        sockets = [(group, _sender(group)) for group in self._broadcast]
        sender = os.urandom(8).hex()  # this announcer's: its sequence numbers start again
        try:
            period = min(group.broadcast_period_ms for group in self._broadcast) / 1000
            while True:
                for group, sock in sockets:
                    for connection in self._connections:
                        self.seq += 1
                        wall_ms = int(self._wall() * 1000)
                        heard = Announcement(connection.name, self._group, self._clients, wall_ms, sender, self.seq)
                        data = encode_announcement(heard, connection.cluster_password)
                        try:
                            sock.sendto(data, (group.group_address, group.group_port))
                            self.sent += 1
                        except OSError as exc:  # no route to the multicast address: say so, keep trying
                            log.warning("discovery.announce_failed", group=self._group, address=group.group_address,
                                        error=str(exc))
                await asyncio.sleep(period)
        finally:
            for _, sock in sockets:
                sock.close()


class DiscoveredLinks(LeaderTask):
    """The bridges of one cluster connection with discovery, made as groups are heard of."""

    def __init__(self, host: Any, own: str, connection: ClusterConnection, links: list[Any],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        assert connection.discovery is not None
        self.name = f"discovered links of {connection.name}"
        self._host, self._own, self._connection = host, own, connection
        self._links = links  # the node's list of links (its status shows them)
        self._clock, self._wall = clock, wall
        self.table = DiscoveryTable(own, connection.discovery.refresh_timeout_ms)
        self.freshness = Freshness(connection.discovery.refresh_timeout_ms)
        self.bridges: dict[str, Bridge] = {}
        self._socket: socket.socket | None = None

    async def start(self) -> None:
        discovery = self._connection.discovery
        assert discovery is not None
        if discovery.file is None:
            self._socket = _listener(discovery)
            asyncio.get_running_loop().add_reader(self._socket.fileno(), self._receive)
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        if self._socket is not None:
            asyncio.get_running_loop().remove_reader(self._socket.fileno())
            self._socket.close()
            self._socket = None
        for bridge in self.bridges.values():
            await bridge.stop()
            if bridge in self._links:
                self._links.remove(bridge)
        self.bridges.clear()

    def _receive(self) -> None:
        assert self._socket is not None
        while True:
            try:
                data, sender = self._socket.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("discovery.receive_failed", error=str(exc))
                return
            try:
                heard = decode_announcement(data, self._connection.cluster_password)
            except ValueError as exc:
                log.warning("discovery.ignored", sender=f"{sender[0]}:{sender[1]}", reason=str(exc))
                continue
            if heard.cluster != self._connection.name:
                continue
            refusal = self.freshness.refusal(heard, int(self._wall() * 1000))
            if refusal is not None:
                log.warning("discovery.ignored", sender=f"{sender[0]}:{sender[1]}", group=heard.group, reason=refusal)
                continue
            self.table.hear(heard.group, heard.clients, self._clock())

    def _read_file(self) -> None:
        discovery = self._connection.discovery
        assert discovery is not None and discovery.file is not None
        try:
            members = parse_members(discovery.file.read_text(encoding="utf-8"), str(discovery.file))
        except (OSError, ValueError) as exc:
            log.warning("discovery.file_unreadable", error=str(exc))
            return
        now = self._clock()
        for group, clients in members.items():
            self.table.hear(group, clients, now)

    async def run(self) -> None:
        discovery = self._connection.discovery
        assert discovery is not None
        while True:
            if discovery.file is not None:
                self._read_file()
            await self._reconcile()
            await asyncio.sleep(RECONCILE_SECONDS)

    async def _reconcile(self) -> None:
        now = self._clock()
        for group, clients in self.table.groups().items():
            bridge = self.bridges.get(group)
            if bridge is None or bridge.neighbour.clients != clients:
                if bridge is not None:
                    await bridge.stop()
                    self._links.remove(bridge)
                log.info("discovery.group_found" if bridge is None else "discovery.group_moved",
                         group=self._own, found=group, clients=list(clients))
                bridge = Bridge(self._host, self._own, PeerGroup(group, clients), self._connection)
                self.bridges[group] = bridge
                self._links.append(bridge)
                await bridge.start()
            up = self.table.up(group, now)
            if bridge.presence == "up" and not up:
                discovery = self._connection.discovery
                log.warning("discovery.group_lost", group=self._own, lost=group,
                            after_s=discovery.refresh_timeout_ms / 1000 if discovery else None)
            if bridge.presence != ("up" if up else "down"):
                self._host.applied.beat()  # the bridge's watcher looks again
            bridge.presence = "up" if up else "down"

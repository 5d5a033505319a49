"""A captured announcement, replayed, does not bring back a group that went down
(raftmq.server.links.discovery, raftmq.routing.discovery `Freshness`). The announcer and the
listener are the node's own, on UDP over loopback (unicast: the multicast path is
tests/cluster/test_discovery_udp.py's, in a network namespace); the clocks are the test's."""

from __future__ import annotations

import asyncio
import select
import socket
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from raftmq.routing.cluster_connection import ClusterConnection
from raftmq.routing.discovery import BroadcastGroup, DiscoveryGroup
from raftmq.server.links.discovery import Announcer, DiscoveredLinks

pytestmark = pytest.mark.integration  # UDP sockets on loopback

REFRESH_MS = 2_000
PASSWORD = "s3cret"


class Clocks:
    """The listener's monotonic clock and everyone's wall clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.wall = 1_700_000_000.0

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += seconds


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def connection(port: int) -> ClusterConnection:
    discovery = DiscoveryGroup("dg", "127.0.0.1", port, refresh_timeout_ms=REFRESH_MS)
    return ClusterConnection("main", (), cluster_password=PASSWORD, discovery=discovery)


def capture(listener: socket.socket, clocks: Clocks, count: int) -> list[bytes]:
    """What g2's leader announces, `count` announcements (its real announcer, sending to `listener`)."""
    port = listener.getsockname()[1]
    announcer = Announcer("g2", ("127.0.0.1:61613",),
                          (BroadcastGroup("bg", "127.0.0.1", port, broadcast_period_ms=10),),
                          (connection(port),), wall=lambda: clocks.wall)

    async def announce() -> None:
        await announcer.start()
        while announcer.seq < count:
            await asyncio.sleep(0.01)
        await announcer.stop()

    asyncio.run(announce())
    return [listener.recv(65536) for _ in range(count)]


def heard(links: DiscoveredLinks, listener: socket.socket, data: bytes) -> None:
    """`data` arrives on the listener's socket and is read as the node reads it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(data, listener.getsockname())
    assert select.select([listener], [], [], 5)[0], "the datagram did not arrive"
    listener.setblocking(False)
    links._receive()
    assert not select.select([listener], [], [], 0)[0]  # read


def listening(listener: socket.socket, clocks: Clocks) -> DiscoveredLinks:
    links = DiscoveredLinks(SimpleNamespace(), "g1", connection(listener.getsockname()[1]), [],
                            clock=lambda: clocks.now, wall=lambda: clocks.wall)
    links._socket = listener
    return links


def test_a_captured_announcement_replayed_does_not_show_a_group_that_went_down_up(listener: socket.socket) -> None:
    clocks = Clocks()
    (captured,) = capture(listener, clocks, 1)
    links = listening(listener, clocks)
    heard(links, listener, captured)
    assert links.table.up("g2", clocks.now)
    clocks.advance(REFRESH_MS / 1000 + 1)  # g2 went down: nothing since
    assert not links.table.up("g2", clocks.now)
    heard(links, listener, captured)  # a stranger replays what it captured on the multicast address
    assert not links.table.up("g2", clocks.now)
    clocks.advance(0.5)
    assert not links.table.up("g2", clocks.now)


def test_a_replay_inside_the_window_does_not_keep_a_group_up(listener: socket.socket) -> None:
    clocks = Clocks()
    (captured,) = capture(listener, clocks, 1)
    links = listening(listener, clocks)
    heard(links, listener, captured)
    clocks.advance(REFRESH_MS / 1000 * 0.9)
    heard(links, listener, captured)  # heard already: refused, however young
    clocks.advance(REFRESH_MS / 1000 * 0.2)
    assert not links.table.up("g2", clocks.now)


def test_one_never_heard_here_is_taken_while_fresh_only(listener: socket.socket) -> None:
    clocks = Clocks()
    first, second = capture(listener, clocks, 2)
    links = listening(listener, clocks)
    clocks.advance(REFRESH_MS / 1000 + 0.1)
    heard(links, listener, first)  # sent before the window: stale
    assert not links.table.up("g2", clocks.now)
    clocks.wall -= REFRESH_MS / 1000  # the same announcement, had it come in time, is taken
    heard(links, listener, second)
    assert links.table.up("g2", clocks.now)

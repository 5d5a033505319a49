"""Peer-to-peer (ActiveMQ's topology of embedded brokers that find each other with no server):
three service processes, each with an embedded durable broker (`EmbeddedBroker(name=...,
network=["multicast://..."], cluster_password=...)`), inside a network namespace this test
creates (its loopback carries the multicast: nothing reaches a real network). They find each
other within 3 s, exchange messages every way, exactly once; one is killed with -9 and the other
two go on; a stranger's unsigned announcement is ignored."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftmq.embedded import EmbeddedBroker
from raftmq.errors import ConfigError
from tests.helpers.multicast_namespace import loopback_namespace, run
from tests.helpers.service_peer import Peer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = "239.77.7.7"
PASSWORD = "peer-secret"


@pytest.fixture
def namespace() -> Iterator[str]:
    with loopback_namespace("rmqp2p") as name:
        yield name


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(predicate: Any, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def test_three_services_find_each_other_exchange_and_survive_a_kill(namespace: str, tmp_path: Path) -> None:
    uri = f"multicast://{ADDRESS}:{free_udp_port()}?group=shop&broadcastPeriod=300&refreshTimeout=3000"
    data = tmp_path / "data"
    data.mkdir()
    peers: dict[str, Peer] = {}
    try:
        for name in ("a", "b", "c"):
            peers[name] = Peer(['ip', 'netns', 'exec', namespace], name, data, uri, PASSWORD)
        started = time.monotonic()
        everyone = {"a", "b", "c"}

        def all_found() -> bool:
            return all(
                {to for to, state in peer.links().items() if state == "connected"} == everyone - {name}
                for name, peer in peers.items())

        found = until(all_found, 20)
        assert found is not None, {name: peer.links() for name, peer in peers.items()}
        assert time.monotonic() - started <= 3.0, found  # from the last one's start: within 3 s
        print(f"found each other in {found:.2f} s")

        # A stranger on the multicast address announces a group of its own, unsigned: ignored.
        body = json.dumps({"cluster": "shop", "group": "evil", "clients": ["127.0.0.1:9"],
                           "sent": int(time.time() * 1000), "sender": "stranger", "seq": 1})
        forged = json.dumps({"body": body, "tag": ""})  # well formed, as an unsigned network's would be
        port = int(uri.split(":")[2].split("?")[0])
        sent = run("ip", "netns", "exec", namespace, sys.executable, "-c",
                   "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                   f"[s.sendto(sys.argv[1].encode(), ({ADDRESS!r}, {port})) for _ in range(5)]", forged)
        assert sent.returncode == 0, sent.stderr
        time.sleep(1.0)
        assert all("evil" not in peer.links() for peer in peers.values())

        # Every way: each service sends 100 receipted messages to each other's inbox.
        for sender in everyone:
            for target in sorted(everyone - {sender}):
                assert peers[sender].ask(f"send /queue/inbox.{target} 100 {sender}to{target}") == {
                    "sent": f"{sender}to{target}", "count": 100}
        expected = {target: sorted(f"{sender}to{target}-{n}" for sender in everyone - {target} for n in range(100))
                    for target in everyone}
        assert until(lambda: all(sorted(peers[t].received()) == expected[t] for t in everyone), 30) is not None, {
            t: len(peers[t].received()) for t in everyone}

        # c dies; a and b go on, both ways.
        peers["c"].kill()
        assert peers["a"].ask("send /queue/inbox.b 100 after-a")["count"] == 100
        assert peers["b"].ask("send /queue/inbox.a 100 after-b")["count"] == 100
        assert until(lambda: sorted(peers["b"].received()) == sorted(
            expected["b"] + [f"after-a-{n}" for n in range(100)]), 30) is not None
        assert until(lambda: sorted(peers["a"].received()) == sorted(
            expected["a"] + [f"after-b-{n}" for n in range(100)]), 30) is not None
        # What a sends c's inbox now waits (receipted by a's own broker), shown down after refreshTimeout.
        assert peers["a"].ask("send /queue/inbox.c 20 waiting")["count"] == 20
        assert until(lambda: peers["a"].links().get("c") not in (None, "connected"), 15) is not None
    finally:
        for peer in peers.values():
            peer.stop()


def test_a_broker_in_a_network_is_named_and_durable_and_its_uris_are_checked_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a name .* and a data_dir"):
        EmbeddedBroker(name="a", network=["multicast://239.1.2.3:6155"])
    with pytest.raises(ValueError, match="needs a name"):
        EmbeddedBroker(data_dir=tmp_path, network=["multicast://239.1.2.3:6155"])
    with pytest.raises(ConfigError, match="10.1.1.1 is not a multicast address"):
        EmbeddedBroker(name="a", data_dir=tmp_path, network=["multicast://10.1.1.1:6155"])

"""Will messages over MQTT, against a node with paho-mqtt: a client whose connection ends without
DISCONNECT has its will published (to MQTT and STOMP subscribers), one that says goodbye does not,
MQTT 5's "disconnect with will message" publishes it, and a group's next leader publishes the
will of a client its predecessor served."""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from raftmq.config import NodeConfig  # noqa: E402
from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.processes import free_ports  # noqa: E402
from raftmq.protocol.mqtt import packets as p  # noqa: E402
from raftmq.protocol.mqtt.codec import MqttParser, encode  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group  # noqa: E402

pytestmark = pytest.mark.integration
WAIT = 10.0


class Watcher:
    """A paho subscriber of `status/#`."""

    def __init__(self, port: int) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        subscribed: queue.Queue[Any] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="watcher", protocol=paho.MQTTv5)
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: subscribed.put(codes)
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        self.client.subscribe("status/#", 1)
        subscribed.get(timeout=WAIT)

    def next(self, within: float = WAIT) -> tuple[str, bytes] | None:
        try:
            message = self.messages.get(timeout=within)
        except queue.Empty:
            return None
        return message.topic, message.payload

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def connect_with_will(port: int, client_id: str, version: int = 5) -> socket.socket:
    """A raw MQTT connection that leaves a will (this codec's encoder; paho's has no way to drop
    a connection without DISCONNECT on purpose)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    will = p.Will(f"status/{client_id}", b"offline", 1, False, {"user_property": [("reason", "lost")]})
    sock.sendall(encode(p.Connect(client_id, version, keep_alive=30, will=will)))
    parser = MqttParser(version)
    packets: list[p.Packet] = []
    while not packets:
        packets = parser.feed(sock.recv(4096))
    assert isinstance(packets[0], p.Connack) and packets[0].reason_code == 0, packets
    return sock


@pytest.fixture
def broker() -> Iterator[tuple[EmbeddedBroker, int]]:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}")) as running:
        yield running, port


def test_a_lost_connection_publishes_the_will_and_a_goodbye_does_not(broker: tuple[EmbeddedBroker, int]) -> None:
    running, port = broker
    watcher = Watcher(port)
    stomp = running.client()
    watching = stomp.subscribe("/topic/status.>")
    try:
        for version in (4, 5):
            polite = connect_with_will(port, f"polite{version}", version)
            polite.sendall(encode(p.Disconnect(), version))
            polite.close()
            lost = connect_with_will(port, f"lost{version}", version)
            lost.close()  # no DISCONNECT: the connection is simply gone
            assert watcher.next() == (f"status/lost{version}", b"offline")
            message = watching.receive(WAIT)
            assert message is not None and message.body == b"offline"
            if version == 5:  # the will's user property, a header for STOMP
                assert dict(message.headers).get("reason") == "lost", message.headers
        five = connect_with_will(port, "asks")
        five.sendall(encode(p.Disconnect(0x04), 5))  # "disconnect with will message"
        five.close()
        assert watcher.next() == ("status/asks", b"offline")
        assert watcher.next(within=0.5) is None  # the polite ones' wills never came
    finally:
        watcher.close()
        stomp.close()


def test_the_next_leader_publishes_the_will_of_a_client_its_predecessor_served(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        device = connect_with_will(mqtt[leader], "device")
        stomp = running.client()  # a failover client: it follows the leader
        watching = stomp.subscribe("/topic/status.device")
        try:
            running.stop_node(leader)  # its clients' sessions end in the next leader's core
            message = watching.receive(WAIT)
            assert message is not None and message.body == b"offline"
        finally:
            device.close()
            stomp.close()


def test_a_will_with_a_delay_is_published_that_much_later(broker: tuple[EmbeddedBroker, int]) -> None:
    _, port = broker
    watcher = Watcher(port)
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        will = p.Will("status/slow", b"offline later", 0, False, {"will_delay_interval": 2})
        # (its session is kept for a minute: a session not kept ends with the connection, and its will goes then)
        sock.sendall(encode(p.Connect("slow", 5, clean_start=False, keep_alive=30, will=will,
                                      properties={"session_expiry_interval": 60})))
        [connack] = MqttParser(5).feed(sock.recv(4096))
        assert isinstance(connack, p.Connack) and connack.reason_code == 0
        sock.close()
        assert watcher.next(within=1.0) is None
        assert watcher.next(within=WAIT) == ("status/slow", b"offline later")
    finally:
        watcher.close()

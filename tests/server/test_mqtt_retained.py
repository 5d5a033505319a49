"""Retained messages over MQTT, against a node with paho-mqtt: a subscriber that comes later gets
each topic's last retained message (retain flag set), a live one comes with the flag clear, an
empty retained message forgets the topic's, MQTT 5's retain handling is kept to, a STOMP SEND can
retain too, and the group's next leader has them (replicated, like everything else)."""

from __future__ import annotations

import queue
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

from raftmq.config import NodeConfig  # noqa: E402
from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.processes import free_ports  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group  # noqa: E402

pytestmark = pytest.mark.integration
WAIT = 10.0


class Client:
    def __init__(self, port: int, version: int, client_id: str) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.subscribed: queue.Queue[Any] = queue.Queue()
        connected: queue.Queue[int] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=paho.MQTTv5 if version == 5 else paho.MQTTv311)
        self.client.on_connect = lambda _c, _u, _f, code, _p: connected.put(int(getattr(code, "value", code)))
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: self.subscribed.put(codes)
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        assert connected.get(timeout=WAIT) == 0

    def subscribe(self, topic_filter: str, qos: int = 1, retain_handling: int | None = None) -> None:
        if retain_handling is None:
            self.client.subscribe(topic_filter, qos)
        else:
            self.client.subscribe(topic_filter, options=SubscribeOptions(qos=qos, retainHandling=retain_handling))
        self.subscribed.get(timeout=WAIT)

    def publish(self, topic: str, body: bytes, retain: bool) -> None:
        self.client.publish(topic, body, qos=1, retain=retain).wait_for_publish(WAIT)

    def received(self, within: float = 1.0) -> list[tuple[str, bytes, bool]]:
        got = []
        while True:
            try:
                message = self.messages.get(timeout=within)
            except queue.Empty:
                return sorted(got)
            got.append((message.topic, message.payload, bool(message.retain)))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def broker() -> Iterator[tuple[EmbeddedBroker, int]]:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}")) as running:
        yield running, port


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_a_later_subscriber_gets_each_topics_last_retained_message(broker: tuple[EmbeddedBroker, int],
                                                                   version: int) -> None:
    running, port = broker
    publisher, early = Client(port, version, "pub"), Client(port, version, "early")
    try:
        early.subscribe("home/#")
        publisher.publish("home/kitchen", b"19", retain=True)
        publisher.publish("home/kitchen", b"21", retain=True)
        publisher.publish("home/hall", b"18", retain=True)
        publisher.publish("home/door", b"shut", retain=False)
        assert early.received() == [("home/door", b"shut", False), ("home/hall", b"18", False),
                                    ("home/kitchen", b"19", False), ("home/kitchen", b"21", False)]  # live: flag clear
        late = Client(port, version, "late")
        late.subscribe("home/+")
        assert late.received() == [("home/hall", b"18", True), ("home/kitchen", b"21", True)]
        publisher.publish("home/kitchen", b"", retain=True)  # forgets the topic's
        assert late.received() == [("home/kitchen", b"", False)]
        later = Client(port, version, "later")
        later.subscribe("home/#")
        assert later.received() == [("home/hall", b"18", True)]
        status = running.status()  # /status and /metrics count what MQTT clients keep
        assert status["broker"]["mqtt"]["retained"] == 1 and status["mqtt_connections"] == 4
        metrics = urllib.request.urlopen(f"http://{running.admin_addresses[0]}/metrics", timeout=WAIT).read().decode()
        assert any(line.startswith("raftmq_mqtt_retained_messages{") and line.endswith(" 1.0")
                   for line in metrics.splitlines()), metrics
        for client in (late, later):
            client.close()
    finally:
        publisher.close()
        early.close()


def test_mqtt_5_retain_handling_and_a_stomp_send_that_retains(broker: tuple[EmbeddedBroker, int]) -> None:
    running, port = broker
    stomp = running.client()
    client = Client(port, 5, "handling")
    try:
        stomp.send("/topic/plant.pump", b"running", {"mqtt-retain": "true", "persistent": "true"})
        client.subscribe("plant/pump", retain_handling=2)  # never
        assert client.received() == []
        client.subscribe("plant/#", retain_handling=1)  # only for a new subscription
        assert client.received() == [("plant/pump", b"running", True)]
        client.subscribe("plant/#", retain_handling=1)  # the same filter again: not new
        assert client.received() == []
        client.subscribe("plant/#", retain_handling=0)  # every time
        assert client.received() == [("plant/pump", b"running", True)]
    finally:
        client.close()
        stomp.close()


def test_the_next_leader_has_the_retained_messages(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        publisher = Client(mqtt[leader], 5, "device")
        properties = Properties(PacketTypes.PUBLISH)
        properties.UserProperty = [("unit", "C")]
        publisher.client.publish("site/temp", b"22.5", qos=1, retain=True, properties=properties).wait_for_publish(WAIT)
        publisher.client.loop_stop()
        running.stop_node(leader)
        successor = running.wait_for_leader()
        reader = Client(mqtt[successor], 5, "dashboard")
        try:
            reader.client.subscribe("site/#", 1)
            message = reader.messages.get(timeout=WAIT)
            assert (message.topic, message.payload, message.retain) == ("site/temp", b"22.5", True)
            assert message.properties.UserProperty == [("unit", "C")]
        finally:
            reader.close()

"""The table of docs/mqtt.md ("Messages both ways"), a test per row, each both ways: an MQTT 5
PUBLISH with the property reaches a STOMP subscriber with the header, and a STOMP SEND with the
header reaches an MQTT 5 subscriber with the property (paho-mqtt and raftmq's STOMP client)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from raftmq.config import NodeConfig  # noqa: E402
from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.processes import free_ports  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def node() -> Iterator[tuple[EmbeddedBroker, int]]:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}")) as running:
        yield running, port


def mqtt_to_stomp(node: tuple[EmbeddedBroker, int], topic: str, qos: int = 1, retain: bool = False,
                  **props: Any) -> dict[str, str]:
    """The headers a STOMP subscriber sees of an MQTT 5 PUBLISH with `props`."""
    running, port = node
    stomp = running.client()
    publisher = Client(port, 5, "mqtt-publisher", keep=False)
    try:
        watching = stomp.subscribe(f"/topic/{topic.replace('/', '.')}")
        time.sleep(0.1)
        properties = Properties(PacketTypes.PUBLISH)
        for name, value in props.items():
            setattr(properties, name, value)
        publisher.client.publish(topic, b"x", qos=qos, retain=retain, properties=properties).wait_for_publish(WAIT)
        message = watching.receive(WAIT)
        assert message is not None
        return dict(message.headers)
    finally:
        publisher.close()
        stomp.close()


def stomp_to_mqtt(node: tuple[EmbeddedBroker, int], topic: str, headers: dict[str, str]) -> Any:
    """The PUBLISH an MQTT 5 subscriber gets of a STOMP SEND with `headers`."""
    running, port = node
    stomp = running.client()
    subscriber = Client(port, 5, "mqtt-subscriber", keep=False)
    try:
        subscriber.subscribe(topic, 1)
        stomp.send(f"/topic/{topic.replace('/', '.')}", b"x", headers, receipt=True)
        return subscriber.received(1)[0]
    finally:
        subscriber.close()
        stomp.close()


def test_the_qos_row(node: tuple[EmbeddedBroker, int]) -> None:
    for qos, persistent in ((0, "false"), (1, "true"), (2, "true")):
        headers = mqtt_to_stomp(node, f"q/{qos}", qos=qos)
        assert (headers["mqtt-qos"], headers["persistent"]) == (str(qos), persistent)
    assert stomp_to_mqtt(node, "q/s1", {"persistent": "true"}).qos == 1
    assert stomp_to_mqtt(node, "q/s0", {}).qos == 0


def test_the_user_property_row(node: tuple[EmbeddedBroker, int]) -> None:
    headers = mqtt_to_stomp(node, "u/1", UserProperty=[("site", "north"), ("floor", "2")])
    assert (headers["site"], headers["floor"]) == ("north", "2")
    got = stomp_to_mqtt(node, "u/2", {"site": "south"})
    assert ("site", "south") in got.properties.UserProperty


def test_the_content_type_row(node: tuple[EmbeddedBroker, int]) -> None:
    assert mqtt_to_stomp(node, "c/1", ContentType="application/json")["content-type"] == "application/json"
    assert stomp_to_mqtt(node, "c/2", {"content-type": "text/csv"}).properties.ContentType == "text/csv"


def test_the_response_topic_row(node: tuple[EmbeddedBroker, int]) -> None:
    assert mqtt_to_stomp(node, "r/1", ResponseTopic="replies/app1")["reply-to"] == "/topic/replies.app1"
    assert stomp_to_mqtt(node, "r/2", {"reply-to": "/topic/replies.app2"}).properties.ResponseTopic == "replies/app2"


def test_the_correlation_data_row(node: tuple[EmbeddedBroker, int]) -> None:
    assert mqtt_to_stomp(node, "k/1", CorrelationData=b"req-17")["correlation-id"] == "req-17"
    assert stomp_to_mqtt(node, "k/2", {"correlation-id": "req-18"}).properties.CorrelationData == b"req-18"


def test_the_message_expiry_row(node: tuple[EmbeddedBroker, int]) -> None:
    before = int(time.time() * 1000)
    expires = int(mqtt_to_stomp(node, "e/1", MessageExpiryInterval=60)["expires"])
    assert before + 59_000 <= expires <= int(time.time() * 1000) + 60_000
    got = stomp_to_mqtt(node, "e/2", {"expires": str(int(time.time() * 1000) + 30_000)})
    assert 28 <= got.properties.MessageExpiryInterval <= 30


def test_the_retain_row(node: tuple[EmbeddedBroker, int]) -> None:
    assert mqtt_to_stomp(node, "t/1", retain=True)["mqtt-retain"] == "true"
    running, port = node
    stomp = running.client()
    try:
        stomp.send("/topic/t.2", b"kept", {"mqtt-retain": "true", "persistent": "true"}, receipt=True)
    finally:
        stomp.close()
    late = Client(port, 5, "late", keep=False)
    try:
        late.subscribe("t/2", 1)
        [got] = late.received(1)
        assert (got.payload, got.retain) == (b"kept", True)
    finally:
        late.close()

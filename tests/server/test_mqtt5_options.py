"""MQTT 5's options with paho-mqtt against a node: topic aliases, subscription identifiers (kept
with a session), no-local, message expiry counted down, the server's keep-alive."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402
from paho.mqtt.subscribeoptions import SubscribeOptions  # noqa: E402

from tests.helpers.mqtt_groups import mqtt_node  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


def subscribe(client: Client, topic_filter: str, identifier: int | None = None, no_local: bool = False) -> None:
    properties = None
    if identifier is not None:
        properties = Properties(PacketTypes.SUBSCRIBE)
        properties.SubscriptionIdentifier = identifier
    client.client.subscribe(topic_filter, options=SubscribeOptions(qos=1, noLocal=no_local), properties=properties)
    assert [int(c.value) for c in client.subscribed.get(timeout=WAIT)] == [1]


def publish(client: Client, topic: str, body: bytes, **props: Any) -> None:
    properties = Properties(PacketTypes.PUBLISH)
    for name, value in props.items():
        setattr(properties, name, value)
    client.client.publish(topic, body, qos=1, properties=properties).wait_for_publish(WAIT)


def test_topic_aliases_and_subscription_identifiers(port: int) -> None:
    subscriber = Client(port, 5, "watcher", keep=True)
    publisher = Client(port, 5, "sender", keep=False)
    try:
        subscribe(subscriber, "sensors/+", identifier=42)
        publish(publisher, "sensors/temp", b"21.5", TopicAlias=1)
        publish(publisher, "", b"21.7", TopicAlias=1)  # the alias alone stands for sensors/temp
        got = subscriber.received(2)
        assert [(m.topic, m.payload) for m in got] == [("sensors/temp", b"21.5"), ("sensors/temp", b"21.7")]
        assert all(m.properties.SubscriptionIdentifier == [42] for m in got)
        subscriber.close()
        publish(publisher, "sensors/hum", b"40")
        back = Client(port, 5, "watcher", keep=True)  # the identifier was kept with the session
        try:
            [m] = back.received(1)
            assert (m.topic, m.payload, m.properties.SubscriptionIdentifier) == ("sensors/hum", b"40", [42])
        finally:
            back.close()
    finally:
        publisher.close()


def test_no_local_and_message_expiry(port: int) -> None:
    me = Client(port, 5, "me", keep=False)
    other = Client(port, 5, "other", keep=False)
    try:
        subscribe(me, "chat", no_local=True)
        publish(me, "chat", b"my own words")
        publish(other, "chat", b"an answer", MessageExpiryInterval=60)
        [m] = me.received(1)
        assert m.payload == b"an answer" and 58 <= m.properties.MessageExpiryInterval <= 60
        assert me.nothing_more()
    finally:
        me.close()
        other.close()


def test_a_client_without_keep_alive_is_given_the_servers(port: int) -> None:
    connected: queue.Queue[Any] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="idle", protocol=paho.MQTTv5)
    client.on_connect = lambda _c, _u, _f, code, properties: connected.put(properties)
    client.connect("127.0.0.1", port, keepalive=0)
    client.loop_start()
    try:
        properties = connected.get(timeout=WAIT)
        assert properties.ServerKeepAlive == 600
        assert properties.TopicAliasMaximum == 64
    finally:
        client.disconnect()
        client.loop_stop()
        time.sleep(0.05)

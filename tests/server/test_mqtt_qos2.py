"""QoS 2 publications against a node: paho's exactly-once flow (PUBLISH, PUBREC, PUBREL, PUBCOMP)
in 3.1.1 and 5.0, and a PUBLISH sent again before its PUBREL (as a client does that missed the
PUBREC) stored once; after the PUBCOMP the packet id is free for the next message."""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from raftmq.protocol.mqtt import packets as p  # noqa: E402
from raftmq.protocol.mqtt.codec import MqttParser, encode  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_node  # noqa: E402

pytestmark = pytest.mark.integration
WAIT = 10.0


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


def subscriber(port: int, topic_filter: str) -> tuple[Any, queue.Queue[Any]]:
    messages: queue.Queue[Any] = queue.Queue()
    subscribed: queue.Queue[Any] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"sub-{topic_filter}", protocol=paho.MQTTv5)
    client.on_message = lambda _c, _u, message: messages.put(message)
    client.on_subscribe = lambda _c, _u, _mid, codes, _p: subscribed.put(codes)
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.subscribe(topic_filter, 2)
    assert [int(c.value) for c in subscribed.get(timeout=WAIT)] == [2]
    return client, messages


def drained(messages: queue.Queue[Any], within: float = 1.0) -> list[bytes]:
    got = []
    while True:
        try:
            got.append(messages.get(timeout=within).payload)
        except queue.Empty:
            return got


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_pahos_exactly_once_flow(port: int, version: int) -> None:
    watcher, messages = subscriber(port, f"meter{version}/#")
    completed: queue.Queue[int] = queue.Queue()
    publisher = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=f"meter{version}",
                            protocol=paho.MQTTv5 if version == 5 else paho.MQTTv311)
    publisher.on_publish = lambda _c, _u, mid, _code, _p: completed.put(mid)  # after the PUBCOMP, for QoS 2
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()
    try:
        mids = [publisher.publish(f"meter{version}/kwh", f"{i}".encode(), qos=2).mid for i in range(20)]
        assert sorted(completed.get(timeout=WAIT) for _ in mids) == sorted(mids)
        assert sorted(drained(messages)) == sorted(f"{i}".encode() for i in range(20))
    finally:
        publisher.disconnect()
        publisher.loop_stop()
        watcher.disconnect()
        watcher.loop_stop()


def test_a_publish_sent_again_before_its_pubrel_is_stored_once(port: int) -> None:
    watcher, messages = subscriber(port, "twice")
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    parser = MqttParser(5)

    def read(count: int) -> list[p.Packet]:
        packets: list[p.Packet] = []
        while len(packets) < count:
            packets += parser.feed(sock.recv(4096))
        return packets

    try:
        sock.sendall(encode(p.Connect("twice-publisher", 5)))
        assert isinstance(read(1)[0], p.Connack)
        sock.sendall(encode(p.Publish("twice", b"once only", 2, packet_id=7), 5))
        sock.sendall(encode(p.Publish("twice", b"once only", 2, dup=True, packet_id=7), 5))  # PUBREC not seen
        assert read(2) == [p.PubRec(7), p.PubRec(7)]
        sock.sendall(encode(p.PubRel(7), 5))
        assert read(1) == [p.PubComp(7)]
        sock.sendall(encode(p.Publish("twice", b"the next message", 2, packet_id=7), 5))  # the id is free again
        assert read(1) == [p.PubRec(7)]
        sock.sendall(encode(p.PubRel(7), 5))
        assert read(1) == [p.PubComp(7)]
        assert drained(messages) == [b"once only", b"the next message"]
    finally:
        sock.close()
        watcher.disconnect()
        watcher.loop_stop()

"""QoS 2 deliveries to a session the client keeps, packet by packet with a raw client: a PUBLISH
not answered comes again on the next connection with the same packet id (and DUP), one answered
PUBREC is never sent again, its PUBREL is; across a leader's stop too (the key the core keeps
for it is replicated)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.protocol.mqtt import packets as p  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group, mqtt_node  # noqa: E402
from tests.helpers.mqtt_raw import RawMqtt  # noqa: E402
from tests.helpers.paho_clients import publish_all  # noqa: E402

pytestmark = pytest.mark.integration
KEEP = {"session_expiry_interval": 0xFFFFFFFF}


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


def session(port: int, present: bool) -> RawMqtt:
    client = RawMqtt(port)
    client.send(p.Connect("exact", 5, clean_start=False, properties=KEEP))
    [connack] = client.read()
    assert isinstance(connack, p.Connack) and connack.reason_code == 0 and connack.session_present == present
    return client


def test_a_kept_sessions_qos_2_delivery_packet_by_packet(port: int) -> None:
    first = session(port, present=False)
    first.send(p.Subscribe(1, [p.Subscription("exact/#", 2)]))
    assert first.read() == [p.SubAck(1, [2])]
    publish_all(port, "exact/one", [b"done with", b"only once"], qos=2)
    done, publish = first.read(2)
    assert isinstance(done, p.Publish) and isinstance(publish, p.Publish)
    assert (done.payload, publish.payload, publish.qos, publish.dup) == (b"done with", b"only once", 2, False)
    first.send(p.PubRec(done.packet_id or 0))
    assert first.read() == [p.PubRel(done.packet_id or 0)]
    first.send(p.PubComp(done.packet_id or 0))
    time.sleep(0.3)
    first.close()  # no PUBREC for the second: the client may not have it

    second = session(port, present=True)
    [again] = second.read()  # the same packet id: a client that has it knows it for a duplicate
    assert isinstance(again, p.Publish) and again.dup and again.packet_id == publish.packet_id
    assert again.payload == b"only once"
    second.send(p.PubRec(again.packet_id or 0))
    assert second.read() == [p.PubRel(again.packet_id or 0)]
    second.close()  # no PUBCOMP: the client may not have released it

    third = session(port, present=True)
    assert third.read() == [p.PubRel(again.packet_id or 0)]  # the PUBREL again, never the PUBLISH
    third.send(p.PubComp(again.packet_id or 0))
    time.sleep(0.3)
    third.close()

    fourth = session(port, present=True)
    assert fourth.nothing()
    fourth.close()


def test_the_next_leader_sends_the_pubrel_its_predecessor_owed(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        first = session(mqtt[leader], present=False)
        first.send(p.Subscribe(1, [p.Subscription("exact", 2)]))
        assert first.read() == [p.SubAck(1, [2])]
        publish_all(mqtt[leader], "exact", [b"across leaders"], qos=2)
        [publish] = first.read()
        assert isinstance(publish, p.Publish)
        first.send(p.PubRec(publish.packet_id or 0))
        assert first.read() == [p.PubRel(publish.packet_id or 0)]
        first.close()
        running.stop_node(leader)
        successor = running.wait_for_leader()
        second = session(mqtt[successor], present=True)
        assert second.read() == [p.PubRel(publish.packet_id or 0)]
        second.send(p.PubComp(publish.packet_id or 0))
        assert second.nothing()
        second.close()

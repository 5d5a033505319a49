"""Any member serves an MQTT client (raftmq.server.mqtt.relay): a client connected to a follower
publishes and subscribes as at the leader, its kept session is the leader's; when the leader
goes, the relays to it end and the client, connecting again to the same member, resumes its
session at the new leader. With `follower_clients = "redirect"` a follower refuses instead."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.protocol.mqtt import packets as p  # noqa: E402
from raftmq.protocol.mqtt import reasons  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group  # noqa: E402
from tests.helpers.mqtt_raw import RawMqtt  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client, publish_all  # noqa: E402

pytestmark = pytest.mark.integration


def test_a_follower_relays_its_mqtt_clients_to_the_leader(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        follower, other = (n for n in mqtt if n != leader)
        subscriber = Client(mqtt[follower], 5, "through-a-follower", keep=True)
        try:
            subscriber.subscribe("relayed/#", 1)
            publish_all(mqtt[other], "relayed/x", [b"one", b"two"])  # the other follower relays too
            assert [m.payload for m in subscriber.received(2)] == [b"one", b"two"]
            status = {n: running.status(n)["mqtt_connections"] for n in mqtt}
            assert status[leader] >= 1 and status[follower] >= 1  # the session is the leader's, the socket here
            subscriber.client.loop_stop()  # the client keeps its session; the leader goes
            running.stop_node(leader)
            successor = running.wait_for_leader()
            publish_all(mqtt[successor], "relayed/y", [b"while away"])
            back = Client(mqtt[follower], 5, "through-a-follower", keep=True)  # the same member again
            try:
                assert back.session_present
                assert [m.payload for m in back.received(1)] == [b"while away"]
            finally:
                back.close()
        finally:
            subscriber.client.loop_stop()


def test_relays_to_a_leader_that_goes_end(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        follower = next(n for n in mqtt if n != leader)
        client = Client(mqtt[follower], 4, "relayed-311", keep=True)
        try:
            running.stop_node(leader)
            assert client.disconnected.get(timeout=WAIT) is not None  # the relay ended with its leader
        finally:
            client.client.loop_stop()


def test_a_follower_set_to_redirect_refuses_and_names_the_leader(tmp_path: Path) -> None:
    group, mqtt, clients = mqtt_group(tmp_path)
    group = dataclasses.replace(group, server=dataclasses.replace(group.server, follower_clients="redirect"))
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        follower = next(n for n in mqtt if n != leader)
        raw = RawMqtt(mqtt[follower])
        try:
            raw.send(p.Connect("redirected", 5))
            [connack] = raw.read()
            assert isinstance(connack, p.Connack) and connack.reason_code == reasons.SERVER_UNAVAILABLE
            assert f"127.0.0.1:{clients[leader]}" in connack.properties["reason_string"]
        finally:
            raw.close()
        time.sleep(0.1)

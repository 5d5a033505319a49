"""MQTT sessions a client keeps (3.1.1 clean session 0, MQTT 5 clean start 0 with a session
expiry), against a node, with paho-mqtt: what was published while the client was away arrives
when it comes back, unacknowledged QoS 1 messages come again, a clean start forgets, a second
connection with the client id takes the session over, and a group's next leader resumes the
session its predecessor served."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from raftmq.embedded import EmbeddedBroker  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group, mqtt_node  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client, publish_all  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_what_was_published_while_away_arrives_on_return_and_a_clean_start_forgets(port: int, version: int) -> None:
    first = Client(port, version, "keeper", keep=True)
    assert not first.session_present
    first.subscribe("k/#", 1)
    first.close()
    publish_all(port, "k/x", [b"one", b"two", b"three"])
    back = Client(port, version, "keeper", keep=True)
    try:
        assert back.session_present  # its subscription was kept: it does not subscribe again
        got = back.received(3)
        assert [(m.topic, m.payload, m.qos) for m in got] == [("k/x", b, 1) for b in (b"one", b"two", b"three")]
        assert back.nothing_more()
    finally:
        back.close()
    fresh = Client(port, version, "keeper", keep=False)  # a clean start: the session is forgotten
    try:
        assert not fresh.session_present
        publish_all(port, "k/x", [b"unheard"])
        assert fresh.nothing_more()
    finally:
        fresh.close()
    again = Client(port, version, "keeper", keep=True)
    try:
        assert not again.session_present
    finally:
        again.close()


def test_an_unacknowledged_qos_1_message_comes_again_flagged_on_return(port: int) -> None:
    first = Client(port, 4, "forgetful", keep=True, manual_ack=True)
    first.subscribe("f", 1)
    publish_all(port, "f", [b"unacknowledged"])
    [message] = first.received(1)
    assert message.payload == b"unacknowledged" and not message.dup
    first.client.disconnect()  # without a PUBACK
    first.client.loop_stop()
    back = Client(port, 4, "forgetful", keep=True, manual_ack=True)
    try:
        [again] = back.received(1)
        assert again.payload == b"unacknowledged" and again.dup  # MQTT's DUP: it may have been seen
        back.client.ack(again.mid, again.qos)
        time.sleep(0.3)
    finally:
        back.close()
    settled = Client(port, 4, "forgetful", keep=True)
    try:
        assert settled.session_present and settled.nothing_more()  # acknowledged: it does not come a third time
    finally:
        settled.close()


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_a_second_connection_with_the_client_id_takes_the_session_over(port: int, version: int) -> None:
    first = Client(port, version, "twin", keep=True)
    first.subscribe("t", 1)
    second = Client(port, version, "twin", keep=True)
    try:
        code = first.disconnected.get(timeout=WAIT)
        if version == 5:
            assert code == 0x8E  # session taken over
        assert second.session_present
        publish_all(port, "t", [b"to the second"])
        [got] = second.received(1)
        assert got.payload == b"to the second" and first.messages.empty()
    finally:
        first.client.loop_stop()
        second.close()


def test_the_next_leader_resumes_a_session_its_predecessor_served(tmp_path: Path) -> None:
    group, mqtt, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        first = Client(mqtt[leader], 5, "roamer", keep=True)
        first.subscribe("r/#", 1)
        publish_all(mqtt[leader], "r/1", [b"before"])
        assert first.received(1)[0].payload == b"before"
        first.client.loop_stop()  # the client is cut off; its leader goes
        running.stop_node(leader)
        successor = running.wait_for_leader()
        assert successor != leader
        publish_all(mqtt[successor], "r/2", [b"while away", b"and more"])
        back = Client(mqtt[successor], 5, "roamer", keep=True)
        try:
            assert back.session_present
            assert [m.payload for m in back.received(2)] == [b"while away", b"and more"]
            assert back.nothing_more()
        finally:
            back.close()

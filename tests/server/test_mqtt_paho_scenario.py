"""One paho-mqtt scenario, MQTT 3.1.1 and 5.0, against a 3-member group's leader: QoS 0, 1 and 2,
a retained message, a will, a kept session across a disconnect, a shared subscription, and (5.0)
properties through to the subscriber. tests/server/test_mqttjs.py runs the same with MQTT.js."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from raftmq.embedded import EmbeddedBroker  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The MQTT port of a 3-member group's leader."""
    group, mqtt, _ = mqtt_group(Path(tmp_path_factory.mktemp("paho")))
    with EmbeddedBroker(config=group) as running:
        yield mqtt[running.wait_for_leader()]


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_the_paho_scenario(leader: int, version: int) -> None:
    v = f"paho/{version}"
    publisher = Client(leader, version, f"paho-publisher-{version}", keep=False)
    subscriber = Client(leader, version, f"paho-keeper-{version}", keep=True)
    clients = [publisher, subscriber]
    try:
        assert not subscriber.session_present
        subscriber.client.subscribe(f"{v}/#", 2)
        assert [int(c.value) for c in subscriber.subscribed.get(timeout=WAIT)] == [2]
        properties = None
        if version == 5:
            properties = Properties(PacketTypes.PUBLISH)
            properties.UserProperty = [("unit", "C")]
            properties.ContentType = "text/plain"
        for qos in (0, 1, 2):
            publisher.client.publish(f"{v}/q{qos}", f"qos{qos}".encode(), qos=qos,
                                     properties=properties).wait_for_publish(WAIT)
        got = {m.payload: m for m in subscriber.received(3)}
        assert {body: m.qos for body, m in got.items()} == {b"qos0": 0, b"qos1": 1, b"qos2": 2}
        if version == 5:
            assert got[b"qos1"].properties.UserProperty == [("unit", "C")]
            assert got[b"qos1"].properties.ContentType == "text/plain"

        publisher.client.publish(f"{v}/status", b"online", qos=1, retain=True).wait_for_publish(WAIT)
        assert subscriber.received(1)[0].payload == b"online"
        late = Client(leader, version, f"paho-late-{version}", keep=False)
        clients.append(late)
        late.subscribe(f"{v}/status", 1)
        [retained] = late.received(1)
        assert (retained.payload, retained.retain) == (b"online", True)
        publisher.client.publish(f"{v}/status", b"", qos=1, retain=True).wait_for_publish(WAIT)  # forgotten
        subscriber.received(1), late.received(1)

        doomed = Client(leader, version, f"paho-doomed-{version}", keep=False, will=(f"{v}/will", b"gone"))
        doomed.lose()
        assert subscriber.received(1)[0].payload == b"gone"

        subscriber.close()
        publisher.client.publish(f"{v}/away", b"while away", qos=1).wait_for_publish(WAIT)
        back = Client(leader, version, f"paho-keeper-{version}", keep=True)
        clients.append(back)
        assert back.session_present
        assert back.received(1)[0].payload == b"while away"

        members = [Client(leader, version, f"paho-member-{version}-{n}", keep=False) for n in (1, 2)]
        clients += members
        for member in members:
            member.subscribe(f"$share/paho/{v}/jobs", 1)
        for n in range(6):
            publisher.client.publish(f"{v}/jobs", f"job{n}".encode(), qos=1).wait_for_publish(WAIT)
        taken: list[bytes] = []
        deadline = time.monotonic() + WAIT
        while len(taken) < 6 and time.monotonic() < deadline:
            for member in members:
                while not member.messages.empty():
                    taken.append(member.messages.get().payload)
            time.sleep(0.02)
        assert sorted(taken) == [f"job{n}".encode() for n in range(6)]
        assert all(member.nothing_more(0.2) for member in members)
        assert back.received(6)  # the kept session's plain subscription has its own copies
    finally:
        for client in clients:
            client.close()

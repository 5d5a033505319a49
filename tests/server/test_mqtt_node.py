"""MQTT on a node (raftmq.server.mqtt), with paho-mqtt (pinned) as the client: QoS 0 and 1 both
ways under 3.1.1 and 5.0, MQTT 5's properties as headers, one address space with STOMP both
ways, and bad input answered with MQTT's reason and a closed connection, the node serving on."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from raftmq.config import NodeConfig  # noqa: E402
from raftmq.embedded import EmbeddedBroker  # noqa: E402
from raftmq.processes import free_port, free_ports  # noqa: E402
from raftmq.protocol.mqtt import packets as p  # noqa: E402
from raftmq.protocol.mqtt import reasons  # noqa: E402
from raftmq.protocol.mqtt.codec import MqttParser, encode  # noqa: E402
from tests.helpers.mqtt_groups import mqtt_group  # noqa: E402

pytestmark = pytest.mark.integration
WAIT = 10.0


@pytest.fixture
def broker() -> Iterator[tuple[EmbeddedBroker, int]]:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}")) as running:
        yield running, port


class Paho:
    """A paho client on its own network thread, what it receives in a queue."""

    def __init__(self, port: int, version: int, client_id: str) -> None:
        self.version = version
        self.messages: queue.Queue[Any] = queue.Queue()
        self.published: queue.Queue[Any] = queue.Queue()
        self.ready = threading.Event()
        self.subscribed: queue.Queue[Any] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=paho.MQTTv5 if version == 5 else paho.MQTTv311)
        self.client.on_connect = lambda *args: self.ready.set()
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_publish = lambda _c, _u, mid, code, _props: self.published.put((mid, code))
        self.client.on_subscribe = lambda _c, _u, mid, codes, _props: self.subscribed.put(codes)
        self.client.connect("127.0.0.1", port, keepalive=30)
        self.client.loop_start()
        assert self.ready.wait(WAIT), "no CONNACK"

    def subscribe(self, topic_filter: str, qos: int) -> list[int]:
        self.client.subscribe(topic_filter, qos)
        return [int(code.value) for code in self.subscribed.get(timeout=WAIT)]

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.parametrize("version", [4, 5], ids=["3.1.1", "5.0"])
def test_qos_0_and_1_both_ways_with_properties(broker: tuple[EmbeddedBroker, int], version: int) -> None:
    _, port = broker
    subscriber, publisher = Paho(port, version, "sub"), Paho(port, version, "pub")
    try:
        assert subscriber.subscribe("sensors/+/temp", 1) == [1]
        assert subscriber.subscribe("sensors/#", 2) == [2]
        properties = None
        if version == 5:
            properties = Properties(PacketTypes.PUBLISH)
            properties.UserProperty = [("unit", "C")]
            properties.ContentType = "text/plain"
        info = publisher.client.publish("sensors/room1/temp", b"21.5", qos=1, properties=properties)
        mid, code = publisher.published.get(timeout=WAIT)  # the PUBACK: on a majority's disk
        assert mid == info.mid and int(getattr(code, "value", code) or 0) == 0
        publisher.client.publish("sensors/room2/temp", b"19", qos=0)
        got = sorted((subscriber.messages.get(timeout=WAIT) for _ in range(4)), key=lambda m: (m.topic, m.qos))
        assert [(m.topic, m.payload, m.qos) for m in got] == [
            ("sensors/room1/temp", b"21.5", 1), ("sensors/room1/temp", b"21.5", 1),  # each matching filter
            ("sensors/room2/temp", b"19", 0), ("sensors/room2/temp", b"19", 0)]
        if version == 5:
            assert got[0].properties.UserProperty == [("unit", "C")]
            assert got[0].properties.ContentType == "text/plain"
        assert subscriber.messages.empty()
    finally:
        subscriber.close()
        publisher.close()


def test_one_address_space_with_stomp(broker: tuple[EmbeddedBroker, int]) -> None:
    running, port = broker
    mqtt = Paho(port, 5, "bridge-both-ways")
    stomp = running.client()
    try:
        watching = stomp.subscribe("/topic/sensors.>", ack="client-individual")
        assert mqtt.subscribe("alerts/#", 1) == [1]
        properties = Properties(PacketTypes.PUBLISH)
        properties.UserProperty = [("site", "north")]
        mqtt.client.publish("sensors/room1/temp", b"22", qos=1, properties=properties)
        message = watching.receive(WAIT)
        assert message is not None and message.body == b"22"
        assert message.get("destination") == "/topic/sensors.room1.temp"
        assert message.get("site") == "north"
        watching.ack(message)
        stomp.send("/topic/alerts.fire", b"evacuate", {"persistent": "true", "level": "high"})
        got = mqtt.messages.get(timeout=WAIT)
        assert (got.topic, got.payload, got.qos) == ("alerts/fire", b"evacuate", 1)
        assert ("level", "high") in got.properties.UserProperty
    finally:
        mqtt.close()
        stomp.close()


def raw(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_bad_input_gets_mqtts_answer_and_the_node_serves_on(broker: tuple[EmbeddedBroker, int]) -> None:
    _, port = broker
    with raw(port) as stranger:  # not MQTT at all: closed, nothing written
        stranger.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_until_closed(stranger) == b""
    with raw(port) as old:  # MQTT 3.1: CONNACK "unacceptable protocol version"
        body = b"\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x01c"
        old.sendall(bytes((0x10, len(body))) + body)
        assert MqttParser(4).feed(read_until_closed(old)) == [p.Connack(reasons.UNACCEPTABLE_PROTOCOL_VERSION_311)]
    with raw(port) as broken:  # MQTT 5, then a PUBLISH whose topic runs past its end: DISCONNECT 0x81
        broken.sendall(encode(p.Connect("broken", 5)))
        broken.sendall(b"\x30\x02\x00\x05")
        answers = MqttParser(5).feed(read_until_closed(broken))
        assert type(answers[0]) is p.Connack and answers[0].reason_code == 0
        assert type(answers[-1]) is p.Disconnect and answers[-1].reason_code == reasons.MALFORMED_PACKET
    with raw(port) as twice:  # a second CONNECT on one connection: DISCONNECT 0x82
        twice.sendall(encode(p.Connect("twice", 5)))
        twice.sendall(encode(p.PubComp(1), 5))  # (one for a delivery never sent is let pass, as MQTT does)
        twice.sendall(encode(p.Connect("twice", 5)))
        answers = MqttParser(5).feed(read_until_closed(twice))
        assert type(answers[-1]) is p.Disconnect and answers[-1].reason_code == reasons.PROTOCOL_ERROR
    after = Paho(port, 4, "after")  # the node serves on
    try:
        assert after.subscribe("x", 0) == [0]
    finally:
        after.close()


def test_a_groups_members_each_listen_for_mqtt_and_each_serves(tmp_path: Path) -> None:
    group, mqtt_port, _ = mqtt_group(tmp_path)
    with EmbeddedBroker(config=group) as running:
        leader = running.wait_for_leader()
        follower = next(node for node in mqtt_port if node != leader)  # relays to the leader
        subscriber, publisher = Paho(mqtt_port[follower], 5, "s"), Paho(mqtt_port[leader], 4, "p")
        try:
            assert subscriber.subscribe("g/#", 1) == [1]
            publisher.client.publish("g/x", b"replicated", qos=1)
            assert publisher.published.get(timeout=WAIT)  # PUBACK: on two of the three members' disks
            got = subscriber.messages.get(timeout=WAIT)
            assert (got.topic, got.payload, got.qos) == ("g/x", b"replicated", 1)
        finally:
            subscriber.close()
            publisher.close()


def test_mqtt_over_websocket_on_the_client_port_beside_stomp(broker: tuple[EmbeddedBroker, int]) -> None:
    """The URL a stompjs page uses also takes MQTT: the WebSocket subprotocol `mqtt` chooses it."""
    running, _ = broker
    host, port = running.addresses[0]
    received: queue.Queue[Any] = queue.Queue()
    ready = threading.Event()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="ws-1", protocol=paho.MQTTv5,
                         transport="websockets")
    client.ws_set_options(path="/mqtt")
    client.on_connect = lambda *args: ready.set()
    client.on_message = lambda _c, _u, message: received.put(message)
    subscribed: queue.Queue[Any] = queue.Queue()
    client.on_subscribe = lambda _c, _u, mid, codes, _props: subscribed.put(codes)
    client.connect(host, port, keepalive=30)
    client.loop_start()
    stomp = running.client()
    try:
        assert ready.wait(WAIT), "no CONNACK over the WebSocket"
        client.subscribe("ws/#", 1)
        assert [int(c.value) for c in subscribed.get(timeout=WAIT)] == [1]
        stomp.send("/topic/ws.news", b"\x00\xffbinary", {"persistent": "true"})
        got = received.get(timeout=WAIT)
        assert (got.topic, got.payload, got.qos) == ("ws/news", b"\x00\xffbinary", 1)
        watching = stomp.subscribe("/topic/ws.back")
        published = client.publish("ws/back", b"from the browser side", qos=1)
        published.wait_for_publish(WAIT)
        message = watching.receive(WAIT)
        assert message is not None and message.body == b"from the browser side"
    finally:
        client.disconnect()
        client.loop_stop()
        stomp.close()


def test_raftmq_node_with_mqtt_says_where_and_serves_it(tmp_path: Path) -> None:
    """`raftmq node --mqtt HOST:PORT`, a real process: its startup lines name both listeners."""
    stomp_port, mqtt_port = free_ports(2)
    out = tmp_path / "node.stdout"
    with open(out, "wb") as stdout, open(tmp_path / "node.stderr", "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--listen", f"127.0.0.1:{stomp_port}",
                                 "--mqtt", f"127.0.0.1:{mqtt_port}", "--in-memory"], cwd=tmp_path, stdout=stdout,
                                stderr=stderr)
    try:
        deadline = time.monotonic() + 20
        while "MQTT" not in out.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "node.stderr").read_text()[-2000:]
            time.sleep(0.05)
        assert out.read_text().splitlines() == [
            f"raftmq node listening on 127.0.0.1:{stomp_port} (in memory: nothing survives a restart)",
            f"MQTT 3.1.1 and 5.0 on 127.0.0.1:{mqtt_port}"]
        client = Paho(mqtt_port, 4, "cli")
        try:
            assert client.subscribe("cli/#", 1) == [1]
            client.client.publish("cli/hello", b"world", qos=1)
            got = client.messages.get(timeout=WAIT)
            assert (got.topic, got.payload) == ("cli/hello", b"world")
        finally:
            client.close()
    finally:
        proc.kill()
        proc.wait(10)


def start_node(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    out = tmp_path / "node.stdout"
    with open(out, "wb") as stdout, open(tmp_path / "node.stderr", "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", *args], cwd=tmp_path, stdout=stdout,
                                stderr=stderr)
    return proc, out


def test_a_single_node_serves_mqtt_on_1883_of_its_host_unless_told_otherwise(tmp_path: Path) -> None:
    """The README's `raftmq node` (here on a free STOMP port): MQTT on port 1883 of the same host,
    said on its second line; `--mqtt off` opens no MQTT port. (Port 1883 is fixed: this test runs
    in the presets' worker group, tests/helpers/worker_groups.py.)"""
    stomp_port = free_port()
    proc, out = start_node(tmp_path, "--listen", f"127.0.0.1:{stomp_port}", "--in-memory")
    try:
        deadline = time.monotonic() + 20
        while "MQTT" not in out.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "node.stderr").read_text()[-2000:]
            time.sleep(0.05)
        assert out.read_text().splitlines()[1] == "MQTT 3.1.1 and 5.0 on 127.0.0.1:1883"
        client = Paho(1883, 5, "default-port")
        try:
            assert client.subscribe("d/#", 1) == [1]
        finally:
            client.close()
    finally:
        proc.terminate()
        proc.wait(10)
    (tmp_path / "off").mkdir()
    proc, out = start_node(tmp_path / "off", "--listen", f"127.0.0.1:{stomp_port}", "--in-memory", "--mqtt", "off")
    try:
        deadline = time.monotonic() + 20
        while "listening" not in out.read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)
        assert out.read_text().splitlines() == [
            f"raftmq node listening on 127.0.0.1:{stomp_port} (in memory: nothing survives a restart)"]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", 1883), timeout=2).close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("durable", [False, True])
def test_an_mqtt_port_in_use_is_named_as_such(tmp_path: Path, durable: bool) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        extra = ("--data-dir", str(tmp_path / "data")) if durable else ("--in-memory",)
        done = subprocess.run([sys.executable, "-m", "raftmq", "node", "--listen", f"127.0.0.1:{free_port()}",
                               "--mqtt", f"127.0.0.1:{port}", *extra], cwd=tmp_path, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port} (MQTT: a single node takes --mqtt HOST:PORT or --mqtt off" in done.stderr
    assert "Traceback" not in done.stderr

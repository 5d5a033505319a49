"""MQTT's limits and bad input, against nodes: `max_connections` holds for MQTT clients too (one
more gets CONNACK "server busy"), `[limits] max_frame_bytes` is MQTT's maximum packet size
(said in an MQTT 5 CONNACK; a larger packet gets DISCONNECT "packet too large"), and a live fuzz
of a real node process — garbage, mutated and truncated packets from hundreds of connections —
leaves it serving, logging no traceback and counting no internal error, with what it stored
intact."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from raftmq.config import NodeConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.processes import free_ports
from raftmq.protocol.limits import Limits
from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt import reasons
from raftmq.protocol.mqtt.codec import MqttParser, encode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
WAIT = 10.0


def connect(port: int, client_id: str, version: int = 5) -> tuple[socket.socket, list[p.Packet]]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.sendall(encode(p.Connect(client_id, version)))
    parser = MqttParser(version)
    packets: list[p.Packet] = []
    while not packets:
        chunk = sock.recv(4096)
        if not chunk:
            break
        packets += parser.feed(chunk)
    return sock, packets


def until_closed(sock: socket.socket, version: int = 5) -> list[p.Packet]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return MqttParser(version).feed(data)


def test_max_connections_holds_for_mqtt_clients_too() -> None:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}", max_connections=2)):
        first, [connack] = connect(port, "one")
        second, _ = connect(port, "two")
        try:
            assert isinstance(connack, p.Connack) and connack.reason_code == 0
            for version, code in ((5, reasons.SERVER_BUSY), (4, reasons.SERVER_UNAVAILABLE_311)):
                third, [refused] = connect(port, "three", version)
                assert isinstance(refused, p.Connack) and refused.reason_code == code
                assert until_closed(third, version) == []
                third.close()
        finally:
            first.close()
            second.close()


def test_max_frame_bytes_is_mqtts_maximum_packet_size() -> None:
    port = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{port}", limits=Limits(max_frame_bytes=100_000))):
        sock, [connack] = connect(port, "big")
        try:
            assert isinstance(connack, p.Connack) and connack.properties["maximum_packet_size"] == 100_000
            sock.sendall(encode(p.Publish("big", b"x" * 99_000, 1, packet_id=1), 5))  # fits
            assert MqttParser(5).feed(sock.recv(4096)) == [p.PubAck(1)]
            # Refused on its length alone: only its first bytes go (the rest unread would make the
            # close a reset, which can drop the DISCONNECT on its way).
            sock.sendall(encode(p.Publish("big", b"x" * 100_001, 1, packet_id=2), 5)[:16])
            [answer] = until_closed(sock)
            assert isinstance(answer, p.Disconnect) and answer.reason_code == reasons.PACKET_TOO_LARGE
        finally:
            sock.close()


def valid_stream(rng: random.Random, version: int) -> bytes:
    """A plausible session's bytes, to mutate."""
    will = p.Will("fuzz/will", b"w", rng.randrange(3), rng.random() < 0.5) if rng.random() < 0.3 else None
    topic_filter = rng.choice(["fuzz/#", "+/x", "$share/g/a", "a/#/b", "fuzz/+"])
    packets: list[p.Packet] = [
        p.Connect(f"fuzz-{rng.randrange(1000)}", version, clean_start=rng.random() < 0.5,
                  keep_alive=rng.randrange(60), will=will),
        p.Subscribe(1, [p.Subscription(topic_filter, rng.randrange(3))]),
        p.Publish("fuzz/a", bytes(rng.randrange(256) for _ in range(rng.randrange(64))), 1, rng.random() < 0.3,
                  packet_id=2),
        p.Publish("fuzz/b", b"q2", 2, packet_id=3),
        p.PubRel(3),
        p.Unsubscribe(4, ["fuzz/#"]),
        p.PingReq(),
    ]
    return b"".join(encode(packet, version) for packet in packets)


def mutated(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:  # garbage
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 512)))
    data = bytearray(valid_stream(rng, rng.choice([4, 5])))
    if kind == 1:  # bytes flipped
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 2:  # cut short
        data = data[: rng.randrange(1, len(data))]
    else:  # a huge length announced after the CONNECT
        data += bytes((0x30, 0xFF, 0xFF, 0xFF, 0x7F))
    return bytes(data)


def test_a_live_fuzz_leaves_the_node_serving_with_what_it_stored(tmp_path: Path) -> None:
    stomp, mqtt, admin = free_ports(3)
    out, err = tmp_path / "node.stdout", tmp_path / "node.stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--listen", f"127.0.0.1:{stomp}",
                                 "--mqtt", f"127.0.0.1:{mqtt}", "--admin", f"127.0.0.1:{admin}",
                                 "--data-dir", str(tmp_path / "data")], cwd=tmp_path, stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + 30
        while "MQTT" not in out.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, err.read_text()[-2000:]
            time.sleep(0.05)
        keeper, _ = connect(mqtt, "keeper")  # a retained message, there before and after
        keeper.sendall(encode(p.Publish("fuzz/state", b"kept", 1, True, packet_id=1), 5))
        assert MqttParser(5).feed(keeper.recv(4096)) == [p.PubAck(1)]
        keeper.close()
        rng = random.Random(45)
        for _ in range(300):
            with socket.create_connection(("127.0.0.1", mqtt), timeout=2) as sock:
                try:
                    sock.sendall(mutated(rng))
                    sock.settimeout(0.2)
                    while sock.recv(65536):
                        pass
                except OSError:
                    pass  # closed on us, or nothing more to say: both fine
        assert proc.poll() is None, err.read_text()[-2000:]
        reader, _ = connect(mqtt, "reader")
        reader.sendall(encode(p.Subscribe(1, [p.Subscription("fuzz/state", 1)]), 5))
        parser, got = MqttParser(5), []
        while not any(isinstance(packet, p.Publish) for packet in got):
            got += parser.feed(reader.recv(4096))
        publish = next(packet for packet in got if isinstance(packet, p.Publish))
        assert (publish.topic, publish.payload, publish.retain) == ("fuzz/state", b"kept", True)
        reader.close()
        status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{admin}/status", timeout=WAIT).read())
        assert status["internal_errors"] == 0 and status["apply_failures"] == 0 and status["failure"] is None
        assert "Traceback" not in err.read_text()
    finally:
        proc.terminate()
        proc.wait(15)

"""MQTT as an operator sees it, on a real 3-member group with [tls]: clients connect over TLS to
the leader and through a follower's relay (pinned to the group's certificate); the management API
lists their connections as clients with their MQTT version, client id and transport, their kept
subscriptions among the consumers, a share's queue among the destinations; /status counts them."""

from __future__ import annotations

import json
import queue
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from tests.helpers.group_harness import secured_group  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PASS = "s3cret-pass"
WAIT = 10.0


def tls_client(port: int, ca: Path, client_id: str, keep: bool) -> tuple[Any, queue.Queue[Any]]:
    messages: queue.Queue[Any] = queue.Queue()
    connected: queue.Queue[int] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv311,
                         clean_session=not keep)
    client.tls_set(ca_certs=str(ca), cert_reqs=ssl.CERT_REQUIRED)
    client.tls_insecure_set(True)  # the test certificate names no host: its chain is still checked
    client.username_pw_set("ops", PASS)
    client.on_connect = lambda _c, _u, _f, code, _p: connected.put(int(getattr(code, "value", code)))
    client.on_message = lambda _c, _u, message: messages.put(message)
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    assert connected.get(timeout=WAIT) == 0
    return client, messages


def test_mqtt_over_tls_through_a_follower_and_what_the_operator_sees(tmp_path: Path) -> None:
    group, ca = secured_group(tmp_path, PASS, mqtt=True)
    access = group.admin_access
    assert access is not None
    group.start()
    clients: list[Any] = []
    try:
        leader = group.leader()
        follower = next(node for node in group.members if node != leader)
        subscriber, messages = tls_client(group.members[follower].mqtt_port or 0, Path(ca), "watcher", keep=True)
        clients.append(subscriber)
        subscriber.subscribe("ops/#", 1)
        subscriber.subscribe("$share/workers/jobs", 1)
        publisher, _ = tls_client(group.members[leader].mqtt_port or 0, Path(ca), "sender", keep=False)
        clients.append(publisher)
        time.sleep(0.5)
        publisher.publish("ops/temp", b"over tls", qos=1).wait_for_publish(WAIT)
        assert messages.get(timeout=WAIT).payload == b"over tls"  # through the follower's TLS relay

        admin = f"https://127.0.0.1:{group.members[leader].admin_port}"

        def get(path: str) -> Any:
            code, data = access.request(admin, path, 15, "GET", None, None)
            assert code == 200, data
            return json.loads(data)

        rows = {row["client_id"]: row for row in get("/api/connections")["connections"] if row["client_id"]}
        assert {name: (rows[name]["kind"], rows[name]["version"], rows[name]["transport"])
                for name in ("watcher", "sender")} == {
            "watcher": ("client", "mqtt-3.1.1", "tls"),  # the follower relays over TLS too (pinned)
            "sender": ("client", "mqtt-3.1.1", "tls")}
        consumers = get("/api/consumers")["consumers"]
        assert any((row["durable_name"] or "").startswith("mqtt:7:watcher:") for row in consumers)
        destinations = [row["destination"] for row in get("/api/destinations")["destinations"]]
        assert any(name.startswith("/queue/$.raftmq.share.") for name in destinations)
        status = get("/status")
        assert status["mqtt_connections"] == 2 and status["broker"]["mqtt"]["kept_sessions"] >= 1
    finally:
        for client in clients:
            client.disconnect()
            client.loop_stop()
        group.close()

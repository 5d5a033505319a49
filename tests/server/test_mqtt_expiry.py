"""MQTT 5's session expiry and will delay with paho-mqtt against a node: a session whose time is up
is gone when its client comes back, one it comes back to in time is there; a will waiting out its
delay is not published when its client returns in time, and is when it does not."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")
from paho.mqtt.packettypes import PacketTypes  # noqa: E402
from paho.mqtt.properties import Properties  # noqa: E402

from tests.helpers.mqtt_groups import mqtt_node  # noqa: E402
from tests.helpers.paho_clients import WAIT, Client  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def port() -> Iterator[int]:
    yield from mqtt_node()


def connect(port: int, client_id: str, expiry: int, will: tuple[str, bytes, int] | None = None) -> tuple[Any, bool]:
    """A paho MQTT 5 client with session expiry `expiry` s (clean start 0), and its session_present."""
    answers: queue.Queue[tuple[bool, int]] = queue.Queue()
    client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    client.on_connect = lambda _c, _u, flags, code, _p: answers.put((bool(flags.session_present), int(code.value)))
    if will is not None:
        will_properties = Properties(PacketTypes.WILLMESSAGE)
        will_properties.WillDelayInterval = will[2]
        client.will_set(will[0], will[1], qos=1, properties=will_properties)
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = expiry
    client.connect("127.0.0.1", port, keepalive=30, clean_start=False, properties=properties)
    client.loop_start()
    present, code = answers.get(timeout=WAIT)
    assert code == 0
    return client, present


def gone(client: Any) -> None:
    client.loop_stop()
    sock = client.socket()
    if sock is not None:
        sock.close()  # no DISCONNECT


def test_a_session_whose_time_is_up_is_gone_and_one_back_in_time_is_there(port: int) -> None:
    short, present = connect(port, "short-lived", expiry=1)
    assert not present
    short.subscribe("x", 1)
    time.sleep(0.2)
    short.disconnect()
    short.loop_stop()
    kept, _ = connect(port, "long-lived", expiry=60)
    kept.subscribe("x", 1)
    time.sleep(0.2)
    kept.disconnect()
    kept.loop_stop()
    time.sleep(2.0)  # past the short one's second
    again, present = connect(port, "short-lived", expiry=1)
    again.disconnect()
    again.loop_stop()
    assert not present, "a session whose expiry passed was still there"
    back, present = connect(port, "long-lived", expiry=60)
    back.disconnect()
    back.loop_stop()
    assert present


def test_a_will_waiting_out_its_delay_is_cancelled_by_a_return_in_time(port: int) -> None:
    watcher = Client(port, 5, "watcher", keep=False)
    try:
        watcher.subscribe("status/#", 1)
        returning, _ = connect(port, "returning", expiry=60, will=("status/returning", b"gone", 2))
        away, _ = connect(port, "away", expiry=60, will=("status/away", b"gone", 2))
        gone(returning)
        gone(away)
        time.sleep(0.5)
        back, present = connect(port, "returning", expiry=60)  # within the 2 s
        assert present
        got = [(m.topic, m.payload) for m in watcher.received(1)]
        assert got == [("status/away", b"gone")]  # only the one that stayed away
        assert watcher.nothing_more(1.5)
        back.disconnect()
        back.loop_stop()
    finally:
        watcher.close()

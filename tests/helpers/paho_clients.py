"""paho-mqtt clients for the tests: one on its own network thread, recording what it is told."""

from __future__ import annotations

import queue
import socket
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

WAIT = 10.0
NEVER = 0xFFFFFFFF  # MQTT 5's session expiry interval: kept until the client ends it


class Client:
    """paho on its own network thread; `keep`: a session the broker keeps (clean session 0, or
    MQTT 5 clean start 0 with a session expiry); `manual_ack`: PUBACKs only when `ack` says."""

    def __init__(self, port: int, version: int, client_id: str, keep: bool, manual_ack: bool = False,
                 will: tuple[str, bytes] | None = None) -> None:
        self.version = version
        self.messages: queue.Queue[Any] = queue.Queue()
        self.connected: queue.Queue[tuple[bool, int]] = queue.Queue()
        self.disconnected: queue.Queue[int] = queue.Queue()
        self.subscribed: queue.Queue[Any] = queue.Queue()
        five = version == 5
        kwargs: dict[str, Any] = {} if five else {"clean_session": not keep}
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=paho.MQTTv5 if five else paho.MQTTv311, manual_ack=manual_ack, **kwargs)
        self.client.on_connect = lambda _c, _u, flags, code, _p: self.connected.put(
            (bool(flags.session_present), int(getattr(code, "value", code))))
        self.client.on_disconnect = lambda _c, _u, _f, code, _p: self.disconnected.put(
            int(getattr(code, "value", code)))
        self.client.on_message = lambda _c, _u, message: self.messages.put(message)
        self.client.on_subscribe = lambda _c, _u, _mid, codes, _p: self.subscribed.put(codes)
        if will is not None:  # published at QoS 1 when the connection is lost
            self.client.will_set(will[0], will[1], qos=1)
        connect: dict[str, Any] = {}
        if five:
            properties = Properties(PacketTypes.CONNECT)
            if keep:
                properties.SessionExpiryInterval = NEVER
            connect = {"clean_start": not keep, "properties": properties}
        self.client.connect("127.0.0.1", port, keepalive=30, **connect)
        self.client.loop_start()
        self.session_present, code = self.connected.get(timeout=WAIT)
        assert code == 0, code

    def subscribe(self, topic_filter: str, qos: int) -> None:
        self.client.subscribe(topic_filter, qos)
        assert [int(c.value) for c in self.subscribed.get(timeout=WAIT)] == [qos]

    def received(self, count: int) -> list[Any]:
        return [self.messages.get(timeout=WAIT) for _ in range(count)]

    def nothing_more(self, within: float = 0.5) -> bool:
        try:
            self.messages.get(timeout=within)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def lose(self) -> None:
        """The connection breaks without a DISCONNECT (its will goes)."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def publish_all(port: int, topic: str, bodies: list[bytes], qos: int = 1) -> None:
    publisher = Client(port, 5, "publisher", keep=False)
    try:
        for body in bodies:
            publisher.client.publish(topic, body, qos=qos).wait_for_publish(WAIT)  # its PUBACK (PUBCOMP)
    finally:
        publisher.close()

"""An MQTT client made of a socket and raftmq's own codec, for tests that must choose each packet
(or not answer one) themselves."""

from __future__ import annotations

import socket

from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt.codec import MqttParser, encode

WAIT = 10.0


class RawMqtt:
    def __init__(self, port: int, version: int = 5) -> None:
        self.version = version
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.parser = MqttParser(version)
        self._read: list[p.Packet] = []

    def send(self, packet: p.Packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def read(self, count: int = 1) -> list[p.Packet]:
        """The next `count` packets (the socket's timeout bounds each wait)."""
        while len(self._read) < count:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed after {self._read}")
            self._read += self.parser.feed(data)
        got, self._read = self._read[:count], self._read[count:]
        return got

    def nothing(self, within: float = 0.5) -> bool:
        """Whether nothing more comes within `within` s."""
        self.sock.settimeout(within)
        try:
            return not self._read and not self.read(1)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(WAIT)

    def close(self) -> None:
        self.sock.close()

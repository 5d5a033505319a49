"""paho-mqtt against a raftmq group, for the `mqtt` workload (chaos.mqtt): finding the leader,
one client thread's loop, aborting a connection as a crash does.

A group's leader runs the MQTT sessions; a follower relays a client to it, or (redirecting, or
knowing no reachable leader) answers CONNECT with CONNACK "server unavailable" (3.1.1: 3;
MQTT 5: 0x88, naming the leader's client address in its reason string, or 0x9C "use another
server" with a server reference). So `Leader.connect` tries the members in turn, the one that
served last first, and the member a refusal names next, until one accepts.

Each client runs in a thread of its own and drives paho's loop itself (`client.loop`), so its
callbacks run in that thread, between its own steps: no locks but the history's.

paho-mqtt 2.1.0 readies its in-flight messages again at every connection attempt: a QoS 2
message whose PUBREL it sent would, at a second attempt before a CONNACK (a member that refuses,
one not listening), be PUBLISHed again as new after the broker released its packet id (docs/mqtt.md).
`undo_double_reset` before each attempt undoes the first attempt's reset.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

KEEPALIVE_S = 2  # paho gives up on a silent broker (a paused leader) after about this long, twice
CONNECT_TIMEOUT_S = 1.0  # the TCP connect (a partitioned member drops the SYN)
CONNACK_TIMEOUT_S = 2.0
LOOP_S = 0.02  # one step of a client's loop
ROUND_PAUSE_S = 0.1  # after every member was tried
SESSION_EXPIRY_S = 0xFFFFFFFF  # MQTT 5: keep the session (raftmq answers "never" to any expiry)
_LEADER_HINT = re.compile(r"leader: (\S+)")


def version_name(protocol: MQTTProtocolVersion) -> str:
    return "5" if protocol == paho.MQTTv5 else "3.1.1"


def new_client(client_id: str, protocol: MQTTProtocolVersion, keep: bool) -> paho.Client:
    """A paho client; `keep`: a session the broker keeps (3.1.1 clean session 0; MQTT 5 a
    session expiry on each CONNECT, clean start on the first successful one only)."""
    if protocol == paho.MQTTv5:
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                             reconnect_on_failure=False)
    else:
        client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
                             clean_session=not keep, reconnect_on_failure=False)
    client.connect_timeout = CONNECT_TIMEOUT_S
    return client


def connect_properties(protocol: MQTTProtocolVersion, keep: bool) -> Properties | None:
    if protocol != paho.MQTTv5 or not keep:
        return None
    properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    properties.SessionExpiryInterval = SESSION_EXPIRY_S
    return properties


def undo_double_reset(client: paho.Client) -> None:
    """See the module docstring: a QoS 2 message waiting for its PUBCOMP stays so until the
    attempt's own reset readies its PUBREL again."""
    for message in client._out_messages.values():
        if message.state == paho.mqtt_ms_resend_pubrel:
            message.state = paho.mqtt_ms_wait_for_pubcomp


def code_of(reason: Any) -> int:
    return int(getattr(reason, "value", reason))


@dataclass
class Answer:
    code: int
    present: bool
    hint: str | None  # what a refusal names: the leader's client address, or a server reference


class Leader:
    """The way to a group's leader over MQTT: the members' MQTT addresses and client addresses
    (a refusal names the leader by its client address)."""

    def __init__(self, mqtt: tuple[str, ...], clients: tuple[str, ...] = ()) -> None:
        self.members = [address for address in mqtt if address]
        self.by_client = {c: m for c, m in zip(clients, mqtt, strict=False) if m}
        self.last = 0  # index of the member that served last

    def order(self, hint: str | None) -> list[str]:
        first = self.by_client.get(hint or "") or (hint if hint in self.members else None)
        members = self.members[self.last:] + self.members[:self.last]
        return [first, *[m for m in members if m != first]] if first else members

    def connect(self, make: Callable[[], paho.Client], stop: threading.Event, keep: bool,
                clean_first: bool = False) -> tuple[paho.Client, Answer, str] | None:
        """A client connected to the leader, its CONNACK and the member's address; None once
        `stop` is set. `make` gives the client for each attempt (a new one, or the same one
        again: a kept session's in-flight messages travel with it)."""
        hint: str | None = None
        first = clean_first
        while not stop.is_set():
            for address in self.order(hint):
                if stop.is_set():
                    return None
                client = make()
                answer = attempt(client, address, stop, keep, first)
                if answer is None:
                    continue
                if answer.code == 0:
                    self.last = self.members.index(address)
                    return client, answer, address
                client._sock_close()  # refused: the member closes it too
                hint = answer.hint
                if hint is not None and hint != address:
                    break  # a refusal named the leader: start the next round there
            else:
                hint = None
            stop.wait(ROUND_PAUSE_S)
        return None


def attempt(client: paho.Client, address: str, stop: threading.Event, keep: bool,
            clean_start: bool) -> Answer | None:
    """One CONNECT to `address`: its CONNACK, or None (unreachable, no answer in time)."""
    answers: list[Answer] = []

    def on_connect(_c: Any, _u: Any, flags: Any, reason: Any, properties: Any) -> None:
        hint = None
        reference = getattr(properties, "ServerReference", None)
        said = _LEADER_HINT.search(str(getattr(properties, "ReasonString", "") or ""))
        if reference:
            hint = str(reference).split(",")[0].strip()
        elif said is not None and said.group(1) != "unknown":
            hint = said.group(1)
        answers.append(Answer(code_of(reason), bool(flags.session_present), hint))

    client.on_connect = on_connect
    undo_double_reset(client)
    host, port = address.rsplit(":", 1)
    protocol = client._protocol
    try:
        if protocol == paho.MQTTv5:
            client.connect(host, int(port), keepalive=KEEPALIVE_S, clean_start=clean_start,
                           properties=connect_properties(protocol, keep))
        else:
            client.connect(host, int(port), keepalive=KEEPALIVE_S)
    except (OSError, ValueError):
        return None
    deadline = time.monotonic() + CONNACK_TIMEOUT_S
    while not answers and time.monotonic() < deadline and not stop.is_set():
        if client.loop(LOOP_S) != paho.MQTT_ERR_SUCCESS and not answers:
            break
    if not answers:
        abort(client)
        return None
    return answers[0]


def abort(client: paho.Client) -> None:
    """Drop the connection without DISCONNECT, as a crashing process would (a reset): the
    broker keeps a kept session and redelivers what was not acknowledged."""
    sock = client.socket()
    if isinstance(sock, socket.socket):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    try:
        client.loop(0)  # paho sees the connection end and closes its socket
    except Exception:  # noqa: BLE001 - paho on a dead socket: nothing left to do
        pass
    if client.is_connected():
        client._sock_close()


def disconnect(client: paho.Client) -> None:
    """A clean DISCONNECT (a kept session stays kept), then the socket closed."""
    try:
        client.disconnect()
        for _ in range(5):
            if client.loop(LOOP_S) != paho.MQTT_ERR_SUCCESS:
                break
    except Exception:  # noqa: BLE001 - already gone
        pass
    client._sock_close()


def alive(client: paho.Client, rc: int) -> bool:
    return rc == paho.MQTT_ERR_SUCCESS and client.is_connected()


def clients_of(url: str) -> tuple[str, ...]:
    """The member addresses of a failover URL (`failover:(stomp://a:1,stomp://b:2)`)."""
    return tuple(part.split("://", 1)[-1] for part in url.removeprefix("failover:(").rstrip(")").split(","))

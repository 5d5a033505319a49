"""MQTT through leader kills, with real node processes and paho-mqtt: a QoS 1 publisher at about
500 messages a second and a subscriber whose session the group keeps (clean session 0) ride
five kill -9s of the leader; every message whose PUBACK the publisher got reaches the subscriber
(duplicates allowed: QoS 1 is at least once). The same at QoS 2 end to end: nothing twice. Each
client finds the leader as an MQTT client would: by trying the members in turn (a follower
answers CONNACK "server unavailable")."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

paho = pytest.importorskip("paho.mqtt.client", reason="pip install -e '.[test]' (paho-mqtt)")

from tests.helpers.group_harness import Group  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
RATE = 500  # messages a second
KILLS = 5
TOPIC = "failover/readings"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Group]:
    group = Group(tmp_path, mqtt=True)
    try:
        group.start()
        yield group
    finally:
        group.close()


def connect_to_leader(group: Group, client_id: str, keep: bool, deadline: float,
                      on_message: Any = None) -> tuple[Any, bool, queue.Queue[int]]:
    """A paho 3.1.1 client connected to whichever member serves MQTT now (and its session_present,
    and the queue its disconnects are told on)."""
    while time.monotonic() < deadline:
        for member in group.members.values():
            if not member.alive or member.mqtt_port is None:
                continue
            answers: queue.Queue[tuple[bool, int]] = queue.Queue()
            gone: queue.Queue[int] = queue.Queue()
            client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv311,
                                 clean_session=not keep, reconnect_on_failure=False)
            client.on_connect = lambda _c, _u, flags, code, _p, answers=answers: answers.put(
                (bool(flags.session_present), int(getattr(code, "value", code))))
            client.on_disconnect = lambda _c, _u, _f, code, _p, gone=gone: gone.put(int(getattr(code, "value", code)))
            if on_message is not None:
                client.on_message = on_message
            try:
                client.connect("127.0.0.1", member.mqtt_port, keepalive=5)
            except OSError:
                continue
            client.loop_start()
            try:
                present, code = answers.get(timeout=3)
            except queue.Empty:
                present, code = False, -1
            if code == 0:
                return client, present, gone
            client.loop_stop()
            client.disconnect()
        time.sleep(0.1)
    raise AssertionError(f"{client_id}: no member served MQTT in time")


class Publisher:
    """QoS 1 at RATE, each message numbered; after a lost connection it reconnects to the leader
    and publishes again whatever was not PUBACKed."""

    def __init__(self, group: Group, count: int) -> None:
        self.group, self.count = group, count
        self.acked: set[int] = set()
        self.reconnects = 0
        self.enough = threading.Event()  # publish no more: the run is over once all are acknowledged
        self._lock = threading.Lock()

    def run(self, deadline: float) -> None:
        pending: dict[int, int] = {}  # mid -> number, on the current connection
        next_number = 0
        client, gone = self._connect(deadline, pending)
        started = time.monotonic()
        while time.monotonic() < deadline:
            if not gone.empty():
                client.loop_stop()
                with self._lock:
                    unacked = sorted(set(pending.values()) - self.acked)
                    pending.clear()
                client, gone = self._connect(deadline, pending)
                self.reconnects += 1
                for number in unacked:
                    self._publish(client, pending, number)
                continue
            if next_number < self.count and not self.enough.is_set():
                wait = started + next_number / RATE - time.monotonic()
                if wait > 0:
                    time.sleep(min(0.01, wait))
                    continue
                self._publish(client, pending, next_number)
                next_number += 1
                continue
            with self._lock:
                if len(self.acked) == next_number:  # every one published is acknowledged
                    self.count = next_number
                    break
            time.sleep(0.05)
        client.disconnect()
        client.loop_stop()

    def _connect(self, deadline: float, pending: dict[int, int]) -> tuple[Any, queue.Queue[int]]:
        client, _, gone = connect_to_leader(self.group, "publisher", False, deadline)
        self._acked_mids: set[int] = set()  # this connection's (paho numbers each connection's from 1)
        acked_mids = self._acked_mids

        def published(_c: Any, _u: Any, mid: int, code: Any, _p: Any) -> None:
            if getattr(code, "is_failure", False):
                return
            with self._lock:  # (never held while calling into paho: its thread calls this holding its own)
                acked_mids.add(mid)
                number = pending.get(mid)
                if number is not None:
                    self.acked.add(number)

        client.on_publish = published
        return client, gone

    def _publish(self, client: Any, pending: dict[int, int], number: int) -> None:
        info = client.publish(TOPIC, f"{number}".encode(), qos=1)
        with self._lock:
            pending[info.mid] = number
            if info.mid in self._acked_mids:  # its PUBACK came before this line
                self.acked.add(number)


def test_qos_1_through_five_leader_kills_loses_nothing_acknowledged(group: Group) -> None:
    deadline = time.monotonic() + 150
    received: set[int] = set()
    lock = threading.Lock()

    def on_message(_c: Any, _u: Any, message: Any) -> None:
        with lock:
            received.add(int(message.payload))

    subscriber, present, sub_gone = connect_to_leader(group, "keeper", True, deadline, on_message)
    assert not present
    subscribed: queue.Queue[Any] = queue.Queue()
    subscriber.on_subscribe = lambda _c, _u, _mid, codes, _p: subscribed.put(codes)
    subscriber.subscribe(TOPIC, 1)
    assert [int(c.value) for c in subscribed.get(timeout=10)] == [1]

    publisher = Publisher(group, count=RATE * 120)  # at most; it stops once the five kills are behind it
    thread = threading.Thread(target=publisher.run, args=(deadline,), daemon=True)
    thread.start()
    resumed = 0
    kills = 0
    try:
        next_kill = time.monotonic() + 2.0
        while thread.is_alive() and time.monotonic() < deadline:
            if not sub_gone.empty():  # the subscriber's member died: back to the leader, same session
                subscriber.loop_stop()
                subscriber, present, sub_gone = connect_to_leader(group, "keeper", True, deadline, on_message)
                assert present, "the group lost the subscriber's session"
                resumed += 1
            if kills < KILLS and time.monotonic() >= next_kill:
                leader = group.leader()
                group.kill(leader)
                group.wait_exit(leader)
                group.start(leader)  # back as a follower: the group keeps three members
                kills += 1
                next_kill = time.monotonic() + 2.0
            if kills == KILLS and time.monotonic() >= next_kill:
                publisher.enough.set()  # the last kill is 2 s behind: what is published now ends the run
            time.sleep(0.02)
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
        assert not thread.is_alive(), (f"the publisher did not finish: {len(publisher.acked)} acknowledged, "
                                       f"{publisher.reconnects} reconnects, {kills} kills")
        assert kills == KILLS and publisher.reconnects >= 1 and resumed >= 1
        assert len(publisher.acked) == publisher.count
        settle = time.monotonic() + 30
        while time.monotonic() < settle:
            if not sub_gone.empty():
                subscriber.loop_stop()
                subscriber, present, sub_gone = connect_to_leader(group, "keeper", True, deadline, on_message)
                assert present
            with lock:
                if publisher.acked <= received:
                    break
            time.sleep(0.1)
        with lock:
            missing = sorted(publisher.acked - received)
        assert not missing, f"{len(missing)} acknowledged messages never reached the subscriber: {missing[:20]}"
    finally:
        subscriber.disconnect()
        subscriber.loop_stop()


class ExactlyOncePublisher:
    """QoS 2 at RATE_QOS_2 from one paho client whose session is kept (clean session 0): after a
    lost connection the same client connects to the next leader and, as MQTT has it, sends again
    each PUBLISH whose PUBREC it missed (same packet id, DUP) and each PUBREL whose PUBCOMP it
    missed. `completed`: the numbers whose flow ended (PUBCOMP)."""

    def __init__(self, group: Group, count: int) -> None:
        self.group, self.count = group, count
        self.completed: set[int] = set()
        self.reconnects = 0
        self.enough = threading.Event()  # publish no more: the run is over once all are completed
        self._numbers: dict[int, int] = {}
        self._done_mids: set[int] = set()
        self._lock = threading.Lock()
        self.mids: list[tuple[int, int]] = []  # (number, packet id), for a failure's message
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="exactly-once", protocol=paho.MQTTv311,
                                  clean_session=False, reconnect_on_failure=False)
        self.client.max_inflight_messages_set(50)
        self.client.max_queued_messages_set(0)
        self.client.on_publish = self._published

    def _published(self, _c: Any, _u: Any, mid: int, _code: Any, _p: Any) -> None:
        with self._lock:
            self._done_mids.add(mid)
            number = self._numbers.get(mid)
            if number is not None:
                self.completed.add(number)

    def connect(self, deadline: float) -> None:
        answers: queue.Queue[int] = queue.Queue()
        self.client.on_connect = lambda _c, _u, _f, code, _p: answers.put(int(getattr(code, "value", code)))
        while time.monotonic() < deadline:
            for member in self.group.members.values():
                if not member.alive or member.mqtt_port is None:
                    continue
                undo_double_reset(self.client)
                try:
                    self.client.connect("127.0.0.1", member.mqtt_port, keepalive=5)
                except OSError:
                    continue
                self.client.loop_start()
                try:
                    code = answers.get(timeout=3)
                except queue.Empty:
                    code = -1
                if code == 0:
                    return
                self.client.loop_stop()
            time.sleep(0.1)
        raise AssertionError("no member served MQTT in time")

    def run(self, deadline: float) -> None:
        self.connect(deadline)
        started = time.monotonic()
        number = 0
        while time.monotonic() < deadline:
            if not self.client.is_connected():  # (paho's own state: its disconnect events may be stale)
                self.client.loop_stop()
                self.connect(deadline)  # the same client: it resends what it has in flight
                self.reconnects += 1
                continue
            if number < self.count and not self.enough.is_set():
                wait = started + number / RATE_QOS_2 - time.monotonic()
                if wait > 0:
                    time.sleep(min(0.01, wait))
                    continue
                info = self.client.publish(TOPIC_QOS_2, f"{number}".encode(), qos=2)
                with self._lock:
                    self._numbers[info.mid] = number
                    self.mids.append((number, info.mid))
                    if info.mid in self._done_mids:
                        self.completed.add(number)
                number += 1
                continue
            with self._lock:
                if len(self.completed) == number:  # every one published is completed
                    self.count = number
                    break
            time.sleep(0.05)
        self.client.disconnect()
        self.client.loop_stop()


def undo_double_reset(client: Any) -> None:
    """paho-mqtt 2.1.0 readies its in-flight messages again at every connection attempt: a QoS 2
    message whose PUBREL it sent (waiting for PUBCOMP) is set to have its PUBREL sent again, and
    a second attempt before a CONNACK (a member that refuses, one not listening yet) takes that
    for a message never sent, and PUBLISHes it again, after the broker released its packet id:
    a new message to any broker, stored twice. The client a user writes must try the leader
    once; here the attempt before each one is undone instead (docs/mqtt.md says so to users)."""
    for message in client._out_messages.values():
        if message.state == paho.mqtt_ms_resend_pubrel:
            message.state = paho.mqtt_ms_wait_for_pubcomp


RATE_QOS_2 = 200
TOPIC_QOS_2 = "failover/meters"


class Reader:
    """The QoS 2 subscriber: one paho client (clean session 0) for the whole run, connected again
    to whichever member serves MQTT after each loss. MQTT's exactly once needs the client's half of
    the session too: paho keeps the QoS 2 messages it answered PUBREC for (and hands each to the
    application at its PUBREL) across reconnections of the same client object."""

    def __init__(self, on_message: Any) -> None:
        self.answers: queue.Queue[tuple[bool, int]] = queue.Queue()
        self.gone: queue.Queue[int] = queue.Queue()
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id="meter-reader", protocol=paho.MQTTv311,
                                  clean_session=False, reconnect_on_failure=False)
        self.client.on_connect = lambda _c, _u, flags, code, _p: self.answers.put(
            (bool(flags.session_present), int(getattr(code, "value", code))))
        self.client.on_disconnect = lambda _c, _u, _f, code, _p: self.gone.put(int(getattr(code, "value", code)))
        self.client.on_message = on_message

    def connect(self, group: Group, deadline: float) -> bool:
        """Connected to the member serving MQTT now; whether the session was present."""
        while time.monotonic() < deadline:
            for member in group.members.values():
                if not member.alive or member.mqtt_port is None:
                    continue
                self.client.loop_stop()
                try:
                    self.client.connect("127.0.0.1", member.mqtt_port, keepalive=5)
                except OSError:
                    continue
                self.client.loop_start()
                try:
                    present, code = self.answers.get(timeout=3)
                except queue.Empty:
                    present, code = False, -1
                if code == 0:
                    while not self.gone.empty():
                        self.gone.get()
                    return present
            time.sleep(0.1)
        raise AssertionError("meter-reader: no member served MQTT in time")


def test_qos_2_through_five_leader_kills_stores_nothing_twice_and_delivers_once(group: Group) -> None:
    """Exactly once end to end: every completed publication reaches the QoS 2 subscriber (granted
    QoS 2, its session kept) once, DUP or not: a message stored twice, or delivered again under
    another packet id, or whose PUBREL was lost with a leader and not sent again, would show."""
    deadline = time.monotonic() + 150
    copies: dict[int, int] = {}  # number -> times handed to the application
    lock = threading.Lock()

    log: list[tuple[float, int, bool, int]] = []

    def on_message(_c: Any, _u: Any, message: Any) -> None:
        with lock:
            number = int(message.payload)
            log.append((time.monotonic(), number, bool(message.dup), message.mid))
            copies[number] = copies.get(number, 0) + 1

    reader = Reader(on_message)
    assert not reader.connect(group, deadline)
    subscribed: queue.Queue[Any] = queue.Queue()
    reader.client.on_subscribe = lambda _c, _u, _mid, codes, _p: subscribed.put(codes)
    reader.client.subscribe(TOPIC_QOS_2, 2)
    assert [int(c.value) for c in subscribed.get(timeout=10)] == [2]

    publisher = ExactlyOncePublisher(group, count=RATE_QOS_2 * 120)
    thread = threading.Thread(target=publisher.run, args=(deadline,), daemon=True)
    thread.start()
    kills = 0
    try:
        next_kill = time.monotonic() + 2.0
        while thread.is_alive() and time.monotonic() < deadline:
            if not reader.gone.empty():
                assert reader.connect(group, deadline), "the group lost the subscriber's session"
            if kills < KILLS and time.monotonic() >= next_kill:
                leader = group.leader()
                group.kill(leader)
                group.wait_exit(leader)
                group.start(leader)
                kills += 1
                next_kill = time.monotonic() + 2.0
            if kills == KILLS and time.monotonic() >= next_kill:
                publisher.enough.set()  # the last kill is 2 s behind: what is published now ends the run
            time.sleep(0.02)
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
        assert not thread.is_alive(), f"the publisher did not finish: {len(publisher.completed)} completed"
        assert kills == KILLS and publisher.reconnects >= 1
        assert len(publisher.completed) == publisher.count
        settle = time.monotonic() + 30
        while time.monotonic() < settle:
            if not reader.gone.empty():
                reader.connect(group, deadline)
            with lock:
                if publisher.completed <= set(copies):
                    break
            time.sleep(0.1)
        time.sleep(1.0)  # a copy that would come twice comes now
        with lock:
            missing = sorted(publisher.completed - set(copies))
            twice = sorted(number for number, n in copies.items() if n > 1)
        assert not missing, f"{len(missing)} completed publications never reached the subscriber: {missing[:20]}"
        detail = [entry for entry in log if entry[1] in twice[:3]]
        detail += [entry for entry in publisher.mids if entry[0] in twice[:3]]
        assert not twice, f"{len(twice)} publications reached the subscriber twice: {twice[:20]} {detail}"
    finally:
        reader.client.disconnect()
        reader.client.loop_stop()

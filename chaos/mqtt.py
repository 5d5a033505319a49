"""The `mqtt` workload: paho-mqtt publishers and subscribers on one group, MQTT 3.1.1 and 5
mixed, each finding the leader by trying the members in turn (chaos.mqtt_client).

- Publishers (`--concurrency`, alternately QoS 1 and QoS 2, the protocol version changing
  every second one: q1p0 3.1.1, q2p1 3.1.1, q1p2 5, q2p3 5, ...) publish unique values
  `<name>-<seq>` to `chaos/<name>`; each records `open` `{"qos", "protocol"}` first. A
  publication is `send` invoke, then `ok` at its PUBACK (QoS 1) or PUBCOMP (QoS 2), `fail` at
  one with an error reason code, `info` when its outcome is unknown.
  - QoS 1: a clean session per connection; what was unacknowledged when the connection broke
    (or stayed unanswered 5 s) is `info` and never sent again.
  - QoS 2: one paho client whose session the broker keeps, for the whole run: after a broken
    connection it reconnects to the next leader and, as MQTT has it, sends again each PUBLISH
    whose PUBREC it missed (DUP, same packet id) and each PUBREL whose PUBCOMP it missed; the
    group's key for the flow keeps the message from being stored twice. `connect` ok
    `{"present": bool}` at each reconnection.
- Kept-session subscribers (k0 3.1.1, k1 5, ...; `max(2, concurrency // 2)`) subscribe to
  `chaos/+` at QoS 1 once, acknowledge each delivery 20 ms late (paho's manual ack), and on
  every reconnection record `connect` `{"present": bool}` (and subscribe again when the session
  is gone). Deliveries are `receive` ok with `redelivered` = the PUBLISH's DUP flag.
- Shared subscribers (s0, s1: MQTT 5, kept sessions, `$share/chaos/chaos/+`): competing
  consumers. Until the broker grants shared subscriptions, their SUBSCRIBE is refused (SUBACK
  0x9E), recorded as `subscribe` fail, and they take no further part.
- Every 4 s, with even odds, one client (subscriber or publisher) crashes: its socket is reset
  without DISCONNECT, its pending acknowledgements dropped; it reconnects.

The checker is chaos.mqtt_checker.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTProtocolVersion

from chaos.client import crash_some
from chaos.history import FAIL, INFO, INVOKE, OK, History, Op
from chaos.mqtt_checker import MqttResult, check_mqtt
from chaos.mqtt_client import LOOP_S, Leader, abort, alive, clients_of, code_of, disconnect, new_client, version_name
from chaos.workload import Env, Workload
from raftmq.errors import RaftmqError

TOPIC_ROOT = "chaos"
TOPIC_FILTER = "chaos/+"
SHARE_GROUP = "chaos"
SHARED_SUBSCRIBERS = 2
PUBLISH_TIMEOUT_S = 5.0  # a publication unanswered this long: the connection is taken for dead
FINISH_S = 10.0  # after the load stops, how long publishers may take to complete what is in flight
ACK_DELAY_S = 0.02
MAX_INFLIGHT = 20
START_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 30.0  # before the drain: every subscriber back and subscribed


class NoMqtt(RaftmqError):
    """The deployment's first group has no member with an MQTT listener."""


async def in_thread(name: str, body: Callable[[threading.Event], None], stop: asyncio.Event) -> None:
    """Run `body(halt)` in a thread of its own; `halt` is set once `stop` is (or this is
    cancelled). Returns when the thread is done; its exception, if any, is raised here."""
    loop = asyncio.get_running_loop()
    halt = threading.Event()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    def main() -> None:
        error: BaseException | None = None
        try:
            body(halt)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
        loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=main, name=name, daemon=True).start()
    waiter: asyncio.Future[Any] = loop.create_task(stop.wait())
    try:
        await asyncio.wait([done, waiter], return_when=asyncio.FIRST_COMPLETED)
        halt.set()
        await asyncio.shield(done)
    finally:
        halt.set()
        waiter.cancel()


def finish_after(halt: threading.Event, grace_s: float) -> threading.Event:
    """An event set `grace_s` after `halt` is."""
    give_up = threading.Event()

    def arm() -> None:
        halt.wait()
        give_up.wait(grace_s)
        give_up.set()

    threading.Thread(target=arm, daemon=True).start()
    return give_up


class Publisher:
    def __init__(self, name: str, qos: int, protocol: MQTTProtocolVersion, leader: Leader, history: History,
                 interval_s: float) -> None:
        self.name, self.qos, self.protocol, self.leader = name, qos, protocol, leader
        self.history, self.interval_s = history, interval_s
        self.topic = f"{TOPIC_ROOT}/{name}"
        self.seq = 0
        self.opened = False
        self._crash = False
        self.pending: dict[int, tuple[str, float]] = {}  # packet id -> (value, when sent)

    def crash(self) -> None:
        self._crash = True

    def _record(self, type_: str, value: str, node: str | None = None, error: str | None = None) -> None:
        self.history.record(self.name, type_, "send", value, node=node, error=error)

    def _on_publish(self, node: Callable[[], str | None]) -> Callable[..., None]:
        def published(_c: Any, _u: Any, mid: int, reason: Any, _p: Any) -> None:
            entry = self.pending.pop(mid, None)
            if entry is None:
                return
            code = code_of(reason)
            if code >= 0x80:
                self._record(FAIL, entry[0], error=f"reason code {code:#x}")
            else:
                self._record(OK, entry[0], node=node())
        return published

    def _open(self, address: str) -> None:
        if not self.opened:
            self.opened = True
            self.history.record(self.name, OK, "open", {"qos": self.qos, "protocol": version_name(self.protocol)},
                                node=address)

    def _publish(self, client: paho.Client) -> bool:
        value = f"{self.name}-{self.seq}"
        self.seq += 1
        self._record(INVOKE, value)
        info = client.publish(self.topic, value.encode(), qos=self.qos)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            self._record(INFO, value, error=f"publish: {paho.error_string(info.rc)}")
            return False
        self.pending[info.mid] = (value, time.monotonic())
        return True

    def _serve(self, client: paho.Client, halt: threading.Event, give_up: threading.Event) -> bool:
        """Publish on one connection until it breaks (False) or the load is over and nothing is
        in flight (True)."""
        next_at = time.monotonic()
        while not give_up.is_set():
            if not alive(client, client.loop(LOOP_S)):
                return False
            now = time.monotonic()
            if self._crash or (self.pending and now - min(t for _, t in self.pending.values()) > PUBLISH_TIMEOUT_S):
                self._crash = False
                abort(client)
                return False
            if halt.is_set():
                if not self.pending:
                    return True
                continue
            if now >= next_at and len(self.pending) < MAX_INFLIGHT:
                if not self._publish(client):
                    return False
                next_at = max(next_at + self.interval_s, now)
        return True

    def run(self, halt: threading.Event) -> None:
        give_up = finish_after(halt, FINISH_S)
        if self.qos == 1:
            self._run_qos_1(halt, give_up)
        else:
            self._run_qos_2(halt, give_up)

    def _run_qos_1(self, halt: threading.Event, give_up: threading.Event) -> None:
        while not halt.is_set():
            connected = self.leader.connect(lambda: new_client(self.name, self.protocol, keep=False), halt,
                                            keep=False, clean_first=True)
            if connected is None:
                return
            client, _, address = connected
            self._open(address)
            client.on_publish = self._on_publish(lambda: address)
            done = self._serve(client, halt, give_up)
            for value, _ in self.pending.values():
                self._record(INFO, value, error="no PUBACK before the connection ended" if not done
                             else "no PUBACK before the run ended")
            self.pending.clear()
            if done or give_up.is_set():
                disconnect(client)
                return

    def _run_qos_2(self, halt: threading.Event, give_up: threading.Event) -> None:
        client = new_client(self.name, self.protocol, keep=True)
        client.max_inflight_messages_set(MAX_INFLIGHT)
        client.max_queued_messages_set(0)
        where: list[str | None] = [None]
        client.on_publish = self._on_publish(lambda: where[0])
        first = True
        done = False
        while not give_up.is_set() and not (halt.is_set() and not self.pending):
            connected = self.leader.connect(lambda: client, give_up, keep=True, clean_first=first)
            if connected is None:
                break
            _, answer, address = connected
            where[0] = address
            if first:
                self._open(address)
                first = False
            else:
                self.history.record(self.name, OK, "connect", {"present": answer.present}, node=address)
            now = time.monotonic()
            self.pending = {mid: (value, now) for mid, (value, _) in self.pending.items()}  # paho sent them again
            done = self._serve(client, halt, give_up)
            if done:
                break
        for value, _ in self.pending.values():
            self._record(INFO, value, error="no PUBCOMP before the run ended")
        self.pending.clear()
        disconnect(client)


class Subscriber:
    """A kept-session subscriber of `chaos/+` at QoS 1; with `share`, a member of the shared
    subscription `$share/<share>/chaos/+`."""

    def __init__(self, name: str, protocol: MQTTProtocolVersion, leader: Leader, history: History,
                 share: str | None = None) -> None:
        self.name, self.protocol, self.leader, self.history, self.share = name, protocol, leader, history, share
        self.filter = f"$share/{share}/{TOPIC_FILTER}" if share else TOPIC_FILTER
        self.about: dict[str, Any] = {"kept": True, "protocol": version_name(protocol), "share": share}
        self.last_delivery = time.monotonic()
        self.granted = False  # the session holds the subscription (a SUBACK granted it)
        self.refused = False  # a shared subscription the broker does not serve: nothing more to do
        self.ready = threading.Event()  # connected with the subscription granted (or refused)
        self.made = False  # a session exists (a connection was accepted before)
        self._crash = False

    def crash(self) -> None:
        self._crash = True

    def run(self, halt: threading.Event) -> None:
        while not halt.is_set() and not self.refused:
            connected = self.leader.connect(lambda: self._client(), halt, keep=True, clean_first=not self.made)
            if connected is None:
                return
            client, answer, address = connected
            if self.made:
                self.history.record(self.name, OK, "connect", {"present": answer.present}, node=address)
                if not answer.present:
                    self.granted = False
            self.made = True
            self.last_delivery = time.monotonic()
            self._serve(client, address, halt)
            self.ready.clear()

    def _client(self) -> paho.Client:
        client = new_client(self.name, self.protocol, keep=True)
        client.manual_ack_set(True)
        return client

    def _serve(self, client: paho.Client, address: str, halt: threading.Event) -> None:
        acks: deque[tuple[float, int, int]] = deque()  # (due, packet id, qos)
        awaiting = [False]

        def on_message(_c: Any, _u: Any, message: Any) -> None:
            now = time.monotonic()
            self.last_delivery = now
            self.history.record(self.name, OK, "receive", message.payload.decode(errors="replace"), node=address,
                                redelivered=bool(message.dup))
            if message.qos > 0:
                acks.append((now + ACK_DELAY_S, message.mid, message.qos))

        def on_subscribe(_c: Any, _u: Any, _mid: int, codes: list[Any], _p: Any) -> None:
            awaiting[0] = False
            code = code_of(codes[0]) if codes else 0x80
            if code < 0x80:
                self.granted = True
                self.history.record(self.name, OK, "subscribe", {**self.about, "qos": code}, node=address)
            else:
                self.history.record(self.name, FAIL, "subscribe", self.about, node=address,
                                    error=f"SUBACK {code:#x}")
                self.refused = self.share is not None  # 0x9E: shared subscriptions not supported
            self.ready.set()

        client.on_message, client.on_subscribe = on_message, on_subscribe
        if self.granted:
            self.ready.set()
        else:
            self.history.record(self.name, INVOKE, "subscribe", self.about, node=address)
            awaiting[0] = True
            client.subscribe(self.filter, qos=1)
        while True:
            if halt.is_set() or self.refused:
                disconnect(client)
                ended = "closed"
                break
            if self._crash:
                self._crash = False
                abort(client)
                ended = "crashed"
                break
            if not alive(client, client.loop(LOOP_S)):
                ended = "lost"
                break
            now = time.monotonic()
            while acks and acks[0][0] <= now:
                _, mid, qos = acks.popleft()
                client.ack(mid, qos)
        if awaiting[0]:
            self.history.record(self.name, INFO, "subscribe", self.about, node=address, error=f"connection {ended}")
        elif self.granted:
            self.history.record(self.name, OK, "detach", {**self.about, "why": ended}, node=address)


class MqttWorkload(Workload):
    """QoS 1 and QoS 2 publishers and kept-session subscribers that crash, MQTT 3.1.1 and 5,
    on the first group of the deployment."""

    name = "mqtt"
    summary = ("paho-mqtt QoS 1 and 2 publishers, kept-session subscribers that crash, 3.1.1 and 5 "
               "(lost, unexpected, QoS 2 stored twice, sessions lost)")

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        mqtt = env.mqtt[0] if env.mqtt else ()
        if not any(mqtt):
            raise NoMqtt("the mqtt workload needs MQTT listeners: `mqtt = \"host:port\"` in each [[node]] of the "
                         "first group (the presets have them)")
        self.leader_of: Callable[[], Leader] = lambda: Leader(mqtt, clients_of(env.urls[0]))
        protocols = (paho.MQTTv311, paho.MQTTv5)
        self.subscribers = [Subscriber(f"k{i}", protocols[i % 2], self.leader_of(), env.history)
                            for i in range(max(2, env.concurrency // 2))]
        # Shared subscriptions ($share/G/filter, MQTT 5): refused until the broker serves them
        # (SUBACK 0x9E); then competing consumers, judged as one group (chaos.mqtt_checker).
        self.subscribers += [Subscriber(f"s{i}", paho.MQTTv5, self.leader_of(), env.history, share=SHARE_GROUP)
                             for i in range(SHARED_SUBSCRIBERS)]
        self.publishers = [Publisher(f"q{1 + i % 2}p{i}", 1 + i % 2, protocols[(i // 2) % 2], self.leader_of(),
                                     env.history, env.interval_s) for i in range(env.concurrency)]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(in_thread(f"mqtt-{s.name}", s.run, stop)) for s in self.subscribers]
        deadline = time.monotonic() + START_TIMEOUT_S
        while (not all(s.ready.is_set() for s in self.subscribers) and time.monotonic() < deadline
               and not stop.is_set()):
            await asyncio.sleep(0.05)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        crashable: list[Subscriber | Publisher] = [*self.subscribers, *self.publishers]
        return [*(in_thread(f"mqtt-{p.name}", p.run, stop) for p in self.publishers),
                crash_some(crashable, random.Random(self.env.seed), stop)]

    async def before_drain(self, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = [s for s in self.subscribers if not s.refused]
        while not all(s.ready.is_set() for s in waiting) and time.monotonic() < deadline and not stop.is_set():
            await asyncio.sleep(0.05)
        for subscriber in self.subscribers:
            subscriber.last_delivery = time.monotonic()

    @property
    def last_delivery(self) -> float:
        return max(s.last_delivery for s in self.subscribers)

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @staticmethod
    def check(history: Iterable[Op]) -> MqttResult:
        return check_mqtt(history)

"""The `topic` workload's clients: producers on `/topic/chaos` (the queue workload's, with
`_AMQ_DUPL_ID` and receipts) and subscribers, durable and not, that crash now and then.

Each subscriber records its subscription windows, so the checker knows what it was owed:
`subscribe` `invoke` when a SUBSCRIBE is written (the first, or again on each new connection),
`ok` at its RECEIPT, `fail` when the broker refused it, `info` when the connection broke
first; `detach` `ok` when the connection of a subscribed window broke or the subscriber closed.
Values are `{"durable": bool, "group": int}` (the index of the subscriber's group); producers
record the group they send to (`open`), since a value reaches the other groups' subscribers
only through a bridge, later, once their group's subscription was advertised.

- A durable subscriber connects with a `client-id` and subscribes with
  `activemq.subscriptionName` (even ones) or `durable:true` (odd ones, RabbitMQ's way: the
  subscription id names it). It acknowledges each delivery (client-individual) a little late,
  so a crash leaves some unacknowledged; the broker keeps collecting while it is away and
  redelivers. A SUBSCRIBE refused because the old session still holds the subscription
  (`durable subscription already active`) is tried again.
- A non-durable subscriber (auto ack) gets only what is published while it is subscribed; the
  failover client subscribes again after every reconnect, which opens a new window.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from chaos.checker import QueueResult
from chaos.client import Producer, ack_quietly, close_quietly, connect, crash, crash_some, node_of
from chaos.history import FAIL, INFO, INVOKE, OK, History, Op
from chaos.topic_checker import check_topic
from chaos.workload import Workload
from raftmq.client.failover import FailoverClient
from raftmq.client.failover_connector import FailoverEvent
from raftmq.client.failover_subscription import Delivery, FailoverSubscription

TOPIC = "/topic/chaos"
SUBSCRIPTION_ID = "chaos"  # fixed: with durable:true the id names the durable subscription
WATCH_S = 0.02  # how often a subscriber looks at its subscription (its RECEIPT, a refusal)
RESUBSCRIBE_S = 0.5  # after a refusal, before subscribing again


class Subscriber:
    def __init__(self, name: str, url: str, history: History, durable: bool, activemq_style: bool = True,
                 group: int = 0) -> None:
        self.name, self.url, self.history, self.durable = name, url, history, durable
        self._about = {"durable": durable, "group": group}  # every subscribe / detach op's value
        self.activemq_style = activemq_style
        self.client: FailoverClient | None = None
        self.subscription: FailoverSubscription | None = None
        self.last_delivery = time.monotonic()
        self._opening: int | None = None  # the connection whose SUBSCRIBE awaits its RECEIPT
        self._open = False  # a window is open (its RECEIPT came, its connection lives)
        self._watcher: asyncio.Task[None] | None = None
        self._retry_at = 0.0

    async def start(self, stop: asyncio.Event) -> bool:
        options: dict[str, Any] = {"connect_headers": [("client-id", self.name)]} if self.durable else {}
        self.client = await connect(self.url, stop, **options)
        if self.client is None:
            return False
        self.client.events.append(self._on_event)
        self._subscribe()
        self._watcher = asyncio.get_running_loop().create_task(self._watch(stop))
        while self._opening is not None and not stop.is_set():  # the consumers are there before the load
            await asyncio.sleep(WATCH_S)
        return True

    def _subscribe(self) -> None:
        client = self.client
        assert client is not None
        headers: list[tuple[str, str]] = []
        if self.durable:
            headers = [("activemq.subscriptionName", "chaos")] if self.activemq_style else [("durable", "true")]
        self.history.record(self.name, INVOKE, "subscribe", self._about)
        ack = "client-individual" if self.durable else "auto"
        self.subscription = client.subscribe(TOPIC, id=SUBSCRIPTION_ID, ack=ack, headers=headers, prefetch=10,
                                             callback=self._on_message)
        self._opening = client.connection_number

    def _on_message(self, frame: Delivery) -> None:
        client = self.client
        assert client is not None
        self.last_delivery = time.monotonic()
        self.history.record(self.name, OK, "receive", frame.body.decode(errors="replace"), node=node_of(client),
                            redelivered=frame.get("redelivered") == "true")
        if self.durable:
            asyncio.get_running_loop().call_later(0.02, ack_quietly, client, frame)

    def _on_event(self, event: FailoverEvent) -> None:
        if event.kind == "disconnected":
            refused = self.subscription is not None and not self.subscription.active  # ended before this event
            self._end_window(FAIL if refused else INFO)
        elif event.kind == "closed":
            self._end_window(INFO)
        elif event.kind == "connected" and self.subscription is not None and self.subscription.active:
            # The failover client wrote the SUBSCRIBE again on this connection: a new window.
            assert self.client is not None
            self.history.record(self.name, INVOKE, "subscribe", self._about)
            self._opening = self.client.connection_number

    def _end_window(self, unanswered: str) -> None:
        """The window's connection is gone: close an open window, or settle a SUBSCRIBE that
        never got its RECEIPT as `unanswered` (info: it may exist; fail: refused)."""
        if self._open:
            self.history.record(self.name, OK, "detach", self._about)
        elif self._opening is not None:
            self.history.record(self.name, unanswered, "subscribe", self._about)
        self._open, self._opening = False, None

    async def _watch(self, stop: asyncio.Event) -> None:
        """Record each SUBSCRIBE's RECEIPT; subscribe again after a refusal. Until `stop`."""
        while not stop.is_set():
            await asyncio.sleep(WATCH_S)
            client, subscription = self.client, self.subscription
            if client is None or subscription is None:
                continue
            if not subscription.active:  # refused (a durable still held by the session that crashed)
                self._end_window(FAIL)
                if client.is_connected and time.monotonic() >= self._retry_at:
                    self._retry_at = time.monotonic() + RESUBSCRIBE_S  # each refusal costs a connection
                    self._subscribe()
            elif (self._opening == client.connection_number and subscription.attached
                  and not subscription.awaiting_receipt):
                self.history.record(self.name, OK, "subscribe", self._about, node=node_of(client))
                self._opening, self._open = None, True

    def crash(self) -> None:
        crash(self.client)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if self.client is not None:
            await close_quietly(self.client)  # a durable subscription stays (inactive) on the broker
        self._end_window(INFO)


class TopicWorkload(Workload):
    """Producers on one topic; durable and non-durable subscribers, spread over the groups."""

    name = "topic"
    summary = "durable and non-durable topic subscribers that crash (owed values lost, unexpected, duplicates)"

    async def start(self, stop: asyncio.Event) -> None:
        env = self.env
        durable = (env.concurrency + 1) // 2
        groups = len(env.urls)
        self.subscribers = [
            Subscriber(f"d{i}", env.urls[i % groups], env.history, durable=True, activemq_style=i % 2 == 0,
                       group=i % groups) for i in range(durable)
        ] + [Subscriber(f"s{i}", env.urls[i % groups], env.history, durable=False, group=i % groups)
             for i in range(max(1, env.concurrency // 2))]
        for subscriber in self.subscribers:
            await subscriber.start(stop)

    def load(self, stop: asyncio.Event) -> list[Coroutine[Any, Any, None]]:
        env = self.env
        producers = [Producer(f"p{i}", env.urls[i % len(env.urls)], env.history, env.interval_s, TOPIC,
                              group=i % len(env.urls)) for i in range(env.concurrency)]
        return [*(p.run(stop) for p in producers), crash_some(self.subscribers, random.Random(env.seed), stop)]

    @property
    def last_delivery(self) -> float:
        return max(s.last_delivery for s in self.subscribers)

    async def close(self) -> None:
        for subscriber in self.subscribers:
            await subscriber.close()

    @staticmethod
    def check(history: Iterable[Op]) -> QueueResult:
        return check_topic(history)

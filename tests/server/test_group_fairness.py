"""Fairness with real processes (`[server] fair_queue_depth`, raftmq.server.seams.flow.Fairness): while
a queue's consumer keeps taking messages, a producer that outruns it waits once the queue holds
that many ready messages, so no standing queue forms; a consumer that stops taking releases the
producer after a second, and the backlog grows (and pages) as without fairness."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import stomp

from tests.helpers.group_harness import Group
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DEPTH = 20
COUNT = 400


class SlowConsumer(stomp.ConnectionListener):
    """Acknowledges each message after `delay` seconds, until told to stop."""

    def __init__(self, connection: stomp.Connection12, delay: float) -> None:
        self.connection, self.delay = connection, delay
        self.bodies: list[str] = []
        self.acking = True
        self.lock = threading.Lock()

    def on_message(self, frame: stomp.utils.Frame) -> None:
        time.sleep(self.delay)
        with self.lock:
            self.bodies.append(frame.body)
            if self.acking:
                self.connection.ack(frame.headers["ack"])


class Receipts(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.count = 0

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self.count += 1


def connect(address: str, listener_of: Any) -> tuple[stomp.Connection12, Any]:
    host, port = address.split(":")
    connection = stomp.Connection12([(host, int(port))], heartbeats=(0, 0), auto_decode=True)
    listener = listener_of(connection)
    connection.set_listener("l", listener)
    connection.connect(wait=True)
    return connection, listener


def test_a_producer_waits_for_a_consumer_that_keeps_up_and_not_for_one_that_stopped(tmp_path: Path) -> None:
    group = Group(tmp_path, server={"fair_queue_depth": DEPTH})
    try:
        group.start()
        leader = group.leader()
        address = group.members[leader].client
        consumer, slow = connect(address, lambda c: SlowConsumer(c, 0.002))
        consumer.subscribe("/queue/fair", id="s", ack="client-individual", headers={"activemq.prefetchSize": "5"})
        producer, receipts = connect(address, lambda c: Receipts())
        for n in range(COUNT):
            producer.send("/queue/fair", f"m{n:04d}", receipt=f"r{n}")
        deepest = 0
        deadline = time.monotonic() + 60
        while len(slow.bodies) < COUNT and time.monotonic() < deadline:
            deepest = max(deepest, group.status(leader)["broker"]["destinations"]["/queue/fair"]["depth"])
            time.sleep(0.02)
        assert slow.bodies == [f"m{n:04d}" for n in range(COUNT)]
        assert deepest <= DEPTH, f"a standing queue of {deepest} formed"
        assert group.status(leader)["flow"]["blocks"] >= 1

        # The consumer stops acknowledging: its prefetch fills and it takes nothing more. After a
        # second the producer is let through, and the messages wait in the queue.
        with slow.lock:
            slow.acking = False
        for n in range(COUNT, 2 * COUNT):
            producer.send("/queue/fair", f"m{n:04d}", receipt=f"r{n}")
        assert wait_until(lambda: receipts.count == 2 * COUNT, 20), receipts.count
        assert group.status(leader)["broker"]["destinations"]["/queue/fair"]["depth"] > DEPTH
        producer.disconnect()
        consumer.disconnect()
    finally:
        group.close()


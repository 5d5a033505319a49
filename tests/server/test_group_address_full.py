"""Producer flow control with real processes (raftmq.core.address_settings, raftmq.server.seams.flow):
a 3-member group with one destination per policy, stomp.py as the producers and consumers.
FAIL answers ERROR with the SEND's receipt-id; DROP receipts and drops; BLOCK withholds the
receipt and reads nothing more from that producer until a consumer makes room, while another
producer's SENDs to another destination go on, and what it holds moves with the producer's session
when the leadership is handed over."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import stomp

from raftmq.replication.group_secret import group_secret
from raftmq.server.admin.http import post_hand_over
from tests.helpers.group_harness import Group
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LIMIT = 5
ADDRESSES = [
    {"match": "/queue/fail", "max_size_messages": LIMIT, "address_full_policy": "FAIL"},
    {"match": "/queue/drop", "max_size_messages": LIMIT, "address_full_policy": "DROP"},
    {"match": "/queue/block.>", "max_size_messages": LIMIT, "address_full_policy": "BLOCK"},
]


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: list[str] = []
        self.errors: list[dict[str, Any]] = []
        self.messages: list[str] = []
        self.lock = threading.Lock()

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.receipts.append(frame.headers["receipt-id"])

    def on_error(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.errors.append(dict(frame.headers))

    def on_message(self, frame: stomp.utils.Frame) -> None:
        with self.lock:
            self.messages.append(frame.body)


def connect(address: str) -> tuple[stomp.Connection12, Listener]:
    host, port = address.split(":")
    connection = stomp.Connection12([(host, int(port))], heartbeats=(0, 0), auto_decode=True)
    listener = Listener()
    connection.set_listener("l", listener)
    connection.connect(wait=True)
    return connection, listener


def wait_for(condition: Any, timeout: float = 10.0) -> bool:
    return wait_until(condition, timeout, step=0.02)


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Any:
    group = Group(tmp_path_factory.mktemp("address-full"), core={"address": ADDRESSES})
    try:
        group.start()
        group.leader()
        yield group
    finally:
        group.close()


def leader_client(group: Group) -> str:
    return group.members[group.leader()].client


def depth(group: Group, destination: str) -> dict[str, int]:
    status = group.status(group.leader())
    return status["broker"]["destinations"].get(destination, {})


def test_fail_answers_error_with_the_receipt_id(group: Group) -> None:
    connection, listener = connect(leader_client(group))
    for n in range(LIMIT):
        connection.send("/queue/fail", f"m{n}", receipt=f"f{n}")
    assert wait_for(lambda: len(listener.receipts) == LIMIT)
    connection.send("/queue/fail", "over", receipt="f-over")
    assert wait_for(lambda: listener.errors)
    (error,) = listener.errors
    assert error["receipt-id"] == "f-over" and error["message"] == "address full"
    assert wait_for(lambda: not connection.is_connected())
    assert depth(group, "/queue/fail")["depth"] == LIMIT


def test_drop_receipts_and_drops(group: Group) -> None:
    connection, listener = connect(leader_client(group))
    try:
        for n in range(LIMIT + 3):
            connection.send("/queue/drop", f"m{n}", receipt=f"d{n}")
        # (20 s: the whole suite's load once kept some of these receipts past 10 s; say which came)
        assert wait_until(lambda: len(listener.receipts) == LIMIT + 3, 20.0, step=0.02), (
            f"receipts {listener.receipts}, errors {listener.errors}, leader {group.leader()}")
        assert not listener.errors
        counters = depth(group, "/queue/drop")
        assert counters["depth"] == LIMIT and counters["dropped"] == 3
    finally:
        connection.disconnect()


def test_block_holds_one_producer_until_a_consumer_makes_room(group: Group) -> None:
    address = leader_client(group)
    blocked, blocked_listener = connect(address)
    other, other_listener = connect(address)
    consumer, consumer_listener = connect(address)
    try:
        for n in range(LIMIT + 3):
            blocked.send("/queue/block.a", f"b{n}", receipt=f"b{n}")
        assert wait_for(lambda: len(blocked_listener.receipts) == LIMIT), blocked_listener.receipts
        time.sleep(1.0)
        assert len(blocked_listener.receipts) == LIMIT, "receipts past the limit while the queue is full"
        status = group.status(group.leader())
        assert status["flow"]["blocked_connections"] == 1
        assert status["broker"]["destinations"]["/queue/block.a"]["depth"] == LIMIT

        # Another producer, another destination (even one of the same setting): not held.
        for n in range(3):
            other.send("/queue/block.b", f"o{n}", receipt=f"o{n}")
            other.send("/queue/elsewhere", f"e{n}", receipt=f"e{n}")
        assert wait_for(lambda: len(other_listener.receipts) == 6)

        # A consumer makes room: the held SENDs go in, their receipts come, nothing is lost.
        consumer.subscribe("/queue/block.a", id="s", ack="auto")
        assert wait_for(lambda: len(blocked_listener.receipts) == LIMIT + 3)
        assert wait_for(lambda: len(consumer_listener.messages) == LIMIT + 3)
        assert consumer_listener.messages == [f"b{n}" for n in range(LIMIT + 3)]
        assert wait_for(lambda: group.status(group.leader())["flow"]["blocked_connections"] == 0)
    finally:
        for connection in (blocked, other, consumer):
            connection.disconnect()


def test_a_producer_held_by_block_keeps_its_held_sends_through_a_hand_over(group: Group) -> None:
    """The SENDs BLOCK holds travel with the session to the successor (in its ticket), which
    proposes them once there is room: receipted once, delivered once, in order."""
    old = group.leader()
    blocked, blocked_listener = connect(group.members[old].client)
    try:
        for n in range(LIMIT + 3):
            blocked.send("/queue/block.h", f"h{n}", receipt=f"h{n}")
        assert wait_for(lambda: len(blocked_listener.receipts) == LIMIT), blocked_listener.receipts
        assert wait_for(lambda: group.status(old)["flow"]["blocked_connections"] == 1)

        member = group.members[old]
        code, answer = post_hand_over(member.host, member.admin_port, group_secret(None, group.data_dir), 10.0)
        assert code == 200 and answer.get("handed_over"), answer
        assert wait_for(lambda: group.leader() != old)
        new = group.leader()
        assert wait_for(lambda: group.status(old)["flow"]["blocked_connections"] == 0)
        assert wait_for(lambda: group.status(new)["flow"]["blocked_connections"] == 1)
        assert len(blocked_listener.receipts) == LIMIT

        consumer, consumer_listener = connect(group.members[new].client)
        try:
            consumer.subscribe("/queue/block.h", id="s", ack="auto")
            assert wait_for(lambda: len(blocked_listener.receipts) == LIMIT + 3), blocked_listener.receipts
            assert wait_for(lambda: len(consumer_listener.messages) == LIMIT + 3)
            time.sleep(0.3)
            assert consumer_listener.messages == [f"h{n}" for n in range(LIMIT + 3)]
            assert not blocked_listener.errors and blocked.is_connected()
        finally:
            consumer.disconnect()
    finally:
        blocked.disconnect()

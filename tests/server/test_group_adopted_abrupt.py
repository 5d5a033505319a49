"""A session adopted at a hand-over whose client goes abruptly (a reset, or a close without
DISCONNECT) gives its unacknowledged messages back at once, as any other session does: the relay
holding the client's socket tells the serving leader that its client ended (a release) before it
closes, so the leader does not park the session for a move that will never come (real processes)."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import RawClient, frame_bytes, unique
from tests.helpers.waiting import wait_until
from tests.server.test_group_hand_over import client, hand_over, send_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# A session that ends gives its deliveries back within a round of the log; a parked one waits
# PARK_SECONDS (1 s) for a relay that would resume it.
PROMPTLY = 0.5


def goes(consumer: RawClient, how: str) -> None:
    if how == "reset":  # kill -9 with unread input, or a dropped link: the kernel resets
        consumer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    consumer.sock.close()


@pytest.mark.parametrize("how", ["reset", "close"])
@pytest.mark.parametrize("where", ["leader", "follower"])
def test_an_adopted_sessions_unacknowledged_message_goes_to_another_consumer_at_once_when_its_client_goes(
        group: Group, how: str, where: str) -> None:
    destination = unique()
    leader = group.leader()
    holder = leader if where == "leader" else next(node_id for node_id in group.members if node_id != leader)
    consumer = RawClient(("127.0.0.1", group.members[holder].client_port))
    consumer.connect()
    consumer.send(frame_bytes("SUBSCRIBE", {"destination": destination, "id": "s1", "ack": "client-individual",
                                            "receipt": "sub"}))
    assert consumer.read_frame().command == "RECEIPT"
    producer, sent = client(group, leader)
    try:
        send_all(producer, sent, destination, ["m1"])
    finally:
        producer.disconnect()
    assert consumer.read_frame().body == b"m1"  # held, unacknowledged

    _, new = hand_over(group)
    if new == holder:  # the follower leads now and serves the session itself: hand over once more
        _, new = hand_over(group)

    def served_there() -> bool:  # adopted (or resumed by the relay that moved), its socket on `holder`
        status = group.status(new)
        return status is not None and status["sessions_adopted"] + status["sessions_resumed"] >= 1

    assert wait_until(served_there, 5.0)
    consumer.send(frame_bytes("SEND", {"destination": unique(), "receipt": "alive"}, b"x"))
    assert consumer.read_frame().headers.get("receipt-id") == "alive"  # still the same session

    other, got = client(group, new)
    try:
        other.subscribe(destination, id="s2", ack="auto")
        assert got.no_message(within=0.3)  # m1 is still the first consumer's
        goes(consumer, how)
        started = time.monotonic()
        message = got.message()
        waited = time.monotonic() - started
        assert message.body == "m1" and message.headers.get("redelivered") == "true"
        print(f"{where} {how}: m1 redelivered to another consumer after {waited * 1000:.0f} ms")
        assert waited < PROMPTLY, f"m1 came back after {waited:.2f} s: the session was parked"
    finally:
        other.disconnect()

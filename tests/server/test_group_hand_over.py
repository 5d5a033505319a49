"""A leadership transfer moves each client's session to the successor: plain stomp.py clients of
the old leader see no ERROR and no redelivery, and their subscription, unacknowledged messages
and open transaction carry on, through transfer after transfer (the relay holding each client's
socket moves to the new leader). A leader that stops or leaves its group hands over first: the
clients of other members keep their sessions, its own are told where the leader is. Real
3-member groups; the transfer is asked the way `raftmq hand-over` asks (a signed POST /leadership)."""

from __future__ import annotations

import queue
import signal
import time

import pytest
import stomp

from raftmq.replication.group_secret import group_secret
from raftmq.replication.membership import REMOVE, Change
from raftmq.server.admin.http import post_hand_over, post_membership
from raftmq.server.stomp.adoption import MAX_HOPS
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import WAIT, Listener, RawClient, frame_bytes, unique
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def hand_over(group: Group) -> tuple[str, str]:
    """(old leader, new leader) after one transfer asked of the leader."""
    old = group.leader()
    member = group.members[old]
    code, answer = post_hand_over(member.host, member.admin_port, group_secret(None, group.data_dir), 10.0)
    assert code == 200 and answer.get("handed_over"), answer
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        new = group.leader()
        if new != old:
            return old, new
        time.sleep(0.05)
    raise AssertionError(f"{old} still leads")


def client(group: Group, node_id: str, heartbeats: tuple[int, int] = (0, 0)) -> tuple[stomp.Connection12, Listener]:
    """stomp.py on one member only: no failover of its own, so an ERROR or a drop would show."""
    conn = stomp.Connection12([("127.0.0.1", group.members[node_id].client_port)], timeout=WAIT,
                              reconnect_attempts_max=1, heartbeats=heartbeats)
    listener = Listener()
    conn.set_listener("t", listener)
    conn.connect(wait=True)
    assert listener.connected.wait(WAIT)
    return conn, listener


def disconnect_all(*connections: stomp.Connection12) -> None:
    for connection in connections:
        try:
            connection.disconnect()
        except Exception:
            pass  # already gone: what the test checks ended it


def send_all(conn: stomp.Connection12, listener: Listener, destination: str, bodies: list[str]) -> None:
    for body in bodies:
        conn.send(destination, body, headers={"receipt": f"r-{body}"})
    for body in bodies:
        listener.receipt(f"r-{body}")


def messages(listener: Listener, count: int) -> list[object]:
    return [listener.message() for _ in range(count)]


def assert_no_error(*listeners: Listener) -> None:
    for listener in listeners:
        assert listener.errors.empty(), listener.errors.get().headers
        assert not listener.disconnected.is_set()


def test_plain_clients_sessions_ride_hand_overs_with_their_acks_and_transaction(group: Group) -> None:
    leader = group.leader()
    destination, other = unique(), unique()
    producer, sent = client(group, leader)
    consumer, got = client(group, leader)
    follower = next(node_id for node_id in group.members if node_id != leader)
    relayed, via_follower = client(group, follower, heartbeats=(200, 200))  # relayed by a follower
    try:
        consumer.subscribe(destination, id="s1", ack="client-individual")
        relayed.subscribe(other, id="s9", ack="auto")
        send_all(producer, sent, destination, ["a1", "a2", "a3", "a4"])
        first = messages(got, 4)
        consumer.ack(first[0].headers["ack"])
        consumer.begin("tx1")
        consumer.send(other, "in-tx", transaction="tx1")
        consumer.ack(first[1].headers["ack"], transaction="tx1")

        old, new = hand_over(group)
        assert_no_error(sent, got, via_follower)
        # The session is the same one: its unacknowledged deliveries and its transaction moved.
        consumer.ack(first[2].headers["ack"], receipt="ack-after")
        got.receipt("ack-after")
        consumer.commit("tx1", receipt="commit-after")
        got.receipt("commit-after")
        assert via_follower.message().body == "in-tx"
        send_all(producer, sent, destination, ["b1", "b2"])
        second = messages(got, 2)
        assert [m.body for m in second] == ["b1", "b2"]
        for message in second:
            consumer.ack(message.headers["ack"])
        new_status = group.status(new)
        assert new_status is not None and new_status["sessions_adopted"] >= 2, new_status

        # Handed over again and again: the relay that holds each client's socket moves to the
        # new leader (the session parked there and resumed), so no path grows past one relay and
        # MAX_HOPS is never reached.
        for hop in range(2, 2 * MAX_HOPS + 2):
            hand_over(group)
            assert_no_error(sent, got, via_follower)
            send_all(producer, sent, destination, [f"c{hop}"])
            assert got.message().body == f"c{hop}"
        relayed.send(other, "still-relayed", receipt="relayed-after")
        via_follower.receipt("relayed-after")
        assert via_follower.message().body == "still-relayed"
        statuses = [group.status(node_id) for node_id in group.members]
        assert sum(status["relays_moved"] for status in statuses if status) >= 2 * MAX_HOPS, statuses
        assert sum(status["sessions_resumed"] for status in statuses if status) >= 2 * MAX_HOPS, statuses
        # a4 and the c-messages were never acknowledged: once the consumer leaves they come
        # back, flagged; a1-a3 and b1-b2 were acknowledged (before, after and in the
        # transaction): they never do.
        consumer.disconnect()
        again, again_got = client(group, group.leader())
        try:
            again.subscribe(destination, id="s2", ack="auto")
            back = sorted(again_got.message().body for _ in range(1 + 2 * MAX_HOPS))
            assert back == sorted(["a4", *(f"c{hop}" for hop in range(2, 2 * MAX_HOPS + 2))])
            assert again_got.no_message(within=1.0)
        finally:
            again.disconnect()
    finally:
        disconnect_all(producer, consumer, relayed)


def test_messages_sent_to_the_successor_reach_the_adopted_consumer_once_and_in_order(group: Group) -> None:
    leader = group.leader()
    destination = unique()
    consumer, got = client(group, leader)
    try:
        consumer.subscribe(destination, id="s1", ack="client-individual")
        old, new = hand_over(group)
        producer, sent = client(group, new)
        try:
            send_all(producer, sent, destination, [f"m{i}" for i in range(20)])
        finally:
            producer.disconnect()
        bodies = []
        for _ in range(20):
            message = got.message()
            bodies.append(message.body)
            consumer.ack(message.headers["ack"])
        assert bodies == [f"m{i}" for i in range(20)]
        assert_no_error(got)
        try:
            extra = got.messages.get(timeout=0.5)
        except queue.Empty:
            extra = None
        assert extra is None, extra.headers
    finally:
        consumer.disconnect()


def test_a_leader_removed_from_its_group_hands_its_sessions_over_and_tells_its_own_clients_where_the_leader_is(
        group: Group) -> None:
    """A member leaving its group is stopped next. As the leader it hands its leadership and its
    sessions over; the other members' relays move to the successor, so their clients keep their
    sessions; its own clients' connections end with it, so they are told where the leader went."""
    leader = group.leader()
    member = group.members[leader]
    follower = next(node_id for node_id in group.members if node_id != leader)
    destination = unique()
    consumer, got = client(group, leader)
    relayed, via_follower = client(group, follower)
    try:
        consumer.subscribe(unique(), id="s1", ack="auto")
        relayed.subscribe(destination, id="s2", ack="client-individual")
        relayed.send(destination, "kept", receipt="before")
        via_follower.receipt("before")
        kept = via_follower.message()
        removal = Change(REMOVE, f"{member.host}:{member.raft_port}")
        secret = group_secret(None, group.data_dir)
        code, answer = post_membership(member.host, member.admin_port, removal, secret, 10.0)
        assert code in (200, 409, 421), answer  # the leader hands over first and names the new one
        error = got.errors.get(timeout=WAIT)
        assert error.headers["message"] == "not the leader"
        new = group.leader(among=tuple(i for i in group.members if i != leader))
        assert error.headers["leader"] == group.members[new].client
        assert_no_error(via_follower)
        relayed.ack(kept.headers["ack"], receipt="after")  # the same session, at the new leader
        via_follower.receipt("after")
        assert via_follower.no_message(within=1.5)
        status = group.status(leader)
        assert status is not None and status["sessions_handed_over"] >= 2, status
    finally:
        disconnect_all(consumer, relayed)


def test_a_node_stopped_after_handing_its_sessions_over_tells_their_clients_where_the_leader_is(group: Group) -> None:
    """`raftmq hand-over` before a stop (systemd's ExecStop, a preStop hook): the sessions moved
    to the successor through this node, and stopping it ends them; the client hears where the
    leader is, after the last frame the successor sent, and its unacknowledged messages return."""
    leader = group.leader()
    destination = unique()
    producer, sent = client(group, leader)
    consumer, got = client(group, leader)
    try:
        consumer.subscribe(destination, id="s1", ack="client-individual")
        old, new = hand_over(group)
        send_all(producer, sent, destination, ["kept"])
        assert got.message().body == "kept"  # delivered by the successor, through the old leader
        group.signal(old, signal.SIGTERM)
        assert group.wait_exit(old) == 0
        error = got.errors.get(timeout=WAIT)
        assert error.headers["message"] == "not the leader" and error.headers["leader"] == group.members[new].client
        member = group.members[old]
        logged = member.stdout_path.read_text(errors="replace") + member.stderr()
        assert "event='client.error'" in logged and "the node goes" in logged  # counted as an ERROR
        again, again_got = client(group, new)
        try:
            again.subscribe(destination, id="s2", ack="auto")
            message = again_got.message()
            assert message.body == "kept" and message.headers.get("redelivered") == "true"
        finally:
            again.disconnect()
    finally:
        disconnect_all(producer, consumer)


def test_a_stopping_leader_hands_its_sessions_over_and_the_clients_of_other_members_keep_theirs(group: Group) -> None:
    """SIGTERM on the leader, as a rolling restart sends it: it hands its sessions over before
    it goes, and the other members' relays of them move to the successor, so their plain
    clients see nothing; its own clients get the ERROR naming the successor."""
    leader = group.leader()
    follower = next(node_id for node_id in group.members if node_id != leader)
    destination = unique()
    producer, sent = client(group, follower)
    consumer, got = client(group, follower, heartbeats=(200, 200))
    direct, direct_got = client(group, leader)
    try:
        consumer.subscribe(destination, id="s1", ack="client-individual")
        send_all(producer, sent, destination, ["r1", "r2"])
        first = messages(got, 2)
        consumer.ack(first[0].headers["ack"])
        group.signal(leader, signal.SIGTERM)
        assert group.wait_exit(leader) == 0
        new = group.leader(among=tuple(node_id for node_id in group.members if node_id != leader))
        error = direct_got.errors.get(timeout=WAIT)
        assert error.headers["message"] == "not the leader" and error.headers["leader"] == group.members[new].client
        assert_no_error(sent, got)
        consumer.ack(first[1].headers["ack"], receipt="ack-after")  # the same session: its deliveries
        got.receipt("ack-after")
        send_all(producer, sent, destination, ["r3"])
        assert got.message().body == "r3"
        assert got.no_message(within=1.5)  # r1 and r2 were acknowledged: nothing comes back
        status = group.status(follower)
        assert status is not None and status["relays_moved"] >= 2, status
    finally:
        disconnect_all(producer, consumer, direct)


def test_a_frame_begun_before_a_hand_over_and_a_move_is_finished_after_them(group: Group) -> None:
    """The client had sent half a SEND when the leadership moved twice (a hand-over, then its
    relay moving to the next leader): the bytes begun travel in the ticket and with the parked
    session, and the rest of the frame completes it there."""
    leader = group.leader()
    destination = unique()
    raw = RawClient(("127.0.0.1", group.members[leader].client_port))
    consumer, got = client(group, leader)
    try:
        assert raw.connect().command == "CONNECTED"
        consumer.subscribe(destination, id="s1", ack="auto")
        frame = frame_bytes("SEND", {"destination": destination, "receipt": "whole"}, b"begun, then finished")
        raw.send(frame[:30])
        _, new = hand_over(group)  # the begun frame goes with the ticket
        assert wait_until(lambda: (group.status(new) or {}).get("sessions_adopted", 0) >= 2, WAIT)
        hand_over(group)  # the relay holding the socket moves: the begun frame is parked with the session
        assert wait_until(lambda: (group.status(leader) or {}).get("relays_moved", 0) >= 2, WAIT)
        raw.send(frame[30:])
        receipt = raw.read_frame()
        assert receipt.command == "RECEIPT" and receipt.headers["receipt-id"] == "whole", receipt
        assert got.message().body == "begun, then finished"
        assert_no_error(got)
    finally:
        raw.close()
        disconnect_all(consumer)

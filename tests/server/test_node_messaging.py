"""Messaging through a real node process, driven by the independent client stomp-py: over plain
STOMP, and over WebSocket where stomp.py's WebSocket connection can (STOMP 1.2)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.helpers.stomp_raw import RawClient, connect, frame_bytes, unique

pytestmark = pytest.mark.integration


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that takes `transport` runs over plain STOMP and over WebSocket (stomp.py's
    WSConnection, STOMP 1.2), against the same node."""
    if "transport" in metafunc.fixturenames:
        metafunc.parametrize("transport", ["tcp", "ws"])


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connect_negotiates_each_version_and_announces_the_server(address, version: str) -> None:
    conn, listener = connect(address, version)
    headers = listener.connected_headers
    assert headers["version"] == version
    assert headers["server"] == "raftmq/0.1.0"
    assert headers["session"]
    sx, sy = headers["heart-beat"].split(",")
    assert sx.isdigit() and sy.isdigit()
    conn.disconnect()


def test_connect_without_accept_version_is_stomp_1_0(address) -> None:
    client = RawClient(address)
    client.send(frame_bytes("CONNECT", {"login": "guest"}))
    frame = client.read_frame()
    assert frame.command == "CONNECTED"
    assert frame.headers["version"] == "1.0"
    assert frame.headers["server"].startswith("raftmq/")
    client.close()


def test_session_ids_are_unique(address) -> None:
    sessions = set()
    for _ in range(3):
        client = RawClient(address)
        sessions.add(client.connect().headers["session"])
        client.close()
    assert len(sessions) == 3


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_queue_send_and_receive_with_user_headers(address, version: str) -> None:
    queue = unique()
    conn, listener = connect(address, version)
    conn.subscribe(queue, id="sub-1", ack="auto")
    conn.send(queue, "hello", headers={"color": "blue", "content-type": "text/plain"}, receipt="s1")
    listener.receipt("s1")
    message = listener.message()
    assert message.body == "hello"
    assert message.headers["destination"] == queue
    assert message.headers["subscription"] == "sub-1"
    assert message.headers["color"] == "blue"
    assert message.headers["content-type"] == "text/plain"
    assert message.headers["message-id"]
    assert "ack" not in message.headers  # ack mode auto
    assert "redelivered" not in message.headers
    conn.disconnect()


def test_competing_consumers_share_a_queue_round_robin(address, transport: str) -> None:
    queue = unique()
    consumers = [connect(address, transport=transport) for _ in range(2)]
    for index, (conn, listener) in enumerate(consumers):
        conn.subscribe(queue, id="s", ack="auto", receipt=f"sub{index}")
        listener.receipt(f"sub{index}")
    producer, plistener = connect(address, transport=transport)
    for i in range(10):
        producer.send(queue, f"m{i}")
    producer.send(queue, "last", receipt="done")
    plistener.receipt("done")
    got: list[list[str]] = [[], []]
    deadline = time.monotonic() + 5
    while len(got[0]) + len(got[1]) < 11 and time.monotonic() < deadline:
        for index, (_, listener) in enumerate(consumers):
            while not listener.messages.empty():
                got[index].append(listener.messages.get().body)
        time.sleep(0.01)
    sent = [f"m{i}" for i in range(10)] + ["last"]
    # Round robin: one consumer gets the even-numbered sends, the other the odd ones, in order.
    assert sorted([got[0], got[1]]) == sorted([sent[0::2], sent[1::2]])
    for conn, listener in consumers:
        listener.no_message(within=0.2)
        conn.disconnect()
    producer.disconnect()


def test_topic_subscribers_each_get_a_copy(address, transport: str) -> None:
    topic = unique("/topic/t")
    subscribers = [connect(address, transport=transport) for _ in range(3)]
    for index, (conn, listener) in enumerate(subscribers):
        conn.subscribe(topic, id=f"t{index}", receipt=f"sub{index}")
        listener.receipt(f"sub{index}")
    producer, _ = connect(address, transport=transport)
    producer.send(topic, "news")
    for index, (conn, listener) in enumerate(subscribers):
        message = listener.message()
        assert message.body == "news"
        assert message.headers["destination"] == topic
        assert message.headers["subscription"] == f"t{index}"
        conn.disconnect()
    producer.disconnect()


def test_client_individual_ack_and_nack_redelivers(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s", ack="client-individual")
    conn.send(queue, "a")
    conn.send(queue, "b")
    first, second = listener.message(), listener.message()
    assert (first.body, second.body) == ("a", "b")
    assert first.headers["ack"] and first.headers["ack"] != second.headers["ack"]
    conn.ack(second.headers["ack"], receipt="ack-b")
    listener.receipt("ack-b")
    conn.nack(first.headers["ack"], receipt="nack-a")
    listener.receipt("nack-a")
    again = listener.message()
    assert again.body == "a"
    assert again.headers["redelivered"] == "true"
    assert int(again.headers["delivery-count"]) >= 2
    conn.ack(again.headers["ack"], receipt="ack-a")
    listener.receipt("ack-a")
    listener.no_message(within=0.2)
    conn.disconnect()


def test_client_ack_is_cumulative(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s", ack="client")
    for i in range(3):
        conn.send(queue, f"m{i}")
    messages = [listener.message() for _ in range(3)]
    conn.ack(messages[1].headers["ack"], receipt="r")  # settles m0 and m1
    listener.receipt("r")
    conn.disconnect()
    conn2, listener2 = connect(address, transport=transport)
    conn2.subscribe(queue, id="s", ack="client-individual")
    leftover = listener2.message()
    assert leftover.body == "m2"
    assert leftover.headers["redelivered"] == "true"
    listener2.no_message(within=0.2)
    conn2.disconnect()


def test_stomp_1_1_acks_by_message_id(address) -> None:
    queue = unique()
    conn, listener = connect(address, "1.1")
    conn.subscribe(queue, id="s", ack="client-individual")
    conn.send(queue, "x")
    message = listener.message()
    conn.ack(message.headers["message-id"], "s", receipt="r")
    listener.receipt("r")
    conn.disconnect()
    conn2, listener2 = connect(address, "1.1")
    conn2.subscribe(queue, id="s")
    listener2.no_message(within=0.2)
    conn2.disconnect()


def test_unacked_messages_of_a_gone_consumer_go_to_another(address, transport: str) -> None:
    queue = unique()
    leaver, leaver_listener = connect(address, transport=transport)
    leaver.subscribe(queue, id="s", ack="client-individual")
    leaver.send(queue, "precious", receipt="sent")
    leaver_listener.receipt("sent")
    assert leaver_listener.message().body == "precious"
    leaver.disconnect()  # without acking
    stayer, listener = connect(address, transport=transport)
    stayer.subscribe(queue, id="s", ack="client-individual")
    message = listener.message()
    assert message.body == "precious"
    assert message.headers["redelivered"] == "true"
    stayer.disconnect()


def test_transaction_commit_and_abort(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s")
    conn.begin("tx1")
    conn.send(queue, "committed", transaction="tx1")
    listener.no_message(within=0.2)  # not visible before COMMIT
    conn.commit("tx1", receipt="c")
    listener.receipt("c")
    assert listener.message().body == "committed"
    conn.begin("tx2")
    conn.send(queue, "aborted", transaction="tx2")
    conn.abort("tx2", receipt="a")
    listener.receipt("a")
    listener.no_message(within=0.3)
    conn.disconnect()


def test_transactional_ack_is_undone_by_abort(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s", ack="client-individual")
    conn.send(queue, "m")
    message = listener.message()
    conn.begin("t")
    conn.ack(message.headers["ack"], transaction="t")
    conn.abort("t", receipt="aborted")
    listener.receipt("aborted")
    conn.disconnect()
    conn2, listener2 = connect(address, transport=transport)
    conn2.subscribe(queue, id="s")
    assert listener2.message().body == "m"
    conn2.disconnect()


def test_durable_topic_subscription_survives_reconnect_activemq_style(address, transport: str) -> None:
    topic = unique("/topic/d")
    headers = {"client-id": unique("client")}
    conn, listener = connect(address, headers=headers, transport=transport)
    conn.subscribe(topic, id="d", ack="client-individual", headers={"activemq.subscriptionName": "audit"},
                   receipt="sub")
    listener.receipt("sub")
    conn.disconnect()
    producer, plistener = connect(address, transport=transport)
    producer.send(topic, "while away", headers={"persistent": "true"}, receipt="sent")
    plistener.receipt("sent")
    conn2, listener2 = connect(address, headers=headers, transport=transport)
    conn2.subscribe(topic, id="d", ack="client-individual", headers={"activemq.subscriptionName": "audit"})
    message = listener2.message()
    assert message.body == "while away"
    conn2.ack(message.headers["ack"], receipt="acked")
    listener2.receipt("acked")
    conn2.unsubscribe("d", headers={"activemq.subscriptionName": "audit"}, receipt="dropped")
    listener2.receipt("dropped")
    conn2.disconnect()
    producer.send(topic, "nobody listens", receipt="sent2")
    plistener.receipt("sent2")
    conn3, listener3 = connect(address, headers=headers, transport=transport)
    conn3.subscribe(topic, id="d", headers={"activemq.subscriptionName": "audit"})
    listener3.no_message(within=0.3)
    conn3.disconnect()
    producer.disconnect()


def test_durable_topic_subscription_rabbitmq_style(address, transport: str) -> None:
    topic = unique("/topic/r")
    headers = {"client-id": unique("rabbit")}
    conn, listener = connect(address, headers=headers, transport=transport)
    conn.subscribe(topic, id="keep", headers={"durable": "true", "auto-delete": "false"}, receipt="sub")
    listener.receipt("sub")
    conn.disconnect()
    producer, plistener = connect(address, transport=transport)
    producer.send(topic, "kept", receipt="sent")
    plistener.receipt("sent")
    conn2, listener2 = connect(address, headers=headers, transport=transport)
    conn2.subscribe(topic, id="keep", headers={"durable": "true", "auto-delete": "false"})
    assert listener2.message().body == "kept"
    conn2.disconnect()
    producer.disconnect()


def test_selector_filters_queue_deliveries(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="red", headers={"selector": "color = 'red' AND size > 2"})
    for color, size in [("blue", 5), ("red", 1), ("red", 3)]:
        conn.send(queue, f"{color}{size}", headers={"color": color, "size": str(size)})
    assert listener.message().body == "red3"
    listener.no_message(within=0.2)
    conn.disconnect()


def test_priority_orders_waiting_messages(address, transport: str) -> None:
    queue = unique()
    producer, plistener = connect(address, transport=transport)
    for priority in (1, 9, 4, 7):
        producer.send(queue, f"p{priority}", headers={"priority": str(priority)})
    producer.send(queue, "p0", headers={"priority": "0"}, receipt="all")
    plistener.receipt("all")
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s")
    assert [listener.message().body for _ in range(5)] == ["p9", "p7", "p4", "p1", "p0"]
    conn.disconnect()
    producer.disconnect()


def test_expired_messages_are_not_delivered(address, transport: str) -> None:
    queue = unique()
    producer, plistener = connect(address, transport=transport)
    now_ms = int(time.time() * 1000)
    producer.send(queue, "stale", headers={"expires": str(now_ms - 1000)})
    producer.send(queue, "short-lived", headers={"expires": str(now_ms + 150)})
    producer.send(queue, "fresh", headers={"expires": str(now_ms + 600_000)}, receipt="sent")
    plistener.receipt("sent")
    time.sleep(0.3)
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s")
    assert listener.message().body == "fresh"
    listener.no_message(within=0.2)
    conn.disconnect()
    producer.disconnect()


def test_duplicate_detection_stores_a_message_once(address, transport: str) -> None:
    queue = unique()
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s")
    for attempt in range(3):
        conn.send(queue, "once", headers={"_AMQ_DUPL_ID": "order-42"}, receipt=f"try{attempt}")
        listener.receipt(f"try{attempt}")  # every retry is acknowledged...
    assert listener.message().body == "once"
    listener.no_message(within=0.3)  # ...but stored once
    conn.disconnect()


def test_disconnect_receipt_then_close(address) -> None:
    client = RawClient(address)
    client.connect()
    client.send(frame_bytes("DISCONNECT", {"receipt": "bye"})
                + frame_bytes("SEND", {"destination": "/queue/ignored"}, b"x"))
    frames = client.read_until_closed()
    assert [(f.command, f.headers.get("receipt-id")) for f in frames] == [("RECEIPT", "bye")]


def test_binary_body_with_nul_bytes_round_trips(address) -> None:
    queue = unique()
    client = RawClient(address)
    client.connect()
    body = bytes(range(256)) * 4
    client.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s"}))
    client.send(frame_bytes("SEND", {"destination": queue, "content-length": str(len(body))}, body))
    frame = client.read_frame()
    assert frame.command == "MESSAGE" and frame.body == body
    assert frame.headers["content-length"] == str(len(body))
    client.close()


def test_client_that_half_closes_still_gets_its_receipts(address, transport: str) -> None:
    queue = unique()
    client = RawClient(address)
    client.connect()
    client.send(b"".join(frame_bytes("SEND", {"destination": queue, "receipt": f"r{i}"}, b"m") for i in range(50)))
    client.sock.shutdown(socket.SHUT_WR)
    frames = client.read_until_closed()
    assert [f.headers.get("receipt-id") for f in frames] == [f"r{i}" for i in range(50)]
    conn, listener = connect(address, transport=transport)
    conn.subscribe(queue, id="s")
    assert [listener.message().body for _ in range(50)] == ["m"] * 50
    conn.disconnect()

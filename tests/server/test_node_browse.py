"""Queue browsers (SUBSCRIBE with browser:true) against a real node process, with stomp-py and
with raw frames."""

from __future__ import annotations

import pytest

from tests.helpers.stomp_raw import RawClient, connect, frame_bytes, unique

pytestmark = pytest.mark.integration


def test_stomp_py_browser_sees_the_queue_then_the_end_marker(address) -> None:
    queue = unique()
    conn, listener = connect(address)
    try:
        for i, priority in enumerate((4, 9, 4)):
            conn.send(queue, f"m{i}", headers={"priority": str(priority), "n": str(i)}, receipt=f"s{i}")
            listener.receipt(f"s{i}")
        conn.subscribe(queue, id="b1", ack="client-individual", headers={"browser": "true"})
        frames = [listener.message() for _ in range(4)]
        assert [f.body for f in frames[:3]] == ["m1", "m0", "m2"]  # queue order: priority, then arrival
        for frame in frames[:3]:
            assert frame.headers["subscription"] == "b1" and frame.headers["destination"] == queue
            assert "ack" not in frame.headers and "browser" not in frame.headers
        end = frames[3]
        assert end.headers["browser"] == "end" and end.headers["subscription"] == "b1" and end.body == ""
        assert end.headers["browser-count"] == "3" and "browser-truncated" not in end.headers
        assert listener.no_message(0.3)  # nothing more for that subscription
        conn.unsubscribe("b1", headers={"receipt": "u1"})  # allowed, and answered
        listener.receipt("u1")
        # Nothing was consumed: a real consumer gets all three, as first deliveries.
        conn.subscribe(queue, id="real", ack="auto")
        got = [listener.message() for _ in range(3)]
        assert [f.body for f in got] == ["m1", "m0", "m2"]
        assert all("redelivered" not in f.headers and f.headers["delivery-count"] == "1" for f in got)
        assert listener.errors.empty()
    finally:
        conn.disconnect()


def test_browsing_leaves_in_flight_messages_and_acks_alone(address) -> None:
    queue = unique()
    consumer, browser = RawClient(address), RawClient(address)
    try:
        consumer.connect()
        browser.connect()
        for i in range(4):
            consumer.send(frame_bytes("SEND", {"destination": queue, "receipt": f"s{i}"}, f"m{i}".encode()))
            assert consumer.read_frame().headers["receipt-id"] == f"s{i}"
        consumer.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "c", "ack": "client-individual",
                                                "activemq.prefetchSize": "1"}))
        held = consumer.read_frame()
        assert held.body == b"m0"
        browser.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "b", "browser": "true",
                                               "browser-limit": "2", "receipt": "r"}))
        frames = [browser.read_frame() for _ in range(4)]
        assert [f.body for f in frames[:2]] == [b"m1", b"m2"]  # m0 is in flight: not in the queue
        assert frames[2].headers["browser"] == "end" and frames[2].headers["browser-truncated"] == "true"
        assert frames[2].headers["content-length"] == "0" and frames[2].body == b""
        assert frames[3].command == "RECEIPT" and frames[3].headers["receipt-id"] == "r"
        # The consumer's delivery is untouched: its ACK works and the next one follows.
        consumer.send(frame_bytes("ACK", {"id": held.headers["ack"], "receipt": "a"}))
        after = [consumer.read_frame() for _ in range(2)]
        assert {f.command for f in after} == {"RECEIPT", "MESSAGE"}
        assert next(f for f in after if f.command == "MESSAGE").body == b"m1"
        assert "redelivered" not in next(f for f in after if f.command == "MESSAGE").headers
    finally:
        consumer.close()
        browser.close()


def test_browser_on_a_topic_or_with_a_bad_limit_is_an_error(address) -> None:
    for headers, message in [
        ({"destination": unique("/topic/t"), "id": "b", "browser": "true"}, "browsing works on queues"),
        ({"destination": unique(), "id": "b", "browser": "true", "browser-limit": "0"}, "invalid browser-limit header"),
        ({"destination": unique(), "id": "b", "browser": "true", "browser-limit": "many"},
         "invalid browser-limit header"),
    ]:
        client = RawClient(address)
        try:
            client.connect()
            client.send(frame_bytes("SUBSCRIBE", headers))
            frames = client.read_until_closed()
            assert [f.command for f in frames] == ["ERROR"] and frames[0].headers["message"] == message, frames
        finally:
            client.close()


def test_an_empty_or_unknown_queue_browses_to_just_the_end_marker(address) -> None:
    client = RawClient(address)
    try:
        client.connect("1.0")
        queue = unique()
        client.send(frame_bytes("SUBSCRIBE", {"destination": queue, "browser": "true"}))  # 1.0: no id
        end = client.read_frame()
        assert end.command == "MESSAGE" and end.headers["browser"] == "end" and end.headers["browser-count"] == "0"
        assert end.headers["subscription"] == queue
        client.send(frame_bytes("UNSUBSCRIBE", {"destination": queue, "receipt": "u"}))
        assert client.read_frame().headers["receipt-id"] == "u"
    finally:
        client.close()

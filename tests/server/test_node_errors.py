"""ERROR-and-close rules against a real node process, with hand-written frames on raw sockets.

Every bad frame must get an ERROR carrying `message`, `content-type:text/plain`, a
`content-length` and a body, `receipt-id` when it asked for a receipt; then the socket closes.
A SEND pipelined in the same write before the bad frame is delivered; one after it is not.
"""

from __future__ import annotations

import socket

import pytest

from tests.helpers.stomp_raw import RawClient, connect, frame_bytes, unique

pytestmark = pytest.mark.integration

BIG = 17 * 1024 * 1024  # over the default 16 MiB limits


def _bad_frames(queue: str) -> dict[str, tuple[bytes, str, str | None]]:
    """name -> (bytes of the bad frame, text the ERROR message must contain, expected receipt-id)."""
    return {
        "missing destination": (frame_bytes("SEND", {"receipt": "bad-1"}, b"x"), "destination", "bad-1"),
        "invalid destination": (
            frame_bytes("SEND", {"destination": "nowhere", "receipt": "bad-2"}, b"x"),
            "destination",
            "bad-2",
        ),
        "bad ack mode": (
            frame_bytes("SUBSCRIBE",
                        {"destination": queue + "-other", "id": "s9", "ack": "sometimes", "receipt": "bad-3"}),
            "ack",
            "bad-3",
        ),
        "subscribe without id": (
            frame_bytes("SUBSCRIBE", {"destination": queue + "-other", "receipt": "bad-4"}),
            "id",
            "bad-4",
        ),
        "unknown transaction (COMMIT)": (
            frame_bytes("COMMIT", {"transaction": "nope", "receipt": "bad-5"}),
            "transaction",
            "bad-5",
        ),
        "unknown transaction (SEND)": (
            frame_bytes("SEND", {"destination": queue, "transaction": "nope", "receipt": "bad-6"}, b"in-tx"),
            "transaction",
            "bad-6",
        ),
        "ack without id": (frame_bytes("ACK", {"receipt": "bad-7"}), "id", "bad-7"),
        "unknown command": (b"FLY\ndestination:" + queue.encode() + b"\n\n\0", "command", None),
        "header without colon": (b"SEND\ndestination" + queue.encode() + b"\n\nbody\0", "header", None),
        "content-length mismatch": (
            b"SEND\ndestination:" + queue.encode() + b"\ncontent-length:2\n\nabc\0",
            "NUL",
            None,
        ),
        "oversize content-length": (
            f"SEND\ndestination:{queue}\ncontent-length:{BIG}\n\n".encode(),
            "limit",
            None,
        ),
        "oversize header line": (
            b"SEND\ndestination:" + queue.encode() + b"\nx:" + b"a" * 9000 + b"\n\nbody\0",
            "header line",
            None,
        ),
        "bad escape": (b"SEND\ndestination:" + queue.encode() + b"\nx:a\\tb\n\nbody\0", "escape", None),
        "invalid selector": (
            frame_bytes("SUBSCRIBE",
                        {"destination": queue + "-other", "id": "s8", "selector": "a = = 1", "receipt": "bad-9"}),
            "selector",
            "bad-9",
        ),
        "second CONNECT": (frame_bytes("CONNECT", {"accept-version": "1.2", "receipt": "bad-8"}), "connected", "bad-8"),
        # Found by the core, after the frames behind it were already appended to the log.
        "unknown ack id (core)": (
            frame_bytes("ACK", {"id": "no-such-delivery", "receipt": "bad-10"}),
            "unknown delivery",
            "bad-10",
        ),
    }


CASES = list(_bad_frames("/queue/x"))


def _assert_error_frame(frame, contains: str, receipt_id: str | None) -> None:  # noqa: ANN001
    assert frame.command == "ERROR", frame
    assert "message" in frame.headers and frame.headers["message"], frame
    assert contains.lower() in (frame.headers["message"] + frame.body.decode()).lower(), frame
    assert frame.headers.get("content-type") == "text/plain", frame
    assert int(frame.headers["content-length"]) == len(frame.body) > 0, frame
    assert frame.headers.get("receipt-id") == receipt_id, frame


@pytest.mark.parametrize("case", CASES)
def test_bad_frame_gets_error_and_close_and_nothing_after_it_is_processed(address, case: str) -> None:
    queue = unique()
    bad, contains, receipt_id = _bad_frames(queue)[case]
    consumer, listener = connect(address)
    consumer.subscribe(queue, id="c", ack="auto", receipt="sub")
    listener.receipt("sub")

    client = RawClient(address)
    client.connect()
    before = frame_bytes("SEND", {"destination": queue, "receipt": "before"}, b"before")
    after = frame_bytes("SEND", {"destination": queue, "receipt": "after"}, b"after")
    client.send(before + bad + after)
    frames = client.read_until_closed()
    assert [f.command for f in frames] == ["RECEIPT", "ERROR"], frames
    assert frames[0].headers["receipt-id"] == "before"
    _assert_error_frame(frames[1], contains, receipt_id)

    assert listener.message().body == "before"
    # A late write on the failed connection is ignored too (or refused by the closed socket).
    try:
        client.send(frame_bytes("SEND", {"destination": queue}, b"later"))
    except OSError:
        pass
    client.close()
    listener.no_message(within=0.4)
    consumer.disconnect()


def test_frame_before_connect_gets_error_and_nothing_after_it_is_processed(address) -> None:
    queue = unique()
    consumer, listener = connect(address)
    consumer.subscribe(queue, id="c", receipt="sub")
    listener.receipt("sub")
    client = RawClient(address)
    client.send(
        frame_bytes("SEND", {"destination": queue, "receipt": "r0"}, b"too early")
        + frame_bytes("CONNECT", {"accept-version": "1.2"})
        + frame_bytes("SEND", {"destination": queue}, b"after")
    )
    frames = client.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"]
    _assert_error_frame(frames[0], "CONNECT", None)
    listener.no_message(within=0.4)
    consumer.disconnect()


def test_unsupported_version_is_refused_with_the_supported_versions(address) -> None:
    client = RawClient(address)
    client.send(frame_bytes("CONNECT", {"accept-version": "2.0,3.1"}))
    frames = client.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"]
    assert frames[0].headers["version"] == "1.0,1.1,1.2"
    _assert_error_frame(frames[0], "version", None)


def test_core_detected_error_unknown_ack_id(address) -> None:
    queue = unique()
    client = RawClient(address)
    client.connect()
    client.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s", "ack": "client-individual"}))
    client.send(frame_bytes("ACK", {"id": "no-such-delivery", "receipt": "a1"}))
    frames = client.read_until_closed()
    assert [f.command for f in frames] == ["ERROR"], frames
    _assert_error_frame(frames[0], "", "a1")


def test_client_closing_mid_frame_loses_nothing_acknowledged(address) -> None:
    queue = unique()
    producer = RawClient(address)
    producer.connect()
    producer.send(b"".join(frame_bytes("SEND", {"destination": queue, "receipt": f"r{i}"}, f"m{i}".encode())
                           for i in range(20)))
    receipts = [producer.read_frame() for _ in range(20)]
    assert [f.headers["receipt-id"] for f in receipts] == [f"r{i}" for i in range(20)]
    # Half a frame, then the connection drops.
    producer.send(f"SEND\ndestination:{queue}\ncontent-length:100\n\npartial".encode())
    producer.sock.shutdown(socket.SHUT_RDWR)
    producer.close()

    consumer = RawClient(address)
    consumer.connect()
    consumer.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s", "ack": "client-individual"}))
    got = [consumer.read_frame() for _ in range(20)]
    assert [f.body for f in got] == [f"m{i}".encode() for i in range(20)]
    # Ack the first ten (waiting for the receipt), then drop mid-frame: exactly the other ten come back.
    consumer.send(b"".join(frame_bytes("ACK", {"id": f.headers["ack"]}) for f in got[:9]))
    consumer.send(frame_bytes("ACK", {"id": got[9].headers["ack"], "receipt": "acked"}))
    assert consumer.read_frame().headers == {"receipt-id": "acked"}
    consumer.send(b"ACK\nid:" + got[10].headers["ack"].encode())
    consumer.close()

    again = RawClient(address)
    again.connect()
    again.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s", "ack": "client-individual"}))
    redelivered = [again.read_frame() for _ in range(10)]
    assert sorted(f.body for f in redelivered) == sorted(f"m{i}".encode() for i in range(10, 20))
    assert all(f.headers.get("redelivered") == "true" for f in redelivered)
    with pytest.raises(TimeoutError):
        again.read_frame(timeout=0.4)
    again.close()

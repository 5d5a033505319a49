"""STOMP over WebSocket on a real node's client port: stomp.py's WebSocket connection, a raw
WebSocket client (websocket-client) for what stomp.py does not do, and a handshake fuzz of raw
sockets. The shared node (tests/server/conftest.py) must end without a traceback or an
internal error, so every refusal here is also checked to have cost nothing but its connection."""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import stomp
import websocket

from raftmq.processes import free_port
from tests.helpers.stomp_raw import WAIT, Listener, NodeProcess, RawClient, frame_bytes, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def ws_url(address: tuple[str, int], path: str = "/ws") -> str:
    return f"ws://{address[0]}:{address[1]}{path}"


@pytest.fixture
def ws(address: tuple[str, int]) -> Iterator[websocket.WebSocket]:
    client = websocket.create_connection(ws_url(address), subprotocols=["v12.stomp"], timeout=WAIT)
    try:
        yield client
    finally:
        client.close()


def connect_frame(**headers: str) -> bytes:
    return frame_bytes("CONNECT", {"accept-version": "1.2", "host": "/", **headers})


def test_stomp_py_over_websocket_sends_receives_and_gets_receipts(address: tuple[str, int]) -> None:
    conn = stomp.WSConnection([address], ws_path="/ws", timeout=WAIT, reconnect_attempts_max=1, heartbeats=(1000, 1000))
    listener = Listener()
    conn.set_listener("test", listener)
    conn.connect(wait=True)
    try:
        assert listener.connected.wait(WAIT)
        queue = unique()
        conn.subscribe(queue, id="1", ack="client-individual")
        conn.send(queue, "over a websocket", receipt="r1")
        listener.receipt("r1")
        message = listener.message()
        assert message.body == "over a websocket"
        conn.ack(message.headers["ack"])
        time.sleep(2.5)  # idle, with 1 s heart-beats both ways: still connected
        assert not listener.disconnected.is_set() and conn.is_connected()
        conn.send(queue, "after the pause", receipt="r2")
        listener.receipt("r2")
        assert listener.message().body == "after the pause"
    finally:
        conn.disconnect()


def test_the_subprotocol_is_the_first_stomp_or_mqtt_one_offered_or_none(address: tuple[str, int]) -> None:
    offered = websocket.create_connection(ws_url(address, "/stomp"), subprotocols=["v10.stomp", "v12.stomp"],
                                          timeout=WAIT)
    plain = websocket.create_connection(ws_url(address, "/"), timeout=WAIT)
    try:
        assert offered.getsubprotocol() == "v10.stomp"
        assert plain.getsubprotocol() is None
        for client in (offered, plain):
            client.send(connect_frame())
            assert frames(client, 1)[0].startswith(b"CONNECTED\n")
    finally:
        offered.close()
        plain.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(ws_url(address), subprotocols=["amqp"], timeout=WAIT)
    assert refused.value.status_code == 400  # (`mqtt` is taken: tests/server/test_mqtt_node.py)


@pytest.mark.parametrize(("origin", "allowed"), [
    ("http://localhost:3000", True), ("http://127.0.0.1:8080", True), ("https://evil.example", False),
    ("null", False), ("http://localhost.evil.example", False),
])
def test_browser_origins_other_than_loopback_are_refused_by_default(address: tuple[str, int], origin: str,
                                                                     allowed: bool) -> None:
    if allowed:
        client = websocket.create_connection(ws_url(address), origin=origin, timeout=WAIT)
        client.close()
        return
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        websocket.create_connection(ws_url(address), origin=origin, timeout=WAIT)
    assert refused.value.status_code == 403


def test_frames_may_span_messages_and_share_them_and_bodies_may_be_binary(ws: websocket.WebSocket) -> None:
    queue = unique()
    whole = connect_frame() + frame_bytes("SUBSCRIBE", {"id": "1", "destination": queue})
    ws.send_binary(whole[:10])  # CONNECT split over three messages, SUBSCRIBE in the last one
    ws.send_binary(whole[10:25])
    ws.send_binary(whole[25:])
    assert frames(ws, 1)[0].startswith(b"CONNECTED\n")
    body = bytes(range(256)) * 4096  # 1 MiB, every byte value, NULs included
    ws.send_binary(frame_bytes("SEND", {"destination": queue, "content-length": str(len(body)), "receipt": "big"},
                               body))
    got = frames(ws, 2)
    message = next(f for f in got if f.startswith(b"MESSAGE\n"))
    assert message.endswith(b"\n\n" + body)
    assert any(f.startswith(b"RECEIPT\nreceipt-id:big") for f in got)


def frames(client: websocket.WebSocket, count: int) -> list[bytes]:
    """The next `count` STOMP frames (heart-beats skipped, content-length bodies, which may hold
    NULs, read whole), however the node packed them in messages."""
    got: list[bytes] = []
    buffer = b""
    while len(got) < count:
        data = client.recv()
        buffer += data.encode() if isinstance(data, str) else data
        while True:
            buffer = buffer.lstrip(b"\r\n")
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            head = buffer[:end]
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\n")
                           if line.startswith(b"content-length:")), None)
            if length is None:
                stop = buffer.find(b"\0", end)
                if stop < 0:
                    break
                got.append(buffer[:stop])
                buffer = buffer[stop + 1:]
            elif len(buffer) >= end + 2 + length + 1:
                got.append(buffer[:end + 2 + length])
                buffer = buffer[end + 2 + length + 1:]
            else:
                break
    return got


def test_pings_are_answered_and_an_error_closes_with_1008(ws: websocket.WebSocket) -> None:
    ws.send(connect_frame())
    assert frames(ws, 1)[0].startswith(b"CONNECTED\n")
    ws.ping(b"are you there")
    opcode, data = ws.recv_data(control_frame=True)
    assert (opcode, data) == (websocket.ABNF.OPCODE_PONG, b"are you there")
    ws.send(frame_bytes("NOT-A-COMMAND"))
    assert frames(ws, 1)[0].startswith(b"ERROR\n")
    opcode, data = ws.recv_data(control_frame=True)
    assert opcode == websocket.ABNF.OPCODE_CLOSE and struct.unpack("!H", data[:2])[0] == 1008


# -- the handshake fuzz: a clean refusal or close, never a crash or a stuck socket ----------------


def raw_upgrade(address: tuple[str, int], request: bytes) -> tuple[bytes, bool]:
    """What the node answers `request` with, and whether it then closed (within WAIT)."""
    sock = socket.create_connection(address, timeout=WAIT)
    try:
        sock.sendall(request)
        got = b""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return got, False
            if not chunk:
                return got, True
            got += chunk
        return got, False
    finally:
        sock.close()


def upgrade_request(path: str = "/ws", key: str | None = None, drop: tuple[str, ...] = (), extra: str = "") -> bytes:
    headers = {
        "Host": "127.0.0.1",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key if key is not None else base64.b64encode(os.urandom(16)).decode(),
        "Sec-WebSocket-Version": "13",
    }
    lines = [f"GET {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items() if k not in drop]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (upgrade_request(drop=("Upgrade",)), b"400"),
    (upgrade_request(drop=("Sec-WebSocket-Key",)), b"400"),
    (upgrade_request(drop=("Host",)), b"400"),
    (upgrade_request(extra="X-Big: " + "a" * 20_000 + "\r\n"), b"4"),
    (b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),
    (b"GARBAGE\r\n\r\n", b"400"),
    (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 7\r\n"
     b"Sec-WebSocket-Key: x\r\n\r\n", b"4"),
])
def test_a_bad_upgrade_gets_an_http_error_and_a_close(address: tuple[str, int], request_bytes: bytes,
                                                      status: bytes) -> None:
    answer, closed = raw_upgrade(address, request_bytes)
    assert answer.startswith(b"HTTP/1.1 " + status) and closed, answer[:200]


def test_unmasked_client_frames_and_half_closes_end_cleanly(address: tuple[str, int]) -> None:
    answer, closed = raw_upgrade(address, upgrade_request() + b"\x81\x05hello")  # a text frame without a mask
    assert answer.startswith(b"HTTP/1.1 101") and closed
    assert b"\x88" in answer.split(b"\r\n\r\n", 1)[1][:2]  # a close frame
    sock = socket.create_connection(address, timeout=WAIT)
    try:
        sock.sendall(upgrade_request()[:30])
        sock.shutdown(socket.SHUT_WR)  # half a handshake, then nothing more
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and sock.recv(65536):
            pass
    finally:
        sock.close()


def test_the_node_still_serves_after_the_fuzz(address: tuple[str, int]) -> None:
    client = RawClient(address)
    client.send(frame_bytes("CONNECT", {"accept-version": "1.2", "host": "/"}))
    assert client.read_frame().command == "CONNECTED"
    client.close()


def test_a_dedicated_websocket_listener_serves_websocket_only(tmp_path: Path) -> None:
    ws_port = free_port()
    config = tmp_path / "node.toml"
    config.write_text(f'[node]\nwebsocket = "127.0.0.1:{ws_port}"\n')
    node = NodeProcess(["--config", str(config)])
    try:
        client = websocket.create_connection(f"ws://127.0.0.1:{ws_port}/ws", timeout=WAIT)
        client.send(connect_frame())
        assert frames(client, 1)[0].startswith(b"CONNECTED\n")
        client.close()
        answer, closed = raw_upgrade(("127.0.0.1", ws_port), connect_frame())
        assert answer.startswith(b"HTTP/1.1 400") and closed
        plain = RawClient(node.address)  # the client port still serves both
        plain.send(connect_frame())
        assert plain.read_frame().command == "CONNECTED"
        plain.close()
    finally:
        node.kill()


def test_permessage_deflate_is_never_accepted(address: tuple[str, int]) -> None:
    answer = raw_upgrade_open(address, upgrade_request(extra="Sec-WebSocket-Extensions: permessage-deflate; "
                                                                      "client_max_window_bits\r\n"))
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 101") and b"sec-websocket-extensions" not in head


def raw_upgrade_open(address: tuple[str, int], request: bytes) -> bytes:
    """The node's answer to an upgrade that it accepts (read up to the end of its headers)."""
    with socket.create_connection(address, timeout=WAIT) as sock:
        sock.sendall(request)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
    return got


def test_handshakes_in_progress_are_bounded_and_the_connect_deadline_covers_the_upgrade(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text("[node]\nwebsocket_max_handshakes = 2\nconnect_timeout_ms = 1000\n")
    node = NodeProcess(["--config", str(config)])
    slow = [socket.create_connection(node.address, timeout=WAIT) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(upgrade_request()[:40])  # an upgrade that never ends
        time.sleep(0.3)
        answer, closed = raw_upgrade(node.address, upgrade_request())
        assert answer.startswith(b"HTTP/1.1 503") and closed
        started = time.monotonic()
        for sock in slow:  # the CONNECT deadline closes them
            while sock.recv(65536):
                pass
        assert time.monotonic() - started < 5
        client = websocket.create_connection(ws_url(node.address), timeout=WAIT)  # room again
        client.send(connect_frame())
        assert frames(client, 1)[0].startswith(b"CONNECTED\n")
        client.close()
    finally:
        for sock in slow:
            sock.close()
        node.kill()

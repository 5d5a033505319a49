"""The WebSocket layer under the STOMP session, sans-I/O (raftmq.server.websocket.session): bytes
in, actions out, driven here by wsproto's client side as a browser would be."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

from raftmq.server.websocket.session import Closed, Opened, Reply, Stomp, WebSocketSession
from raftmq.web_guard import HostNames, origin_allowed


def upgrade(session: WebSocketSession, subprotocols: list[str] | None = None,
            headers: list[tuple[bytes, bytes]] | None = None) -> tuple[WSConnection, list[object], list[object]]:
    """The client, the session's actions, and what the client made of the answer."""
    client = WSConnection(ConnectionType.CLIENT)
    request = client.send(Request(host="broker", target="/ws", subprotocols=subprotocols or [],
                                  extra_headers=headers or []))
    actions = session.receive(request)
    return client, actions, events(client, actions)


def events(client: WSConnection, actions: list[object]) -> list[object]:
    for action in actions:
        if isinstance(action, Reply):
            client.receive_data(action.data)
    return list(client.events())


@pytest.mark.parametrize(("origin", "allowed", "expected"), [
    (None, ("loopback",), True),
    ("http://localhost:3000", ("loopback",), True),
    ("http://[::1]:8080", ("loopback",), True),
    ("http://127.0.0.2", ("loopback",), True),
    ("https://app.example", ("loopback",), False),
    ("https://app.example", ("https://app.example",), True),
    ("https://app.example:8443", ("https://app.example",), False),
    ("http://localhost.evil.example", ("loopback",), False),
    ("null", ("loopback",), False),
    ("https://anything", ("*",), True),
])
def test_origins(origin: str | None, allowed: tuple[str, ...], expected: bool) -> None:
    assert origin_allowed(origin, allowed) is expected


def test_the_first_stomp_subprotocol_offered_is_chosen_and_stomp_flows_both_ways() -> None:
    session = WebSocketSession(("loopback",))
    client, actions, answer = upgrade(session, ["amqp", "v11.stomp", "v12.stomp", "mqtt"])
    accepted = [e for e in answer if isinstance(e, AcceptConnection)]
    assert accepted and accepted[0].subprotocol == "v11.stomp"
    assert [a for a in actions if isinstance(a, Opened)] == [Opened("/ws", "v11.stomp", None)]
    frame = b"CONNECT\naccept-version:1.2\n\n\0"
    got = session.receive(client.send(TextMessage(frame[:8].decode())) + client.send(TextMessage(frame[8:].decode())))
    assert b"".join(a.data for a in got if isinstance(a, Stomp)) == frame
    [text] = [e for e in events(client, [Reply(session.send(b"CONNECTED\n\n\0"))]) if isinstance(e, TextMessage)]
    assert text.data == "CONNECTED\n\n\0"  # text for a client that sends text, while it is UTF-8
    [binary] = [e for e in events(client, [Reply(session.send(b"MESSAGE\n\n\xff\0"))]) if isinstance(e, BytesMessage)]
    assert binary.data == b"MESSAGE\n\n\xff\0"


def test_mqtt_is_chosen_when_offered_alone_and_travels_in_binary_messages_only() -> None:
    session = WebSocketSession(("loopback",))
    client, actions, answer = upgrade(session, ["mqtt"])
    assert [e.subprotocol for e in answer if isinstance(e, AcceptConnection)] == ["mqtt"]
    assert [a for a in actions if isinstance(a, Opened)] == [Opened("/ws", "mqtt", None)]
    connack = b"\x20\x02\x00\x00"  # valid UTF-8, and still binary
    assert [type(e) for e in events(client, [Reply(session.send(connack))])] == [BytesMessage]
    got = session.receive(client.send(BytesMessage(b"\xc0\x00")))
    assert [a.data for a in got if isinstance(a, Stomp)] == [b"\xc0\x00"]
    refused = session.receive(client.send(TextMessage("text")))
    assert any(isinstance(a, Closed) and a.code == 1003 for a in refused) and session.closed


def test_a_client_that_sends_binary_gets_binary() -> None:
    session = WebSocketSession(("*",))
    client, _, _ = upgrade(session)
    session.receive(client.send(BytesMessage(b"\n")))
    assert [type(e) for e in events(client, [Reply(session.send(b"RECEIPT\n\n\0"))])] == [BytesMessage]


def test_pings_are_answered_and_a_close_is_answered_and_ends() -> None:
    session = WebSocketSession(("*",))
    client, _, _ = upgrade(session)
    assert [type(e) for e in events(client, session.receive(client.send(Ping(b"x"))))] == [Pong]
    actions = session.receive(client.send(CloseConnection(1000, "bye")))
    assert any(isinstance(a, Closed) and a.code == 1000 for a in actions)
    assert [type(e) for e in events(client, actions)] == [CloseConnection]
    assert session.send(b"late") == b""


def test_an_origin_not_allowed_gets_403_and_a_subprotocol_neither_stomp_nor_mqtt_400() -> None:
    for subprotocols, headers, status in ((None, [(b"Origin", b"https://evil.example")], 403), (["amqp"], None, 400)):
        session = WebSocketSession(("loopback",))
        _, actions, answer = upgrade(session, subprotocols, headers)
        assert [e.status_code for e in answer if isinstance(e, RejectConnection)] == [status]
        assert any(isinstance(a, Closed) for a in actions) and session.closed


def test_bytes_sent_right_behind_the_request_are_not_lost() -> None:
    session = WebSocketSession(("*",))
    client = WSConnection(ConnectionType.CLIENT)
    request = client.send(Request(host="broker", target="/ws"))
    actions = session.receive(request + b"\x82\x81abcd" + bytes([ord("\n") ^ ord("a")]))  # a masked binary "\n"
    assert [a.data for a in actions if isinstance(a, Stomp)] == [b"\n"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.booleans())
def test_any_bytes_give_actions_never_an_exception(data: bytes, after_upgrade: bool) -> None:
    session = WebSocketSession(("*",))
    if after_upgrade:
        upgrade(session)
    for chunk in (data[: len(data) // 2], data[len(data) // 2 :]):
        for action in session.receive(chunk):
            assert isinstance(action, Reply | Opened | Stomp | Closed)


@pytest.mark.parametrize(("host", "local", "origin", "status"), [
    ("evil.example", "127.0.0.1", "http://evil.example", 403),  # a rebound name (allowed origins: "*")
    ("evil.example:61613", "127.0.0.1", "http://evil.example:61613", 403),
    ("broker.example", "127.0.0.1", "https://app.example", None),  # configured (host_names)
    ("localhost:61613", "127.0.0.1", "http://localhost:3000", None),
    ("10.0.0.5:61613", "10.0.0.5", "https://app.example", None),  # the address the connection came in on
    ("10.0.0.6", "10.0.0.5", "https://app.example", 403),
    ("g1-client.svc", "10.0.0.5", None, None),  # not a browser: a Service's name, no page behind it
])
def test_a_browsers_handshake_is_answered_only_for_the_names_the_port_is_known_by(
        host: str, local: str, origin: str | None, status: int | None) -> None:
    session = WebSocketSession(("*",), HostNames.of("broker.example"), local)
    client = WSConnection(ConnectionType.CLIENT)
    headers = [(b"Origin", origin.encode())] if origin else []
    actions = session.receive(client.send(Request(host=host, target="/ws", extra_headers=headers)))
    answer = events(client, actions)
    if status is None:
        assert session.opened and any(isinstance(e, AcceptConnection) for e in answer)
    else:
        assert [e.status_code for e in answer if isinstance(e, RejectConnection)] == [status]
        assert session.closed and not session.opened

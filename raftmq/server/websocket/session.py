"""STOMP over WebSocket, sans-I/O: the WebSocket layer under a client connection's STOMP session.

`WebSocketSession` takes the bytes a client sends and hands out what to do, the way
`StompSession` does one layer up; wsproto (RFC 6455) does the protocol. It

- answers the HTTP/1.1 upgrade on any path, choosing the first subprotocol the client offers
  among `SUBPROTOCOLS` (or none, when the client offers none, as RabbitMQ does; a client
  offering only others is refused with 400), after checking its `Origin` against `origins`
  (cross-site WebSocket hijacking: a page of another site cannot use a visitor's browser to
  reach the broker) and, for a browser's (one with `Origin`), its `Host` against `hosts` (403
  for a name the port is not known by: a rebound DNS name; raftmq.web_guard); no extension is
  accepted, so `permessage-deflate` (a small message that inflates to gigabytes) never is;
- passes the payload of text and binary messages on as STOMP bytes as it arrives, frame by
  frame: a STOMP frame may span messages and a message may carry several frames, and nothing
  is buffered here beyond one read (the STOMP parser enforces the frame and body limits);
- answers pings, and a close with a close; a client breaking the protocol (an unmasked frame,
  a bad opcode, invalid UTF-8 in a text message) gets the close code wsproto names (1002,
  1007) and the connection ends;
- wraps what the server writes: each `send` is one WebSocket message (several STOMP frames
  when they were written together), text when it is valid UTF-8 and the client last sent
  text, else binary (a binary body cannot go in a text message).

With the subprotocol `mqtt` the connection carries MQTT instead (raftmq.server.mqtt): every
message is binary both ways, and a text message from the client closes it (1003).

Handshake limits: the request line and headers may take `MAX_HANDSHAKE_BYTES`; past it, or on
anything that is not a WebSocket upgrade, the answer is an HTTP error and the connection closes.
The node bounds the handshakes in progress and the time to CONNECT.
"""

from __future__ import annotations

from dataclasses import dataclass

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from raftmq.protocol.negotiation import WEBSOCKET_SUBPROTOCOLS
from raftmq.web_guard import HostNames, origin_allowed

MQTT_SUBPROTOCOL = "mqtt"  # MQTT over WebSocket (raftmq.server.mqtt): binary messages only
SUBPROTOCOLS = (*WEBSOCKET_SUBPROTOCOLS, MQTT_SUBPROTOCOL)  # the first of these the client offers is chosen
MAX_HANDSHAKE_BYTES = 16 * 1024  # the upgrade request, line and headers
# Close codes (RFC 6455 section 7.4.1).
NORMAL = 1000
GOING_AWAY = 1001
POLICY = 1008  # the STOMP session ended with an ERROR (the frame says why)


@dataclass(frozen=True, slots=True)
class Reply:
    """Bytes to write to the client (the handshake's answer, a pong, a close)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Opened:
    """The upgrade was accepted: STOMP starts now."""

    path: str
    subprotocol: str | None
    origin: str | None


@dataclass(frozen=True, slots=True)
class Stomp:
    """STOMP bytes the client sent."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Closed:
    """Close the connection once what was replied is written (`code`, `reason`: why)."""

    code: int
    reason: str


Action = Reply | Opened | Stomp | Closed


_REASONS = {400: "Bad Request", 426: "Upgrade Required", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


def http_error(status: int, why: str) -> bytes:
    """A plain HTTP/1.1 answer that closes the connection, `why` as its text body."""
    text = (why + "\n").encode("utf-8", "replace")
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(text)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + text


class HandshakeGate:
    """The node's count of WebSocket upgrades being read (`websocket_max_handshakes`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_progress = 0

    def start(self) -> bool:
        """Count one more; False (not counted) at the limit."""
        if self.in_progress >= self.limit:
            return False
        self.in_progress += 1
        return True

    def end(self) -> None:
        self.in_progress -= 1


class WebSocketSession:
    def __init__(self, origins: tuple[str, ...], hosts: HostNames | None = None,
                 local_address: str | None = None) -> None:
        self._ws = WSConnection(ConnectionType.SERVER)
        self._origins = origins
        self._hosts = hosts  # None: any Host (a test's session)
        self._local_address = local_address  # the address the connection came in on
        self.opened = False
        self.closed = False
        self._binary = False  # the client's last message was binary
        self.mqtt = False  # the chosen subprotocol is MQTT: every message binary, both ways
        self._request = b""  # the upgrade request, until its end is read

    def receive(self, data: bytes) -> list[Action]:
        """Bytes from the client."""
        if self.closed or not data:
            return []
        if not self.opened:
            return self._receive_handshake(data)
        return self._receive(data)

    def _receive_handshake(self, data: bytes) -> list[Action]:
        """The request is read whole (it has no body) before wsproto sees it, so its size is
        bounded and bytes a client sent behind it are not lost."""
        self._request += data
        end = self._request.find(b"\r\n\r\n")
        if end < 0 or end + 4 > MAX_HANDSHAKE_BYTES:
            if end < 0 and len(self._request) <= MAX_HANDSHAKE_BYTES:
                return []
            return self._refuse_handshake(431, f"the upgrade request passed {MAX_HANDSHAKE_BYTES} bytes")
        request, rest = self._request[:end + 4], self._request[end + 4:]
        self._request = b""
        actions = self._receive(request)
        if self.opened and not self.closed and rest:
            actions += self._receive(rest)
        return actions

    def _receive(self, data: bytes) -> list[Action]:
        try:
            self._ws.receive_data(data)
            return self._events()
        except RemoteProtocolError as exc:
            if self.opened:
                return self._fail(1002, str(exc))
            hint = exc.event_hint
            return self._refuse_handshake(hint.status_code if isinstance(hint, RejectConnection) else 400, str(exc))

    def _events(self) -> list[Action]:
        actions: list[Action] = []
        for event in self._ws.events():
            if isinstance(event, Request):
                actions += self._handshake(event)
            elif isinstance(event, BytesMessage):
                self._binary = True
                if event.data:
                    actions.append(Stomp(bytes(event.data)))
            elif isinstance(event, TextMessage):
                if self.mqtt:
                    actions += self._fail(1003, "MQTT over WebSocket is carried in binary messages")
                    break
                self._binary = False
                if event.data:
                    actions.append(Stomp(event.data.encode("utf-8")))
            elif isinstance(event, Ping):
                actions.append(Reply(self._ws.send(event.response())))
            elif isinstance(event, CloseConnection):
                state = self._ws.state
                if state is ConnectionState.REMOTE_CLOSING:  # the client's close: answered
                    reply = self._ws.send(event.response())
                elif state is ConnectionState.OPEN:  # the client broke the protocol: our close says how
                    reply = self._ws.send(CloseConnection(event.code, (event.reason or "")[:120]))
                else:
                    reply = b""
                self.closed = True
                actions += [Reply(reply), Closed(event.code, event.reason or "closed by the client")]
            if self.closed:
                break
        return actions

    def _handshake(self, request: Request) -> list[Action]:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in request.extra_headers}
        origin = headers.get("origin")
        # A browser's upgrade (it carries Origin) for a name the port is not known by: a page
        # whose DNS name was made to point here. Other clients reach brokers by names of their
        # own (a Kubernetes Service's), and no page can send their requests.
        if self._hosts is not None and origin is not None and not self._hosts.allows(request.host, self._local_address):
            return self._reject(403, f"this port is not known by the name {request.host!r} (host_names)")
        if not origin_allowed(origin, self._origins):
            return self._reject(403, f"origin {origin!r} is not allowed to connect (websocket_origins)")
        offered = list(request.subprotocols)
        chosen = next((p for p in offered if p in SUBPROTOCOLS), None)
        if offered and chosen is None:
            return self._reject(400, f"none of the subprotocols {', '.join(offered)} is STOMP or MQTT "
                                f"(offer one of {', '.join(SUBPROTOCOLS)})")
        self.opened = True
        if chosen == MQTT_SUBPROTOCOL:
            self.mqtt = self._binary = True
        return [Reply(self._ws.send(AcceptConnection(subprotocol=chosen))), Opened(request.target, chosen, origin)]

    def _reject(self, status: int, why: str) -> list[Action]:
        body = (why + "\n").encode("utf-8")
        head = self._ws.send(RejectConnection(status_code=status, has_body=True,
                                              headers=[(b"content-type", b"text/plain; charset=utf-8"),
                                                       (b"content-length", str(len(body)).encode())]))
        self.closed = True
        return [Reply(head + self._ws.send(RejectData(body))), Closed(status, why)]

    def _refuse_handshake(self, status: int, why: str) -> list[Action]:
        """Not a WebSocket upgrade we can read: a plain HTTP error (wsproto's state is spent)."""
        self.closed = True
        return [Reply(http_error(status, f"not a WebSocket upgrade: {why}")), Closed(status, why)]

    def _fail(self, code: int, why: str) -> list[Action]:
        self.closed = True
        try:
            data = self._ws.send(CloseConnection(code, why[:120]))
        except LocalProtocolError:
            data = b""
        return [Reply(data), Closed(code, why)]

    def send(self, data: bytes) -> bytes:
        """One WebSocket message carrying these STOMP bytes (b"" once closed)."""
        if not self.opened or self.closed:
            return b""
        if not self._binary and not self.mqtt:
            try:
                return self._ws.send(TextMessage(data.decode("utf-8")))
            except UnicodeDecodeError:
                pass
        return self._ws.send(BytesMessage(data))

    def close(self, code: int = NORMAL, reason: str = "") -> bytes:
        """Our close (the STOMP session ended): the close frame to write last."""
        if not self.opened or self.closed or self._ws.state is not ConnectionState.OPEN:
            self.closed = True
            return b""
        self.closed = True
        return self._ws.send(CloseConnection(code, reason[:120]))

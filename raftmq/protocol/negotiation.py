"""STOMP CONNECT negotiation, shared by the server's session and the client. Pure: strings in,
frozen values out, `ProtocolError` for what a server refuses.

- `negotiate_version`: the version a server picks from a CONNECT's `accept-version`.
- `parse_heart_beat` / `parse_heart_beat_leniently`: a `heart-beat` header as a `HeartBeat`
  offer; the server refuses a malformed one, the client reads it as "no heart-beats".
- `WEBSOCKET_SUBPROTOCOLS`: STOMP's names as a WebSocket subprotocol, newest first.
- `agree_heartbeats`: what one side does with its own offer and the peer's, as a
  `HeartbeatAgreement`. Both sides apply the same rule to the same two offers, so what one
  agrees to send is what the other agrees to expect.
"""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.errors import ProtocolError
from raftmq.protocol.frame import SUPPORTED_VERSIONS


@dataclass(frozen=True, slots=True)
class HeartBeat:
    """One side's `heart-beat` header "cx,cy": it can send every `send_ms` (cx) and wants to
    receive something every `receive_ms` (cy); 0 means never."""

    send_ms: int = 0
    receive_ms: int = 0

    def header(self) -> str:
        return f"{self.send_ms},{self.receive_ms}"


NO_HEART_BEAT = HeartBeat()

# STOMP over WebSocket (the names stompjs and Spring offer): the server picks the first of these
# the client offers, and raftmq's client offers them in this order.
WEBSOCKET_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")


@dataclass(frozen=True, slots=True)
class HeartbeatAgreement:
    """What one side of a connection agreed to: send something at least every `send_ms`, and
    expect something from the peer at least every `receive_ms`; 0 means never."""

    send_ms: int
    receive_ms: int


def negotiate_version(accept_version: str | None) -> str:
    """The highest version both sides speak, from a CONNECT frame's `accept-version` header.

    A missing header means a 1.0 client (STOMP 1.1 §"Protocol Negotiation").
    """
    if accept_version is None:
        return "1.0"
    offered = {item.strip() for item in accept_version.split(",")}
    for version in reversed(SUPPORTED_VERSIONS):
        if version in offered:
            return version
    supported = ",".join(SUPPORTED_VERSIONS)
    raise ProtocolError(
        f"Supported protocol versions are {supported}",
        detail=f"the client accepts {accept_version!r}; this server speaks {supported}",
    )


def parse_heart_beat(value: str | None) -> HeartBeat:
    """The `heart-beat` header "cx,cy" (two non-negative integers, blanks around each allowed);
    absent means no heart-beats. A server refuses anything else with `ProtocolError`."""
    if value is None:
        return NO_HEART_BEAT
    parts = value.split(",")
    # isdecimal, not isdigit: "²" is a digit that int() refuses.
    if len(parts) != 2 or not all(p.strip().isdecimal() for p in parts):
        raise ProtocolError("invalid heart-beat header", f"expected two non-negative integers 'cx,cy', got {value!r}")
    return HeartBeat(int(parts[0]), int(parts[1]))


def parse_heart_beat_leniently(value: str | None) -> HeartBeat:
    """The broker's `heart-beat` header as the client reads it: any two integers int() takes,
    a negative one meaning 0; anything else means no heart-beats (a client does not refuse a
    broker over it)."""
    if value is None:
        return NO_HEART_BEAT
    parts = value.split(",")
    if len(parts) != 2:
        return NO_HEART_BEAT
    try:
        send_ms, receive_ms = int(parts[0]), int(parts[1])
    except ValueError:
        return NO_HEART_BEAT
    return HeartBeat(max(send_ms, 0), max(receive_ms, 0))


def agree_heartbeats(ours: HeartBeat, theirs: HeartBeat) -> HeartbeatAgreement:
    """STOMP's rule: a side sends every max(its cx, the peer's cy) when both are non-zero, and
    expects something every max(its cy, the peer's cx) when both are non-zero; else never."""
    send_ms = max(ours.send_ms, theirs.receive_ms) if ours.send_ms > 0 and theirs.receive_ms > 0 else 0
    receive_ms = max(ours.receive_ms, theirs.send_ms) if ours.receive_ms > 0 and theirs.send_ms > 0 else 0
    return HeartbeatAgreement(send_ms, receive_ms)

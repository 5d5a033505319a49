"""STOMP CONNECT negotiation, shared by the server's session and the client: which version, and
how often each side sends heart-beats and expects them. Pure."""

from __future__ import annotations

from raftmq.errors import ProtocolError
from raftmq.protocol.frame import SUPPORTED_VERSIONS

HeartBeat = tuple[int, int]  # (cx, cy): can send every cx ms, wants to receive every cy ms; 0 = none


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
    """The `heart-beat` header "cx,cy" as two non-negative ints; absent means 0,0. A server
    refuses a malformed one (ProtocolError)."""
    if value is None:
        return 0, 0
    parts = value.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ProtocolError("invalid heart-beat header", f"expected two non-negative integers 'cx,cy', got {value!r}")
    return int(parts[0]), int(parts[1])


def parse_heart_beat_leniently(value: str | None) -> HeartBeat:
    """As `parse_heart_beat`, but a malformed value means no heart-beats (a client does not
    refuse a broker over it)."""
    try:
        return parse_heart_beat(value)
    except ProtocolError:
        return 0, 0


def agree_heartbeats(ours: HeartBeat, theirs: HeartBeat) -> tuple[int, int]:
    """(we send every ms, we expect something every ms), 0 meaning never. STOMP: each side
    uses the larger of what one can send and the other wants, when both are non-zero."""
    our_cx, our_cy = ours
    their_cx, their_cy = theirs
    send_ms = max(our_cx, their_cy) if our_cx > 0 and their_cy > 0 else 0
    receive_ms = max(our_cy, their_cx) if our_cy > 0 and their_cx > 0 else 0
    return send_ms, receive_ms

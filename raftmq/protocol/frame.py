"""The STOMP frame value shared by the codec, the server and the clients."""

from __future__ import annotations

from dataclasses import dataclass, field

from mypy_extensions import mypyc_attr

# Client frames (STOMP 1.2 §"Client Frames"); STOMP is the 1.1+ alias of CONNECT.
CLIENT_COMMANDS = frozenset(
    {"CONNECT", "STOMP", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "DISCONNECT"}
)
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
ALL_COMMANDS = CLIENT_COMMANDS | SERVER_COMMANDS

SUPPORTED_VERSIONS = ("1.0", "1.1", "1.2")

# raftmq's CONNECT header for a client that follows `not the leader` redirects (ours): with
# "true", a follower answers with the redirect instead of relaying the session to the leader.
REDIRECT_HEADER = "raftmq.redirect"
# What a follower adds to the CONNECT it relays: the leader then knows the client's socket is elsewhere.
RELAYED_HEADER = "raftmq.relayed"
# A session resumed at its group's leader (raftmq.server.stomp.adoption, raftmq.client.resume):
# the request (signed by a member), where the client's stream goes on, and the answer's CONNECTED.
RESUME_HEADER = "raftmq.resume"
RESUMED_AT_HEADER = "raftmq.resume-at"
RESUME_MAC_HEADER = "raftmq.resume-mac"
RESUME_OFFSET_HEADER = "raftmq.resume-offset"
ADOPTED_HEADER = "raftmq.adopted"


# Compiled (raftmq.compiled), so the clients' own frames (a failover Delivery) are Python subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass(slots=True)
class Frame:
    """One STOMP frame.

    `headers` keeps every header in wire order, repeats included, as decoded (unescaped)
    strings; STOMP says the first occurrence of a repeated header wins, which `get` honours.
    """

    command: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return default

    def header_dict(self) -> dict[str, str]:
        """Headers as a dict where the first occurrence of a name wins."""
        out: dict[str, str] = {}
        for key, value in self.headers:
            if key not in out:
                out[key] = value
        return out

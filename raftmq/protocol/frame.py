"""The STOMP frame value shared by the codec, the server and the clients."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from raftmq.protocol.header_block import pairs_of

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
# On MESSAGE and CONNECTED: the Raft term of the leader that wrote the frame (raftmq.client.terms
# drops a MESSAGE from a deposed leader by it).
TERM_HEADER = "raftmq-term"
# On CONNECTED from a node in a cluster of groups: its group's name (an embedded broker's link
# to a hub learns the hub's name so: raftmq.server.links.hub_links).
GROUP_HEADER = "raftmq-group"


# Compiled (raftmq.compiled), so the clients' own frames (a failover Delivery) are Python subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class Frame:
    """One STOMP frame.

    `headers` keeps every header in wire order, repeats included, as decoded (unescaped)
    strings; STOMP says the first occurrence of a repeated header wins, which `get` honours.

    A plain class with its own `__init__`, `__eq__` and `__repr__` rather than a dataclass:
    compiled, a dataclass's generated `__init__` still runs as Python code, once per frame
    read (0.19 against 0.05 µs)."""

    command: str
    body: bytes
    # A SEND whose header lines needed no unescaping (nearly every one): the lines as read, each
    # `name:value\n`, and the user headers' block (raftmq.protocol.header_block): those lines
    # without the transport ones. `headers` is then made from `text` when first asked for.
    text: str | None
    block: str | None
    _headers: list[tuple[str, str]] | None

    def __init__(self, command: str, headers: list[tuple[str, str]] | None = None, body: bytes = b"",
                 text: str | None = None, block: str | None = None) -> None:
        self.command = command
        self._headers = headers if headers is not None or text is not None else []
        self.body = body
        self.text = text
        self.block = block

    @property
    def headers(self) -> list[tuple[str, str]]:
        headers = self._headers
        if headers is None:
            headers = self._headers = list(pairs_of(self.text or ""))
        return headers

    @headers.setter
    def headers(self, value: list[tuple[str, str]]) -> None:
        self._headers = value
        self.text = self.block = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Frame)
        return self.command == other.command and self.headers == other.headers and self.body == other.body

    def __repr__(self) -> str:
        return f"Frame(command={self.command!r}, headers={self.headers!r}, body={self.body!r})"

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


def with_header_line(data: bytes, name: str, value: str) -> bytes:
    """`data`, a client's first bytes, with the line `name:value` added right after its first
    frame's command line (never escaped: the frame is a CONNECT, whose headers never are), every
    other byte unchanged; `data` as it is while its command line is not whole."""
    start = len(data) - len(data.lstrip(b"\r\n"))  # EOLs (heart-beats) before the frame
    end = data.find(b"\n", start)
    if end < 0:
        return data
    return data[:end + 1] + f"{name}:{value}\n".encode() + data[end + 1:]

"""What a follower's relay writes to the leader first: the client's bytes with its CONNECT
marked relayed (the leader then parks none of its sessions for the client itself to resume:
the client's socket is the follower's), and nothing else changed."""

from __future__ import annotations

from raftmq.config import NodeConfig
from raftmq.protocol.codec import FrameParser
from raftmq.server.stomp.relay_sides import mark_relayed, named_session
from raftmq.server.stomp.session import StompSession
from tests.server.test_stomp_session import NOW, Host, frame


def test_the_relayed_connect_carries_the_mark_and_everything_else_unchanged() -> None:
    connect = frame("CONNECT", {"accept-version": "1.2", "host": "x", "login": "a:b"})
    then = frame("SEND", {"destination": "/queue/a"}, b"body")
    marked = mark_relayed(b"\r\n\n" + connect + then)
    first, second = FrameParser(NodeConfig().limits, "1.2").feed(marked)
    assert first.get("raftmq.relayed") == "true" and first.get("login") == "a:b" and first.get("host") == "x"
    assert (second.command, second.body) == ("SEND", b"body")
    assert mark_relayed(b"CONNE") == b"CONNE"  # not a whole command line yet: left as it is
    session = StompSession(Host(), "s")
    session.receive(marked, NOW)
    assert session.via_relay
    direct = StompSession(Host(), "d")
    direct.receive(connect, NOW)
    assert not direct.via_relay


def test_the_session_id_is_read_from_the_leaders_connected() -> None:
    assert named_session(b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0") == "n1:a:1"
    assert named_session(b"CONNECTED\nversion:1.2\n") is None  # more may come
    assert named_session(b"ERROR\nmessage:x\n\n\0") == ""

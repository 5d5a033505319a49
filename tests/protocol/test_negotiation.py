"""CONNECT negotiation, shared by server and client."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.errors import ProtocolError
from raftmq.protocol.negotiation import (
    agree_heartbeats,
    negotiate_version,
    parse_heart_beat,
    parse_heart_beat_leniently,
)

beats = st.tuples(st.integers(0, 100_000), st.integers(0, 100_000))


@given(server=beats, client=beats)
def test_both_sides_agree_on_each_direction(server: tuple[int, int], client: tuple[int, int]) -> None:
    server_sends, server_expects = agree_heartbeats(server, client)
    client_sends, client_expects = agree_heartbeats(client, server)
    assert server_sends == client_expects and client_sends == server_expects


@given(ours=beats, theirs=beats)
def test_nobody_sends_more_often_than_either_asked(ours: tuple[int, int], theirs: tuple[int, int]) -> None:
    send, expect = agree_heartbeats(ours, theirs)
    assert send == 0 or send >= max(ours[0], theirs[1])
    assert expect == 0 or expect >= max(ours[1], theirs[0])
    assert (send == 0) == (ours[0] == 0 or theirs[1] == 0)


def test_spec_examples() -> None:
    assert agree_heartbeats((1000, 0), (0, 5000)) == (5000, 0)
    assert agree_heartbeats((0, 0), (10, 10)) == (0, 0)
    assert agree_heartbeats((100, 200), (300, 400)) == (400, 300)


def test_heart_beat_header_parsing() -> None:
    assert parse_heart_beat(None) == (0, 0)
    assert parse_heart_beat("10,20") == (10, 20)
    for bad in ("10", "a,b", "-1,5", "1,2,3"):
        with pytest.raises(ProtocolError):
            parse_heart_beat(bad)
        assert parse_heart_beat_leniently(bad) == (0, 0)


def test_version_is_the_highest_both_speak() -> None:
    assert negotiate_version(None) == "1.0"
    assert negotiate_version("1.0,1.1") == "1.1"
    assert negotiate_version("1.2, 1.1") == "1.2"
    with pytest.raises(ProtocolError):
        negotiate_version("2.0")

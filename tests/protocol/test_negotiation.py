"""CONNECT negotiation, shared by server and client (raftmq.protocol.negotiation)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.errors import ProtocolError
from raftmq.protocol.negotiation import (
    NO_HEART_BEAT,
    HeartBeat,
    HeartbeatAgreement,
    agree_heartbeats,
    negotiate_version,
    parse_heart_beat,
    parse_heart_beat_leniently,
)

offers = st.builds(HeartBeat, st.integers(0, 100_000), st.integers(0, 100_000))
# Headers as a broker or a client might write them, well-formed or not.
header_values = st.one_of(
    st.text(alphabet="0123456789,- +_.x²٥\t", max_size=12),
    st.builds(lambda a, b: f"{a},{b}", st.integers(-10, 10**6), st.integers(-10, 10**6)),
    st.text(max_size=8),
)


def _original_client_rule(ours: tuple[int, int], theirs: str) -> tuple[int, int]:
    """The client's rule before it moved here, kept as the oracle for "behaviour unchanged"."""
    try:
        their_cx, their_cy = (int(part.strip()) for part in theirs.split(","))
    except ValueError:
        their_cx = their_cy = 0
    our_cx, our_cy = ours
    send_ms = max(our_cx, their_cy) if our_cx > 0 and their_cy > 0 else 0
    receive_ms = max(our_cy, their_cx) if our_cy > 0 and their_cx > 0 else 0
    return send_ms, receive_ms


@given(server=offers, client=offers)
def test_what_one_side_sends_the_other_expects(server: HeartBeat, client: HeartBeat) -> None:
    at_server = agree_heartbeats(server, client)
    at_client = agree_heartbeats(client, server)
    assert at_server.send_ms == at_client.receive_ms
    assert at_client.send_ms == at_server.receive_ms


@given(server=offers, client=offers)
def test_server_and_client_agree_through_their_headers(server: HeartBeat, client: HeartBeat) -> None:
    # Each side reads the other's header with its own parser, as on the wire.
    at_server = agree_heartbeats(server, parse_heart_beat(client.header()))
    at_client = agree_heartbeats(client, parse_heart_beat_leniently(server.header()))
    assert at_server.send_ms == at_client.receive_ms
    assert at_client.send_ms == at_server.receive_ms


@given(ours=offers, theirs=offers)
def test_nobody_sends_more_often_than_either_asked(ours: HeartBeat, theirs: HeartBeat) -> None:
    agreed = agree_heartbeats(ours, theirs)
    assert agreed.send_ms == 0 or agreed.send_ms >= max(ours.send_ms, theirs.receive_ms)
    assert agreed.receive_ms == 0 or agreed.receive_ms >= max(ours.receive_ms, theirs.send_ms)
    assert (agreed.send_ms == 0) == (ours.send_ms == 0 or theirs.receive_ms == 0)
    assert (agreed.receive_ms == 0) == (ours.receive_ms == 0 or theirs.send_ms == 0)


@given(ours=st.tuples(st.integers(-5, 100_000), st.integers(-5, 100_000)), theirs=header_values)
def test_the_client_reads_the_broker_as_it_always_did(ours: tuple[int, int], theirs: str) -> None:
    agreed = agree_heartbeats(HeartBeat(*ours), parse_heart_beat_leniently(theirs))
    assert (agreed.send_ms, agreed.receive_ms) == _original_client_rule(ours, theirs)


@given(value=header_values)
def test_the_server_parses_or_refuses(value: str) -> None:
    try:
        offer = parse_heart_beat(value)
    except ProtocolError as exc:
        assert exc.message == "invalid heart-beat header"
    else:
        assert offer.send_ms >= 0 and offer.receive_ms >= 0
        assert parse_heart_beat_leniently(value) == offer


def test_spec_examples() -> None:
    assert agree_heartbeats(HeartBeat(1000, 0), HeartBeat(0, 5000)) == HeartbeatAgreement(5000, 0)
    assert agree_heartbeats(NO_HEART_BEAT, HeartBeat(10, 10)) == HeartbeatAgreement(0, 0)
    assert agree_heartbeats(HeartBeat(100, 200), HeartBeat(300, 400)) == HeartbeatAgreement(400, 300)


def test_heart_beat_header_parsing() -> None:
    assert parse_heart_beat(None) == NO_HEART_BEAT
    assert parse_heart_beat("10,20") == HeartBeat(10, 20)
    assert parse_heart_beat(" 10 , 20 ") == HeartBeat(10, 20)
    assert HeartBeat(10, 20).header() == "10,20"
    for bad in ("10", "a,b", "-1,5", "1,2,3", "²,1", ""):
        with pytest.raises(ProtocolError):
            parse_heart_beat(bad)
    for garbage in ("10", "a,b", "1,2,3", "²,1", "", "1.5,2"):
        assert parse_heart_beat_leniently(garbage) == NO_HEART_BEAT
    assert parse_heart_beat_leniently(None) == NO_HEART_BEAT
    assert parse_heart_beat_leniently("-1,5") == HeartBeat(0, 5)  # negative: none that way


def test_results_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        HeartBeat(1, 2).send_ms = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        HeartbeatAgreement(1, 2).receive_ms = 3  # type: ignore[misc]


def test_version_is_the_highest_both_speak() -> None:
    assert negotiate_version(None) == "1.0"
    assert negotiate_version("1.0,1.1") == "1.1"
    assert negotiate_version("1.2, 1.1") == "1.2"
    with pytest.raises(ProtocolError):
        negotiate_version("2.0")

"""A follower that stops parks the sessions it relays at the leader, and their clients resume them
there, as a leader's own clients do (raftmq.server.stomp.mobility, `_follower_farewell`; the
leader's end: raftmq.server.stomp.serving, `relay_goes`): machine level."""

from __future__ import annotations

import pytest

from raftmq.server.stomp import serving as sv
from raftmq.server.stomp.mobility import Kind, RelayMachine, State
from raftmq.server.stomp.relay_events import (
    ClientData,
    ClientEof,
    ClientReading,
    Connected,
    Count,
    Farewell,
    HalfCloseUpstream,
    Log,
    Release,
    SendOff,
    ToClient,
    UpstreamData,
    UpstreamLost,
)

SECRET = "s3cret"
CONNECTED = b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0"


def relaying(**options: object) -> RelayMachine:
    """A follower's relay (n3) of its client's session, served by the leader n1."""
    settings: dict[str, object] = {"version": "1.2", "secret": SECRET, "own_address": "n3:1", **options}
    machine = RelayMachine(Kind.FOLLOWER, b"CONNECT\n\n\0", **settings)  # type: ignore[arg-type]
    machine.start()
    machine.handle(Connected("n1:1", half_close=True))
    machine.handle(UpstreamData(CONNECTED, 1.0, 1000))
    machine.handle(ClientData(b"SEND\n\n\0"))
    assert machine.state.value == "relaying"
    return machine


def actions(decisions: list[object]) -> list[object]:
    return [decision for decision in decisions if not isinstance(decision, (Log, Count))]


def test_a_stopping_followers_relay_asks_the_leader_to_park_then_sends_its_client_off_to_resume_there() -> None:
    machine = relaying()
    sent = machine.stream_bytes
    assert machine.handle(Farewell(2000)) == [ClientReading(False),
                                              Release("n1:1", "n1:a:1", HalfCloseUpstream(), parks=True)]
    assert machine.state is State.FAREWELL
    assert machine.handle(ClientData(b"ACK\n")) == []  # a read under way: held, the client sends it again
    assert machine.handle(UpstreamData(b"RECEIPT\n\n\0", 2.1, 2100)) == [ToClient(b"RECEIPT\n\n\0")]
    [send_off] = actions(machine.handle(UpstreamLost(2200)))  # the leader parked it and closed
    assert isinstance(send_off, SendOff) and machine.state is State.CLOSING
    frame = send_off.frame
    assert b"message:not the leader" in frame and b"leader:n1\\c1" in frame
    assert f"raftmq.resume-offset:{sent}".encode() in frame and b"raftmq.resume:n1\\ca\\c1" in frame


@pytest.mark.parametrize("why", ["tls", "eof", "no secret", "connecting"])
def test_a_followers_relay_that_cannot_park_closes_with_the_node(why: str) -> None:
    if why == "connecting":
        machine = RelayMachine(Kind.FOLLOWER, b"CONNECT\n\n\0", version="1.2", secret=SECRET, own_address="n3:1")
        machine.start()
    else:
        machine = relaying(secret=None) if why == "no secret" else relaying()
    if why == "tls":
        machine.half_close = False
    elif why == "eof":
        machine.handle(ClientEof())
    before = machine.state
    assert machine.handle(Farewell(2000)) == [] and machine.state is before and not machine.parks


def test_the_leader_parks_at_once_a_session_whose_followers_relay_said_it_goes() -> None:
    machine = sv.ServingMachine()
    decisions = machine.handle(sv.HalfClosed(True, via_relay=True, hops=0, transferring=False, relay_goes=True))
    assert decisions == [sv.Park()] and machine.state is sv.Serving.PARKING
    unsaid = sv.ServingMachine()  # no notice: the half-close may be a move, or the client's own
    assert unsaid.handle(sv.HalfClosed(True, via_relay=True, hops=0, transferring=False)) == [
        sv.AwaitNotice(sv.MOVE_NOTICE_SECONDS)]

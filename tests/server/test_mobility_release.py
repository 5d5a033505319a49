"""A relay holding the client's own socket of a session adopted elsewhere says so when its client
ends (raftmq.server.stomp.mobility, `Release`), and the serving machine then ends the session
instead of parking it (raftmq.server.stomp.serving, `client_gone`): machine level."""

from __future__ import annotations

import pytest

from raftmq.protocol.codec import first_frame
from raftmq.server.stomp import serving as sv
from raftmq.server.stomp.adoption import PARK, RELEASE, adopted_frame, read_adoption, release_frame
from raftmq.server.stomp.mobility import Kind, RelayMachine, State
from raftmq.server.stomp.relay_events import (
    ClientEof,
    ClientLost,
    CloseUpstream,
    Connected,
    Count,
    Ended,
    HalfCloseUpstream,
    Log,
    Release,
    UpstreamData,
)

SECRET = "s3cret"


def handed_over(**options: object) -> RelayMachine:
    """A deposed leader's relay of its own client's session, adopted by n2."""
    machine = RelayMachine(Kind.HAND_OVER, b"TICKET", version="1.2", secret=SECRET, own_address="n1:1",
                           target="n2:1", session_id="n1:a:1", refusal=b"ERROR\n\n\0", **options)  # type: ignore[arg-type]
    machine.start()
    machine.handle(Connected("n2:1", half_close=True))
    machine.handle(UpstreamData(adopted_frame("n1:a:1"), 1.0, 1000))
    assert machine.state is State.RELAYING
    return machine


def actions(decisions: list[object]) -> list[object]:
    return [decision for decision in decisions if not isinstance(decision, (Log, Count))]


def test_a_clients_half_close_is_announced_before_it_is_passed_on() -> None:
    machine = handed_over()
    assert machine.handle(ClientEof()) == [Release("n2:1", "n1:a:1", HalfCloseUpstream())]
    assert machine.handle(ClientLost()) == [CloseUpstream(), Ended(session_lost=True)]  # said once


def test_a_clients_reset_is_announced_before_the_upstream_closes() -> None:
    machine = handed_over()
    assert machine.handle(ClientLost()) == [Release("n2:1", "n1:a:1", CloseUpstream()), Ended(session_lost=True)]


def test_a_relay_of_another_members_relay_announces_nothing_its_half_close_may_be_a_move() -> None:
    machine = handed_over(own_socket=False)
    assert machine.handle(ClientEof()) == [HalfCloseUpstream()]


def test_a_followers_relay_announces_nothing_its_leader_serves_the_session_unadopted() -> None:
    machine = RelayMachine(Kind.FOLLOWER, b"CONNECT\n\n\0", version="1.2", secret=SECRET, own_address="n3:1")
    machine.start()
    machine.handle(Connected("n1:1", half_close=True))
    machine.handle(UpstreamData(b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0", 1.0, 1000))
    assert machine.handle(ClientEof()) == [HalfCloseUpstream()]


@pytest.mark.parametrize(("parks", "notice"), [(False, RELEASE), (True, PARK)])
def test_the_notice_is_a_signed_request_the_leader_reads_as_a_release_or_as_the_relay_going(
        parks: bool, notice: str) -> None:
    parsed = first_frame(release_frame("n1:a:1", SECRET, 1000, parks=parks))
    assert parsed is not None
    request = read_adoption(parsed[0], SECRET, 1000)
    assert (request.session_id, request.ticket, request.offset, request.notice) == ("n1:a:1", None, None, notice)


def test_a_half_close_said_to_be_the_clients_own_ends_an_adopted_session_rather_than_parking_it() -> None:
    machine = sv.ServingMachine()
    decisions = machine.handle(sv.HalfClosed(True, via_relay=False, hops=1, transferring=False, client_gone=True))
    assert decisions == [sv.EndInput()] and machine.state is sv.Serving.ENDING
    waiting = sv.ServingMachine()
    waiting.handle(sv.HalfClosed(True, via_relay=False, hops=1, transferring=True))
    assert waiting.handle(sv.NoticeOver(True, 1, client_gone=True)) == [sv.EndInput()]

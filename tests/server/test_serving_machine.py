"""The served session's mobility machine (raftmq.server.stomp.serving): what a half-close, the
leadership going and the notice deadline decide, and every move in its table."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftmq.server.stomp import serving as sv
from raftmq.server.stomp.adoption import MAX_HOPS


def machine_in(*events: sv.ServingEvent) -> sv.ServingMachine:
    machine = sv.ServingMachine()
    for event in events:
        machine.handle(event)
    return machine


def test_a_clients_own_half_close_ends_its_input() -> None:
    machine = sv.ServingMachine()
    assert machine.handle(sv.HalfClosed(True, via_relay=False, hops=0, transferring=False)) == [sv.EndInput()]
    assert machine.state is sv.Serving.ENDING and not machine.eof_pending


def test_a_relay_of_a_session_adopted_here_half_closes_to_move_closer_and_it_is_parked() -> None:
    machine = sv.ServingMachine()
    assert machine.handle(sv.HalfClosed(True, via_relay=False, hops=1, transferring=False)) == [sv.Park()]
    assert machine.handle(sv.ParkDone()) == [] and machine.state is sv.Serving.ENDING


def test_a_followers_relay_half_closing_waits_for_the_leadership_to_go_then_is_handed_over() -> None:
    machine = sv.ServingMachine()
    decisions = machine.handle(sv.HalfClosed(True, via_relay=True, hops=0, transferring=False))
    assert decisions == [sv.AwaitNotice(sv.MOVE_NOTICE_SECONDS)] and machine.eof_pending
    assert machine.handle(sv.LeadershipGone("n2:1", True, 0)) == [sv.Hold(), sv.HandOver("n2:1")]
    assert machine.handle(sv.NoticeOver(True, 0)) == []  # the hand-over is under way
    assert machine.handle(sv.HandedOver()) == [] and machine.handed_over


@pytest.mark.parametrize(("hops", "then"), [(0, sv.EndInput()), (1, sv.Park())])
def test_a_half_close_unclaimed_by_a_leader_change_is_the_clients_own_or_a_move_closer(
        hops: int, then: sv.ServingDecision) -> None:
    machine = machine_in(sv.HalfClosed(True, via_relay=True, hops=hops, transferring=True))
    assert machine.handle(sv.NoticeOver(True, hops)) == [then]


def test_a_half_close_read_while_the_session_is_handed_over_goes_with_it() -> None:
    """A read under way as the hand-over paused reading brings the client's half-close: the
    relay to the successor is built with it (`eof_pending`) and passes it on."""
    machine = machine_in(sv.LeadershipGone("n2:1", True, 0))
    assert not machine.eof_pending
    assert machine.handle(sv.HalfClosed(True, via_relay=False, hops=0, transferring=True)) == []
    assert machine.eof_pending and machine.state is sv.Serving.HANDING_OVER


def test_a_session_that_cannot_be_handed_over_is_ended_by_the_caller() -> None:
    assert sv.ServingMachine().handle(sv.LeadershipGone("n2:1", False, 0)) == [sv.CannotHandOver()]
    assert sv.ServingMachine().handle(sv.LeadershipGone("n2:1", True, MAX_HOPS)) == [sv.CannotHandOver()]
    under_way = machine_in(sv.LeadershipGone("n2:1", True, 0))
    assert under_way.handle(sv.LeadershipGone("n2:1", True, 0)) == []  # asked again as the node stops


def test_an_event_outside_the_table_is_refused() -> None:
    with pytest.raises(sv.ServingError, match="in state serving got ParkDone"):
        sv.ServingMachine().handle(sv.ParkDone())
    handed = machine_in(sv.LeadershipGone("n2:1", True, 0), sv.HandedOver())
    with pytest.raises(sv.ServingError, match="in state handed-over got HalfClosed"):
        handed.handle(sv.HalfClosed(True, via_relay=True, hops=0, transferring=False))


def test_a_move_outside_the_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sv.SERVING_TRANSITIONS, (sv.Serving.SERVING, sv.HalfClosed),
                        frozenset({sv.Serving.AWAITING_MOVE, sv.Serving.PARKING}))
    with pytest.raises(sv.ServingError, match="moved to ending on HalfClosed"):
        sv.ServingMachine().handle(sv.HalfClosed(False, via_relay=False, hops=0, transferring=False))


def test_the_docs_draw_the_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "mobility.md").read_text()
    assert "```mermaid\n" + sv.diagram() + "```" in text

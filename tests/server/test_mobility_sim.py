"""The mobility simulator (raftmq.testing.mobility_sim) drives the production machines under
seeded interleavings of a leader change, and finds the races it exists for."""

from __future__ import annotations

from typing import Any

import pytest

from raftmq.server.stomp import serving as sv
from raftmq.server.stomp.mobility import RelayMachine
from raftmq.server.stomp.relay_events import Decision
from raftmq.testing import mobility_sim
from raftmq.testing.mobility_sim import MobilityViolation, check, run

SEEDS = range(300)


def violations(**planted: Any) -> list[int]:
    found = []
    for seed in SEEDS:
        try:
            check(run(seed, **planted))
        except MobilityViolation:
            found.append(seed)
    return found


def test_every_seed_keeps_the_session_and_every_frame_once() -> None:
    assert violations() == []


def test_the_seeds_cover_both_orders_of_learning() -> None:
    """The follower's relay moves before the old leader hands the session over, and after."""
    orders = set()
    for seed in SEEDS:
        outcome = run(seed)
        events = [line.split()[2] for line in outcome.trace]
        if outcome.client_closed:
            continue
        assert "client.relay_moved" in events, seed
        orders.add(events.index("client.relay_moving") < events.index("client.handed_over"))
    assert orders == {True, False}


class MovedBeforeTheLeaderKnew(sv.ServingMachine):
    """The rule before the fix: a relayed connection's half-close ends its input at once, although
    the relay may be moving to a leader this node does not know of yet."""

    def _decide(self, event: sv.ServingEvent) -> list[sv.ServingDecision]:
        if isinstance(event, sv.HalfClosed) and self.state is sv.Serving.SERVING and not event.hops:
            self.state = sv.Serving.ENDING
            return [sv.EndInput()]
        return super()._decide(event)


def test_the_race_ci_found_is_found_without_its_fix() -> None:
    assert len(violations(serving_machine=MovedBeforeTheLeaderKnew)) > len(SEEDS) // 10


class DropsWhatWaited(RelayMachine):
    """A relay that forgets what its client sent while the session moved."""

    def _moved(self) -> list[Decision]:
        self.held = b""
        return super()._moved()


def test_a_frame_lost_in_a_move_is_found() -> None:
    with pytest.raises(MobilityViolation, match="committed"):
        for seed in SEEDS:
            check(run(seed, relay_machine=DropsWhatWaited))


def test_the_command_line_counts_the_seeds_that_held(capsys: pytest.CaptureFixture[str]) -> None:
    assert mobility_sim.main(["--seeds", "20"]) == 0
    assert "20 of 20 seeds held" in capsys.readouterr().out

"""The pure pre-vote / stickiness / lease decisions (raftmq.replication.leadership)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.replication.leadership import FOREVER, LEASE_FRACTION, NO_LEASE, Leadership, LogTip

MIN = 0.3  # minimum election timeout (s)


def test_log_tip_comparison_is_raft_up_to_date() -> None:
    assert LogTip(3, 1).at_least(LogTip(2, 100))
    assert LogTip(2, 10).at_least(LogTip(2, 10))
    assert not LogTip(2, 9).at_least(LogTip(2, 10))
    assert not LogTip(1, 100).at_least(LogTip(2, 1))


def test_a_follower_in_contact_with_its_leader_refuses_pre_votes_and_votes() -> None:
    voter = Leadership(3, MIN)
    voter.heard_from_leader(now=10.0)
    tip = LogTip(1, 5)
    assert not voter.grants_prevote(10.0 + MIN - 0.001, 1, tip, 2, tip)
    assert voter.ignores_vote_request(10.0 + MIN - 0.001, handover=False)
    # ...unless the leader itself asked for the election (leadership transfer)
    assert not voter.ignores_vote_request(10.0 + 0.01, handover=True)
    # a whole minimum election timeout later the leader is presumed gone
    assert voter.grants_prevote(10.0 + MIN, 1, tip, 2, tip)
    assert not voter.ignores_vote_request(10.0 + MIN, handover=False)


def test_pre_votes_need_an_up_to_date_log_and_a_term_not_behind() -> None:
    voter = Leadership(3, MIN)
    mine = LogTip(2, 10)
    assert voter.grants_prevote(0.0, 2, mine, 3, LogTip(2, 10))
    assert not voter.grants_prevote(0.0, 2, mine, 3, LogTip(2, 9))  # shorter log
    assert not voter.grants_prevote(0.0, 2, mine, 3, LogTip(1, 50))  # older last term
    assert not voter.grants_prevote(0.0, 5, mine, 3, LogTip(2, 10))  # would stand below our term


def test_a_pre_vote_round_is_won_once_by_a_majority_of_its_own_term() -> None:
    candidate = Leadership(5, MIN)
    term = candidate.start_prevote(current_term=7)
    assert term == 8
    assert not candidate.prevote_answer("a", term, granted=True)  # 2 of 5
    assert not candidate.prevote_answer("b", term, granted=False)
    assert not candidate.prevote_answer("c", term - 1, granted=True)  # an earlier round's answer
    assert not candidate.prevote_answer("a", term, granted=True)  # counted once
    assert candidate.prevote_answer("d", term, granted=True)  # 3 of 5
    assert not candidate.prevote_answer("e", term, granted=True)  # reported once
    assert candidate.take_prevote_win() and not candidate.take_prevote_win()


def test_hearing_from_a_leader_cancels_the_round_under_way() -> None:
    candidate = Leadership(3, MIN)
    term = candidate.start_prevote(current_term=1)
    candidate.heard_from_leader(now=1.0)
    assert not candidate.prevote_answer("a", term, granted=True)  # late: must not stand now
    assert not candidate.take_prevote_win()


def test_the_lease_runs_from_the_latest_send_time_a_majority_echoed() -> None:
    leader = Leadership(5, MIN)
    leader.became_leader(now=100.0)
    assert leader.lease_expiry == NO_LEASE
    assert leader.echoed("a", 100.01) == NO_LEASE  # us + 1 of 5: no majority yet
    expiry = leader.echoed("b", 100.02)  # us + a + b: the older of the two marks counts
    assert expiry == pytest.approx(100.01 + MIN * LEASE_FRACTION)
    assert leader.echoed("a", 100.05) == pytest.approx(100.02 + MIN * LEASE_FRACTION)
    assert leader.echoed("b", 100.03) == pytest.approx(100.03 + MIN * LEASE_FRACTION)
    # an old, reordered echo never moves it back
    assert leader.echoed("a", 100.04) == pytest.approx(100.03 + MIN * LEASE_FRACTION)


def test_echoes_of_an_earlier_leadership_or_after_a_handover_do_not_count() -> None:
    leader = Leadership(3, MIN)
    leader.became_leader(now=50.0)
    assert leader.echoed("a", 49.9) == NO_LEASE  # sent while we led before, answered late
    assert leader.echoed("a", 50.1) > 50.1
    leader.handing_over()
    assert leader.lease_expiry == NO_LEASE
    assert leader.echoed("a", 50.2) == NO_LEASE
    leader.stepped_down()
    assert leader.echoed("a", 50.3) == NO_LEASE


def test_a_group_of_one_always_holds_its_lease() -> None:
    solo = Leadership(1, MIN)
    solo.became_leader(now=1.0)
    assert solo.lease_expiry == FOREVER and solo.in_contact(1e9)


def test_a_new_leader_ignores_votes_for_an_election_timeout_then_only_under_its_lease() -> None:
    leader = Leadership(3, MIN)
    leader.became_leader(now=0.0)
    assert leader.ignores_vote_request(MIN - 0.01, handover=False)
    assert not leader.ignores_vote_request(MIN + 0.01, handover=False)  # no majority answered
    leader.echoed("a", 1.0)
    assert leader.ignores_vote_request(1.0 + MIN * LEASE_FRACTION - 0.01, handover=False)


@given(
    members=st.integers(min_value=2, max_value=7),
    echoes=st.lists(st.tuples(st.integers(min_value=0, max_value=6), st.floats(min_value=0.0, max_value=10.0)),
                    max_size=40),
)
def test_no_voter_of_a_majority_behind_a_lease_grants_before_it_ends(members: int,
                                                                     echoes: list[tuple[int, float]]) -> None:
    """The safety argument, checked: whenever a lease is granted, a majority (leader included)
    received an append-entries at or after `expiry - lease_for`, and a voter that received one
    at time t grants no vote before t + MIN > expiry."""
    leader = Leadership(members, MIN)
    leader.became_leader(now=0.0)
    latest: dict[int, float] = {}
    for follower, mark in echoes:
        follower %= members - 1
        expiry = leader.echoed(follower, mark)
        latest[follower] = max(latest.get(follower, 0.0), mark)
        if expiry == NO_LEASE:
            continue
        start = expiry - MIN * LEASE_FRACTION
        heard = [t for t in latest.values() if t >= start - 1e-9]
        assert 1 + len(heard) > members / 2
        for t in heard:
            voter = Leadership(members, MIN)
            voter.heard_from_leader(t)
            assert voter.ignores_vote_request(expiry, handover=False)


def test_granting_a_pre_vote_ends_our_own_round() -> None:
    # Two members whose timers fired together (a group starting up) must not both stand.
    member = Leadership(3, MIN)
    term = member.start_prevote(current_term=0)
    member.stand_aside()
    assert not member.prevote_answer("a", term, granted=True)
    assert not member.take_prevote_win()

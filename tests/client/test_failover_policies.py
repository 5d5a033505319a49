"""Connection load-balancing policies, deterministic through a seeded `random.Random`."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from raftmq.client.policies import (
    POLICY_NAMES,
    FirstElementPolicy,
    RandomPolicy,
    RandomStickyPolicy,
    RoundRobinPolicy,
    canonical_policy_name,
    make_policy,
    rotated,
)


def test_first_element_always_picks_zero() -> None:
    policy = make_policy("first-element", random.Random(1))
    assert isinstance(policy, FirstElementPolicy)
    assert [policy.select(5) for _ in range(10)] == [0] * 10


def test_round_robin_starts_at_random_then_walks_in_turn() -> None:
    start = random.Random(7).randrange(4)
    policy = make_policy("round-robin", random.Random(7))
    assert isinstance(policy, RoundRobinPolicy)
    picks = [policy.select(4) for _ in range(9)]
    assert picks == [(start + i) % 4 for i in range(9)]
    # Different seeds start at different places, so clients spread over the list.
    starts = {make_policy("round-robin", random.Random(seed)).select(4) for seed in range(40)}
    assert starts == {0, 1, 2, 3}


def test_random_picks_anew_each_time_reproducibly() -> None:
    expected_source = random.Random(3)
    expected = [expected_source.randrange(3) for _ in range(300)]
    policy = make_policy("random", random.Random(3))
    assert isinstance(policy, RandomPolicy)
    picks = [policy.select(3) for _ in range(300)]
    assert picks == expected
    assert set(Counter(picks)) == {0, 1, 2} and min(Counter(picks).values()) > 60


def test_random_sticky_keeps_its_first_random_choice() -> None:
    first = random.Random(11).randrange(6)
    policy = make_policy("random-sticky", random.Random(11))
    assert isinstance(policy, RandomStickyPolicy)
    assert [policy.select(6) for _ in range(20)] == [first] * 20
    choices = {make_policy("random-sticky", random.Random(seed)).select(6) for seed in range(60)}
    assert len(choices) == 6


def test_random_sticky_rechooses_when_the_list_shrinks_below_its_choice() -> None:
    policy = RandomStickyPolicy(random.Random(0))
    while (chosen := policy.select(10)) < 5:
        policy = RandomStickyPolicy(random.Random(chosen + 100))
    again = policy.select(3)
    assert 0 <= again < 3
    assert policy.select(3) == again


def test_policy_names() -> None:
    assert POLICY_NAMES == ("round-robin", "random", "random-sticky", "first-element")
    assert canonical_policy_name("RoundRobinConnectionLoadBalancingPolicy") == "round-robin"
    assert canonical_policy_name(
        "org.apache.activemq.artemis.api.core.client.loadbalance.RandomConnectionLoadBalancingPolicy"
    ) == "random"
    with pytest.raises(ValueError, match="choose one of"):
        make_policy("least-loaded")
    with pytest.raises(ValueError, match="at least one candidate"):
        FirstElementPolicy().select(0)


def test_rotation_visits_every_item_once_from_the_start_index() -> None:
    assert rotated(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert rotated(["a", "b", "c"], 5) == ["c", "a", "b"]
    assert rotated([], 3) == []

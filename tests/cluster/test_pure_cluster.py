"""The pure cluster model: address filters, load balancing, adverts and routes, route headers."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raftmq.routing.addresses import AddressFilter
from raftmq.routing.balance import Candidate, choose
from raftmq.routing.bindings import Advert, Binding, advert_for, decode_advert, encode_advert, routes, summarise
from raftmq.routing.cluster_connection import OFF, OFF_WITH_REDISTRIBUTION, ON_DEMAND, STRICT, RetryPolicy
from raftmq.routing.route import dedup_id, is_internal, parse_route, sf_queue

# -- address filters ------------------------------------------------------------------------


def test_an_empty_address_covers_every_destination_but_internal_ones() -> None:
    everything = AddressFilter.parse("")
    assert everything.covers("/queue/orders") and everything.covers("/topic/prices.eu")
    assert not everything.covers(sf_queue("g2")) and not everything.covers("/queue/$.raftmq.cluster")


def test_includes_excludes_and_wildcards() -> None:
    address = AddressFilter.parse("orders.>, prices.*, !orders.local.>")
    assert address.covers("/queue/orders.eu") and address.covers("/topic/orders.eu.urgent")
    assert address.covers("/topic/prices.fx") and not address.covers("/topic/prices.fx.spot")
    assert not address.covers("/queue/orders.local.x") and not address.covers("/queue/other")
    only_excludes = AddressFilter.parse("!audit")
    assert only_excludes.covers("/queue/a") and not only_excludes.covers("/queue/audit")


@pytest.mark.parametrize("text", ["orders.>.x", "a..b", "a*"])
def test_a_bad_pattern_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        AddressFilter.parse(text)


def test_a_pattern_naming_its_kind_covers_that_kind_only() -> None:
    address = AddressFilter.parse("/queue/orders.>, !/topic/orders.audit")
    assert address.covers("/queue/orders.eu") and not address.covers("/topic/orders.eu")
    everything_but = AddressFilter.parse("!/topic/orders.audit")
    assert everything_but.covers("/queue/orders.audit") and not everything_but.covers("/topic/orders.audit")
    with pytest.raises(ValueError):
        AddressFilter.parse("/queue/a.>.b")


# -- load balancing -------------------------------------------------------------------------


def here(takers: int = 0) -> Candidate:
    return Candidate("g1", takers, 0)


def there(group: str, takers: int = 0, hops: int = 1) -> Candidate:
    return Candidate(group, takers, hops)


def test_off_and_off_with_redistribution_keep_messages_local() -> None:
    for policy in (OFF, OFF_WITH_REDISTRIBUTION):
        assert choose(policy, here(), [there("g2", 1)], 0) == ("g1", False)


def test_strict_round_robins_over_every_group_with_the_queue() -> None:
    remote = [there("g3"), there("g2")]
    picks = [choose(STRICT, here(), remote, turn)[0] for turn in range(6)]
    assert picks == ["g1", "g2", "g3"] * 2


def test_on_demand_round_robins_over_matching_consumers_only() -> None:
    assert choose(ON_DEMAND, here(), [there("g2"), there("g3")], 5) == ("g1", False)  # none: local
    assert choose(ON_DEMAND, here(), [there("g2", 1), there("g3")], 5) == ("g2", False)
    picks = [choose(ON_DEMAND, here(1), [there("g2", 1), there("g3")], turn)[0] for turn in range(4)]
    assert picks == ["g1", "g2", "g1", "g2"]


def test_conduit_subscriptions_give_a_group_one_turn_and_without_them_one_per_consumer() -> None:
    # ActiveMQ Classic's example: one consumer here, two on the other broker, 30 messages.
    remote = [there("g2", 2)]
    conduit = Counter(choose(ON_DEMAND, here(1), remote, turn)[0] for turn in range(30))
    assert conduit == {"g1": 15, "g2": 15}
    per_consumer = Counter(choose(ON_DEMAND, here(1), remote, turn, conduit=False)[0] for turn in range(30))
    assert per_consumer == {"g1": 10, "g2": 20}  # 10 to each of the three consumers


def test_prefer_local_keeps_the_nearest_groups_with_a_consumer() -> None:
    remote = [there("g2", 1, hops=1), there("g3", 3, hops=2)]
    assert {choose(ON_DEMAND, here(1), remote, turn, prefer_local=True)[0] for turn in range(6)} == {"g1"}
    assert {choose(ON_DEMAND, here(0), remote, turn, prefer_local=True)[0] for turn in range(6)} == {"g2"}
    assert {choose(ON_DEMAND, here(1), remote, turn)[0] for turn in range(6)} == {"g1", "g2", "g3"}


@given(st.integers(0, 10_000),
       st.lists(st.tuples(st.sampled_from(["g2", "g3", "g4"]), st.integers(0, 3), st.integers(1, 3)),
                unique_by=lambda t: t[0]),
       st.booleans(), st.booleans())
def test_a_choice_is_always_a_candidate(turn: int, remote: list[tuple[str, int, int]], conduit: bool,
                                        prefer_local: bool) -> None:
    candidates = [Candidate(*item) for item in remote]
    for policy in (STRICT, ON_DEMAND):
        target, _ = choose(policy, here(turn % 2), candidates, turn, conduit=conduit, prefer_local=prefer_local)
        allowed = {"g1"} | {c.group for c in candidates if c.takers or policy == STRICT}
        assert target in allowed


def test_the_retry_back_off_grows_to_its_ceiling() -> None:
    retry = RetryPolicy(100, 2.0, 1000, -1)
    assert [retry.delay_ms(i) for i in range(6)] == [100, 200, 400, 800, 1000, 1000]


# -- adverts and routes ---------------------------------------------------------------------


def _advert(sender: str, position: int, groups: dict[str, int], bindings: list[tuple[str, str, int, int]]) -> Advert:
    return Advert(sender, position, tuple(sorted(groups.items())),
                  tuple(Binding(d, g, h, ((None, n),) if n else ()) for d, g, h, n in bindings))


def test_an_advert_carries_own_bindings_at_one_hop_and_learned_ones_one_further() -> None:
    learned = {"g3": _advert("g3", 7, {"g3": 1, "g4": 2}, [("/queue/a", "g3", 1, 1), ("/queue/b", "g4", 2, 1)])}
    advert = advert_for("g2", "g1", 10, {"/queue/a": ((None, 2),)}, learned, lambda d: 3)
    assert advert.sender == "g2" and advert.position == 10
    assert dict(advert.groups) == {"g2": 1, "g3": 2, "g4": 3}
    assert {(b.destination, b.group, b.hops) for b in advert.bindings} == {
        ("/queue/a", "g2", 1), ("/queue/a", "g3", 2), ("/queue/b", "g4", 3)}


def test_split_horizon_and_hop_limits() -> None:
    learned = {
        "g1": _advert("g1", 1, {"g1": 1}, [("/queue/a", "g1", 1, 1)]),
        "g3": _advert("g3", 1, {"g3": 1, "g1": 2}, [("/queue/a", "g3", 1, 1), ("/queue/a", "g1", 2, 1)]),
    }
    to_g1 = advert_for("g2", "g1", 5, {}, learned, lambda d: 3)
    assert all(b.group != "g1" for b in to_g1.bindings)  # never its own bindings back
    assert {b.group for b in to_g1.bindings} == {"g3"}
    limited = advert_for("g2", "g1", 5, {"/queue/a": ()}, learned, lambda d: 1)
    assert {(b.group, b.hops) for b in limited.bindings} == {("g2", 1)}
    assert advert_for("g2", "g1", 5, {"/queue/a": ()}, learned, lambda d: None).bindings == ()


def test_routes_take_the_fewest_hops_then_the_first_neighbour_by_name() -> None:
    learned = {
        "g2": _advert("g2", 1, {"g2": 1, "g4": 2}, [("/queue/a", "g4", 2, 1)]),
        "g3": _advert("g3", 1, {"g3": 1, "g4": 2}, [("/queue/a", "g4", 2, 3)]),
        "g5": _advert("g5", 1, {"g5": 1, "g4": 1}, []),
    }
    by_destination, next_hops = routes(learned, "g1")
    assert next_hops["g4"] == (1, "g5")
    route = by_destination["/queue/a"]["g4"]
    assert (route.hops, route.via, route.consumer_count) == (2, "g2", 1)


bindings_strategy = st.lists(
    st.builds(Binding, st.sampled_from(["/queue/a", "/topic/t"]), st.sampled_from(["g1", "g2"]), st.integers(1, 5),
              st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=8)), st.integers(0, 9)), max_size=3).map(tuple)),
    max_size=5,
).map(tuple)


@given(st.text(min_size=1, max_size=5), st.integers(0, 2**40), bindings_strategy)
def test_adverts_round_trip_through_their_wire_form(sender: str, position: int, bindings: tuple[Binding, ...]) -> None:
    advert = Advert(sender, position, (("g1", 1),), bindings)
    assert decode_advert(encode_advert(advert)) == advert


@pytest.mark.parametrize("text", ["", "[]", "{}", '{"sender": "", "position": 1, "groups": [], "bindings": []}',
                                  '{"sender": "g", "position": true, "groups": [], "bindings": []}',
                                  '{"sender": "g", "position": 1, "groups": [["g", -1]], "bindings": []}'])
def test_anything_else_is_not_an_advert(text: str) -> None:
    with pytest.raises(ValueError):
        decode_advert(text)


def test_consumers_are_summarised_by_selector() -> None:
    assert summarise([None, "a = 1", None, "b = 2", "a = 1"]) == ((None, 2), ("a = 1", 2), ("b = 2", 1))


# -- route headers --------------------------------------------------------------------------


def test_route_helpers() -> None:
    assert parse_route("g1,g2") == ("g1", "g2") and parse_route("") == () and parse_route(None) == ()
    assert dedup_id("g1-7", "g3") != dedup_id("g1-7", "g2")
    assert is_internal(sf_queue("g2")) and not is_internal("/queue/a")

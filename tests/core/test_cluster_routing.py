"""The broker core in a cluster (raftmq.core.cluster_routing), two or three cores wired by hand."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Connect, Disconnect, Send, Subscribe, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Reject
from raftmq.protocol.header_block import block_of, header_dict, pairs_of
from raftmq.routing.bindings import encode_advert
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView
from raftmq.routing.route import (
    ADVERT_HEADER,
    CONTROL_DESTINATION,
    DESTINATION_HEADER,
    FORWARD_ID_HEADER,
    TO_HEADER,
    outgoing,
    sf_queue,
)


def core(group: str, neighbours: list[str], **connection: object) -> Broker:
    links = tuple(sorted((min(group, n), max(group, n)) for n in neighbours))
    view = ClusterView(group, (ClusterConnection("c", links, **connection),))  # type: ignore[arg-type]
    broker = Broker(CoreConfig(broker_name=group, cluster=view))
    broker.apply(Connect("p", 1))
    broker.apply(Connect("link", 1, login="cluster"))
    return broker


def learn(receiver: Broker, sender: Broker, sender_name: str, receiver_name: str, position: int) -> None:
    assert sender.routing is not None
    advert = sender.routing.advert_for(receiver_name, position)
    effects = receiver.apply(Send("link", CONTROL_DESTINATION, block_of(((ADVERT_HEADER, encode_advert(advert)),)),
                                  b"", 2))
    assert not any(isinstance(e, Reject) for e in effects)


def depth(broker: Broker, destination: str) -> int:
    store = broker.state.queues.get(destination)
    return 0 if store is None else len(store.ready) + store.in_flight


def test_on_demand_routes_to_the_group_with_a_consumer_and_selectors_decide() -> None:
    g1, g2 = core("g1", ["g2"]), core("g2", ["g1"])
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", "/queue/q", 1, selector="color = 'red'"))
    learn(g1, g2, "g2", "g1", 1)
    for color in ("red", "blue", "red"):
        g1.apply(Send("p", "/queue/q", block_of((("color", color),)), b"x", 3))
    assert depth(g1, sf_queue("g2")) == 2 and depth(g1, "/queue/q") == 1
    g1.check_invariants()


def test_a_forward_repeated_is_stored_once_and_its_routing_headers_are_gone() -> None:
    g2 = core("g2", ["g1"])
    headers = (("k", "v"), (TO_HEADER, "g2"), ("_raftmq_route", "g1"), (FORWARD_ID_HEADER, "raftmq:g1-1>g2"))
    for _ in range(3):
        g2.apply(Send("link", "/queue/q", block_of(headers), b"x", 5))
    (message,) = g2.state.queues["/queue/q"].ready.values()
    assert message.headers == block_of((("k", "v"),))


def test_adverts_from_a_stranger_or_another_login_are_refused() -> None:
    g1 = core("g1", ["g2"], cluster_user="cluster")
    g1.apply(Connect("other", 1, login="app"))
    g3 = core("g3", ["g1"])
    advert = g3.routing.advert_for("g1", 1)  # type: ignore[union-attr]
    refused = g1.apply(Send("link", CONTROL_DESTINATION, block_of(((ADVERT_HEADER, encode_advert(advert)),)), b"", 2))
    assert any(isinstance(e, Reject) and "not linked" in e.detail for e in refused)
    g2 = core("g2", ["g1"])
    advert = g2.routing.advert_for("g1", 1)  # type: ignore[union-attr]
    refused = g1.apply(Send("other", CONTROL_DESTINATION, block_of(((ADVERT_HEADER, encode_advert(advert)),)), b"", 2))
    assert any(isinstance(e, Reject) and e.message == "reserved destination" for e in refused)


def test_a_store_and_forward_message_is_never_dead_lettered_for_its_bridge_reconnecting() -> None:
    g1, g2 = core("g1", ["g2"]), core("g2", ["g1"])
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", "/queue/q", 1))
    learn(g1, g2, "g2", "g1", 1)
    g1.apply(Send("p", "/queue/q", "", b"x", 3))
    for attempt in range(g1.config.max_delivery_count + 5):
        session = f"bridge{attempt}"
        g1.apply(Connect(session, 4))
        effects = g1.apply(Subscribe(session, "sf", sf_queue("g2"), 4, ACK_CLIENT_INDIVIDUAL))
        assert [type(e) for e in effects] == [Deliver]
        g1.apply(Disconnect(session, 4))
    assert depth(g1, sf_queue("g2")) == 1 and depth(g1, g1.config.dead_letter_queue) == 0


def test_redistribution_waits_for_its_delay_then_moves_the_backlog_best_priority_first() -> None:
    g1, g2 = core("g1", ["g2"], redistribution_delay_ms=500), core("g2", ["g1"])
    for priority in (1, 9, 4):
        g1.apply(Send("p", "/queue/q", block_of((("priority", str(priority)),)), b"x", 3))
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", "/queue/q", 1))
    learn(g1, g2, "g2", "g1", 1)
    g1.apply(Tick(1000))
    g1.apply(Tick(1499))
    assert depth(g1, "/queue/q") == 3
    g1.apply(Tick(1500))
    assert depth(g1, "/queue/q") == 0
    moved = list(g1.state.queues[sf_queue("g2")].ready.values())
    assert [m.priority for m in sorted(moved, key=lambda m: -m.priority)] == [9, 4, 1]
    assert g1.routing is not None and g1.routing.cluster_state.redistributed == 3
    g1.check_invariants()


def test_a_redistributed_message_that_was_delivered_here_is_flagged_redelivered_there() -> None:
    # Regression (found by the chaos matrix on the symmetric preset, kill and pause): a
    # consumer's session ended with a delivery unacknowledged, redistribution moved the message
    # to another group, and there it arrived as new: delivered again without `redelivered`.
    g1, g2 = core("g1", ["g2"], redistribution_delay_ms=500), core("g2", ["g1"])
    g1.apply(Connect("c1", 1))
    g1.apply(Subscribe("c1", "s", "/queue/q", 1, ACK_CLIENT_INDIVIDUAL))
    (first,) = [e for e in g1.apply(Send("p", "/queue/q", "", b"x", 2)) if isinstance(e, Deliver)]
    assert not first.redelivered
    g1.apply(Disconnect("c1", 3))  # never acknowledged: back in g1's queue
    g2.apply(Connect("c2", 1))
    g2.apply(Subscribe("c2", "s", "/queue/q", 1))
    learn(g1, g2, "g2", "g1", 1)
    g1.apply(Tick(1000))
    g1.apply(Tick(1600))
    (moved,) = g1.state.queues[sf_queue("g2")].ready.values()
    destination, headers = outgoing(pairs_of(moved.headers), moved.message_id, "g2")
    (again,) = [e for e in g2.apply(Send("link", destination, block_of(tuple(headers)), moved.body, 1700))
                if isinstance(e, Deliver)]
    assert again.redelivered and again.delivery_count == 2
    assert not any(name.startswith("_raftmq_") for name, _ in pairs_of(again.message.headers))
    g1.check_invariants()
    g2.check_invariants()


def test_a_restored_core_routes_as_the_old_one_did() -> None:
    g1, g2, g3 = core("g1", ["g2", "g3"], message_load_balancing="STRICT"), core("g2", ["g1"]), core("g3", ["g1"])
    for other, name in ((g2, "g2"), (g3, "g3")):
        other.apply(Send("p", "/queue/q", "", b"seed", 1))
        learn(g1, other, name, "g1", 1)
    for _ in range(4):
        g1.apply(Send("p", "/queue/q", "", b"x", 2))
    restored = Broker.restore(g1.snapshot(), g1.config)
    for broker in (g1, restored):
        for _ in range(5):
            broker.apply(Send("p", "/queue/q", "", b"x", 3))
    assert restored.snapshot() == g1.snapshot()
    assert {d: depth(g1, d) for d in ("/queue/q", sf_queue("g2"), sf_queue("g3"))} == {
        "/queue/q": 3, sf_queue("g2"): 3, sf_queue("g3"): 3}


def test_a_wildcard_subscription_in_another_group_gets_what_matches_once() -> None:
    g1, g2 = core("g1", ["g2"]), core("g2", ["g1"])
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "wild", "/topic/prices.>", 1))
    g2.apply(Subscribe("c", "exact", "/topic/prices.eur", 1))  # g2 wants prices.eur twice over: one copy travels
    learn(g1, g2, "g2", "g1", 1)
    for name in ("prices.eur", "prices.usd.spot", "volumes.eur"):
        g1.apply(Send("p", f"/topic/{name}", "", name.encode(), 3))
    forwarded = [header_dict(m.headers)[DESTINATION_HEADER] for m in g1.state.queues[sf_queue("g2")].ready.values()]
    assert forwarded == ["/topic/prices.eur", "/topic/prices.usd.spot"]
    # Queues never match a topic pattern.
    g1.apply(Send("p", "/queue/prices.eur", "", b"q", 4))
    assert depth(g1, sf_queue("g2")) == 2
    g1.check_invariants()


def test_a_wildcard_queue_consumer_in_another_group_draws_matching_queues_there() -> None:
    g1, g2 = core("g1", ["g2"]), core("g2", ["g1"])
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "wild", "/queue/orders.>", 1, selector="n > 0"))
    learn(g1, g2, "g2", "g1", 1)
    for name, n in (("orders.eu", "1"), ("orders.us.east", "2"), ("orders.eu", "0"), ("other", "1")):
        g1.apply(Send("p", f"/queue/{name}", block_of((("n", n),)), name.encode(), 3))
    forwarded = [header_dict(m.headers)[DESTINATION_HEADER] for m in g1.state.queues[sf_queue("g2")].ready.values()]
    assert forwarded == ["/queue/orders.eu", "/queue/orders.us.east"]  # the selector decides, as for any consumer
    assert depth(g1, "/queue/orders.eu") == 1 and depth(g1, "/queue/other") == 1
    # Arriving at g2, a forward creates its queue there and the wildcard consumer gets it.
    message = next(iter(g1.state.queues[sf_queue("g2")].ready.values()))
    headers = tuple((n, v) for n, v in pairs_of(message.headers) if n != DESTINATION_HEADER)
    effects = g2.apply(Send("link", header_dict(message.headers)[DESTINATION_HEADER], block_of(headers),
                            message.body, 5))
    assert [(e.sub_id, e.destination) for e in effects if isinstance(e, Deliver)] == [("wild", "/queue/orders.eu")]
    g1.check_invariants()
    g2.check_invariants()


def test_redistribution_moves_a_paged_backlog_in_arrival_order() -> None:
    g1, g2 = core("g1", ["g2"], redistribution_delay_ms=0), core("g2", ["g1"])
    g1 = Broker.restore(g1.snapshot(), CoreConfig(broker_name="g1", cluster=g1.config.cluster, page_size=4))
    for n in range(30):
        g1.apply(Send("p", "/queue/q", block_of((("n", str(n)),)), b"x", 3))
    queue = g1.state.queues["/queue/q"]
    assert len(queue.ready) == 8 and queue.depth == 30  # most of it paged
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", "/queue/q", 1))
    learn(g1, g2, "g2", "g1", 1)
    for now in range(1000, 1100):
        g1.apply(Tick(now))
        if not queue.depth:
            break
    assert queue.depth == 0 and g1.routing is not None and g1.routing.cluster_state.redistributed == 30
    forwarded = g1.state.queues[sf_queue("g2")]
    order = [header_dict(m.headers)["n"] for m in forwarded.ready.values()]
    order += [header_dict(m.headers)["n"] for m in (forwarded.tail.messages() if forwarded.tail is not None else ())]
    assert order == [str(n) for n in range(30)]
    g1.check_invariants()

"""Scale-down in the core (raftmq.core.cluster_routing: `control`, `drain`): a drained group moves
every message it holds — queues, dead letters, in-flight ones once returned, inactive durable
subscriptions — to other groups as committed moves; cores wired by hand, the bridges' carrying
done by the test."""

from __future__ import annotations

from collections import Counter

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Connect, Disconnect, Send, Subscribe, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Reject
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.bindings import encode_advert
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView
from raftmq.routing.route import ADVERT_HEADER, CONTROL_DESTINATION, DRAIN_HEADER, outgoing, sf_queue

GROUPS = ("g1", "g2", "g3")


def mesh() -> dict[str, Broker]:
    links = (("g1", "g2"), ("g1", "g3"), ("g2", "g3"))
    brokers = {}
    for name in GROUPS:
        broker = Broker(CoreConfig(broker_name=name, cluster=ClusterView(name, (ClusterConnection("c", links),))))
        broker.apply(Connect("p", 1))
        broker.apply(Connect("link", 1, login="cluster"))
        brokers[name] = broker
    advertise(brokers)
    return brokers


def advertise(brokers: dict[str, Broker], position: list[int] = [100]) -> None:  # noqa: B006 - a counter on purpose
    for name, sender in brokers.items():
        for other, receiver in brokers.items():
            if other != name:
                position[0] += 1
                advert = sender.routing.advert_for(other, position[0])  # type: ignore[union-attr]
                receiver.apply(Send("link", CONTROL_DESTINATION,
                                    block_of(((ADVERT_HEADER, encode_advert(advert)),)), b"", 2))


def drain(broker: Broker, to: str) -> list[object]:
    return broker.apply(Send("link", CONTROL_DESTINATION, block_of(((DRAIN_HEADER, to),)), b"", 3))


def carry(brokers: dict[str, Broker], source: str) -> Counter[str]:
    """Hand what waits in `source`'s store-and-forward queues to their groups, as a bridge
    would (each SEND twice: a resend after a lost receipt stores nothing more)."""
    carried: Counter[str] = Counter()
    for target in GROUPS:
        store = brokers[source].state.queues.get(sf_queue(target))
        if store is None:
            continue
        for message in list(store.ready.values()):
            destination, headers = outgoing(pairs_of(message.headers), message.message_id, target)
            for _ in range(2):
                brokers[target].apply(Send("link", destination, block_of(tuple(headers)), message.body, 5))
            carried[target] += 1
    return carried


def depth(broker: Broker, destination: str) -> int:
    store = broker.state.queues.get(destination)
    return 0 if store is None else len(store.ready) + store.in_flight


def send(broker: Broker, destination: str, bodies: list[bytes], headers: tuple[tuple[str, str], ...] = ()) -> None:
    for body in bodies:
        broker.apply(Send("p", destination, block_of(headers), body, 3))


def test_a_drain_to_a_group_it_does_not_reach_is_refused() -> None:
    brokers = mesh()
    refused = drain(brokers["g3"], "g9")
    assert any(isinstance(e, Reject) and "cannot drain to g9" in e.detail for e in refused)
    assert brokers["g3"].routing.cluster_state.draining is None  # type: ignore[union-attr]


def test_every_queued_message_moves_once_and_the_group_is_left_empty() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    send(g3, "/queue/a", [f"a{i}".encode() for i in range(30)])
    send(g3, "/queue/b", [f"b{i}".encode() for i in range(10)])
    g3.apply(Connect("c", 3))
    g3.apply(Subscribe("c", "s", "/queue/a", 3, ACK_CLIENT_INDIVIDUAL, prefetch=5))  # five in flight
    assert not any(isinstance(e, Reject) for e in drain(g3, ""))
    g3.apply(Tick(10))
    assert depth(g3, "/queue/a") == 5 and depth(g3, "/queue/b") == 0  # what a consumer holds stays with it
    g3.apply(Disconnect("c", 11))  # the node ends client sessions of a drained group: they come back
    g3.apply(Tick(20))
    assert depth(g3, "/queue/a") == 0
    carried = carry(brokers, "g3")
    assert sum(carried.values()) == 40 and set(carried) == {"g1", "g2"}  # round robin over every group
    bodies = Counter(m.body for name in ("g1", "g2") for q in ("/queue/a", "/queue/b")
                     for m in brokers[name].state.queues.get(q, None).ready.values()
                     if brokers[name].state.queues.get(q))
    assert len(bodies) == 40 and set(bodies.values()) == {1}
    assert g3.routing.cluster_state.drained == 40  # type: ignore[union-attr]
    g3.check_invariants()


def test_messages_go_where_consumers_are_and_a_message_group_stays_together() -> None:
    brokers = mesh()
    brokers["g2"].apply(Connect("c", 1))
    brokers["g2"].apply(Subscribe("c", "s", "/queue/work", 1, ACK_CLIENT_INDIVIDUAL, prefetch=1))
    advertise(brokers)
    g3 = brokers["g3"]
    send(g3, "/queue/work", [b"x"] * 10)
    send(g3, "/queue/ordered", [f"o{i}".encode() for i in range(10)], (("JMSXGroupID", "order-7"),))
    drain(g3, "g1,g2")
    g3.apply(Tick(10))
    carried = carry(brokers, "g3")
    assert depth(brokers["g2"], "/queue/work") == 10  # all to the group with the consumer
    ordered = [depth(brokers[name], "/queue/ordered") for name in ("g1", "g2")]
    assert sorted(ordered) == [0, 10] and sum(carried.values()) == 20


def test_dead_letters_move_to_the_other_groups_dead_letter_queue() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    dlq = g3.config.dead_letter_queue
    g3.apply(Send("p", dlq, "", b"dead", 3))
    drain(g3, "g1")
    g3.apply(Tick(10))
    carry(brokers, "g3")
    assert depth(g3, dlq) == 0 and depth(brokers["g1"], brokers["g1"].config.dead_letter_queue) == 1


def test_an_inactive_durable_subscription_moves_with_its_name_and_selector() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    g3.apply(Connect("d", 1, client_id="app"))
    g3.apply(Subscribe("d", "s", "/topic/news", 1, selector="kind = 'big'", durable_name="app:audit"))
    g3.apply(Disconnect("d", 2))
    for i in range(6):
        g3.apply(Send("p", "/topic/news", block_of((("kind", "big" if i % 2 == 0 else "small"),)), f"n{i}".encode(), 3))
    drain(g3, "")  # either group: the subscription goes to one of them, whole
    g3.apply(Tick(10))
    carry(brokers, "g3")
    (g2,) = [brokers[name] for name in ("g1", "g2") if "app:audit" in brokers[name].state.durables]
    moved = g2.state.durables["app:audit"]
    assert moved.session is None and moved.selector is not None and moved.selector.text == "kind = 'big'"
    g2.apply(Connect("d2", 20, client_id="app"))
    effects = g2.apply(Subscribe("d2", "s", "/topic/news", 20, selector="kind = 'big'", durable_name="app:audit"))
    assert sorted(e.message.body for e in effects if isinstance(e, Deliver)) == [b"n0", b"n2", b"n4"]
    g2.check_invariants()


def test_a_stopped_drain_moves_nothing_more_and_survives_a_snapshot() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    drain(g3, "g1,g2")
    restored = Broker.restore(g3.snapshot(), g3.config)
    assert restored.routing.cluster_state.draining == ("g1", "g2")  # type: ignore[union-attr]
    drain(g3, "-")
    send(g3, "/queue/a", [b"x"] * 3)
    g3.apply(Tick(10))
    assert depth(g3, "/queue/a") == 3


def test_an_empty_inactive_durable_subscription_is_made_again_elsewhere_and_collects_there() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    g3.apply(Connect("d", 1, client_id="app"))
    g3.apply(Subscribe("d", "s", "/topic/news", 1, durable_name="app:quiet"))
    g3.apply(Disconnect("d", 2))
    drain(g3, "g1")
    g3.apply(Tick(10))
    carry(brokers, "g3")
    assert "app:quiet" not in g3.state.durables and not g3.state.topics["/topic/news"].subs
    g1 = brokers["g1"]
    assert g1.state.durables["app:quiet"].session is None
    g1.apply(Send("p", "/topic/news", "", b"later", 12))  # published while the subscriber is away
    g1.apply(Connect("d2", 20, client_id="app"))
    effects = g1.apply(Subscribe("d2", "s", "/topic/news", 20, durable_name="app:quiet"))
    assert [e.message.body for e in effects if isinstance(e, Deliver)] == [b"later"]
    g1.check_invariants()
    g3.check_invariants()


def test_a_draining_group_advertises_nothing_so_others_stop_routing_to_it() -> None:
    brokers = mesh()
    g3 = brokers["g3"]
    g3.apply(Connect("c", 1))
    g3.apply(Subscribe("c", "s", "/queue/work", 1))
    advertise(brokers)
    assert "/queue/work" in brokers["g1"].routing.remote_bindings()  # type: ignore[union-attr]
    drain(g3, "")
    advertise(brokers)
    assert "/queue/work" not in brokers["g1"].routing.remote_bindings()  # type: ignore[union-attr]
    brokers["g1"].apply(Send("p", "/queue/work", "", b"x", 5))
    assert depth(brokers["g1"], "/queue/work") == 1 and depth(brokers["g1"], sf_queue("g3")) == 0

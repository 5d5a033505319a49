"""What each ActiveMQ Classic network-connector option does to routing, on broker cores wired by
hand (the options compiled by cluster.network, the adverts carried as the bridges carry them).
The same cases on real processes: tests/cluster/test_network_connectors.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from cluster.network import parse_network_connectors
from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Connect, Disconnect, Send, Subscribe, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Reject
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.bindings import encode_advert
from raftmq.routing.cluster_connection import ClusterConnection, cluster_view
from raftmq.routing.route import ADVERT_HEADER, CONTROL_DESTINATION, TO_HEADER, sf_queue

MEMBERS = {"g1": ("127.0.0.1:1001",), "g2": ("127.0.0.1:1002",), "g3": ("127.0.0.1:1003",)}


def net(*entries: dict[str, Any]) -> tuple[ClusterConnection, ...]:
    """Connectors written as {"group": "g1", "to": "g2", option: value, ...}."""
    tables = []
    for entry in entries:
        table = {k: v for k, v in entry.items() if k != "to"}
        table["uri"] = f"static:(stomp://{MEMBERS[entry['to']][0]})"
        tables.append(table)
    return parse_network_connectors(Path("t.toml"), tables, MEMBERS)


def cores(connections: tuple[ClusterConnection, ...], *names: str) -> dict[str, Broker]:
    made = {}
    for name in names:
        broker = Broker(CoreConfig(broker_name=name, cluster=cluster_view(name, connections)))
        broker.apply(Connect("p", 1))
        broker.apply(Connect("link", 1, login="cluster"))
        made[name] = broker
    return made


def advertise(brokers: dict[str, Broker], rounds: int = 3) -> None:
    """Every group tells each upstream neighbour its bindings, as the bridges do (a few rounds,
    so what is learned travels several hops)."""
    position = 10
    for _ in range(rounds):
        for name, sender in brokers.items():
            assert sender.routing is not None
            for neighbour in sender.routing.view.upstream:
                if neighbour not in brokers:
                    continue
                position += 1
                advert = sender.routing.advert_for(neighbour, position)
                advert_headers = block_of(((ADVERT_HEADER, encode_advert(advert)),))
                effects = brokers[neighbour].apply(Send("link", CONTROL_DESTINATION, advert_headers, b"", 2))
                assert not any(isinstance(e, Reject) for e in effects), effects


def consumer(broker: Broker, destination: str, session: str = "c", durable: str | None = None) -> None:
    broker.apply(Connect(session, 1, client_id=session if durable else None))
    # Client acks and a deep prefetch: what a consumer took stays in flight, counted by depth().
    broker.apply(Subscribe(session, "s", destination, 1, ACK_CLIENT_INDIVIDUAL, prefetch=1000, durable_name=durable))


def depth(broker: Broker, destination: str) -> int:
    store = broker.state.queues.get(destination)
    return 0 if store is None else len(store.ready) + store.in_flight


def forwarded_to(broker: Broker, group: str) -> int:
    return depth(broker, sf_queue(group))


def send(broker: Broker, destination: str, count: int = 1) -> None:
    for _ in range(count):
        broker.apply(Send("p", destination, "", b"x", 3))


def test_one_way_a_connector_forwards_from_its_group_only_and_duplex_both_ways() -> None:
    brokers = cores(net({"group": "g1", "to": "g2"}), "g1", "g2")
    consumer(brokers["g1"], "/queue/q")
    consumer(brokers["g2"], "/queue/q")
    advertise(brokers)
    send(brokers["g2"], "/queue/q", 4)
    assert forwarded_to(brokers["g2"], "g1") == 0  # g2 declares no connector: nothing leaves it
    send(brokers["g1"], "/queue/q", 4)
    assert forwarded_to(brokers["g1"], "g2") == 2
    assert brokers["g2"].routing is not None
    advert = brokers["g1"].routing.advert_for("g2", 99)  # type: ignore[union-attr]
    refused = brokers["g2"].apply(Send("link", CONTROL_DESTINATION,
                                       block_of(((ADVERT_HEADER, encode_advert(advert)),)), b"", 2))
    assert any(isinstance(e, Reject) and "does not forward" in e.detail for e in refused)
    brokers = cores(net({"group": "g1", "to": "g2", "duplex": True}), "g1", "g2")
    consumer(brokers["g1"], "/queue/q")
    consumer(brokers["g2"], "/queue/q")
    advertise(brokers)
    send(brokers["g2"], "/queue/q", 4)
    assert forwarded_to(brokers["g2"], "g1") == 2


def chain(**options: Any) -> dict[str, Broker]:
    # g1 <-> g2 <-> g3, each link a duplex connector; the consumer is on g3.
    connections = net({"group": "g1", "to": "g2", "duplex": True, **options},
                      {"group": "g2", "to": "g3", "duplex": True, **options})
    brokers = cores(connections, "g1", "g2", "g3")
    consumer(brokers["g3"], "/queue/q")
    advertise(brokers)
    return brokers


def test_network_ttl_bounds_how_far_consumers_are_known_and_messages_travel() -> None:
    near = chain()  # networkTTL 1: g1 never hears of a consumer two hops away
    send(near["g1"], "/queue/q")
    assert depth(near["g1"], "/queue/q") == 1 and forwarded_to(near["g1"], "g2") == 0
    far = chain(networkTTL=2)
    send(far["g1"], "/queue/q")
    (message,) = far["g1"].state.queues[sf_queue("g2")].ready.values()
    assert (TO_HEADER, "g3") in pairs_of(message.headers)  # through g2, to g3
    known_not_sent = chain(consumerTTL=2, messageTTL=1)  # g1 knows, but the message may not go two hops
    assert "/queue/q" in known_not_sent["g1"].routing.remote_bindings()  # type: ignore[union-attr]
    send(known_not_sent["g1"], "/queue/q")
    assert depth(known_not_sent["g1"], "/queue/q") == 1 and forwarded_to(known_not_sent["g1"], "g2") == 0


def split(**options: Any) -> Counter[str]:
    # Classic's example: a producer and one consumer on g1, two consumers on g2, 30 messages.
    brokers = cores(net({"group": "g1", "to": "g2", **options}), "g1", "g2")
    consumer(brokers["g1"], "/queue/q")
    consumer(brokers["g2"], "/queue/q", "c1")
    consumer(brokers["g2"], "/queue/q", "c2")
    advertise(brokers)
    send(brokers["g1"], "/queue/q", 30)
    return Counter({"g1": depth(brokers["g1"], "/queue/q"), "g2": forwarded_to(brokers["g1"], "g2")})


def test_conduit_subscriptions_split_15_15_and_without_them_10_10_10() -> None:
    assert split() == {"g1": 15, "g2": 15}  # the two consumers on g2 look like one
    assert split(conduitSubscriptions=False) == {"g1": 10, "g2": 20}  # 10 for each of the three


def test_decrease_network_consumer_priority_keeps_messages_with_a_local_consumer() -> None:
    assert split(decreaseNetworkConsumerPriority=True) == {"g1": 30, "g2": 0}


def test_suppress_duplicate_queue_subscriptions_one_route_in_a_mesh() -> None:
    # A mesh with networkTTL 2: g1 hears of g3's consumer directly and through g2; one route
    # (the direct one) is kept, so each message goes once, one hop. (raftmq always does this.)
    options = {"duplex": True, "networkTTL": 2, "suppressDuplicateQueueSubscriptions": True}
    brokers = cores(net({"group": "g1", "to": "g2", **options}, {"group": "g2", "to": "g3", **options},
                        {"group": "g3", "to": "g1", **options}), "g1", "g2", "g3")
    consumer(brokers["g3"], "/queue/q")
    advertise(brokers)
    send(brokers["g1"], "/queue/q", 10)
    assert forwarded_to(brokers["g1"], "g3") == 10 and forwarded_to(brokers["g1"], "g2") == 0


def test_dynamic_only_does_not_forward_to_an_inactive_durable_subscription() -> None:
    for dynamic_only, forwarded in ((False, 1), (True, 0)):
        brokers = cores(net({"group": "g1", "to": "g2", "dynamicOnly": dynamic_only}), "g1", "g2")
        consumer(brokers["g2"], "/topic/t", "d", durable="audit")
        brokers["g2"].apply(Disconnect("d", 2))  # the durable subscription stays, inactive
        advertise(brokers)
        send(brokers["g1"], "/topic/t")
        assert forwarded_to(brokers["g1"], "g2") == forwarded, dynamic_only


def test_excluded_and_dynamically_included_destinations_choose_what_travels() -> None:
    brokers = cores(net({"group": "g1", "to": "g2", "excludedDestinations": ["queue://orders.audit"],
                         "dynamicallyIncludedDestinations": ["queue://orders.>"]}), "g1", "g2")
    for destination in ("/queue/orders.eu", "/queue/orders.audit", "/queue/other"):
        consumer(brokers["g2"], destination, f"c-{destination}")
    advertise(brokers)
    for destination in ("/queue/orders.eu", "/queue/orders.audit", "/queue/other"):
        send(brokers["g1"], destination)
    (message,) = brokers["g1"].state.queues[sf_queue("g2")].ready.values()
    assert message.destination == sf_queue("g2") and ("_raftmq_dest", "/queue/orders.eu") in pairs_of(message.headers)
    assert depth(brokers["g1"], "/queue/orders.audit") == 1 and depth(brokers["g1"], "/queue/other") == 1


def test_statically_included_destinations_travel_without_any_consumer() -> None:
    brokers = cores(net({"group": "g1", "to": "g2", "staticallyIncludedDestinations": ["queue://jobs"]}), "g1", "g2")
    send(brokers["g1"], "/queue/jobs", 3)  # g2 never advertised anything
    send(brokers["g1"], "/queue/other", 3)
    assert forwarded_to(brokers["g1"], "g2") == 3 and depth(brokers["g1"], "/queue/other") == 3
    consumer(brokers["g1"], "/queue/jobs")  # a local consumer shares with the static bridge
    send(brokers["g1"], "/queue/jobs", 4)
    assert forwarded_to(brokers["g1"], "g2") == 5


def replay(**options: Any) -> int:
    # A message waits on g2 (its consumer there left); a consumer appears on g1.
    brokers = cores(net({"group": "g1", "to": "g2", "duplex": True, **options}), "g1", "g2")
    send(brokers["g2"], "/queue/q")
    consumer(brokers["g1"], "/queue/q")
    advertise(brokers)
    for now in (1_000, 2_000, 10_000):
        brokers["g2"].apply(Tick(now))
    return forwarded_to(brokers["g2"], "g1")


def test_replay_when_no_consumers_moves_messages_to_where_the_consumers_went() -> None:
    assert replay() == 1
    assert replay(replayWhenNoConsumers=True, replayDelay=5_000) == 1
    assert replay(replayWhenNoConsumers=False) == 0


def test_only_the_cluster_user_consumes_a_neighbours_store_and_forward_queue() -> None:
    # g1 opens the link to g2 alone: g1's bridge pulls from g2's queue for g1, as user "net".
    brokers = cores(net({"group": "g1", "to": "g2", "duplex": True, "userName": "net", "password": "pw"}), "g2")
    g2 = brokers["g2"]
    g2.apply(Connect("app", 1, login="app"))
    refused = g2.apply(Subscribe("app", "s", sf_queue("g1"), 1, ACK_CLIENT_INDIVIDUAL))
    assert any(isinstance(e, Reject) and "cluster user only" in e.detail for e in refused)
    g2.apply(Connect("bridge", 1, login="net"))
    refused = g2.apply(Subscribe("bridge", "s1", sf_queue("g9"), 1, ACK_CLIENT_INDIVIDUAL))  # no such neighbour
    assert any(isinstance(e, Reject) and e.message == "reserved destination" for e in refused)
    g2.apply(Connect("bridge2", 1, login="net"))
    assert not any(isinstance(e, Reject)
                   for e in g2.apply(Subscribe("bridge2", "s", sf_queue("g1"), 1, ACK_CLIENT_INDIVIDUAL)))


def test_an_advert_put_in_a_store_and_forward_queue_is_stored_with_its_headers() -> None:
    # The passive end's adverts travel in the queue the opener pulls, headers intact (a SEND
    # elsewhere would have its _raftmq_ headers stripped by the routing).
    brokers = cores(net({"group": "g1", "to": "g2"}), "g2")
    g2 = brokers["g2"]
    assert g2.routing is not None
    advert = encode_advert(g2.routing.advert_for("g1", 5))
    g2.apply(Connect("link", 1))
    g2.apply(Send("link", sf_queue("g1"), block_of(((ADVERT_HEADER, advert),)), b"", 2))
    (message,) = g2.state.queues[sf_queue("g1")].ready.values()
    assert message.headers == block_of(((ADVERT_HEADER, advert),))

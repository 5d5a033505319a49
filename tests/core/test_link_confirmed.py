"""What a link's neighbour confirmed, counted in the committed cluster state
(raftmq.core.cluster_state `confirmed`, `adverts_confirmed`): the figures a link shows on the
end that did not open it (raftmq.server.links.passive_link), where nothing of the link's own
passes through the node's code but the neighbour's ACKs."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Connect, Nack, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of
from raftmq.routing.bindings import encode_advert
from raftmq.routing.route import ADVERT_HEADER, sf_queue
from tests.core.test_cluster_routing_network import advertise, consumer, cores, net


def test_what_the_opener_pulled_and_acked_is_counted_on_the_passive_end_and_survives_a_snapshot() -> None:
    # g1 opens a duplex link to g2 alone: g2's messages for g1's consumers wait in g2's queue for g1.
    brokers = cores(net({"group": "g1", "to": "g2", "duplex": True}), "g1", "g2")
    g1, g2 = brokers["g1"], brokers["g2"]
    consumer(g1, "/queue/back")
    advertise(brokers)
    for i in range(20):
        g2.apply(Send("p", "/queue/back", "", f"m{i}".encode(), 3))
    assert g2.routing is not None
    advert = encode_advert(g2.routing.advert_for("g1", 5))
    g2.apply(Send("link", sf_queue("g1"), block_of(((ADVERT_HEADER, advert),)), b"", 3))  # the passive end's advert
    assert g2.routing.cluster_state.forwarded == {"g1": 20}
    # g1's bridge pulls them, client-individual; it NACKs one (not stored there) and ACKs the rest.
    g2.apply(Connect("puller", 4, login="cluster"))
    effects = g2.apply(Subscribe("puller", "pull", sf_queue("g1"), 4, ACK_CLIENT_INDIVIDUAL, prefetch=100))
    pulled = [e for e in effects if isinstance(e, Deliver)]
    assert len(pulled) == 21
    g2.apply(Nack("puller", 5, ack_id=pulled[0].ack_id))
    for delivery in pulled[1:]:
        g2.apply(Ack("puller", 5, ack_id=delivery.ack_id))
    cluster = g2.routing.cluster_state
    assert (cluster.confirmed, cluster.adverts_confirmed) == ({"g1": 19}, {"g1": 1})
    restored = Broker.restore(g2.snapshot(), g2.config)
    assert restored.routing is not None
    cluster = restored.routing.cluster_state
    assert (cluster.confirmed, cluster.adverts_confirmed) == ({"g1": 19}, {"g1": 1})
    restored.check_invariants()


def test_a_pushing_bridges_acks_count_too_and_an_ordinary_queues_do_not() -> None:
    brokers = cores(net({"group": "g1", "to": "g2"}), "g1", "g2")
    g1, g2 = brokers["g1"], brokers["g2"]
    consumer(g2, "/queue/mail")
    advertise(brokers)
    for i in range(3):
        g1.apply(Send("p", "/queue/mail", "", b"x", 3))
    g1.apply(Connect("bridge", 4, login="cluster"))
    effects = g1.apply(Subscribe("bridge", "sf", sf_queue("g2"), 4, ACK_CLIENT_INDIVIDUAL))
    for delivery in [e for e in effects if isinstance(e, Deliver)]:
        g1.apply(Ack("bridge", 5, ack_id=delivery.ack_id))
    g1.apply(Send("p", "/queue/local", "", b"x", 6))
    g1.apply(Connect("app", 6))
    (local,) = [e for e in g1.apply(Subscribe("app", "s", "/queue/local", 6, ACK_CLIENT_INDIVIDUAL))
                if isinstance(e, Deliver)]
    g1.apply(Ack("app", 7, ack_id=local.ack_id))
    assert g1.routing is not None
    assert g1.routing.cluster_state.confirmed == {"g2": sum(g1.routing.cluster_state.forwarded.values())}
    assert g1.routing.cluster_state.adverts_confirmed == {}

"""Forward first in the core: where the leader may send a client's SEND before storing it
(`ClusterRouting.first_target`), and the store path a forward falls back to, which keeps the
target and the forward id, so the target stores the message once however it travelled."""

from __future__ import annotations

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Connect, Send, Subscribe
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.cluster_connection import LOCAL_FIRST
from raftmq.routing.route import (
    FORWARD_ID_HEADER,
    RESENT_HEADER,
    TO_HEADER,
    first_headers,
    outgoing,
    producer_forward_id,
    sf_queue,
)
from tests.core.test_cluster_routing import core, depth, learn

Q = "/queue/q"


def linked(**connection: object) -> tuple[Broker, Broker]:
    """g1 and g2, g2 with a consumer on Q that g1 has heard of."""
    g1, g2 = core("g1", ["g2"], **connection), core("g2", ["g1"], **connection)
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", Q, 1, prefetch=1000))
    learn(g1, g2, "g2", "g1", 1)
    return g1, g2


def target(broker: Broker, destination: str = Q, headers: tuple[tuple[str, str], ...] = (),
           turn: int = 0) -> str | None:
    assert broker.routing is not None
    return broker.routing.first_target(destination, block_of(headers), turn)


def test_a_queue_send_for_a_neighbour_may_go_first_and_the_committed_turn_stays() -> None:
    g1, _ = linked()
    assert g1.routing is not None
    turns = dict(g1.routing.cluster_state.turns)
    assert target(g1) == "g2"
    assert g1.routing.cluster_state.turns == turns  # the stored SENDs' round robin is not moved


def test_what_stays_here_or_is_not_a_plain_queue_send_is_stored_first() -> None:
    g1, _ = linked()
    assert target(g1, "/queue/elsewhere") is None  # nobody consumes it anywhere: it stays
    assert target(g1, "/topic/q") is None
    assert target(g1, headers=(("JMSXGroupID", "a"),)) is None  # pinned to this group
    assert target(g1, headers=((TO_HEADER, "g2"),)) is None  # already on its way (a fallback)


def test_under_local_first_a_local_consumer_with_room_keeps_it_here() -> None:
    g1, _ = linked(message_load_balancing=LOCAL_FIRST)
    assert target(g1) == "g2"
    g1.apply(Connect("l", 1))
    g1.apply(Subscribe("l", "s", Q, 1, prefetch=10))
    assert target(g1) is None


def test_a_group_two_links_away_is_reached_through_the_store_path() -> None:
    g1, g2, g3 = core("g1", ["g2"], max_hops=2), core("g2", ["g1", "g3"], max_hops=2), core("g3", ["g2"], max_hops=2)
    g3.apply(Connect("c", 1))
    g3.apply(Subscribe("c", "s", Q, 1))
    learn(g2, g3, "g3", "g2", 1)
    learn(g1, g2, "g2", "g1", 1)
    assert target(g1) is None


def fallback(send_headers: tuple[tuple[str, str], ...], forward_id: str) -> Send:
    pins = ((TO_HEADER, "g2"), (FORWARD_ID_HEADER, forward_id))
    return Send("p", Q, block_of(send_headers + pins), b"x", 3)


def test_a_fallback_keeps_its_target_and_forward_id_and_is_stored_once() -> None:
    g1, g2 = linked()
    g1.apply(fallback((("n", "1"),), "raftmq:f:abc.1"))
    g1.apply(fallback((("n", "1"),), "raftmq:f:abc.1"))  # proposed again: stored once
    assert depth(g1, sf_queue("g2")) == 1
    (message,) = g1.state.queues[sf_queue("g2")].ready.values()
    destination, sent = outgoing(pairs_of(message.headers), message.message_id, "g2")
    assert destination == Q and (FORWARD_ID_HEADER, "raftmq:f:abc.1") in sent
    # The copy that went first arrived after all: the store path's copy is the same message.
    first = first_headers((("n", "1"),), "g1", "g2", "raftmq:f:abc.1")
    delivered = g2.apply(Send("link", Q, block_of(first), b"x", 4))
    delivered += g2.apply(Send("link", destination, block_of(sent), b"x", 5))
    assert [type(e) for e in delivered].count(Deliver) == 1
    g1.check_invariants()
    g2.check_invariants()


def test_a_producer_id_gives_the_same_forward_id_first_or_stored() -> None:
    g1, g2 = linked()
    g1.apply(Send("p", Q, block_of((("_AMQ_DUPL_ID", "order-7"),)), b"x", 3))
    (message,) = g1.state.queues[sf_queue("g2")].ready.values()
    destination, sent = outgoing(pairs_of(message.headers), message.message_id, "g2")
    assert (FORWARD_ID_HEADER, producer_forward_id("order-7")) in sent
    first = first_headers((("_AMQ_DUPL_ID", "order-7"),), "g1", "g2", producer_forward_id("order-7"))
    delivered = g2.apply(Send("link", Q, block_of(first), b"x", 4))  # written first by a leader that died
    delivered += g2.apply(Send("link", destination, block_of(sent), b"x", 5))  # then by its successor's store path
    assert [type(e) for e in delivered].count(Deliver) == 1


def test_a_send_written_again_goes_where_its_forward_first_went_never_by_room() -> None:
    """LOCAL_FIRST: g1's consumer is full, so the SEND goes first to the group its producer id
    names; written again by its client after g1's consumer found room, it is not stored in g1
    (that would be a second copy): it follows the first, where duplicate detection stops it."""
    g1 = core("g1", ["g2", "g3"], message_load_balancing=LOCAL_FIRST)
    for name in ("g2", "g3"):
        neighbour = core(name, ["g1"], message_load_balancing=LOCAL_FIRST)
        neighbour.apply(Connect("c", 1))
        neighbour.apply(Subscribe("c", "s", Q, 1, prefetch=1000))
        learn(g1, neighbour, name, "g1", 1)
    g1.apply(Connect("l", 1))
    g1.apply(Subscribe("l", "s", Q, 1, ACK_CLIENT_INDIVIDUAL, prefetch=1))
    g1.apply(Send("p", Q, block_of((("n", "0"),)), b"x", 3))  # fills the local consumer
    headers = (("_AMQ_DUPL_ID", "order-7"),)
    first = target(g1, headers=headers, turn=0)
    assert first in ("g2", "g3") and first == target(g1, headers=headers, turn=1)  # the id decides
    g1.apply(Connect("m", 1))
    g1.apply(Subscribe("m", "s", Q, 1, ACK_CLIENT_INDIVIDUAL, prefetch=10))  # room here now
    assert target(g1, headers=headers) is None  # a new SEND would stay
    g1.apply(Send("p", Q, block_of((*headers, (RESENT_HEADER, "1"))), b"x", 5))
    assert depth(g1, sf_queue(first)) == 1 and depth(g1, Q) == 1  # not stored here beside the first
    (moved,) = g1.state.queues[sf_queue(first)].ready.values()
    assert (FORWARD_ID_HEADER, producer_forward_id("order-7")) in outgoing(pairs_of(moved.headers), "", first)[1]
    g1.check_invariants()


def test_a_fallback_and_a_send_written_again_are_one_message_here() -> None:
    g1, _ = linked()
    headers = (("_AMQ_DUPL_ID", "order-8"),)
    g1.apply(fallback(headers, producer_forward_id("order-8")))
    g1.apply(Send("p", Q, block_of((*headers, (RESENT_HEADER, "1"))), b"x", 4))  # its client wrote it again
    assert depth(g1, sf_queue("g2")) == 1
    g3, _ = linked()
    g3.apply(Send("p", Q, block_of((*headers, (RESENT_HEADER, "1"))), b"x", 4))  # the other order
    g3.apply(fallback(headers, producer_forward_id("order-8")))
    assert depth(g3, sf_queue("g2")) == 1

"""LOCAL_FIRST, the cluster connection mode that keeps a message in the group that received it
while a consumer there has room: the pure choice (raftmq.routing.balance), the room that adverts
carry (raftmq.routing.bindings), and the broker core routing and redistributing with it."""

from __future__ import annotations

import json

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Connect, Send, Subscribe, Tick
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of, pairs_of
from raftmq.routing.balance import Candidate, choose
from raftmq.routing.bindings import Advert, Binding, decode_advert, encode_advert
from raftmq.routing.cluster_connection import LOCAL_FIRST
from raftmq.routing.route import outgoing, sf_queue
from tests.core.test_cluster_routing import core, depth, learn

Q = "/queue/hot"


# -- the choice, pure ----------------------------------------------------------------------------


def test_the_local_group_while_a_local_consumer_has_room() -> None:
    own = Candidate("g2", 1, 0, room=True)
    remote = [Candidate("g1", 1, 1), Candidate("g3", 5, 1)]
    assert choose(LOCAL_FIRST, own, remote, 7) == ("g2", False)


def test_full_local_consumers_send_the_overflow_round_robin_to_the_nearest_groups_with_room() -> None:
    own = Candidate("g1", 2, 0, room=False)
    remote = [Candidate("g3", 1, 1), Candidate("g2", 1, 1), Candidate("g4", 1, 2), Candidate("g5", 1, 1, room=False)]
    assert [choose(LOCAL_FIRST, own, remote, turn)[0] for turn in range(4)] == ["g2", "g3", "g2", "g3"]


def test_full_everywhere_the_message_waits_for_the_local_consumers() -> None:
    own = Candidate("g1", 1, 0, room=False)
    assert choose(LOCAL_FIRST, own, [Candidate("g2", 3, 1, room=False)], 0) == ("g1", False)


def test_without_a_local_consumer_it_goes_where_consumers_are_with_room_or_not() -> None:
    own = Candidate("g1", 0, 0, room=False)
    busy = [Candidate("g2", 1, 1, room=False), Candidate("g3", 1, 2, room=False)]
    assert choose(LOCAL_FIRST, own, busy, 0) == ("g2", False)
    assert choose(LOCAL_FIRST, own, [Candidate("g2", 0, 1)], 0) == ("g1", False)


# -- room on the wire ----------------------------------------------------------------------------


def test_adverts_carry_room_apart_from_the_bindings_so_older_readers_still_parse_them() -> None:
    advert = Advert("g2", 4, (("g2", 1),),
                    (Binding(Q, "g2", 1, ((None, 1),), room=False), Binding("/queue/b", "g2", 1, ())))
    text = encode_advert(advert)
    data = json.loads(text)
    assert all(len(binding) == 4 for binding in data["bindings"])
    assert data["busy"] == [[Q, "g2"]]
    assert decode_advert(text) == advert
    del data["busy"]  # an advert from a version without room: room everywhere
    assert all(binding.room for binding in decode_advert(json.dumps(data)).bindings)


# -- the core ------------------------------------------------------------------------------------


def consumer(broker: Broker, session: str, prefetch: int) -> list[Deliver]:
    broker.apply(Connect(session, 1))
    effects = broker.apply(Subscribe(session, "s", Q, 1, ACK_CLIENT_INDIVIDUAL, prefetch=prefetch))
    return [e for e in effects if isinstance(e, Deliver)]


def send(broker: Broker, n: int, now: int = 3, group: str | None = None) -> list[Deliver]:
    delivered: list[Deliver] = []
    for i in range(n):
        headers = (("n", str(i)),) if group is None else (("n", str(i)), ("JMSXGroupID", group))
        delivered += [e for e in broker.apply(Send("p", Q, block_of(headers), b"x", now)) if isinstance(e, Deliver)]
    return delivered


def test_messages_stay_local_while_the_local_consumer_has_room_then_overflow_to_a_group_with_room() -> None:
    g1 = core("g1", ["g2"], message_load_balancing=LOCAL_FIRST)
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    consumer(g2, "c2", 100)
    learn(g1, g2, "g2", "g1", 1)
    consumer(g1, "c1", 3)
    assert len(send(g1, 3)) == 3 and depth(g1, sf_queue("g2")) == 0  # ON_DEMAND would alternate
    send(g1, 4)
    assert depth(g1, sf_queue("g2")) == 4 and depth(g1, Q) == 3
    g1.check_invariants()


def test_a_full_neighbour_gets_nothing_and_the_backlog_waits_here() -> None:
    g1 = core("g1", ["g2"], message_load_balancing=LOCAL_FIRST)
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    consumer(g2, "c2", 1)
    send(g2, 2)  # g2's consumer is full and one message waits there: no room
    learn(g1, g2, "g2", "g1", 1)
    consumer(g1, "c1", 1)
    send(g1, 5)
    assert depth(g1, sf_queue("g2")) == 0 and len(g1.state.queues[Q].ready) == 4


def test_redistribution_moves_a_share_of_a_backlog_behind_full_consumers_to_a_group_with_room() -> None:
    g1 = core("g1", ["g2", "g3"], message_load_balancing=LOCAL_FIRST)
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    g3 = core("g3", ["g1"], message_load_balancing=LOCAL_FIRST)
    for neighbour in (g2, g3):
        consumer(neighbour, "busy", 1)
        send(neighbour, 2)  # full: no room yet
    learn(g1, g2, "g2", "g1", 1)
    learn(g1, g3, "g3", "g1", 1)
    consumer(g1, "c1", 1)
    send(g1, 1)
    send(g1, 3, group="G")  # a message group stays with the local consumer
    send(g1, 8)
    assert len(g1.state.queues[Q].ready) == 11
    g1.apply(Tick(10_000))
    g1.apply(Tick(20_000))
    assert depth(g1, sf_queue("g2")) + depth(g1, sf_queue("g3")) == 0  # nobody has room
    for neighbour, name in ((g2, "g2"), (g3, "g3")):  # their consumers catch up: room
        (delivery,) = [m for m in neighbour.state.sessions["busy"].deliveries.values()]
        for effect in neighbour.apply(Ack("busy", 5, ack_id=delivery.ack_id)):
            if isinstance(effect, Deliver):
                neighbour.apply(Ack("busy", 5, ack_id=effect.ack_id))
        assert not neighbour.state.queues[Q].ready
        learn(g1, neighbour, name, "g1", 2)
    g1.apply(Tick(30_000))
    g1.apply(Tick(30_000 + g1.routing.governing(Q).redistribution_delay_ms))  # type: ignore[union-attr]
    moved = depth(g1, sf_queue("g2")), depth(g1, sf_queue("g3"))
    assert moved == (4, 3)  # 11 waiting, a share for each of three groups: 11 * 2 // 3 = 7 move, round robin
    kept = list(g1.state.queues[Q].ready.values())
    assert len(kept) == 4 and sum(1 for m in kept if m.group == "G") == 3
    g1.apply(Tick(30_000 + 2 * g1.routing.governing(Q).redistribution_delay_ms - 1))  # type: ignore[union-attr]
    assert depth(g1, sf_queue("g2")) + depth(g1, sf_queue("g3")) == 7  # a new share waits a whole delay
    g1.check_invariants()


def test_the_advert_says_which_queues_have_no_room() -> None:
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    consumer(g2, "c", 2)
    g2.apply(Connect("p2", 1))
    g2.apply(Send("p2", "/queue/idle", "", b"x", 2))  # a queue without consumers: no room
    assert g2.routing is not None
    room = {b.destination: b.room for b in g2.routing.advert_for("g1", 1).bindings}
    assert room == {Q: True, "/queue/idle": False}
    send(g2, 2)
    assert {b.destination: b.room for b in g2.routing.advert_for("g1", 2).bindings}[Q] is False


def test_a_waiting_message_means_no_room_even_beside_a_consumer_with_room_for_others() -> None:
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    g2.apply(Connect("c", 1))
    g2.apply(Subscribe("c", "s", Q, 1, ACK_CLIENT_INDIVIDUAL, prefetch=5, selector="color = 'red'"))
    assert g2.routing is not None
    assert [b.room for b in g2.routing.advert_for("g1", 1).bindings] == [True]
    g2.apply(Send("p", Q, block_of((("color", "blue"),)), b"x", 2))  # nobody here takes it: it waits
    assert [b.room for b in g2.routing.advert_for("g1", 2).bindings] == [False]


def test_each_group_counts_what_it_sent_on_and_what_arrived_and_snapshots_keep_it() -> None:
    g1 = core("g1", ["g2"], message_load_balancing=LOCAL_FIRST)
    g2 = core("g2", ["g1"], message_load_balancing=LOCAL_FIRST)
    consumer(g2, "c2", 100)
    learn(g1, g2, "g2", "g1", 1)
    consumer(g1, "c1", 2)
    send(g1, 5)  # 2 stay, 3 go on to g2
    counters = g1.stats()["destinations"][Q]
    assert (counters["enqueued"], counters["forwarded"], counters["arrived"]) == (2, 3, 0)
    (sf,) = [e for e in g1.apply(Subscribe("link", "sf", sf_queue("g2"), 4, ACK_CLIENT_INDIVIDUAL))
             if isinstance(e, Deliver)][:1]
    destination, headers = outgoing(pairs_of(sf.message.headers), sf.message.message_id, "g2", True)
    g2.apply(Connect("link", 1, login="cluster"))
    g2.apply(Send("link", destination, block_of(tuple(headers)), b"x", 5))
    counters = g2.stats()["destinations"][Q]
    assert (counters["enqueued"], counters["arrived"], counters["forwarded"]) == (1, 1, 0)
    restored = Broker.restore(g1.snapshot(), g1.config)
    assert restored.stats()["destinations"][Q]["forwarded"] == 3
    dump = g1.snapshot()
    for key in ("sent_on", "arrived"):  # a snapshot from before these counters
        del dump["federation"][key]
    assert Broker.restore(dump, g1.config).stats()["destinations"][Q]["forwarded"] == 0
    alone = Broker(g1.config.__class__(broker_name="solo"))
    alone.apply(Connect("p", 1))
    alone.apply(Send("p", Q, "", b"x", 2))
    assert "forwarded" not in alone.stats()["destinations"][Q]  # not in a cluster: no such counters

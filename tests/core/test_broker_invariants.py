"""`Broker.check_invariants` catches the corruptions it exists for (each test breaks one rule in
a real broker's state and expects the check to name it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from raftmq.core.broker import Broker
from raftmq.core.commands import Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.errors import InvariantViolated
from raftmq.protocol.header_block import block_of


def busy_broker() -> Broker:
    broker = Broker(CoreConfig(broker_name="inv"))
    broker.apply(Connect("p", 1, None, None))
    broker.apply(Connect("c", 1, None, None))
    broker.apply(Subscribe("c", "s1", "/queue/a", 1, ack="client-individual", prefetch=2))
    broker.apply(Subscribe("c", "t1", "/topic/t", 1))
    for i in range(5):
        broker.apply(Send("p", "/queue/a", block_of((("expires", "9999999"),) if i % 2 else ()), f"m{i}".encode(), 2))
        broker.apply(Send("p", "/topic/t", "", b"t", 2))
    broker.check_invariants()
    return broker


def _lose_a_delivery(broker: Broker) -> None:
    session = broker.state.sessions["c"]
    ack_id = next(iter(session.deliveries))
    del session.deliveries[ack_id]


def _deliver_while_ready(broker: Broker) -> None:
    store = broker.state.queues["/queue/a"]
    delivery = next(iter(broker.state.sessions["c"].deliveries.values()))
    store.ready[10**9] = delivery.message
    store.lanes[delivery.message.priority].append(10**9)


def _miscount_in_flight(broker: Broker) -> None:
    broker.state.queues["/queue/a"].in_flight += 1


def _miscount_expiring(broker: Broker) -> None:
    broker.state.expiring += 1


def _orphan_a_subscription(broker: Broker) -> None:
    sub = broker.state.sessions["c"].subs["s1"]
    sub.session = None


def _negative_counter(broker: Broker) -> None:
    broker.state.queues["/queue/a"].dequeued = -1


def _miscount_tombstones(broker: Broker) -> None:
    broker.state.queues["/queue/a"].tombstones += 1


def _unindex_an_expiring_message(broker: Broker) -> None:
    store = broker.state.queues["/queue/a"]
    state = broker.state
    live = [entry for entry in state.expiry_heap if entry[2] is store and entry[1] in store.ready]
    state.expiry_heap.remove(live[0])
    state.expiring -= 1  # the count agrees: only the index is wrong


def _leave_a_pass_pending(broker: Broker) -> None:
    broker.state.queues["/queue/a"].pending = True


def _end_a_session_under_its_subscriptions(broker: Broker) -> None:
    del broker.state.sessions["c"]


def _reorder_deliveries(broker: Broker) -> None:
    session = broker.state.sessions["c"]
    session.deliveries = dict(reversed(session.deliveries.items()))


def _miscount_shadowed(broker: Broker) -> None:
    session = broker.state.sessions["c"]
    delivery = next(iter(session.deliveries.values()))
    assert session.find_by_message(delivery.message.message_id, None) is delivery  # builds the index
    session.shadowed += 1


def _give_a_group_to_no_one(broker: Broker) -> None:
    broker.state.queues["/queue/a"].groups["g"] = broker.state.sessions["c"].subs["s1"]


def _crown_a_plain_consumer(broker: Broker) -> None:
    broker.state.queues["/queue/a"].exclusive = broker.state.sessions["c"].subs["s1"]


def _lose_the_round_robin(broker: Broker) -> None:
    broker.state.queues["/queue/a"].rr = 7


def _enqueue_from_nowhere(broker: Broker) -> None:
    broker.state.queues["/queue/a"].enqueued += 1


def _overfill_a_consumer(broker: Broker) -> None:
    broker.state.sessions["c"].subs["s1"].prefetch = 1


def _leave_a_message_behind(broker: Broker) -> None:
    sub = broker.state.sessions["c"].subs["s1"]
    assert broker.state.queues["/queue/a"].ready and broker.state.queues["/queue/a"].stable
    sub.prefetch += 1  # room, and no dispatch pass to use it


def _remember_too_much(broker: Broker) -> None:
    broker.state.dedup.remember("/queue/a", "one")
    broker.state.dedup.capacity = 0


def _unpublish(broker: Broker) -> None:
    broker.state.topics["/topic/t"].retired["expired"] = -1


@pytest.mark.parametrize(
    ("corrupt", "named"),
    [
        (_lose_a_delivery, "unknown to any session"),
        (_deliver_while_ready, "both ready and in flight"),
        (_miscount_in_flight, "counted in flight"),
        (_miscount_expiring, "expiring"),
        (_orphan_a_subscription, "is not its own"),
        (_negative_counter, "negative counter"),
        (_miscount_tombstones, "tombstones counted"),
        (_unindex_an_expiring_message, "missing from the expiry heap"),
        (_leave_a_pass_pending, "dispatch pass left"),
        (_end_a_session_under_its_subscriptions, "session that ended"),
        (_reorder_deliveries, "out of delivery order"),
        (_miscount_shadowed, "shadowed"),
        (_give_a_group_to_no_one, "owned by no consumer"),
        (_crown_a_plain_consumer, "exclusive consumer"),
        (_lose_the_round_robin, "round-robin"),
        (_enqueue_from_nowhere, "6 enqueued but 0 gone, 3 ready, 0 paged, 2 in flight"),
        (_overfill_a_consumer, "2 deliveries in flight, prefetch 1"),
        (_remember_too_much, "1 duplicate-detection ids remembered, capacity 0"),
        (_unpublish, "/topic/t: a negative counter"),
        (_leave_a_message_behind, "stable, yet s1 has room for ready message inv-5"),
    ],
)
def test_a_broken_rule_is_named(corrupt: Callable[[Broker], None], named: str) -> None:
    broker = busy_broker()
    corrupt(broker)
    with pytest.raises(InvariantViolated, match=named):
        broker.check_invariants()


def test_a_restored_broker_is_consistent() -> None:
    broker = busy_broker()
    Broker.restore(broker.snapshot(), broker.config).check_invariants()

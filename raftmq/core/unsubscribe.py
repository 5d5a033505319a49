"""Ending subscriptions: a session that ends, an UNSUBSCRIBE, an operator's drop. Part of the
pure core (raftmq.core.broker applies the commands that call these)."""

from __future__ import annotations

from raftmq.core import shares
from raftmq.core.dispatch import Dispatcher
from raftmq.core.message import Message
from raftmq.core.model import Delivery, Session, Subscription
from raftmq.core.state import BrokerState
from raftmq.routing.route import is_internal


def end_subscriptions(state: BrokerState, dispatch: Dispatcher, session: Session, subs: list[Subscription],
                      deliveries: list[Delivery], drop_durable: bool) -> None:
    """Stop `subs` consuming; return `deliveries` (theirs, in delivery order) to their stores."""
    returning = dispatch.take_back(session, deliveries)
    for sub in subs:
        del session.subs[sub.sub_id]
        store = sub.store
        if sub.children is not None:  # a wildcard queue subscription: each child leaves its queue
            dispatch.queue_patterns.end(sub)
            for child in sub.children.values():
                child.store.remove_consumer(child)
                child.session = None
                dispatch.mark(child.store)
        elif store.shared:
            store.remove_consumer(sub)
            if state.shares:
                shares.left(state, dispatch, sub, drop_durable)
            if not store.stable and store.destination in state.queues:
                dispatch.mark(store)
        elif sub.durable_name is not None and not drop_durable:
            store.consumers.clear()
            store.woken.clear()
            sub.session = None
        else:
            drop_topic_subscription(state, dispatch, sub, returning.pop(store, []))
    for store, messages in returning.items():
        # A store-and-forward queue's consumer is a bridge: its session ending (a reconnect,
        # a new leader) says nothing about the message, which may already be stored at the
        # neighbour; dead-lettering it after a few of those would store it twice. Only a
        # refusal (a NACK) counts towards the dead-letter queue there.
        dispatch.requeue(store, messages, may_dead_letter=not is_internal(store.destination), returned=True)


def drop_topic_subscription(state: BrokerState, dispatch: Dispatcher, sub: Subscription,
                            taken_back: list[Message]) -> None:
    """Drop a topic subscription and what it collected (`taken_back`: its deliveries, returned)."""
    store = sub.store
    share = state.shares.get(store.destination) if store.shared else None
    if share is not None:  # a share's anchor (an operator deleting the topic): the share goes
        return shares.drop(state, dispatch, share)
    topic = state.topics[sub.destination]
    del topic.subs[sub]
    if sub.durable_name is not None and state.durables.get(sub.durable_name) is sub:
        del state.durables[sub.durable_name]
    topic.retire(store, dispatch.discard(store, taken_back))
    store.consumers.clear()
    store.woken.clear()
    sub.session = None

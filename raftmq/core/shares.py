"""Shared subscriptions: MQTT's `$share/GROUP/FILTER`, competing consumers of one copy of what a
topic gets. Part of the pure core (raftmq.core.broker applies `Share`; the MQTT session proposes it).

A share is named by its group and topic destination (a pattern where the filter has wildcards).
Its messages wait in a queue of its own, `/queue/$.raftmq.share.<n>` (internal: no client may
name it), which an *anchor* fills: an inactive subscription of the topic, copying each message the
topic gets into the queue as a durable subscription copies into its own store. The sessions that
share it are the queue's consumers, so they compete as a queue's do (round robin, each its
prefetch), and what one of them held when it left goes back to the queue for the others.

A share lives while it has a holder: a session that shares it (until its consumer ends), or a
session the client keeps (until an Unsubscribe with `drop_durable`); while only kept sessions
hold it, the queue keeps collecting. The last holder gone, the share and what it collected go.
No retained message goes to a shared subscription (MQTT: they are not sent to shares).
"""

from __future__ import annotations

from collections.abc import Callable

from raftmq.core.commands import ACK_MODES, Share
from raftmq.core.dispatch import Dispatcher
from raftmq.core.model import Session, Subscription
from raftmq.core.model import Share as SharedSubscription
from raftmq.core.state import BrokerState
from raftmq.core.validation import TOPIC_PREFIX, Refused, check_wildcards, is_valid_destination

QUEUE_PREFIX = "/queue/$.raftmq.share."

Reject = Callable[[str, str, str, "str | None"], None]
Done = Callable[[str, "str | None"], None]


def join(state: BrokerState, dispatch: Dispatcher, command: Share, reject: Reject, done: Done) -> None:
    """Apply a `Share`: the share made where it is not there yet, the holder added, the session's
    consumer of its queue subscribed."""
    session = state.sessions.get(command.session)
    if session is None:
        return reject(command.session, "not connected", "unknown or closed session", command.receipt)
    problem = _problem(session, command)
    if problem is not None:
        return reject(session.session_id, "invalid shared subscription", problem, command.receipt)
    share = find(state, command.group, command.destination) or _make(state, dispatch, command)
    store = share.anchor.store
    holder = command.holder if command.holder is not None else session.session_id
    share.holders[holder] = command.ack
    prefetch = command.prefetch or dispatch.config.default_prefetch
    sub = Subscription(session, command.sub_id, share.queue, command.ack, prefetch, None, False, None, store)
    session.subs[command.sub_id] = sub
    share.members[sub] = holder
    store.add_consumer(sub)
    dispatch.wake(store, sub)
    done(session.session_id, command.receipt)


def _problem(session: Session, command: Share) -> str | None:
    destination = command.destination
    if not destination.startswith(TOPIC_PREFIX) or not is_valid_destination(destination):
        return f"{destination}: a share is of a topic"
    try:
        check_wildcards(destination, subscribing=True)
    except Refused as refused:
        return refused.detail
    if not command.group:
        return "a share needs a group name"
    if command.ack not in ACK_MODES:
        return f"unknown ack mode {command.ack}"
    if command.prefetch < 0:
        return f"prefetch {command.prefetch}"
    if command.sub_id in session.subs:
        return f"subscription id {command.sub_id} is in use"
    return None


def find(state: BrokerState, group: str, destination: str) -> SharedSubscription | None:
    for share in state.shares.values():
        if share.group == group and share.destination == destination:
            return share
    return None


def _make(state: BrokerState, dispatch: Dispatcher, command: Share) -> SharedSubscription:
    state.share_seq += 1
    queue = f"{QUEUE_PREFIX}{state.share_seq}"
    store = dispatch.queue(queue)
    anchor = Subscription(None, queue, command.destination, "auto", 0, None, False, None, store)
    dispatch.topic(command.destination).subs[anchor] = None
    share = state.shares[queue] = SharedSubscription(command.group, command.destination, queue, anchor)
    return share


def left(state: BrokerState, dispatch: Dispatcher, sub: Subscription, drop_durable: bool) -> None:
    """`sub`, a consumer of a queue, has left it (raftmq.core.unsubscribe): where it was a share's
    member, its holder goes too (unless another of its consumers stands for it, or a kept session
    holds the share through it: `drop_durable` lets go of that one as well); the share goes with
    its last holder."""
    share = state.shares.get(sub.store.destination)
    if share is None:
        return
    holder = share.members.pop(sub, None)
    if holder is None:
        return
    session = sub.session
    if holder in share.members.values():
        return  # another of the session's consumers stands for it still
    if drop_durable or (session is not None and holder == session.session_id):
        share.holders.pop(holder, None)
    if not share.holders:
        drop(state, dispatch, share)


def drop(state: BrokerState, dispatch: Dispatcher, share: SharedSubscription) -> None:
    """The share and what its queue holds go (its members are gone)."""
    store = share.anchor.store
    topic = state.topics[share.destination]
    del topic.subs[share.anchor]
    topic.retire(store, dispatch.discard(store))
    del state.queues[share.queue]
    del state.shares[share.queue]


def kept(state: BrokerState, prefix: str) -> list[tuple[str, SharedSubscription, str | None]]:
    """(holder, share, the session consuming for it or None) of each holder named with `prefix`
    (a client's kept session), in holder order."""
    found = []
    for share in state.shares.values():
        for holder in share.holders:
            if holder.startswith(prefix):
                consumer = next((sub.session.session_id for sub, h in share.members.items()
                                 if h == holder and sub.session is not None), None)
                found.append((holder, share, consumer))
    return sorted(found, key=lambda item: item[0])

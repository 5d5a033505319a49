"""Operators' changes, as committed commands: what `Manage` does (the admin API,
raftmq.server.admin.management, proposes it once it has checked who asks).

Each op answers with one `Managed` effect for the request: what it did, or why it did not.
Work per command is bounded: a retry or move takes at most `MAX_MOVED` messages and says
whether more matched (the API asks again). Deterministic like the rest of the core: every
walk is over insertion-ordered dicts and deques.

- create: an empty queue or topic (a no-op when it exists);
- purge: every ready (and held-back) message of a queue, or of each subscription of a topic,
  counted as dequeued; messages in flight stay with their consumers;
- delete: the destination and its counters; its consumers' sessions get an ERROR and end (their
  in-flight messages return first, then go with the rest), a topic's durable subscriptions
  are dropped;
- retry / move: ready messages back to their `original-destination` (dead-letter and expiry
  queues set it) or to `target`, published as new SENDs would be (routed over cluster
  connections too) without a second duplicate check, without the headers of their death
  (raftmq.core.dead_letter);
- close: a client session ends with an ERROR, as a Disconnect would end it.
"""

from __future__ import annotations

from typing import Protocol

from raftmq.core.commands import Manage
from raftmq.core.dead_letter import HEADERS, ORIGINAL_DESTINATION
from raftmq.core.dispatch import Dispatcher
from raftmq.core.effects import Managed
from raftmq.core.model import PRIORITY_LEVELS, Store, Subscription, selector_headers
from raftmq.core.selector import compile_selector
from raftmq.core.state import BrokerState
from raftmq.core.validation import QUEUE_PREFIX, Refused, is_valid_destination, is_wildcard
from raftmq.errors import SelectorError
from raftmq.protocol.header_block import first, without
from raftmq.routing.route import is_internal

MAX_MOVED = 10_000
CLOSED_BY_ADMIN = "closed by an administrator"


class Broker(Protocol):
    """What these ops need of `raftmq.core.broker.Broker` (which imports this module)."""

    state: BrokerState
    dispatch: Dispatcher

    def has_destination(self, destination: str) -> bool: ...

    def refuse_session(self, session_id: str, message: str, detail: str) -> None: ...

    def drop_topic_subscription(self, sub: Subscription) -> None: ...

    def publish_again(self, destination: str, headers: str, body: object, now: int) -> None: ...


def apply_manage(broker: Broker, command: Manage) -> None:
    handler = _OPS.get(command.op)
    effects = broker.dispatch.effects
    try:
        if handler is None:
            raise Refused("unknown operation", command.op)
        counts = handler(broker, command)
    except Refused as refused:
        effects.append(Managed(command.request, f"{refused.message}: {refused.detail}"))
        return
    if broker.dispatch.dirty:
        broker.dispatch.run()
    effects.append(Managed(command.request, None, counts))


def _checked(destination: str, what: str) -> str:
    if not is_valid_destination(destination) or is_wildcard(destination):
        raise Refused("invalid destination", f"{destination!r}: {what} a /queue/NAME or /topic/NAME without wildcards")
    if is_internal(destination):
        raise Refused("reserved destination", f"{destination}: belongs to the cluster's bridges")
    return destination


def _exists(broker: Broker, destination: str) -> None:
    if not broker.has_destination(_checked(destination, "name")):
        raise Refused("no such destination", destination)


def _create(broker: Broker, command: Manage) -> tuple[tuple[str, int], ...]:
    destination = _checked(command.destination, "create")
    created = not broker.has_destination(destination)
    if destination.startswith(QUEUE_PREFIX):
        broker.dispatch.queue(destination)
    else:
        broker.dispatch.topic(destination)
    return (("created", int(created)),)


def _stores(broker: Broker, destination: str) -> list[Store]:
    state = broker.state
    if destination.startswith(QUEUE_PREFIX):
        return [state.queues[destination]]
    return [sub.store for sub in state.topics[destination].subs]


def _purge_store(broker: Broker, store: Store) -> int:
    purged = broker.dispatch.discard(store)
    store.dequeued += purged
    return purged


def _purge(broker: Broker, command: Manage) -> tuple[tuple[str, int], ...]:
    _exists(broker, command.destination)
    return (("purged", sum(_purge_store(broker, store) for store in _stores(broker, command.destination))),)


def _delete(broker: Broker, command: Manage) -> tuple[tuple[str, int], ...]:
    destination = command.destination
    _exists(broker, destination)
    state = broker.state
    consuming = [sub.session.session_id for store in _stores(broker, destination) for sub in store.consumers
                 if sub.session is not None]
    for session_id in dict.fromkeys(consuming):
        broker.refuse_session(session_id, "destination deleted", f"{destination} was deleted by an administrator")
    purged = sum(_purge_store(broker, store) for store in _stores(broker, destination))
    if destination.startswith(QUEUE_PREFIX):
        del state.queues[destination]
    else:
        for sub in list(state.topics[destination].subs):
            broker.drop_topic_subscription(sub)
        del state.topics[destination]
        broker.dispatch.patterns.pop(destination, None)
    return (("deleted", 1), ("purged", purged))


def _move(broker: Broker, command: Manage) -> tuple[tuple[str, int], ...]:
    source = command.destination
    _exists(broker, source)
    if not source.startswith(QUEUE_PREFIX):
        raise Refused("not a queue", f"{source}: messages are moved from queues")
    target = _checked(command.target, "move to") if command.op == "move" and command.target else None
    if command.op == "move" and target is None:
        raise Refused("no target", "a move names the destination to move to")
    if not (command.ids or command.selector or command.every):
        raise Refused("nothing chosen", "name message ids, a selector, or every message")
    try:
        selector = compile_selector(command.selector) if command.selector else None
    except SelectorError as exc:
        raise Refused("invalid selector", str(exc)) from None
    wanted = set(command.ids)
    store = broker.state.queues[source]
    chosen: list[int] = []
    more = 0
    for priority in range(PRIORITY_LEVELS - 1, -1, -1):
        for token in store.lanes[priority]:
            message = store.ready.get(token)
            if message is None or (wanted and message.message_id not in wanted):
                continue
            if selector is not None and not selector.matches(selector_headers(message)):
                continue
            if len(chosen) == MAX_MOVED:
                more = 1
                break
            chosen.append(token)
    if store.tail is not None:
        more = 1  # paged messages are looked at once they are paged in: ask again
    moved = skipped = 0
    for token in chosen:
        message = store.ready[token]
        origin = first(message.headers, ORIGINAL_DESTINATION)
        to = target if target is not None else origin
        if to is None or not is_valid_destination(to) or is_wildcard(to) or is_internal(to):
            skipped += 1  # a retry of a message that never had another home: it stays
            continue
        broker.dispatch.take_ready(store, token)
        headers = without(message.headers, HEADERS)  # a fresh start
        broker.publish_again(to, headers, message.body, command.now)
        moved += 1
    store.maybe_compact()
    return (("moved", moved), ("skipped", skipped), ("more", more))


def _close(broker: Broker, command: Manage) -> tuple[tuple[str, int], ...]:
    closing = command.closing
    if closing is None or closing not in broker.state.sessions:
        return (("closed", 0),)
    broker.refuse_session(closing, CLOSED_BY_ADMIN, "")
    return (("closed", 1),)


_OPS = {"create": _create, "purge": _purge, "delete": _delete, "retry": _move, "move": _move, "close": _close}

"""Snapshots of the broker core's state as plain data (dicts, lists, str, int, bool, None, bytes).

The format keeps everything that decides future effects: counters, the order of sessions,
subscriptions, consumers, ready messages (with their entry tokens) and in-flight deliveries,
round-robin positions, group owners, the dedup cache and the `stable` flags. Derived indexes
(the expiry heap, per-session ack indexes, in-flight counts) are rebuilt on restore.

Subscriptions are listed once and referred to by position, because one subscription appears
in several places (its session, its queue's consumers, its topic, group owners).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from heapq import heapify
from typing import Any

from raftmq.core.cluster_state import ClusterState
from raftmq.core.commands import Will
from raftmq.core.config import CoreConfig
from raftmq.core.dedup import DedupCache
from raftmq.core.message import body_size, dump_message, load_message
from raftmq.core.model import (
    PRIORITY_LEVELS,
    Delivery,
    Lifetime,
    Session,
    Share,
    Store,
    Subscription,
    Topic,
    TransactionOp,
)
from raftmq.core.paging import Page, PageStore, Tail, decode_page
from raftmq.core.paging import journal_indexes as journal_indexes_of
from raftmq.core.schedule import Job
from raftmq.core.selector import compile_selector
from raftmq.core.state import BrokerState
from raftmq.errors import SelectorError, SnapshotError
from raftmq.protocol.header_block import user_block

# Format 2 holds messages' headers as blocks (raftmq.protocol.header_block); format 1, still
# read, as lists of pairs. A release that reads only format 1 refuses a format-2 snapshot.
FORMAT = 2
HEADER_PAIRS_FORMAT = 1

_STORE_COUNTERS = ("enqueued", "dequeued", "expired", "dead_lettered")


# -- dump ----------------------------------------------------------------------------------------


def _dump_store(store: Store, position: dict[int, int]) -> dict[str, Any]:
    ready = store.ready
    record: dict[str, Any] = {
        "destination": store.destination,
        "lanes": [[[token, dump_message(ready[token])] for token in lane if token in ready] for lane in store.lanes],
        "rr": store.rr,
        "stable": store.stable,
    }
    for counter in _STORE_COUNTERS:
        record[counter] = getattr(store, counter)
    if store.delayed:  # only then: a snapshot without any reads as it always did
        record["delayed"] = [[token, due, dump_message(message)] for token, (due, message) in store.delayed.items()]
    if store.tail is not None:  # only then, as for "delayed"
        record["tail"] = _dump_tail(store.tail)
    if store.shared:
        record["consumers"] = [position[id(sub)] for sub in store.consumers]
        record["groups"] = [[group, position[id(owner)]] for group, owner in store.groups.items()]
    return record


def _dump_tail(tail: Tail) -> dict[str, Any]:
    """A store's paged messages: each sealed page as its compressed bytes (with what a reader
    needs without decoding it), the open list as messages."""
    return {
        "count": tail.count,
        "pages": [[page.count, page.min_expires, page.indexes, tail.store.dump(page.handle), page.bytes]
                  for page in tail.pages],
        "open": [dump_message(message) for message in tail.open],
    }


def _load_tail(record: dict[str, Any], pages: PageStore) -> Tail:
    tail = Tail.restored(
        pages, [Page(pages.load(dumped), int(count), int(min_expires), [int(i) for i in indexes], int(size))
                for count, min_expires, indexes, dumped, size in record["pages"]],
        [load_message(message) for message in record["open"]], int(record["count"]))
    if tail.count != sum(page.count for page in tail.pages) + len(tail.open) or not tail.count:
        raise SnapshotError(f"a paged store counts {tail.count} messages but holds another number")
    return tail


def _dump_op(op: TransactionOp) -> list[Any]:
    if op[0] == "send":
        _, destination, headers, body, now = op
        return ["send", destination, headers, body, now]
    return [op[0], op[1]]


def dump_state(state: BrokerState) -> dict[str, Any]:
    # Every subscription is reachable from a session (active) or a topic (inactive durable).
    subs: list[Subscription] = []
    position: dict[int, int] = {}
    for session in state.sessions.values():
        for sub in session.subs.values():
            for listed in (sub, *(sub.children.values() if sub.children is not None else ())):
                position[id(listed)] = len(subs)
                subs.append(listed)
    for topic in state.topics.values():
        for sub in topic.subs:
            if id(sub) not in position:
                position[id(sub)] = len(subs)
                subs.append(sub)
    data: dict[str, Any] = {
        "format": FORMAT,
        "message_seq": state.message_seq,
        "delivery_seq": state.delivery_seq,
        "entry_seq": state.entry_seq,
        "dedup": state.dedup.dump(),
        "subscriptions": [
            {
                "session": sub.session.session_id if sub.session is not None else None,
                "sub_id": sub.sub_id,
                "destination": sub.destination,
                "ack": sub.ack,
                "prefetch": sub.prefetch,
                "selector": sub.selector.text if sub.selector is not None else None,
                "exclusive": sub.exclusive,
                "durable_name": sub.durable_name,
                "in_flight": [[d.seq, dump_message(d.message)] for d in sub.in_flight.values()],
                "store": None if sub.store.shared else _dump_store(sub.store, position),
                # A wildcard queue subscription lists its children (each a consumer of its queue).
                **({"children": [position[id(child)] for child in sub.children.values()]}
                   if sub.children is not None else {}),
            }
            for sub in subs
        ],
        "sessions": [
            {
                "id": session.session_id,
                "login": session.login,
                "client_id": session.client_id,
                "subs": [position[id(sub)] for sub in session.subs.values()],
                "transactions": [[name, [_dump_op(op) for op in ops]] for name, ops in session.transactions.items()],
            }
            for session in state.sessions.values()
        ],
        "queues": [_dump_store(store, position) for store in state.queues.values()],
        "topics": [
            {
                "destination": topic.destination,
                "subs": [position[id(sub)] for sub in topic.subs],
                "published": topic.published,
                "retired": dict(topic.retired),
            }
            for topic in state.topics.values()
        ],
        "durables": [[name, position[id(sub)]] for name, sub in state.durables.items()],
    }
    # Only a group in a cluster has any: a broker on its own writes what it always wrote.
    if not state.cluster.is_empty():
        data["federation"] = state.cluster.dump()  # the key's older name: snapshots keep their format
    if state.dropped:  # only then: a snapshot without any reads as it always did
        data["dropped"] = dict(state.dropped)
    if state.job_seq:
        data["job_seq"] = state.job_seq
        data["jobs"] = [job.dump() for job in state.jobs.values()]
    if state.retained:  # only then: a snapshot without any reads as it always did
        data["retained"] = [[topic, dump_message(message)] for topic, message in state.retained.items()]
    if state.once:  # likewise
        data["once"] = list(state.once)
    if state.shares:  # likewise
        data["shares"] = [[share.queue, share.group, share.destination, position[id(share.anchor)],
                           list(share.holders.items()),
                           [[position[id(sub)], holder] for sub, holder in share.members.items()]]
                          for share in state.shares.values()]
        data["share_seq"] = state.share_seq
    if state.lifetimes or state.delayed_wills:  # likewise
        data["lifetimes"] = [[key, life.session, life.after_ms, life.due] for key, life in state.lifetimes.items()]
        data["delayed_wills"] = [[key, due, w.session, w.destination, w.headers, w.body, w.now, w.delay_ms]
                                 for key, (due, w) in state.delayed_wills.items()]
    if state.wills:  # likewise
        data["wills"] = [[w.session, w.destination, w.headers, w.body, w.now, w.delay_ms] for w in state.wills.values()]
    return data


# -- load ----------------------------------------------------------------------------------------


def _load_store(record: dict[str, Any], shared: bool, pages: PageStore) -> Store:
    store = Store(record["destination"], shared)
    if "tail" in record:
        store.tail = _load_tail(record["tail"], pages)
    if len(record["lanes"]) != PRIORITY_LEVELS:
        raise SnapshotError(f"store {store.destination}: expected {PRIORITY_LEVELS} priority lanes")
    for priority, entries in enumerate(record["lanes"]):
        lane = store.lanes[priority] = deque()
        for token, message in entries:
            lane.append(token)
            store.ready[token] = load_message(message)
    store.rr = record["rr"]
    store.stable = record["stable"]
    for counter in _STORE_COUNTERS:
        setattr(store, counter, record[counter])
    for token, due, message in record.get("delayed", ()):
        store.delayed[token] = (due, load_message(message))
    store.bytes = (sum(body_size(m.body) for m in store.ready.values())
                   + sum(body_size(m.body) for _, m in store.delayed.values())
                   + (store.tail.bytes if store.tail is not None else 0))  # in-flight ones are added as they load
    return store


def _load_op(record: list[Any]) -> TransactionOp:
    if record[0] == "send":
        _, destination, headers, body, now = record
        # Pairs: headers written before blocks.
        block = headers if isinstance(headers, str) else user_block((name, value) for name, value in headers)
        return ("send", destination, block, body, now)
    return (record[0], record[1])


def load_state(state: BrokerState, data: dict[str, Any], config: CoreConfig) -> BrokerState:
    """Fill a fresh `state` from `data` (a `dump_state` result, possibly via msgpack)."""
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, HEADER_PAIRS_FORMAT):
        raise SnapshotError(f"not a broker snapshot of format {HEADER_PAIRS_FORMAT} or {FORMAT}")
    try:
        return _load(state, data, config)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, SelectorError) as error:
        raise SnapshotError(f"malformed broker snapshot: {error!r}") from error


def _load(state: BrokerState, data: dict[str, Any], config: CoreConfig) -> BrokerState:
    state.message_seq = data["message_seq"]
    state.delivery_seq = data["delivery_seq"]
    state.entry_seq = data["entry_seq"]
    state.dedup = DedupCache.load(config.dedup_cache_size, data["dedup"])

    # A queue subscription's store is the queue that lists it among its consumers.
    queue_of: dict[int, Store] = {}
    for record in data["queues"]:
        store = state.queues[record["destination"]] = _load_store(record, shared=True, pages=state.pages)
        for index in record["consumers"]:
            queue_of[index] = store
    for queue, *_rest, anchor, _holders, _members in data.get("shares", ()):
        queue_of[anchor] = state.queues[queue]  # a share's anchor copies into its queue

    subs: list[Subscription] = []
    for index, record in enumerate(data["subscriptions"]):
        selector = compile_selector(record["selector"]) if record["selector"] is not None else None
        if "children" in record:  # a wildcard queue subscription: it consumes through its children
            store = Store(record["destination"], shared=True)
        else:
            store = (_load_store(record["store"], shared=False, pages=state.pages) if record["store"] is not None
                     else queue_of[index])
        sub = Subscription(
            None,
            record["sub_id"],
            record["destination"],
            record["ack"],
            record["prefetch"],
            selector,
            record["exclusive"],
            record["durable_name"],
            store,
        )
        subs.append(sub)
    for sub, record in zip(subs, data["subscriptions"]):
        if "children" in record:
            sub.children = {}
            for index in record["children"]:
                child = subs[index]
                child.parent = sub
                sub.children[child.destination] = child

    for record in data["queues"]:
        store = state.queues[record["destination"]]
        store.consumers.extend(subs[index] for index in record["consumers"])
        store.exclusive = next((sub for sub in store.consumers if sub.exclusive), None)
        for group, index in record["groups"]:
            store.groups[group] = subs[index]
            subs[index].groups[group] = None

    for record in data["sessions"]:
        session = state.sessions[record["id"]] = Session(record["id"], record["login"], record["client_id"])
        for index in record["subs"]:
            sub = subs[index]
            session.subs[sub.sub_id] = sub
            for consumer in (sub, *sub.consumers()):
                consumer.session = session
            if not sub.store.shared:
                sub.store.consumers.append(sub)
        for name, ops in record["transactions"]:
            session.transactions[name] = [_load_op(op) for op in ops]

    # In-flight deliveries; each session's ack index is in delivery (= ack id) order.
    per_session: dict[str, list[Delivery]] = {}
    for sub, record in zip(subs, data["subscriptions"]):
        for seq, message in record["in_flight"]:
            delivery = Delivery(seq, str(seq), sub, load_message(message))
            sub.in_flight[delivery.ack_id] = delivery
            sub.store.in_flight += 1
            sub.store.bytes += body_size(delivery.message.body)
            if sub.session is None:
                raise SnapshotError(f"subscription {sub.sub_id}: deliveries in flight to no session")
            per_session.setdefault(sub.session.session_id, []).append(delivery)
    for session_id, deliveries in per_session.items():
        session = state.sessions[session_id]
        for delivery in sorted(deliveries, key=lambda d: d.seq):
            session.add_delivery(delivery)

    for record in data["topics"]:
        topic = state.topics[record["destination"]] = Topic(record["destination"])
        for index in record["subs"]:
            topic.subs[subs[index]] = None
        topic.published = record["published"]
        topic.retired.update(record["retired"])
    for name, index in data["durables"]:
        state.durables[name] = subs[index]

    if "federation" in data:
        state.cluster = ClusterState.load(data["federation"])
    state.dropped = {str(name): int(count) for name, count in data.get("dropped", {}).items()}
    state.job_seq = data.get("job_seq", 0)
    for record in data.get("jobs", ()):
        job = Job.load(record)
        state.jobs[job.seq] = job
    for topic, message in data.get("retained", ()):
        state.retained[topic] = load_message(message)
    state.once = dict.fromkeys(str(key) for key in data.get("once", ()))
    for queue, group, destination, anchor, holders, members in data.get("shares", ()):
        share = state.shares[queue] = Share(group, destination, queue, subs[anchor])
        share.holders.update((str(holder), str(ack)) for holder, ack in holders)
        share.members.update((subs[index], str(holder)) for index, holder in members)
    state.share_seq = data.get("share_seq", 0)
    for key, session, after_ms, due in data.get("lifetimes", ()):
        state.lifetimes[key] = Lifetime(session, after_ms, due)
    for key, due, session, destination, headers, body, now, delay_ms in data.get("delayed_wills", ()):
        state.delayed_wills[key] = (due, Will(session, destination, headers, bytes(body), now, delay_ms))
    state.lifetime_of = {life.session: key for key, life in state.lifetimes.items()  # (derived: lifetimes.index)
                         if life.due < 0 and life.session in state.sessions}
    for session, destination, headers, body, now, delay_ms in data.get("wills", ()):
        state.wills[session] = Will(session, destination, headers, bytes(body), now, delay_ms)
    state.rebuild_expiry_index()
    state.redelivery_heap = [(due, token, store) for store in state.stores()
                             for token, (due, _) in store.delayed.items()]
    heapify(state.redelivery_heap)
    return state


def journal_refs(dump: dict[str, Any], read_page: Callable[[Any], bytes] | None = None) -> Iterator[Any]:
    """The body-journal references among `body_refs` (in a group, a message the core made
    itself — a moved durable subscription's empty marker — holds its bytes instead)."""
    return (ref for ref in body_refs(dump, read_page) if not isinstance(ref, (bytes, bytearray)))


def body_refs(dump: dict[str, Any], read_page: Callable[[Any], bytes] | None = None) -> Iterator[Any]:
    """Every message body held in a `Broker.snapshot()` dict (format 1), as stored: the bytes,
    or in a group the body journal's `(raft index, ordinal)` reference. Ready and in-flight
    messages of queues and subscriptions (held-back ones too), sends inside open transactions,
    scheduled messages, retained ones and wills (bytes). Paged messages are decoded page by page; a page kept in a body
    journal is read with `read_page` (its dumped reference -> the page's bytes).
    tests/server/test_group_bodies.py pins this against a real broker."""

    def messages_of(store: dict[str, Any] | None) -> Iterator[list[Any]]:
        if store is not None:
            yield from _unpaged(store)
            tail = store.get("tail")
            if tail is not None:
                for _count, _expires, _indexes, dumped, _size in tail["pages"]:
                    if not isinstance(dumped, (bytes, bytearray)):
                        if read_page is None:
                            raise ValueError(f"a page kept in a body journal ({dumped!r}), and no way to read it")
                        dumped = read_page(dumped)
                    yield from (dump_message(message) for message in decode_page(bytes(dumped)))
                yield from tail["open"]

    for store in dump["queues"]:
        for message in messages_of(store):
            yield message[3]
    for sub in dump["subscriptions"]:
        for _seq, message in sub["in_flight"]:
            yield message[3]
        for message in messages_of(sub["store"]):
            yield message[3]
    for session in dump["sessions"]:
        for _name, ops in session["transactions"]:
            for op in ops:
                if op[0] == "send":
                    yield op[3]
    for job in dump.get("jobs", ()):
        yield job[3]
    for _topic, message in dump.get("retained", ()):
        yield message[3]
    for will in dump.get("wills", ()):
        yield will[3]
    for delayed in dump.get("delayed_wills", ()):
        yield delayed[5]


def _unpaged(store: dict[str, Any]) -> Iterator[list[Any]]:
    """A dumped store's messages held as messages: ready ones in the head, held-back ones."""
    for lane in store["lanes"]:
        for _token, message in lane:
            yield message
    for _token, _due, message in store.get("delayed", ()):
        yield message


def journal_indexes(dump: dict[str, Any]) -> set[int]:
    """The raft indexes of every body-journal reference in `dump`, like `journal_refs` but
    without decoding a page: each page lists the indexes it references."""
    indexes: set[int] = set()
    stores = [*dump["queues"], *(sub["store"] for sub in dump["subscriptions"] if sub["store"] is not None)]
    paged = [store["tail"] for store in stores if "tail" in store]
    for tail in paged:
        for _count, _expires, page_indexes, dumped, _size in tail["pages"]:
            indexes.update(int(index) for index in page_indexes)
            if isinstance(dumped, (list, tuple)):  # the page itself is a body-journal record
                indexes.add(int(dumped[0]))
    bodies = [message[3] for tail in paged for message in tail["open"]]
    bodies += [message[3] for store in stores for message in _unpaged(store)]
    bodies += [message[3] for sub in dump["subscriptions"] for _seq, message in sub["in_flight"]]
    bodies += [op[3] for session in dump["sessions"] for _n, ops in session["transactions"] for op in ops
               if op[0] == "send"]
    bodies += [job[3] for job in dump.get("jobs", ())]
    indexes.update(journal_indexes_of(bodies))
    return indexes

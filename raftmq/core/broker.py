"""The broker core: `Broker.apply(command) -> effects`, pure and deterministic.

Every replica applies the same commands in the same order and must reach the same state and
emit the same effects, so nothing here reads a clock, draws a random number, logs or does I/O:
time is `command.now`, ids come from counters in the state, and every iteration runs over
insertion-ordered dicts or lists (never sets).

Work per command is bounded by what the command touched: a dispatch pass runs only on the
stores (queues, topic subscriptions) the command changed; a store that is known to be
blocked (`Store.stable`) only looks at a newly arrived message, or offers its messages to the
consumers that just gained room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from raftmq.core import commands, exactly_once, lifetimes, retained, shares, ticks, unsubscribe, wills
from raftmq.core import validation as v  # (check_subscribe, check_browse: not per message)
from raftmq.core.address_settings import DROP, FAIL, AddressLimits, refusal
from raftmq.core.browse import browse_store
from raftmq.core.cluster_rights import learn, may_pull
from raftmq.core.cluster_routing import ClusterRouting
from raftmq.core.commands import Ack, Command, Nack, Send
from raftmq.core.config import CoreConfig
from raftmq.core.dedup import DedupCache
from raftmq.core.dispatch import Dispatcher
from raftmq.core.effects import BrowseEnd, Deliver, Effect, Receipt, Reject
from raftmq.core.manage import apply_manage
from raftmq.core.model import Delivery, Session, Store, Subscription
from raftmq.core.paging import MemoryPages, PageStore
from raftmq.core.queue_patterns import is_queue_pattern
from raftmq.core.schedule import Scheduler, is_scheduled, plan, special_headers
from raftmq.core.selector import Selector
from raftmq.core.snapshot import dump_state, load_state
from raftmq.core.state import BrokerState
from raftmq.core.stats import broker_stats
from raftmq.core.temp_owners import claim, forget, index_owners, reply_subscription, stays
from raftmq.core.temp_owners import refusal as temp_refusal
from raftmq.core.temporary import MARK, alias_of, owner_token
from raftmq.core.validation import QUEUE_PREFIX, Refused, check_wildcards, is_valid_destination
from raftmq.routing.route import CONTROL_DESTINATION, SF_PREFIX, is_internal


class Broker:
    """The replicated state machine of one logical broker. See the module docstring."""

    def __init__(self, config: CoreConfig = CoreConfig(), pages: PageStore | None = None) -> None:
        """`pages`: where paged messages live (raftmq.core.paging); in memory unless given."""
        self.config = config
        self.state = BrokerState(DedupCache(config.dedup_cache_size),
                                 pages=pages if pages is not None else MemoryPages())
        self.dispatch = Dispatcher(self.state, config)
        self._entry_index = -1  # the Raft entry applying (begin_entry); -1: bodies are held as they are
        self._ordinal = 0  # of the next Send in that entry
        self._entry_ref_index: object = -1  # `_entry_index` boxed once per entry: every BodyRef of it shares it
        self.applying: Command | None = None  # `apply_all`'s command now (the one that raised, after one did)
        self.limits = AddressLimits(config.addresses, config.global_max_size_messages, config.global_max_size_bytes)
        # In a cluster of groups, SENDs go through the cluster routing (raftmq.core.cluster_routing).
        self.routing = ClusterRouting(config.cluster, self.state, self.dispatch) if config.cluster is not None else None
        self.scheduler = Scheduler(self.state.jobs, self.publish_again)
        self._handlers: dict[type, Callable[[Any], None]] = {
            commands.Connect: self._connect,
            commands.Disconnect: self._disconnect,
            commands.Subscribe: self._subscribe,
            commands.Unsubscribe: self._unsubscribe,
            Send: self._send,
            Ack: self._ack,
            Nack: self._ack,  # the same handler: it settles by the command's type
            commands.Begin: self._begin,
            commands.Commit: self._commit,
            commands.Abort: self._abort,
            commands.Tick: self._tick,
            commands.Browse: self._browse,
            commands.Noop: self._noop,
            commands.Manage: lambda command: apply_manage(self, command),
            commands.Recover: lambda command: retained.recover(self.state, self.dispatch, command),
            commands.Will: lambda command: wills.set_will(self.state, command),
            commands.Release: self._release,
            commands.Hold: lambda command: exactly_once.hold(self.state, command),
            commands.Share: lambda command: shares.join(self.state, self.dispatch, command, self._reject, self._done),
            commands.Expiry: lambda command: lifetimes.claim(self.state, command),
        }

    # -- public API --------------------------------------------------------------------------

    def apply(self, command: Command) -> list[Effect]:
        """Apply one committed command; bad client input yields a Reject effect, never an exception."""
        effects: list[Effect] = []
        dispatch = self.dispatch
        dispatch.effects = effects
        dispatch.now = command.now
        self._handlers[type(command)](command)
        return effects

    def apply_all(self, commands: Sequence[Command]) -> list[Effect]:
        """Apply committed commands in order, each as `apply` applies it; the effects of all of
        them in one list, in order. For a member that serves none of their sessions
        (`begin_entry(quiet=True)`: no Deliver or Receipt is built), which acts on the few
        that are left once per entry. When one raises, `applying` is that command."""
        effects: list[Effect] = []
        dispatch = self.dispatch
        dispatch.effects = effects
        handlers = self._handlers
        for command in commands:
            self.applying = command
            dispatch.now = command.now
            handlers[type(command)](command)
        return effects

    def begin_entry(self, index: int, *, quiet: bool = False) -> None:
        """The commands applied next are the Raft entry at `index`, on a group member whose bodies
        live in its body journal: the core holds each Send's body as the reference (index,
        ordinal, size), the ordinal counting the entry's Sends in order (rejected ones too),
        minted here as it applies them, so every member and the audit's replay hold the same
        references. `quiet`: no session of this member's can be named by the effects (a
        follower): no Deliver is built for a delivery and no Receipt. The state is the same."""
        self._entry_index, self._ordinal = index, 0
        self._entry_ref_index = index
        self.dispatch.quiet = quiet

    def check_invariants(self) -> None:
        """Raise `InvariantViolated` unless the state is consistent (tests and the simulator)."""
        self.state.check_invariants()

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain (msgpack-able) data; message bodies included as they are."""
        return dump_state(self.state)

    @classmethod
    def restore(cls, data: Any, config: CoreConfig, pages: PageStore | None = None) -> Broker:
        """A broker in the state `data` (a `snapshot()`) describes; raises SnapshotError if it is none
        (`data` is Any: it comes from a file or a peer, and the compiled build checks an annotated
        argument's type before the body runs, with a TypeError, not a SnapshotError)."""
        broker = cls(config)
        if pages is not None:
            broker.state.pages = pages
        load_state(broker.state, data, config)
        broker.scheduler = Scheduler(broker.state.jobs, broker.publish_again)
        index_owners(broker.state)
        broker.dispatch.queue_patterns.rebuild()
        broker.dispatch.index_patterns()
        if broker.routing is not None:
            broker.routing.rebuild()
        return broker

    def body_refs(self) -> Iterator[Any]:
        """Every message body the state holds, as stored (bytes or a body-journal reference):
        what `raftmq.core.snapshot.body_refs` finds in `snapshot()`, without building one."""
        return self.state.body_refs()

    def session_ids(self) -> list[str]:
        """Ids of the connected sessions, oldest first. Read-only."""
        return list(self.state.sessions)

    def has_destination(self, destination: str) -> bool:
        """True once a SEND, a SUBSCRIBE or an operator created `destination`, until an
        operator deletes it. Read-only; the server asks it to tell creating from using."""
        return destination in self.state.queues or destination in self.state.topics

    def next_due(self) -> int | None:
        """The earliest time (ms) a Tick has work to do for (raftmq.core.ticks.next_due)."""
        return ticks.next_due(self.state, self.scheduler, self.dispatch)

    def wants_ticks(self) -> bool:
        """Whether a Tick every interval has work besides `next_due`'s (raftmq.core.ticks.wants_ticks)."""
        return ticks.wants_ticks(self.state, self.routing)

    def stats(self) -> dict[str, Any]:
        """Counters per destination, sessions, dead-letter and expiry queues (raftmq.core.stats)."""
        return broker_stats(self.state, self.config)

    # -- shared helpers ------------------------------------------------------------------------

    def _reject(self, session_id: str, message: str, detail: str, receipt: str | None) -> None:
        self.dispatch.effects.append(Reject(session_id, message, detail, receipt))
        # The client gets an ERROR and its connection closes, so nothing it pipelined after the
        # offending frame may take effect: those commands are already in the log, and only
        # ending the session here, in replicated state, makes every replica refuse them.
        if session_id in self.state.sessions:
            self._end_session(session_id)

    def _done(self, session_id: str, receipt: str | None) -> None:
        """Finish an accepted command: run pending dispatch passes, then its receipt."""
        if self.dispatch.dirty:
            self.dispatch.run()
        if receipt is not None and not self.dispatch.quiet:
            self.dispatch.effects.append(Receipt(session_id, receipt))

    def _session(self, command: Any) -> Session | None:
        session = self.state.sessions.get(command.session)
        if session is None:
            self._reject(command.session, "not connected", "unknown or closed session", command.receipt)
        return session

    # -- sessions ------------------------------------------------------------------------------

    def _connect(self, command: commands.Connect) -> None:
        # Idempotent: a node that retries a Connect whose outcome it did not learn must not fail.
        if command.session not in self.state.sessions:
            self.state.sessions[command.session] = Session(command.session, command.login, command.client_id)

    def _disconnect(self, command: commands.Disconnect) -> None:
        self._end_session(command.session)
        self._done(command.session, command.receipt)

    def _end_session(self, session_id: str) -> None:
        session = self.state.sessions.pop(session_id, None)
        if session is not None:
            session.transactions.clear()
            unsubscribe.end_subscriptions(self.state, self.dispatch, session, list(session.subs.values()),
                              list(session.deliveries.values()), drop_durable=False)
            if session.temps:
                forget(self.state, session, self.dispatch)
            will = lifetimes.ended(self.state, session_id, self.dispatch.now)
            if will is not None:
                self._publish(*will)
            if self.dispatch.dirty:
                self.dispatch.run()

    def refuse_session(self, session_id: str, message: str, detail: str) -> None:
        """End a session with an ERROR to its client (an operator's close, a deleted destination)."""
        self._reject(session_id, message, detail, None)

    def drop_topic_subscription(self, sub: Subscription) -> None:
        """Drop an inactive (durable) topic subscription and what it collected."""
        unsubscribe.drop_topic_subscription(self.state, self.dispatch, sub, [])

    # -- subscriptions -------------------------------------------------------------------------

    def _subscribe(self, command: commands.Subscribe) -> None:
        session = self._session(command)
        if session is None:
            return
        try:
            prefetch, selector = v.check_subscribe(session, command, self.config.default_prefetch)
        except Refused as refused:
            return self._reject(session.session_id, refused.message, refused.detail, command.receipt)
        destination = command.destination
        if owner_token(destination) is not None:
            problem = temp_refusal(session, destination, command.durable_name is not None)
            if problem is not None:
                return self._reject(session.session_id, "temporary destination", problem, command.receipt)
            claim(self.state, session, destination)
        if is_internal(destination):
            problem = may_pull(self.config, self.routing, session, destination)
            if problem is not None:
                return self._reject(session.session_id, "reserved destination", problem, command.receipt)
        if is_queue_pattern(destination):
            sub, children = self.dispatch.queue_patterns.subscribe(session, command.sub_id, destination, command.ack,
                                                                    prefetch, selector)
            session.subs[command.sub_id] = sub
            for child in children:
                child.store.add_consumer(child)
                self.dispatch.wake(child.store, child)
            return self._done(session.session_id, command.receipt)
        if destination.startswith(QUEUE_PREFIX):
            store = self.dispatch.queue(destination)
            sub = Subscription(
                session, command.sub_id, destination, command.ack, prefetch, selector, command.exclusive, None, store
            )
        else:
            topic_sub = self._topic_subscription(session, command, prefetch, selector)
            if topic_sub is None:
                return
            sub = topic_sub
        session.subs[command.sub_id] = sub
        sub.store.add_consumer(sub)
        self.dispatch.wake(sub.store, sub)
        self._done(session.session_id, command.receipt)

    def _topic_subscription(
        self, session: Session, command: commands.Subscribe, prefetch: int, selector: Selector | None
    ) -> Subscription | None:
        """A new or resumed topic subscription; None (after a Reject) when its durable name is in use."""
        name = command.durable_name
        if name is not None:
            sub = self.state.durables.get(name)
            if sub is not None:
                if sub.session is not None:
                    self._reject(session.session_id, "durable subscription already active", name, command.receipt)
                    return None
                old_selector = sub.selector.text if sub.selector is not None else None
                new_selector = selector.text if selector is not None else None
                if sub.destination == command.destination and old_selector == new_selector:
                    sub.session = session
                    sub.sub_id = command.sub_id
                    sub.set_mode(command.ack, prefetch)
                    return sub
                # JMS: a durable subscription re-made with another topic or selector starts afresh.
                unsubscribe.drop_topic_subscription(self.state, self.dispatch, sub, [])
        topic = self.dispatch.topic(command.destination)
        store = Store(command.destination, shared=False)
        sub = Subscription(session, command.sub_id, command.destination, command.ack, prefetch, selector, False, name,
                           store)
        topic.subs[sub] = None
        if name is not None:
            self.state.durables[name] = sub
        return sub

    def _unsubscribe(self, command: commands.Unsubscribe) -> None:
        session = self._session(command)
        if session is None:
            return
        sub = session.subs.get(command.sub_id)
        if sub is None:
            return self._reject(session.session_id, "no such subscription", command.sub_id, command.receipt)
        deliveries = sorted((d for child in sub.consumers() for d in child.in_flight.values()), key=lambda d: d.seq)
        unsubscribe.end_subscriptions(self.state, self.dispatch, session, [sub], deliveries, command.drop_durable)
        self._done(session.session_id, command.receipt)

    # -- sending -------------------------------------------------------------------------------

    def _send(self, command: Send) -> None:
        body = command.body
        if self._entry_index >= 0:  # a BodyRef (begin_entry)
            body = (self._entry_ref_index, self._ordinal, len(body) if isinstance(body, (bytes, bytearray)) else 0)
            self._ordinal += 1
        session = self.state.sessions.get(command.session)
        if session is None:
            return self._reject(command.session, "not connected", "unknown or closed session", command.receipt)
        destination = command.destination
        if not is_valid_destination(destination):
            return self._reject(command.session, "invalid destination", destination, command.receipt)
        try:
            check_wildcards(destination, subscribing=False)
        except Refused as refused:
            return self._reject(command.session, refused.message, refused.detail, command.receipt)
        if destination == CONTROL_DESTINATION:
            return learn(self, session, command)
        temporary = MARK in destination
        if temporary and owner_token(destination) is not None:
            claim(self.state, session, destination)
        scheduled, replying = special_headers(command.headers)  # one look at the headers
        if replying:
            reply = reply_subscription(session, command.headers)
            if reply is not None:  # RabbitMQ's way: replies to /temp-queue/NAME arrive without a SUBSCRIBE
                self._subscribe(commands.Subscribe(session.session_id, alias_of(reply), reply, command.now))
        if scheduled:
            try:
                plan(destination, command.headers, command.now)
            except Refused as refused:
                return self._reject(command.session, refused.message, refused.detail, command.receipt)
        if self.limits.active and not destination.startswith(SF_PREFIX):
            full = self.limits.full(self.state, destination)
            if full is not None and full.address_full_policy == FAIL:
                return self._reject(command.session, "address full", refusal(full, destination), command.receipt)
            if full is not None and full.address_full_policy == DROP:
                self.state.dropped[destination] = self.state.dropped.get(destination, 0) + 1
                return self._done(command.session, command.receipt)
        if destination.startswith(SF_PREFIX) and command.transaction is None:
            # Only the node's own sessions get here (the STOMP layer refuses $.raftmq. SENDs):
            # a passive link's advert for the neighbour that pulls it, stored as it is.
            self.dispatch.publish(destination, command.headers, body, command.now, deduplicated=True)
            return self._done(command.session, command.receipt)
        if command.transaction is not None:
            ops = session.transactions.get(command.transaction)
            if ops is None:
                return self._reject(command.session, "unknown transaction", command.transaction, command.receipt)
            ops.append(("send", destination, command.headers, body, command.now))
        else:
            headers = command.headers
            if "mqtt-once:" in headers or "mqtt-retain:" in headers:  # (most SENDs: two searches of their headers)
                mqtt_headers = exactly_once.stored_headers(self.state, destination, headers, command.body, command.now)
                if mqtt_headers is None:  # a QoS 2 publication stored before (raftmq.core.exactly_once)
                    return self._done(command.session, command.receipt)
                headers = mqtt_headers
            self._publish(destination, headers, body, command.now, scheduled, temporary)
        self._done(command.session, command.receipt)

    def _publish(self, destination: str, headers: str, body: object, now: int, scheduled: bool | None = None,
                 temporary: bool | None = None) -> None:
        """`scheduled` / `temporary`: what the caller found already (None: look)."""
        if (MARK in destination if temporary is None else temporary) and owner_token(destination) is not None \
                and not stays(self.state, self.routing, destination, headers, body, now):
            return  # sent on to its owner's group, or its owner is gone
        if is_scheduled(headers) if scheduled is None else scheduled:
            self.state.job_seq += 1
            self.scheduler.add(plan(destination, headers, now), self.state.job_seq, body, self.state.dedup)
        elif self.routing is None:
            self.dispatch.publish(destination, headers, body, now)
        else:
            self.routing.publish(destination, headers, body, now)

    def publish_again(self, destination: str, headers: str, body: object, now: int) -> None:
        """Publish a message whose duplicate-detection id was checked already: a scheduled one
        whose time came, one an operator retries or moves (raftmq.core.manage)."""
        if "mqtt-retain:" in headers:  # a delayed will, say: retained as it is published
            retained.keep(self.state, destination, headers, body, now)
        if self.routing is None:
            self.dispatch.publish(destination, headers, body, now, deduplicated=True)
        else:
            self.routing.publish(destination, headers, body, now, deduplicated=True)

    # -- acknowledgements ----------------------------------------------------------------------

    def _find_delivery(self, session: Session, command: Ack | Nack) -> Delivery | None:
        if command.ack_id is not None:
            return session.deliveries.get(command.ack_id)
        if command.message_id is not None:
            return session.find_by_message(command.message_id, command.subscription)
        return None

    def _ack(self, command: Ack | Nack) -> None:
        session = self.state.sessions.get(command.session)
        if session is None:
            return self._reject(command.session, "not connected", "unknown or closed session", command.receipt)
        delivery = self._find_delivery(session, command)
        if delivery is None:
            name = "ACK" if type(command) is Ack else "NACK"
            detail = command.ack_id if command.ack_id is not None else command.message_id or "no id"
            return self._reject(session.session_id, f"{name} of an unknown delivery", detail, command.receipt)
        if command.transaction is not None:
            ops = session.transactions.get(command.transaction)
            if ops is None:
                return self._reject(session.session_id, "unknown transaction", command.transaction, command.receipt)
            ops.append(("ack" if type(command) is Ack else "nack", delivery.ack_id))
        else:
            self.dispatch.settle(delivery, type(command) is Ack)
        self._done(session.session_id, command.receipt)

    # -- transactions --------------------------------------------------------------------------

    def _begin(self, command: commands.Begin) -> None:
        session = self._session(command)
        if session is None:
            return
        if command.transaction in session.transactions:
            return self._reject(session.session_id, "transaction already begun", command.transaction, command.receipt)
        session.transactions[command.transaction] = []
        self._done(session.session_id, command.receipt)

    def _commit(self, command: commands.Commit) -> None:
        session = self._session(command)
        if session is None:
            return
        ops = session.transactions.pop(command.transaction, None)
        if ops is None:
            return self._reject(session.session_id, "unknown transaction", command.transaction, command.receipt)
        for op in ops:
            if op[0] == "send":
                # A scheduled message's delay counts from the COMMIT that makes it sent.
                self._publish(op[1], op[2], op[3], command.now if is_scheduled(op[2]) else op[4])
            else:
                # Settled meanwhile (an earlier cumulative ACK, a NACK): nothing left to do.
                delivery = session.deliveries.get(op[1])
                if delivery is not None:
                    self.dispatch.settle(delivery, op[0] == "ack")
        self._done(session.session_id, command.receipt)

    def _abort(self, command: commands.Abort) -> None:
        session = self._session(command)
        if session is None:
            return
        if session.transactions.pop(command.transaction, None) is None:
            return self._reject(session.session_id, "unknown transaction", command.transaction, command.receipt)
        self._done(session.session_id, command.receipt)

    # -- browsing (replicated reads) -----------------------------------------------------------

    def _browse(self, command: commands.Browse) -> None:
        session = self._session(command)
        if session is None:
            return
        try:
            selector = v.check_browse(session, command)
        except Refused as refused:
            return self._reject(session.session_id, refused.message, refused.detail, command.receipt)
        destination = command.destination
        # `state.queues.get`, never `dispatch.queue`: browsing a queue that does not exist must not create it.
        messages, truncated = browse_store(self.state.queues.get(destination), command.limit, selector, command.now)
        effects = self.dispatch.effects
        for message in messages:
            count = message.delivery_count  # as it stands: a copy is not a delivery
            effects.append(Deliver(session.session_id, command.sub_id, destination, message, None, count > 0, count))
        effects.append(BrowseEnd(session.session_id, command.sub_id, destination, len(messages), truncated))
        self._done(session.session_id, command.receipt)

    def _noop(self, command: commands.Noop) -> None:
        if self._session(command) is not None:
            self._done(command.session, command.receipt)

    def _release(self, command: commands.Release) -> None:
        if exactly_once.release(self.state, command):  # (its session is there to be answered)
            self._done(command.session, command.receipt)

    # -- time ------------------------------------------------------------------------------------

    def _tick(self, command: commands.Tick) -> None:
        self.dispatch.expire_due(command.now)
        self.dispatch.release_due(command.now)
        self.scheduler.fire_due(command.now)
        lifetimes.expire_due(self.state, self.dispatch, command.now, self.publish_again)
        if self.routing is not None:
            self.routing.redistribute(command.now)
            self.routing.drain()
        if self.dispatch.dirty:
            self.dispatch.run()

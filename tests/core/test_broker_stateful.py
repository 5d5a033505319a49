"""The broker core against a small reference model (tests/core/broker_model.py), driven by hypothesis.

The model does not re-implement dispatch (who gets which message when); it keeps the facts
every dispatch must respect and checks each effect against them:
- which copies are ready in which store, in flight with which subscription, or gone (acked,
  discarded with a subscription, moved to the DLQ or the expiry queue), each exactly once;
- a Deliver takes a ready, unexpired copy; its redelivered flag and count match the copy's
  history; client-mode subscriptions never exceed their prefetch; an exclusive consumer, a
  message group's owner and selectors are respected;
- first deliveries from one store come in send order (per priority, group and color);
- no store keeps a deliverable message while a consumer that may take it has room;
- every accepted command with a receipt yields exactly one Receipt, as its last effect; a
  rejected command yields exactly one Reject carrying the receipt id, and nothing else;
- after a snapshot → msgpack → restore step the machine goes on with the restored broker and
  runs the old one beside it: both must emit the same effects and report the same stats;
- at the end, everything left is drained, and must be exactly what the model holds;
- after every step, each store holds as many messages as its `StoreLedger` was told entered
  less those that left (raftmq.core.store_observer): no way in or out goes unreported.

Expiry without a Tick depends on which dispatch passes met the message, so the model treats a
ready copy past its expiry as "in limbo" (in its store or already in the expiry queue) until
the next Tick settles it; the expiry queue is only consumed after a Tick, in the teardown. A
topic subscription dropped with limbo copies leaves them "ambiguous" (moved or discarded).
"""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from raftmq.core.broker import Broker
from raftmq.core.commands import (
    Abort,
    Ack,
    Begin,
    Command,
    Commit,
    Connect,
    Disconnect,
    Nack,
    Send,
    Subscribe,
    Tick,
    Unsubscribe,
)
from raftmq.core.effects import Deliver, Effect, Receipt, Reject
from raftmq.protocol.header_block import block_of
from raftmq.testing.store_ledger import StoreLedger
from tests.core.broker_model import CONFIG, DLQ, EXPIRY, QUEUES, RED, SESSIONS, TOPIC, TRANSACTIONS, Model, MSession

# Rules name their session by a number: mostly one of the connected sessions, now and then
# (9) any session, maybe a closed one.
WHO = st.integers(0, 9)


class BrokerMachine(RuleBasedStateMachine):
    config = CONFIG

    def __init__(self) -> None:
        super().__init__()
        self.broker = Broker(self.config)
        self.shadow: Broker | None = None  # the pre-restore broker, run side by side
        self.ledger = StoreLedger.watching(self.broker)
        self.shadow_ledger: StoreLedger | None = None
        self.model = Model()
        self.receipt_seq = 0

    # -- plumbing ----------------------------------------------------------------------

    def receipt(self, wanted: bool) -> str | None:
        if not wanted:
            return None
        self.receipt_seq += 1
        return f"r{self.receipt_seq}"

    def run(self, command: Command) -> list[Effect]:
        effects = self.broker.apply(command)
        if self.shadow is not None:
            assert self.shadow.apply(command) == effects, "restored broker diverged"
        return effects

    def expect(self, command: Command, accepted: bool, apply_model=None) -> None:
        """Run `command`; check accept/reject against the model; feed deliveries to it."""
        effects = self.run(command)
        session = getattr(command, "session", None)
        receipt = getattr(command, "receipt", None)
        failures = [e for e in effects if isinstance(e, Reject)]
        if not accepted:
            assert failures and effects[0] is failures[0], f"{command} should be rejected: {effects}"
            assert len(failures) == 1 and not any(isinstance(e, Receipt) for e in effects)
            assert failures[0].session == session and failures[0].receipt_id == receipt
            # A rejected command ends its session (its client is sent an ERROR and closed):
            # its deliveries return and may go straight to other consumers.
            self.model_end_session(session)
            for effect in effects[1:]:
                assert isinstance(effect, Deliver) and effect.session != session, effect
                self.model.on_deliver(effect)
            return
        assert not failures, f"{command} rejected: {failures}"
        got = [e for e in effects if isinstance(e, Receipt)]
        if receipt is None:
            assert not got
        else:
            assert got == [Receipt(session, receipt)] and effects[-1] == got[0]  # type: ignore[arg-type]
        if apply_model is not None:
            apply_model()
        for effect in effects:
            if isinstance(effect, Deliver):
                self.model.on_deliver(effect)

    # -- rules -------------------------------------------------------------------------

    @initialize(
        ack_a=st.sampled_from(("client", "client-individual", "auto")),
        ack_b=st.sampled_from(("client-individual", "client", "auto")),
        prefetch=st.sampled_from((1, 2, 0)),
        b_destination=st.sampled_from((TOPIC, *QUEUES)),
    )
    def start(self, ack_a: str, ack_b: str, prefetch: int, b_destination: str) -> None:
        # Every run starts with consumers, so that acks, nacks and redeliveries happen early.
        for session in SESSIONS:
            self.connect(session)
        self.subscribe("a", "s1", QUEUES[0], ack_a, prefetch, None, False, False)
        self.subscribe("b", "s1", b_destination, ack_b, 2, "d1" if b_destination == TOPIC else None, False, False)

    def who(self, pick: int) -> str:
        connected = [name for name in SESSIONS if name in self.model.sessions]
        if pick == 9 or not connected:
            return SESSIONS[pick % len(SESSIONS)]
        return connected[pick % len(connected)]

    def connect(self, session: str) -> None:
        self.expect(Connect(session, self.model.now), True, lambda: self.model.sessions.setdefault(session, MSession()))

    def model_end_session(self, session: str | None) -> None:
        state = self.model.sessions.pop(session, None) if session is not None else None
        if state is not None:
            for sub in list(state.subs.values()):
                self.model.end_subscription(state, sub, drop_durable=False)

    def disconnect(self, session: str, receipt: bool) -> None:
        self.expect(Disconnect(session, self.model.now, receipt=self.receipt(receipt)), True,
                    lambda: self.model_end_session(session))

    @rule(session=st.sampled_from(SESSIONS), connect=st.sampled_from((True, True, True, False)), receipt=st.booleans())
    def connect_or_disconnect(self, session: str, connect: bool, receipt: bool) -> None:
        if connect:
            self.connect(session)
        else:
            self.disconnect(session, receipt)

    @rule(
        who=WHO,
        sub_id=st.sampled_from(("s1", "s2")),
        destination=st.sampled_from((*QUEUES, TOPIC, DLQ, "/bad/x")),
        ack=st.sampled_from(("client", "client-individual", "client", "client-individual", "auto")),
        prefetch=st.sampled_from((0, 1, 2)),
        durable=st.sampled_from((None, "d1", "d2")),
        exclusive=st.sampled_from((False, False, False, True)),
        selector=st.sampled_from((False, False, True)),
        receipt=st.booleans(),
        unsubscribe=st.sampled_from((False, False, True)),
        drop=st.booleans(),
    )
    def subscribe_or_unsubscribe(
        self,
        who: int,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int,
        durable: str | None,
        exclusive: bool,
        selector: bool,
        receipt: bool,
        unsubscribe: bool,
        drop: bool,
    ) -> None:
        if unsubscribe:
            self.unsubscribe(self.who(who), sub_id, drop, receipt)
        else:
            self.subscribe(self.who(who), sub_id, destination, ack, prefetch, durable, exclusive, receipt, selector)

    def subscribe(
        self,
        session: str,
        sub_id: str,
        destination: str,
        ack: str,
        prefetch: int,
        durable: str | None,
        exclusive: bool,
        receipt: bool,
        selector: bool = False,
    ) -> None:
        model = self.model
        state = model.sessions.get(session)
        if destination != TOPIC:
            durable = None
        existing = model.durables.get(durable) if durable else None
        accepted = (
            state is not None
            and sub_id not in state.subs
            and destination != "/bad/x"
            and (existing is None or existing.session is None)
        )
        command = Subscribe(
            session, sub_id, destination, model.now, ack=ack, prefetch=prefetch, selector=RED if selector else None,
            exclusive=exclusive, durable_name=durable, receipt=self.receipt(receipt),
        )  # fmt: skip

        def apply() -> None:
            model.subscribe(session, sub_id, destination, ack, prefetch, exclusive, durable, selector)

        self.expect(command, accepted, apply)

    def unsubscribe(self, session: str, sub_id: str, drop: bool, receipt: bool) -> None:
        model = self.model
        state = model.sessions.get(session)
        accepted = state is not None and sub_id in state.subs
        command = Unsubscribe(session, sub_id, model.now, drop_durable=drop, receipt=self.receipt(receipt))
        self.expect(command, accepted,
                    lambda: model.end_subscription(state, state.subs[sub_id], drop))  # type: ignore[arg-type]

    @rule(
        who=WHO,
        destination=st.sampled_from((*QUEUES, *QUEUES, TOPIC, DLQ, "/bad/x")),
        priority=st.sampled_from((None, None, "0", "9", "junk")),
        expires=st.sampled_from((None, None, 50, 300, -1)),
        dupl_id=st.sampled_from((None, None, None, "x", "y", "z", "w", "v")),
        transaction=st.sampled_from((None, None, None, *TRANSACTIONS)),
        receipt=st.booleans(),
        group=st.sampled_from((None, None, "g1", "g2")),
        red=st.booleans(),
    )
    def send_rule(
        self,
        who: int,
        destination: str,
        priority: str | None,
        expires: int | None,
        dupl_id: str | None,
        transaction: str | None,
        receipt: bool,
        group: str | None,
        red: bool,
    ) -> None:
        self.send(self.who(who), destination, priority, expires, dupl_id, transaction, receipt, group, red)

    def send(
        self,
        session: str,
        destination: str,
        priority: str | None,
        expires: int | None,
        dupl_id: str | None,
        transaction: str | None,
        receipt: bool,
        group: str | None,
        red: bool,
    ) -> None:
        model = self.model
        state = model.sessions.get(session)
        headers: list[tuple[str, str]] = [("producer", session), ("color", "red" if red else "blue")]
        if group is not None:
            headers.append(("JMSXGroupID", group))
        level = 4
        if priority is not None:
            headers.append(("priority", priority))
            level = int(priority) if priority.isdigit() else 4
        expires_at = 0
        if expires is not None:
            expires_at = model.now + expires if expires > 0 else max(model.now - 1, 1)
            headers.append(("expires", str(expires_at)))
        if dupl_id is not None:
            headers.append(("_AMQ_DUPL_ID", dupl_id))
        accepted = (
            state is not None and destination != "/bad/x" and (transaction is None or transaction in state.transactions)
        )
        command = Send(session, destination, block_of(tuple(headers)), b"body", model.now, transaction=transaction,
                       receipt=self.receipt(receipt))

        def apply() -> None:
            op = ("send", destination, level, expires_at, dupl_id, group, red)
            if transaction is not None:
                state.transactions[transaction].append(op)  # type: ignore[union-attr]
            else:
                model.publish(*op[1:])

        self.expect(command, accepted, apply)

    @rule(
        who=WHO,
        destination=st.sampled_from((*QUEUES, TOPIC)),
        messages=st.lists(st.tuples(st.sampled_from((None, "1", "7")), st.booleans()), min_size=1, max_size=6),
        group=st.sampled_from((None, None, "g1")),
    )
    def send_burst(self, who: int, destination: str, messages: list[tuple[str | None, bool]],
                   group: str | None) -> None:
        session = self.who(who)
        for priority, red in messages:
            self.send(session, destination, priority, None, None, None, False, group, red)

    def settle_rule(self, acked: bool, pick: int, by: str, transaction: str | None, receipt: bool) -> None:
        model = self.model
        live = [(name, *entry) for name, state in model.sessions.items() for entry in model.deliveries(state)]
        ack_id = message_id = sub_id = None
        if pick < 0 or not live:
            session = SESSIONS[pick % len(SESSIONS)]
            ack_id = "999999"
        else:
            session, target_ack, target_sub, target_copy = live[pick % len(live)]
            if by == "ack_id":
                ack_id = target_ack
            else:
                message_id = target_copy.message_id
                sub_id = target_sub.sub_id if by == "message_id+subscription" else None
        state = model.sessions.get(session)
        found = model.find(state, ack_id, message_id, sub_id) if state is not None else None
        accepted = found is not None and (
            transaction is None or transaction in state.transactions)  # type: ignore[union-attr]
        kind = Ack if acked else Nack
        command = kind(
            session, model.now, ack_id=ack_id, message_id=message_id, subscription=sub_id,
            transaction=transaction, receipt=self.receipt(receipt),
        )  # fmt: skip

        def apply() -> None:
            assert found is not None and state is not None
            if transaction is not None:
                state.transactions[transaction].append(("ack" if acked else "nack", found[0]))
            else:
                model.settle(found[1], found[0], acked)

        self.expect(command, accepted, apply)

    ack_args = dict(
        pick=st.integers(-1, 30),
        by=st.sampled_from(("ack_id", "ack_id", "message_id", "message_id+subscription")),
        transaction=st.sampled_from((None, None, None, *TRANSACTIONS)),
        receipt=st.booleans(),
    )

    @rule(**ack_args)
    def ack(self, pick: int, by: str, transaction: str | None, receipt: bool) -> None:
        self.settle_rule(True, pick, by, transaction, receipt)

    @rule(**ack_args)
    def nack(self, pick: int, by: str, transaction: str | None, receipt: bool) -> None:
        self.settle_rule(False, pick, by, transaction, receipt)

    @rule(
        who=WHO,
        transaction=st.sampled_from(TRANSACTIONS),
        action=st.sampled_from(("begin", "begin", "commit", "commit", "abort")),
        receipt=st.booleans(),
    )
    def transaction(self, who: int, transaction: str, action: str, receipt: bool) -> None:
        model = self.model
        session = self.who(who)
        state = model.sessions.get(session)
        rid = self.receipt(receipt)
        if action == "begin":
            accepted = state is not None and transaction not in state.transactions
            command: Command = Begin(session, transaction, model.now, receipt=rid)
            self.expect(command, accepted,
                        lambda: state.transactions.__setitem__(transaction, []))  # type: ignore[union-attr]
            return
        accepted = state is not None and transaction in state.transactions

        def apply() -> None:
            assert state is not None
            ops = state.transactions.pop(transaction)
            if action == "abort":
                return
            for op in ops:
                if op[0] == "send":
                    model.publish(*op[1:])
                else:
                    found = model.find(state, op[1], None, None)
                    if found is not None:
                        model.settle(found[1], found[0], op[0] == "ack")

        command = (Commit if action == "commit" else Abort)(session, transaction, model.now, receipt=rid)
        self.expect(command, accepted, apply)

    @rule(advance=st.sampled_from((0, 40, 100, 1_000)))
    def tick(self, advance: int) -> None:
        model = self.model
        model.now += advance
        for effect in self.run(Tick(model.now)):
            assert isinstance(effect, Deliver)
        # Nobody consumes the expiry queue before the teardown, so the Tick has no deliveries;
        # settle the limbo now.
        model.tick()

    @rule()
    def snapshot_and_restore(self) -> None:
        snap = self.broker.snapshot()
        packed = msgpack.packb(snap, use_bin_type=True)
        restored = Broker.restore(msgpack.unpackb(packed, raw=False), self.config)
        assert restored.snapshot() == snap
        self.shadow, self.shadow_ledger = self.broker, self.ledger
        self.broker = restored
        self.ledger = StoreLedger.watching(restored)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def the_core_finds_its_state_consistent(self) -> None:
        self.broker.check_invariants()
        if self.shadow is not None:
            self.shadow.check_invariants()

    @invariant()
    def every_way_in_and_out_is_reported(self) -> None:
        self.ledger.check(self.broker)
        if self.shadow is not None and self.shadow_ledger is not None:
            self.shadow_ledger.check(self.shadow)

    @invariant()
    def counts_match_the_model(self) -> None:
        stats = self.broker.stats()
        self.model.check_stats(stats)
        if self.shadow is not None:
            assert self.shadow.stats() == stats
            assert self.shadow.snapshot() == self.broker.snapshot()

    def teardown(self) -> None:
        """Drain everything: the messages the model holds ready must be exactly those left."""
        model = self.model
        for session in list(model.sessions):
            self.disconnect(session, receipt=False)
        # Everything is back in its store now: one Tick settles every expiry.
        self.tick(10**7)
        drainer = "drain"
        self.expect(Connect(drainer, model.now), True, lambda: model.sessions.setdefault(drainer, MSession()))
        for index, destination in enumerate((*QUEUES, DLQ, EXPIRY)):
            self.subscribe(drainer, f"q{index}", destination, "auto", 0, None, False, False)
        for index, (name, sub) in enumerate(list(model.durables.items())):
            self.subscribe(drainer, f"d{index}", TOPIC, "auto", 0, name, False, False, sub.selector)
        leftover = [(p.destination, c.message_id) for p in model.all_pools() for c in p.ready]
        assert leftover == [], f"the model expected these but the broker did not have them: {leftover}"
        # Ambiguous copies that did not show up in the expiry queue were discarded.
        discarded = self.broker.stats()["destinations"].get(TOPIC, {}).get("discarded", 0)
        assert discarded == model.discarded + len(model.ambiguous)
        assert all(d["depth"] == 0 for d in self.broker.stats()["destinations"].values())


# 250 runs of up to 60 steps each: 8-9 s of CPU per machine alone here, and every suite run draws
# new ones. Each machine is bounded by these settings, so a limit above the suite's 120 s (which
# is there to catch hangs) costs nothing: on a loaded hour, with 400 runs, one took over 120 s.
BrokerMachine.TestCase.settings = settings(
    max_examples=250,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBrokerStateful = pytest.mark.timeout(300)(BrokerMachine.TestCase)


class PagedBrokerMachine(BrokerMachine):
    """The same machine with pages of two messages: a store holds four in memory, and every
    later arrival is paged out and back in (raftmq.core.paging), against the same model."""

    config = dataclasses.replace(CONFIG, page_size=2)


PagedBrokerMachine.TestCase.settings = BrokerMachine.TestCase.settings
TestPagedBrokerStateful = pytest.mark.timeout(300)(PagedBrokerMachine.TestCase)

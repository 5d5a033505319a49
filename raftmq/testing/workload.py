"""Seeded streams of commands from simulated clients, shaped like the ones real sessions make.

Each `SimClient` behaves like a STOMP client behind `server/stomp/translate.py`: it connects (a new
session id per connection, as the node assigns), subscribes to queues and topics with the
three ack modes, prefetches, selectors, exclusive and durable subscriptions, sends with the
headers the core reads, acks and nacks (by ack id in STOMP 1.2, by message id and subscription
in 1.1) the deliveries the effects handed it, uses transactions, browses, and disconnects.

Like the failover client, it puts an `_AMQ_DUPL_ID` on most SENDs and, when its connection is
lost before a SEND's RECEIPT came back, sends it again with the same id on its next connection
(the first copy may or may not have been committed): the core's duplicate detection must keep
one. A lost connection reaches the log as the `Disconnect` the node appends for a closed
socket; a leader change as the `Disconnect`s a new leader appends for the old one's sessions,
with the new leader's clock a little off. Ticks move time so that messages expire.

Everything is drawn from the one `random.Random` given, and clients decide only from the
effects addressed to them, so the stream is a function of the seed and the core's effects.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from raftmq.clock import ManualClock
from raftmq.core.commands import (
    ACK_AUTO,
    ACK_CLIENT,
    ACK_CLIENT_INDIVIDUAL,
    Abort,
    Ack,
    Begin,
    Browse,
    Command,
    Commit,
    Connect,
    Disconnect,
    Headers,
    Nack,
    Noop,
    Send,
    Subscribe,
    Tick,
    Unsubscribe,
)
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect, Receipt, Reject
from raftmq.protocol.header_block import block_of

QUEUES = ("/queue/q0", "/queue/q1", "/queue/q2")
TOPICS = ("/topic/t0", "/topic/t1")
DUPL_ID = "_AMQ_DUPL_ID"
RED = "color = 'red'"


@dataclass(slots=True)
class PendingSend:
    """A SEND the client will send again after a lost connection, until its RECEIPT comes."""

    destination: str
    headers: Headers
    body: bytes


@dataclass(slots=True)
class Held:
    """A delivery the client holds and has not settled."""

    sub_id: str
    ack_id: str
    message_id: str


@dataclass(slots=True)
class SubInfo:
    destination: str
    ack: str
    durable_name: str | None


@dataclass
class SimClient:
    name: str
    version: str  # "1.2" acks by ack id, "1.1" by message id and subscription
    client_id: str | None
    session: str | None = None
    connections: int = 0
    counter: int = 0  # for ids: sends, subscriptions, transactions, receipts
    subs: dict[str, SubInfo] = field(default_factory=dict)
    browsers: list[str] = field(default_factory=list)
    held: list[Held] = field(default_factory=list)  # in delivery order
    transactions: list[str] = field(default_factory=list)
    awaiting: dict[tuple[str, str], PendingSend | None] = field(default_factory=dict)  # (session, receipt)
    retry: list[PendingSend] = field(default_factory=list)
    broken: bool = False  # the connection broke as a RECEIPT was on its way; the node notices next

    def next_id(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def lose_connection(self) -> None:
        """The socket is gone: what awaited a receipt on it is sent again next time."""
        session = self.session
        for key in [key for key in self.awaiting if key[0] == session]:
            pending = self.awaiting.pop(key)
            if pending is not None:
                self.retry.append(pending)
        self.session = None
        self.broken = False
        self.subs.clear()
        self.browsers.clear()
        self.held.clear()
        self.transactions.clear()


@dataclass
class Workload:
    """The clients and the clock; `next_batch` draws one log entry, `observe` hands the
    committed batch's effects back to the clients."""

    rng: random.Random
    clock: ManualClock
    config: CoreConfig
    clients: list[SimClient] = field(default_factory=list)
    skew: int = 0  # the current leader's clock minus the simulation's
    sends: int = 0
    retries: int = 0
    sweeps: int = 0

    def __post_init__(self) -> None:
        rng = self.rng
        for i in range(rng.randint(2, 5)):
            version = "1.2" if rng.random() < 0.7 else "1.1"
            self.clients.append(SimClient(f"c{i}", version, f"cid{i}" if rng.random() < 0.7 else None))

    def now(self) -> int:
        return self.clock.now_ms() + self.skew

    def next_batch(self) -> list[Command]:
        rng = self.rng
        self.clock.advance(rng.choice((0, 1, 5, 20, 50, 100, 300)) if rng.random() < 0.95 else rng.randint(500, 4000))
        batch: list[Command] = []
        if rng.random() < 0.01:
            batch.extend(self._leader_change())
        for client in self.clients:
            if client.broken:
                batch.extend(self._drop(client, self.now()))
        for _ in range(rng.randint(1, 4)):
            batch.extend(self._act(rng.choice(self.clients)))
        if rng.random() < 0.25:
            batch.append(Tick(self.now()))
        return batch

    def _leader_change(self) -> list[Command]:
        """The new leader ends the old leader's sessions; its clock differs a little."""
        self.sweeps += 1
        self.skew = self.rng.randint(-200, 200)
        swept: list[Command] = []
        for client in self.clients:
            if client.session is not None:
                swept.append(Disconnect(client.session, self.now()))
                client.lose_connection()
        return swept

    # -- one client's turn -------------------------------------------------------------------

    def _act(self, client: SimClient) -> list[Command]:
        rng = self.rng
        now = self.now()
        if client.session is None:
            if rng.random() < 0.5:
                return []
            client.connections += 1
            client.session = f"{client.name}.{client.connections}"
            return [Connect(client.session, now, f"user-{client.name}", client.client_id)]
        if client.retry:
            return [self._resend(client, client.retry.pop(0), now)]
        roll = rng.random()
        if roll < 0.04:
            return self._drop(client, now)
        if roll < 0.06:
            return self._disconnect(client, now)
        if roll < 0.45:
            return [self._send(client, now)]
        if roll < 0.55:
            return self._subscribe(client, now)
        if roll < 0.58:
            return self._unsubscribe(client, now)
        if roll < 0.85:
            return self._settle(client, now)
        if roll < 0.93:
            return self._transaction(client, now)
        if roll < 0.96:
            return self._browse(client, now)
        if roll < 0.97:
            return self._bad_ack(client, now)
        return [Noop(client.session, now, client.next_id("r"))]

    def _receipt(self, client: SimClient, pending: PendingSend | None) -> str:
        assert client.session is not None
        receipt = client.next_id("r")
        client.awaiting[(client.session, receipt)] = pending
        return receipt

    def _send(self, client: SimClient, now: int) -> Command:
        rng = self.rng
        assert client.session is not None
        self.sends += 1
        n = client.next_id("m")
        destination = rng.choice(QUEUES) if rng.random() < 0.8 else rng.choice(TOPICS)
        headers: list[tuple[str, str]] = []
        deduplicated = rng.random() < 0.9
        if deduplicated:
            headers.append((DUPL_ID, f"{client.name}-{n}"))
        if rng.random() < 0.3:
            headers.append(("priority", str(rng.randint(0, 9))))
        if rng.random() < 0.2:
            headers.append(("expires", str(now + rng.randint(1, 3000))))
        if rng.random() < 0.5:
            headers.append(("persistent", "true"))
        if rng.random() < 0.15:
            headers.append(("JMSXGroupID", rng.choice(("g1", "g2"))))
        headers.append(("color", rng.choice(("red", "blue"))))
        body = f"{client.name}:{n}".encode()
        pending = PendingSend(destination, tuple(headers), body)
        transaction = rng.choice(client.transactions) if client.transactions and rng.random() < 0.5 else None
        receipt = None
        if rng.random() < 0.85:
            # Only a deduplicated, non-transactional SEND is sent again (as the failover client does).
            receipt = self._receipt(client, pending if deduplicated and transaction is None else None)
        return Send(client.session, destination, block_of(pending.headers), body, now, transaction, receipt)

    def _resend(self, client: SimClient, pending: PendingSend, now: int) -> Command:
        assert client.session is not None
        self.retries += 1
        receipt = self._receipt(client, pending)
        return Send(client.session, pending.destination, block_of(pending.headers), pending.body, now, None, receipt)

    def _subscribe(self, client: SimClient, now: int) -> list[Command]:
        rng = self.rng
        assert client.session is not None
        if len(client.subs) >= 3:
            return self._settle(client, now)
        sub_id = client.next_id("s")
        pick = rng.random()
        if pick < 0.65:
            destination = rng.choice(QUEUES)
        elif pick < 0.9:
            destination = rng.choice(TOPICS)
        else:
            destination = rng.choice((self.config.dead_letter_queue, self.config.expiry_queue))
        ack = rng.choice((ACK_AUTO, ACK_CLIENT, ACK_CLIENT_INDIVIDUAL, ACK_CLIENT_INDIVIDUAL))
        prefetch = rng.choice((0, 1, 2, 3, 5))
        selector = RED if rng.random() < 0.15 else None
        exclusive = destination.startswith("/queue/") and rng.random() < 0.1
        durable_name = None
        if destination.startswith("/topic/") and client.client_id is not None and rng.random() < 0.5:
            name = f"{client.client_id}:d{rng.randint(0, 1)}"
            if all(info.durable_name != name for info in client.subs.values()):
                durable_name = name
        client.subs[sub_id] = SubInfo(destination, ack, durable_name)
        receipt = client.next_id("r") if rng.random() < 0.5 else None
        return [Subscribe(client.session, sub_id, destination, now, ack, selector, prefetch, exclusive, durable_name,
                          receipt)]

    def _unsubscribe(self, client: SimClient, now: int) -> list[Command]:
        rng = self.rng
        assert client.session is not None
        if client.browsers and rng.random() < 0.5:
            client.browsers.remove(rng.choice(client.browsers))
            return [Noop(client.session, now, client.next_id("r"))]
        if not client.subs:
            return []
        sub_id = rng.choice(list(client.subs))
        info = client.subs.pop(sub_id)
        client.held = [held for held in client.held if held.sub_id != sub_id]
        drop = info.durable_name is not None and rng.random() < 0.5
        return [Unsubscribe(client.session, sub_id, now, drop, client.next_id("r") if rng.random() < 0.5 else None)]

    def _settle(self, client: SimClient, now: int) -> list[Command]:
        """ACK (mostly) or NACK a held delivery, maybe inside an open transaction."""
        rng = self.rng
        assert client.session is not None
        if not client.held:
            return []
        held = client.held[0] if rng.random() < 0.5 else rng.choice(client.held)
        info = client.subs[held.sub_id]
        if info.ack == ACK_CLIENT:
            # Cumulative: this settles every earlier delivery of the subscription too.
            position = client.held.index(held)
            client.held = [h for i, h in enumerate(client.held) if i > position or h.sub_id != held.sub_id]
        else:
            client.held.remove(held)
        kind = Ack if rng.random() < 0.8 else Nack
        transaction = rng.choice(client.transactions) if client.transactions and rng.random() < 0.3 else None
        receipt = client.next_id("r") if rng.random() < 0.3 else None
        if client.version == "1.2":
            return [kind(client.session, now, held.ack_id, None, None, transaction, receipt)]
        return [kind(client.session, now, None, held.message_id, held.sub_id, transaction, receipt)]

    def _transaction(self, client: SimClient, now: int) -> list[Command]:
        rng = self.rng
        assert client.session is not None
        if not client.transactions or (len(client.transactions) < 2 and rng.random() < 0.3):
            name = client.next_id("tx")
            client.transactions.append(name)
            return [Begin(client.session, name, now, client.next_id("r") if rng.random() < 0.3 else None)]
        name = rng.choice(client.transactions)
        client.transactions.remove(name)
        kind = Commit if rng.random() < 0.75 else Abort
        return [kind(client.session, name, now, client.next_id("r") if rng.random() < 0.8 else None)]

    def _browse(self, client: SimClient, now: int) -> list[Command]:
        rng = self.rng
        assert client.session is not None
        sub_id = client.next_id("b")
        client.browsers.append(sub_id)
        selector = RED if rng.random() < 0.2 else None
        return [Browse(client.session, sub_id, rng.choice(QUEUES), now, rng.randint(1, 20), selector)]

    def _bad_ack(self, client: SimClient, now: int) -> list[Command]:
        """An ACK of a delivery the client never got: the core refuses it and ends the session."""
        assert client.session is not None
        if client.version == "1.2":
            return [Ack(client.session, now, ack_id="no-such-ack")]
        return [Ack(client.session, now, message_id="no-such-message", subscription="s0")]

    def _drop(self, client: SimClient, now: int) -> list[Command]:
        """The connection breaks: the node appends the session's Disconnect."""
        assert client.session is not None
        session = client.session
        client.lose_connection()
        return [Disconnect(session, now)]

    def _disconnect(self, client: SimClient, now: int) -> list[Command]:
        """A DISCONNECT frame: the receipts of what came before it still arrive."""
        assert client.session is not None
        session = client.session
        client.session = None
        client.subs.clear()
        client.browsers.clear()
        client.held.clear()
        client.transactions.clear()
        return [Disconnect(session, now, client.next_id("r"))]

    # -- effects -------------------------------------------------------------------------------

    def observe(self, batch: list[Command], effects: list[list[Effect]]) -> None:
        by_session = {client.session: client for client in self.clients if client.session is not None}
        owners = {key[0]: client for client in self.clients for key in client.awaiting}
        for command_effects in effects:
            for effect in command_effects:
                kind = type(effect)
                if kind is Receipt:
                    owner = owners.get(effect.session)
                    key = (effect.session, effect.receipt_id)  # type: ignore[union-attr]
                    if owner is None or key not in owner.awaiting:
                        continue
                    if owner.awaiting[key] is not None and owner.session == effect.session and self.rng.random() < 0.05:
                        # Committed, but the client never reads the RECEIPT: it will send again.
                        owner.broken = True
                    elif not owner.broken or owner.session != effect.session:
                        del owner.awaiting[key]
                    continue
                client = by_session.get(effect.session)
                if client is None or client.session != effect.session or client.broken:
                    continue
                if kind is Reject:
                    client.lose_connection()  # the node sends ERROR and closes the socket
                elif kind is Deliver:
                    deliver: Deliver = effect  # type: ignore[assignment]
                    if deliver.ack_id is not None and deliver.sub_id in client.subs:
                        client.held.append(Held(deliver.sub_id, deliver.ack_id, deliver.message.message_id))

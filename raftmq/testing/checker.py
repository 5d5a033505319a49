"""Properties every run of the broker core must keep, checked from commands and effects alone.

The model does not re-implement dispatch (who gets which message when). It follows what the
protocol promises and checks each effect against it:

- a stored message (a queue message, or one subscription's copy of a topic message) is in
  flight with at most one consumer at a time;
- a message that was consumed (acknowledged, or delivered in ack mode auto) or dead-lettered
  is never delivered again from the store it left; delivery counts go up by one per
  delivery, `redelivered` says whether it is a redelivery, no message past its expiry is
  delivered, no client-mode subscription holds more than its prefetch;
- every delivered message was sent, and one logical SEND (retries with the same
  `_AMQ_DUPL_ID` included) is stored once: all its deliveries carry one message id;
- an ACK or NACK is refused exactly when it names no delivery in flight in its session (or an
  unknown transaction); a refused command yields one Reject carrying its receipt id and
  no Receipt, an accepted one exactly one Receipt;
- at the end (`audit`), every queue SEND whose RECEIPT came back (for a transaction: the
  COMMIT's) is consumed, in flight, or still stored in its queue, the dead-letter queue or
  the expiry queue.

A violated property raises `Violation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftmq.core.commands import (
    ACK_AUTO,
    ACK_CLIENT,
    Abort,
    Ack,
    Begin,
    Browse,
    Command,
    Commit,
    Connect,
    Disconnect,
    Nack,
    Send,
    Subscribe,
    Unsubscribe,
)
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect, Receipt, Reject
from raftmq.protocol.header_block import first

Key = tuple[str, ...]  # a stored message: (queue, message id) or (topic, subscription, message id)


class Violation(AssertionError):
    """The core broke a property of the protocol (see the module docstring)."""


@dataclass(slots=True)
class _InFlight:
    key: Key
    ack_id: str
    message_id: str
    body: object
    count: int
    tracked: bool  # False in the dead-letter and expiry queues, where copies share message ids


@dataclass(slots=True)
class _Sub:
    identity: str  # what a topic copy belongs to: a durable name outlives sessions
    destination: str
    ack: str
    prefetch: int
    in_flight: dict[str, _InFlight] = field(default_factory=dict)  # by ack id, in delivery order


@dataclass(slots=True)
class _Session:
    subs: dict[str, _Sub] = field(default_factory=dict)
    transactions: dict[str, list[Command]] = field(default_factory=dict)


@dataclass(slots=True)
class _Sent:
    destination: str
    deduplicated: bool
    acknowledged: bool = False
    message_id: str | None = None
    consumed: bool = False
    in_flight: int = 0
    stored_at: int | None = None  # deduplicated SENDs stored before this one's first store


class Checker:
    def __init__(self, config: CoreConfig) -> None:
        self.config = config
        self.sessions: dict[str, _Session] = {}
        self.holders: dict[Key, str] = {}  # key -> "session/sub/ack id"
        self.retired: dict[Key, str] = {}  # key -> why it may never be delivered again
        self.counts: dict[Key, int] = {}
        self.sent: dict[object, _Sent] = {}  # by body (one body per logical SEND)
        self.deliveries = 0
        self.acknowledged_sends = 0
        self.stored = 0  # deduplicated SENDs stored so far (what the core's dedup cache saw)
        self.duplicates = 0  # SENDs committed again after their first copy: the core drops them
        self._committed: list[Send] = []  # the SENDs of the COMMIT being observed

    # -- one command and its effects ---------------------------------------------------------

    def observe(self, command: Command, effects: list[Effect]) -> None:
        session_id = getattr(command, "session", None)
        errors = [e for e in effects if isinstance(e, Reject) and e.session == session_id]
        rejected = bool(errors)
        self._check_receipts(command, effects, errors)
        if isinstance(command, (Ack, Nack)):
            expected = self._acceptable(command)
            if expected != (not rejected):
                verdict = "refused" if rejected else "accepted"
                reason = f" ({errors[0].message}: {errors[0].detail})" if errors else ""
                raise Violation(f"the core {verdict} {command!r}{reason}; the model expected the opposite")
        if rejected:
            self._end_session(str(session_id))  # the core ends a refused session
        else:
            self._accepted(command)
        browse = type(command) is Browse
        for effect in effects:
            if isinstance(effect, Deliver) and not browse:
                self._delivered(effect, command)
            elif isinstance(effect, Receipt) and not rejected:
                self._receipted(command)

    def _check_receipts(self, command: Command, effects: list[Effect], errors: list[Reject]) -> None:
        receipt = getattr(command, "receipt", None)
        session_id = getattr(command, "session", None)
        if errors:
            if len(errors) != 1 or errors[0].receipt_id != receipt:
                raise Violation(f"a refused command must yield one Reject with its receipt: {command!r} -> {errors!r}")
            if any(isinstance(e, Receipt) and e.session == session_id for e in effects):
                raise Violation(f"a refused command got a Receipt: {command!r}")
            return
        if receipt is not None:
            mine = [e for e in effects if isinstance(e, Receipt) and e.session == session_id]
            if len(mine) != 1 or mine[0].receipt_id != receipt:
                raise Violation(f"an accepted command must yield exactly one Receipt: {command!r} -> {mine!r}")

    def _acceptable(self, command: Ack | Nack) -> bool:
        session = self.sessions.get(command.session)
        if session is None or self._find(session, command) is None:
            return False
        return command.transaction is None or command.transaction in session.transactions

    def _find(self, session: _Session, command: Ack | Nack) -> tuple[_Sub, _InFlight] | None:
        for sub_id, sub in session.subs.items():
            if command.ack_id is not None:
                held = sub.in_flight.get(command.ack_id)
                if held is not None:
                    return sub, held
            elif command.subscription is None or command.subscription == sub_id:
                for held in sub.in_flight.values():
                    if held.message_id == command.message_id:
                        return sub, held
        return None

    def _accepted(self, command: Command) -> None:
        if isinstance(command, Connect):
            self.sessions.setdefault(command.session, _Session())
        elif isinstance(command, Disconnect):
            self._end_session(command.session)
        elif isinstance(command, Subscribe):
            self._subscribed(command)
        elif isinstance(command, Unsubscribe):
            sub = self.sessions[command.session].subs.pop(command.sub_id)
            self._return(sub, list(sub.in_flight.values()), dropped=self._dropped(sub, command.drop_durable))
        elif isinstance(command, Send):
            self._send(command)
        elif isinstance(command, (Ack, Nack)):
            self._settle_or_buffer(command)
        elif isinstance(command, Begin):
            self.sessions[command.session].transactions[command.transaction] = []
        elif isinstance(command, Commit):
            self._committed = []
            for op in self.sessions[command.session].transactions.pop(command.transaction):
                if isinstance(op, Send):
                    self._stored(op)
                    self._committed.append(op)
                elif isinstance(op, (Ack, Nack)):
                    self._settle(op, skip_settled=True)
        elif isinstance(command, Abort):
            del self.sessions[command.session].transactions[command.transaction]

    def _subscribed(self, command: Subscribe) -> None:
        session = self.sessions[command.session]
        if command.durable_name is not None:
            identity = f"durable:{command.durable_name}"
        else:
            identity = f"{command.session}/{command.sub_id}"
        prefetch = command.prefetch or self.config.default_prefetch
        session.subs[command.sub_id] = _Sub(identity, command.destination, command.ack, prefetch)

    @staticmethod
    def _dropped(sub: _Sub, drop_durable: bool) -> bool:
        """A topic subscription's store goes with it (unless it is durable and kept)."""
        return sub.destination.startswith("/topic/") and (drop_durable or not sub.identity.startswith("durable:"))

    def _end_session(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        for sub in session.subs.values():
            self._return(sub, list(sub.in_flight.values()), dropped=self._dropped(sub, False))

    def _send(self, command: Send) -> None:
        if command.body not in self.sent:
            deduplicated = bool(first(command.headers, "_AMQ_DUPL_ID"))
            self.sent[command.body] = _Sent(command.destination, deduplicated)
        if command.transaction is not None:
            self.sessions[command.session].transactions[command.transaction].append(command)
        else:
            self._stored(command)

    def _stored(self, command: Send) -> None:
        """A SEND reached its destination (the core drops it there if it is a duplicate)."""
        record = self.sent[command.body]
        if not record.deduplicated:
            return
        if record.stored_at is None:
            record.stored_at = self.stored
            self.stored += 1
        else:
            self.duplicates += 1

    def _receipted(self, command: Command) -> None:
        """The client learns its command took effect: SENDs (a COMMIT's ones) are acknowledged."""
        if isinstance(command, Send) and command.transaction is None:
            self._acknowledge(command)
        elif isinstance(command, Commit):
            for send in self._committed:
                self._acknowledge(send)

    def _acknowledge(self, command: Send) -> None:
        record = self.sent[command.body]
        if command.destination.startswith("/queue/") and not record.acknowledged:
            record.acknowledged = True
            self.acknowledged_sends += 1

    # -- settling ------------------------------------------------------------------------------

    def _settle_or_buffer(self, command: Ack | Nack) -> None:
        if command.transaction is not None:
            session = self.sessions[command.session]
            found = self._find(session, command)
            assert found is not None
            # The core remembers the delivery by ack id; settled meanwhile means nothing to do.
            session.transactions[command.transaction].append(
                type(command)(command.session, command.now, ack_id=found[1].ack_id)
            )
            return
        self._settle(command, skip_settled=False)

    def _settle(self, command: Ack | Nack, skip_settled: bool) -> None:
        session = self.sessions[command.session]
        found = self._find(session, command)
        if found is None:
            assert skip_settled, command
            return
        sub, held = found
        settled = [held]
        if sub.ack == ACK_CLIENT:
            settled = []
            for earlier in sub.in_flight.values():
                settled.append(earlier)
                if earlier is held:
                    break
        if isinstance(command, Ack):
            for done in settled:
                self._release(sub, done)
                self._consumed(done, "acknowledged")
        else:
            self._return(sub, settled, dropped=False)

    def _release(self, sub: _Sub, held: _InFlight) -> None:
        del sub.in_flight[held.ack_id]
        if held.tracked:
            del self.holders[held.key]
        record = self.sent.get(held.body)
        if record is not None:
            record.in_flight -= 1

    def _return(self, sub: _Sub, returned: list[_InFlight], dropped: bool) -> None:
        """Deliveries go back to their store, to the dead-letter queue (delivered too often),
        or nowhere (the store of a dropped topic subscription)."""
        for held in returned:
            self._release(sub, held)
            if not held.tracked:
                continue
            if dropped:
                self.retired[held.key] = "discarded with its subscription"
            elif held.count >= self.config.max_delivery_count:
                self.retired[held.key] = f"dead-lettered after {held.count} deliveries"

    def _consumed(self, held: _InFlight, why: str) -> None:
        if held.tracked:
            self.retired[held.key] = why
        record = self.sent.get(held.body)
        if record is not None:
            record.consumed = True

    # -- deliveries ----------------------------------------------------------------------------

    def _delivered(self, effect: Deliver, command: Command) -> None:
        self.deliveries += 1
        session = self.sessions.get(effect.session)
        sub = session.subs.get(effect.sub_id) if session is not None else None
        if sub is None:
            raise Violation(f"delivery to a subscription that does not exist: {effect!r}")
        message = effect.message
        if message.destination.startswith("/queue/"):
            key: Key = (message.destination, message.message_id)
        else:
            key = (message.destination, sub.identity, message.message_id)
        where = f"{effect.session}/{effect.sub_id}/{effect.ack_id}"
        # Copies in the dead-letter and expiry queues keep their message id, and there can be
        # several (one per topic subscription, or dead-lettered again): those are not followed
        # one by one.
        tracked = message.destination not in (self.config.dead_letter_queue, self.config.expiry_queue)
        count = effect.delivery_count
        if tracked:
            if key in self.retired:
                raise Violation(f"{key} delivered again to {where} after it was {self.retired[key]}")
            if key in self.holders:
                raise Violation(f"{key} delivered to {where} while in flight with {self.holders[key]}")
            count = self.counts[key] = self.counts.get(key, 0) + 1
        if effect.delivery_count != count or effect.redelivered != (count > 1):
            raise Violation(f"{key} delivery {count} reported as count {effect.delivery_count}, "
                            f"redelivered {effect.redelivered}")
        if message.expires and message.expires <= command.now:
            raise Violation(f"{key} delivered at {command.now} though it expired at {message.expires}")
        record = self.sent.get(message.body)
        if record is None:
            raise Violation(f"{key} delivered, but nobody sent its body {message.body!r}")
        if record.message_id is None:
            record.message_id = message.message_id
        elif record.message_id != message.message_id and self._remembered(record):
            raise Violation(f"one SEND stored twice: {message.body!r} as {record.message_id} and {message.message_id}")
        held = _InFlight(key, effect.ack_id or "", message.message_id, message.body, count, tracked)
        if sub.ack == ACK_AUTO:
            self._consumed(held, "consumed (ack mode auto)")
            return
        assert effect.ack_id is not None, effect
        sub.in_flight[effect.ack_id] = held
        if tracked:
            self.holders[key] = where
        record.in_flight += 1
        if len(sub.in_flight) > sub.prefetch:
            raise Violation(f"{where} holds {len(sub.in_flight)} deliveries, over its prefetch {sub.prefetch}")

    def _remembered(self, record: _Sent) -> bool:
        """Whether the core's dedup cache must still hold this SEND's id. It forgets the
        oldest first; half the capacity leaves room for ids it learned twice (a retry that
        came after its id was forgotten is rightly stored again, and counted once here)."""
        if not record.deduplicated or record.stored_at is None:
            return False
        return self.stored - record.stored_at < self.config.dedup_cache_size // 2

    # -- the end -------------------------------------------------------------------------------

    def audit(self, stored: dict[str, list[object]]) -> int:
        """Every acknowledged queue SEND is consumed, in flight, or among the bodies `stored`
        (destination -> ready bodies, as browses found them); the number checked."""
        where: dict[object, str] = {}
        for destination, bodies in stored.items():
            for body in bodies:
                where.setdefault(body, destination)
        checked = 0
        for body, record in self.sent.items():
            if not record.acknowledged:
                continue
            checked += 1
            if record.consumed or record.in_flight or body in where:
                continue
            raise Violation(f"acknowledged SEND lost: {body!r} to {record.destination} "
                            "is neither consumed, in flight nor stored")
        return checked

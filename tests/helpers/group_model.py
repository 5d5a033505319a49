"""What a replicated group may and may not do with one queue, as seen from its clients.

The stateful group test cannot know which node holds what; it only knows what each client was
told. This model keeps exactly that and checks every delivery against it:

- a SEND either got its RECEIPT (the message must be delivered, and stay until an ACK of it
  was receipted) or its outcome is unknown (the client gave up, the connection broke, no
  majority): it may or may not be stored, but at most once per `_AMQ_DUPL_ID`;
- a message that was delivered is stored, whatever its SEND was told;
- after an ACK got its RECEIPT the message never comes back; an ACK with an unknown outcome
  may or may not have removed it;
- duplicates reach consumers only as flagged redeliveries: each id is delivered at most once
  without `redelivered:true`, over the whole run and the final drain (a second unflagged copy
  means it was stored twice, or a dispatch was forgotten);
- every body is the one that was sent for that id.

Pure: no sockets, no clock. Violations raise `ModelViolation` (an AssertionError) at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


class ModelViolation(AssertionError):
    """The group did something no correct group may do."""


@dataclass
class QueueModel:
    sent: set[str] = field(default_factory=set)  # every id a SEND was issued for
    receipted: set[str] = field(default_factory=set)
    send_unknown: set[str] = field(default_factory=set)
    acked: set[str] = field(default_factory=set)  # the ACK's RECEIPT arrived
    ack_unknown: set[str] = field(default_factory=set)
    delivered: Counter[str] = field(default_factory=Counter)  # every MESSAGE, run and drain
    unflagged: Counter[str] = field(default_factory=Counter)  # MESSAGEs without redelivered:true
    drained: Counter[str] = field(default_factory=Counter)
    failed: bool = False  # a violation was raised; the teardown then skips its own checks

    # -- producers -------------------------------------------------------------------------

    def send_issued(self, message_id: str) -> None:
        if message_id in self.sent:
            raise ValueError(f"the test reused the id {message_id}")
        self.sent.add(message_id)

    def send_receipted(self, message_id: str) -> None:
        self.send_unknown.discard(message_id)
        self.receipted.add(message_id)

    def send_failed(self, message_id: str) -> None:
        """No RECEIPT (an error, a timeout, a cancelled wait): stored or not, we cannot tell."""
        if message_id not in self.receipted:
            self.send_unknown.add(message_id)

    # -- consumers -------------------------------------------------------------------------

    def delivery(self, message_id: str | None, redelivered: bool, body_ok: bool, *, drain: bool = False) -> None:
        where = "the final drain" if drain else "a consumer"
        if message_id is None or message_id not in self.sent:
            self._violate(f"{where} got a message nobody sent: {message_id!r}")
        assert message_id is not None
        if not body_ok:
            self._violate(f"{where} got {message_id} with a body that is not the one sent")
        if message_id in self.acked:
            self._violate(f"{where} got {message_id} (redelivered={redelivered}) after its ACK was receipted")
        self.delivered[message_id] += 1
        if drain:
            self.drained[message_id] += 1
        if not redelivered:
            self.unflagged[message_id] += 1
            if self.unflagged[message_id] > 1:
                self._violate(
                    f"{where} got {message_id} unflagged a {self.unflagged[message_id]}. time: stored twice, "
                    f"or a redelivery not flagged (deliveries so far: {self.delivered[message_id]})"
                )

    def ack_receipted(self, message_id: str) -> None:
        self.ack_unknown.discard(message_id)
        self.acked.add(message_id)

    def ack_failed(self, message_id: str) -> None:
        if message_id not in self.acked:
            self.ack_unknown.add(message_id)

    # -- the end ---------------------------------------------------------------------------

    def must_remain(self) -> set[str]:
        """Ids that must still be in the queue once every consumer is gone."""
        stored = self.receipted | set(self.delivered)
        return stored - self.acked - self.ack_unknown

    def check_final(self, stored_count: int | None = None) -> None:
        """After the drain (every consumer of the run closed first, then one fresh consumer
        took what was left). `stored_count`: how many messages the queue ever enqueued, as the
        leader reports it, when known."""
        never = self.receipted - set(self.delivered)
        if never:
            self._violate(f"{len(never)} receipted messages were never delivered, e.g. {sorted(never)[:5]}")
        missing = self.must_remain() - set(self.drained)
        if missing:
            self._violate(
                f"{len(missing)} messages neither acked nor in the final drain, e.g. {sorted(missing)[:5]} "
                f"(receipted: {len(self.receipted)}, acked: {len(self.acked)})"
            )
        if stored_count is not None and stored_count != len(self.delivered):
            self._violate(
                f"the queue enqueued {stored_count} messages but {len(self.delivered)} distinct ids were "
                "delivered: a copy was stored twice, or one was never delivered"
            )

    def summary(self) -> dict[str, int]:
        return {
            "sent": len(self.sent),
            "receipted": len(self.receipted),
            "send_unknown": len(self.send_unknown),
            "acked": len(self.acked),
            "ack_unknown": len(self.ack_unknown),
            "deliveries": sum(self.delivered.values()),
            "redeliveries": sum(self.delivered.values()) - sum(self.unflagged.values()),
            "drained": sum(self.drained.values()),
        }

    def _violate(self, message: str) -> None:
        self.failed = True
        raise ModelViolation(message)

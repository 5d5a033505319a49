"""Who sent what, what the broker confirmed, what consumers got: lost and duplicated messages.

Every bench message is named by (producer id, sequence number); sequences of one producer run
0, 1, 2, ... so each set of names is a bitmap per producer. Bitmaps from several consumer
processes merge with bitwise operations, which is also how a message received by two
processes is recognised as a duplicate.

Definitions:
- lost: receipted by the broker, never received by any consumer.
- missing_unconfirmed: sent without (or before) a receipt and never received; reported,
  but no guarantee was broken.
- duplicated: each reception of a message beyond the first that did not carry
  `redelivered:true`. Receptions flagged `redelivered:true` are counted as redelivered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Bitmap:
    """A growable set of small non-negative integers."""

    __slots__ = ("bits",)

    def __init__(self, data: bytes = b"") -> None:
        self.bits = bytearray(data)

    def add(self, n: int) -> bool:
        """Add `n`; True when it was not there before."""
        byte = n >> 3
        bits = self.bits
        if byte >= len(bits):
            bits.extend(bytes(byte + 1 - len(bits) + len(bits) // 2))
        mask = 1 << (n & 7)
        if bits[byte] & mask:
            return False
        bits[byte] |= mask
        return True

    def __contains__(self, n: int) -> bool:
        byte = n >> 3
        return byte < len(self.bits) and bool(self.bits[byte] & (1 << (n & 7)))

    def as_int(self) -> int:
        return int.from_bytes(self.bits, "little")

    @classmethod
    def from_int(cls, value: int) -> Bitmap:
        return cls(value.to_bytes((value.bit_length() + 7) // 8, "little"))

    def __len__(self) -> int:
        return self.as_int().bit_count()


class SendLedger:
    """The producers' side: how many sequences each producer used, which were receipted."""

    def __init__(self) -> None:
        self.sent: dict[int, int] = {}
        self.receipted: dict[int, Bitmap] = {}

    def record_sent(self, producer: int, seq: int) -> None:
        if seq >= self.sent.get(producer, 0):
            self.sent[producer] = seq + 1

    def record_receipt(self, producer: int, seq: int) -> None:
        bitmap = self.receipted.get(producer)
        if bitmap is None:
            bitmap = self.receipted[producer] = Bitmap()
        bitmap.add(seq)

    def merge(self, other: SendLedger) -> None:
        for producer, count in other.sent.items():
            self.sent[producer] = max(self.sent.get(producer, 0), count)
        for producer, bitmap in other.receipted.items():
            mine = self.receipted.get(producer)
            merged = bitmap.as_int() if mine is None else mine.as_int() | bitmap.as_int()
            self.receipted[producer] = Bitmap.from_int(merged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": dict(self.sent),
            "receipted": {p: bytes(b.bits) for p, b in self.receipted.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SendLedger:
        ledger = cls()
        ledger.sent = {int(p): n for p, n in data["sent"].items()}
        ledger.receipted = {int(p): Bitmap(b) for p, b in data["receipted"].items()}
        return ledger


class ReceiveLedger:
    """The consumers' side: which messages arrived, and how often."""

    def __init__(self) -> None:
        self.received: dict[int, Bitmap] = {}  # any reception
        self.plain: dict[int, Bitmap] = {}  # receptions without redelivered:true
        self.duplicated = 0
        self.redelivered = 0
        self.unique = 0

    def record(self, producer: int, seq: int, redelivered: bool) -> bool:
        """Note one reception; True when it is the first reception of that message here."""
        received = self.received.get(producer)
        if received is None:
            received = self.received[producer] = Bitmap()
            self.plain[producer] = Bitmap()
        if redelivered:
            self.redelivered += 1
        elif not self.plain[producer].add(seq):
            self.duplicated += 1
        first = received.add(seq)
        if first:
            self.unique += 1
        return first

    def merge(self, other: ReceiveLedger) -> None:
        """Combine with another consumer process's ledger; overlaps in `plain` are duplicates."""
        self.duplicated += other.duplicated
        self.redelivered += other.redelivered
        for producer, bitmap in other.received.items():
            theirs_plain = other.plain[producer].as_int()
            mine = self.received.get(producer)
            if mine is None:
                self.received[producer] = Bitmap(bytes(bitmap.bits))
                self.plain[producer] = Bitmap.from_int(theirs_plain)
                continue
            mine_plain = self.plain[producer].as_int()
            self.duplicated += (mine_plain & theirs_plain).bit_count()
            self.plain[producer] = Bitmap.from_int(mine_plain | theirs_plain)
            self.received[producer] = Bitmap.from_int(mine.as_int() | bitmap.as_int())
        self.unique = sum(len(b) for b in self.received.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "received": {p: bytes(b.bits) for p, b in self.received.items()},
            "plain": {p: bytes(b.bits) for p, b in self.plain.items()},
            "duplicated": self.duplicated,
            "redelivered": self.redelivered,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReceiveLedger:
        ledger = cls()
        ledger.received = {int(p): Bitmap(b) for p, b in data["received"].items()}
        ledger.plain = {int(p): Bitmap(b) for p, b in data["plain"].items()}
        ledger.duplicated = data["duplicated"]
        ledger.redelivered = data["redelivered"]
        ledger.unique = sum(len(b) for b in ledger.received.values())
        return ledger


@dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    sent: int
    receipted: int
    received: int  # distinct messages of this run received
    lost: int
    missing_unconfirmed: int
    duplicated: int
    redelivered: int


def reconcile(sent: SendLedger, received: ReceiveLedger) -> DeliveryOutcome:
    """Compare what was sent and confirmed with what arrived."""
    total_sent = total_receipted = lost = missing = 0
    for producer, count in sent.sent.items():
        all_sent = (1 << count) - 1
        receipted_bits = sent.receipted[producer].as_int() if producer in sent.receipted else 0
        got = received.received[producer].as_int() if producer in received.received else 0
        total_sent += count
        total_receipted += receipted_bits.bit_count()
        lost += (receipted_bits & ~got).bit_count()
        missing += (all_sent & ~receipted_bits & ~got).bit_count()
    return DeliveryOutcome(
        sent=total_sent,
        receipted=total_receipted,
        received=received.unique,
        lost=lost,
        missing_unconfirmed=missing,
        duplicated=received.duplicated,
        redelivered=received.redelivered,
    )

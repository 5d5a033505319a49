from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.bench.accounting import Bitmap, ReceiveLedger, SendLedger, reconcile


def test_bitmap_add_and_contains() -> None:
    bitmap = Bitmap()
    assert bitmap.add(0) and bitmap.add(9) and bitmap.add(1000)
    assert not bitmap.add(9)
    assert 9 in bitmap and 1000 in bitmap and 8 not in bitmap and 5000 not in bitmap
    assert len(bitmap) == 3
    assert Bitmap.from_int(bitmap.as_int()).as_int() == bitmap.as_int()


def test_receipted_but_never_received_is_lost() -> None:
    sent = SendLedger()
    for seq in range(5):
        sent.record_sent(0, seq)
        sent.record_receipt(0, seq)
    received = ReceiveLedger()
    for seq in (0, 1, 3):
        received.record(0, seq, redelivered=False)
    outcome = reconcile(sent, received)
    assert (outcome.sent, outcome.receipted, outcome.received) == (5, 5, 3)
    assert outcome.lost == 2 and outcome.missing_unconfirmed == 0


def test_unreceipted_missing_messages_are_not_lost() -> None:
    sent = SendLedger()
    for seq in range(4):
        sent.record_sent(1, seq)
    sent.record_receipt(1, 0)
    received = ReceiveLedger()
    received.record(1, 1, redelivered=False)
    outcome = reconcile(sent, received)
    assert outcome.lost == 1  # seq 0: receipted, never received
    assert outcome.missing_unconfirmed == 2  # seq 2 and 3: never confirmed, never received


def test_duplicates_and_redeliveries_are_told_apart() -> None:
    received = ReceiveLedger()
    assert received.record(0, 1, redelivered=False)
    assert not received.record(0, 1, redelivered=False)  # a duplicate
    assert not received.record(0, 1, redelivered=True)  # flagged: a redelivery
    assert received.record(0, 2, redelivered=True)  # first seen as a redelivery
    assert not received.record(0, 2, redelivered=False)  # then plain: not a duplicate of a plain one
    assert (received.duplicated, received.redelivered, received.unique) == (1, 2, 2)


def test_the_same_message_in_two_processes_is_a_duplicate() -> None:
    first, second = ReceiveLedger(), ReceiveLedger()
    first.record(0, 5, redelivered=False)
    second.record(0, 5, redelivered=False)
    second.record(0, 6, redelivered=False)
    third = ReceiveLedger()
    third.record(0, 6, redelivered=True)
    merged = ReceiveLedger()
    for part in (first, second, third):
        merged.merge(ReceiveLedger.from_dict(part.to_dict()))
    assert (merged.duplicated, merged.redelivered, merged.unique) == (1, 1, 2)


def test_send_ledgers_merge_by_producer() -> None:
    a, b = SendLedger(), SendLedger()
    a.record_sent(0, 2)
    a.record_receipt(0, 2)
    b.record_sent(1, 0)
    b.record_receipt(1, 0)
    merged = SendLedger()
    merged.merge(SendLedger.from_dict(a.to_dict()))
    merged.merge(SendLedger.from_dict(b.to_dict()))
    assert merged.sent == {0: 3, 1: 1}
    assert 2 in merged.receipted[0] and 0 in merged.receipted[1]


receptions = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 60), st.booleans(), st.integers(0, 2)), max_size=200
)


@settings(max_examples=120, deadline=None)
@given(
    sent_counts=st.dictionaries(st.integers(0, 3), st.integers(0, 60), max_size=4),
    receipted=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 60)), max_size=120),
    events=receptions,
)
def test_reconcile_matches_a_naive_model(
    sent_counts: dict[int, int], receipted: set[tuple[int, int]], events: list[tuple[int, int, bool, int]]
) -> None:
    """Receptions spread over three consumer processes; compare with counting by hand."""
    sent_names = {(p, s) for p, n in sent_counts.items() for s in range(n)}
    receipted &= sent_names
    events = [e for e in events if (e[0], e[1]) in sent_names]

    sent = SendLedger()
    for producer, seq in sorted(sent_names):
        sent.record_sent(producer, seq)
    for producer, seq in receipted:
        sent.record_receipt(producer, seq)
    parts = [ReceiveLedger() for _ in range(3)]
    for producer, seq, redelivered, process in events:
        parts[process].record(producer, seq, redelivered)
    merged = ReceiveLedger()
    for part in parts:
        merged.merge(part)

    plain = Counter((p, s) for p, s, redelivered, _ in events if not redelivered)
    got = {(p, s) for p, s, _, _ in events}
    outcome = reconcile(sent, merged)
    assert outcome.sent == len(sent_names)
    assert outcome.receipted == len(receipted)
    assert outcome.received == len(got)
    assert outcome.lost == len(receipted - got)
    assert outcome.missing_unconfirmed == len(sent_names - receipted - got)
    assert outcome.duplicated == sum(n - 1 for n in plain.values())
    assert outcome.redelivered == sum(1 for e in events if e[2])

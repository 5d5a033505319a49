"""The failover client's outbox, pure: duplicate-detection ids and which frame an ERROR blames."""

from __future__ import annotations

from dataclasses import dataclass

from raftmq.client.failover_outbox import (
    DUPL_ID_HEADER,
    UNNAMED_REFUSALS_TO_BLAME,
    Outbox,
    header_pairs,
    with_dupl_id,
)


@dataclass(eq=False)
class Written:
    awaiting_receipt: bool = True


def test_a_send_keeps_its_own_id_and_an_empty_one_is_replaced() -> None:
    assert with_dupl_id({"a": "1"}, lambda: "new") == ([("a", "1"), (DUPL_ID_HEADER, "new")], "new")
    assert with_dupl_id([(DUPL_ID_HEADER, "mine")], lambda: "new") == ([(DUPL_ID_HEADER, "mine")], "mine")
    assert with_dupl_id([(DUPL_ID_HEADER, ""), ("b", "2")], lambda: "new") == (
        [("b", "2"), (DUPL_ID_HEADER, "new")], "new")
    assert header_pairs(None) == [] and header_pairs({"x": 1}) == [("x", "1")]  # type: ignore[dict-item]


def test_a_named_refusal_blames_the_frame_with_that_receipt() -> None:
    outbox = Outbox()
    first, second = Written(), Written()
    outbox.receipts = {"r1": first, "r2": second}
    assert outbox.blame("r2", "access denied") is second
    assert outbox.blame("r9", "access denied") is None  # an ACK or COMMIT: nothing to stop resending


def test_an_unnamed_refusal_is_pinned_on_the_oldest_waiting_frame_only_when_it_repeats() -> None:
    outbox = Outbox()
    done, oldest, later = Written(False), Written(), Written()
    outbox.receipts = {"r1": done, "r2": oldest, "r3": later}
    results = [outbox.blame(None, "frame too large") for _ in range(UNNAMED_REFUSALS_TO_BLAME)]
    assert results[:-1] == [None] * (UNNAMED_REFUSALS_TO_BLAME - 1) and results[-1] is oldest
    # Another message in between starts the count again.
    assert outbox.blame(None, "frame too large") is None
    assert outbox.blame(None, "something else") is None
    outbox.not_blamed()
    assert outbox.blame(None, "frame too large") is None

"""The failover client's outbox, pure: the order of unreceipted SENDs, their duplicate-detection
ids (kept when written again), and which frame an ERROR blames."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from raftmq.client import failover_outbox
from raftmq.client.failover_outbox import (
    DUPL_ID_HEADER,
    UNNAMED_REFUSALS_TO_BLAME,
    Outbox,
    PendingSend,
    Verdict,
    with_dupl_id,
)
from raftmq.client.headers import header_list, header_pairs


@dataclass(eq=False)
class Written:
    awaiting_receipt: bool = True


def test_a_send_keeps_its_own_id_and_an_empty_one_is_replaced() -> None:
    assert with_dupl_id({"a": "1"}, lambda: "new") == ([("a", "1"), (DUPL_ID_HEADER, "new")], "new")
    assert with_dupl_id([(DUPL_ID_HEADER, "mine")], lambda: "new") == ([(DUPL_ID_HEADER, "mine")], "mine")
    assert with_dupl_id([(DUPL_ID_HEADER, ""), ("b", "2")], lambda: "new") == (
        [("b", "2"), (DUPL_ID_HEADER, "new")], "new")
    assert header_pairs(None) == [] and header_pairs({"x": 1}) == [("x", "1")]  # type: ignore[arg-type]
    mine = [("a", "1")]
    assert header_pairs(mine) == mine and header_pairs(mine) is not mine  # a subscription keeps a copy
    assert header_list(mine) is mine and header_list({"a": "1"}) == mine  # a frame reads it at once


def test_a_named_refusal_blames_the_frame_with_that_receipt() -> None:
    outbox: Outbox[Outcome] = Outbox()
    first, second = Written(), Written()
    outbox.receipts = {"r1": first, "r2": second}
    assert outbox.blame("r2", "access denied") is second
    assert outbox.blame("r9", "access denied") is None  # an ACK or COMMIT: nothing to stop resending


def test_an_unnamed_refusal_is_pinned_on_the_oldest_waiting_frame_only_when_it_repeats() -> None:
    outbox: Outbox[Outcome] = Outbox()
    done, oldest, later = Written(False), Written(), Written()
    outbox.receipts = {"r1": done, "r2": oldest, "r3": later}
    results = [outbox.blame(None, "frame too large") for _ in range(UNNAMED_REFUSALS_TO_BLAME)]
    assert results[:-1] == [None] * (UNNAMED_REFUSALS_TO_BLAME - 1) and results[-1] is oldest
    # Another message in between starts the count again.
    assert outbox.blame(None, "frame too large") is None
    assert outbox.blame(None, "something else") is None
    outbox.not_blamed()
    assert outbox.blame(None, "frame too large") is None


@dataclass
class Outcome:
    """Stands in for the client's future: the outbox only asks whether it is done."""

    finished: bool = False

    def done(self) -> bool:
        return self.finished


@dataclass
class Receipt:
    """Stands in for a RECEIPT future on one connection."""

    state: str = "waiting"  # waiting, answered, broken, cancelled

    def done(self) -> bool:
        return self.state != "waiting"

    def cancelled(self) -> bool:
        return self.state == "cancelled"

    def exception(self) -> BaseException | None:
        return ConnectionError() if self.state == "broken" else None


def _ids(counter: list[int]) -> str:
    counter.append(len(counter) + 1)
    return f"id-{counter[-1]}"


def test_sends_keep_their_order_and_their_id_across_connections() -> None:
    outbox: Outbox[Outcome] = Outbox()
    made: list[int] = []
    first = outbox.add("/queue/a", b"1", None, True, None, Outcome(), lambda: _ids(made))
    second = outbox.add("/queue/a", b"2", {DUPL_ID_HEADER: "mine"}, True, None, Outcome(), lambda: _ids(made))
    third = outbox.add("/queue/b", b"3", [], True, "tx", Outcome(), lambda: _ids(made))
    assert [p.dupl_id for p in outbox.in_order()] == ["id-1", "mine", "id-2"]
    assert (first.headers, third.transaction) == ([(DUPL_ID_HEADER, "id-1")], "tx")
    assert outbox.resent_ids() == ()  # nothing was written yet
    first.writes = second.writes = 1
    outbox.forget(second)
    assert outbox.in_order() == [first, third] and len(outbox) == 2
    assert outbox.resent_ids() == ("id-1",)  # written before: written again with the same id
    outbox.forget(second)  # forgetting twice is harmless
    assert len(outbox) == 2


def awaiting(pending: PendingSend[Outcome]) -> bool:
    return pending.awaiting_receipt  # a call: mypy would take one assert on the property as final


def test_a_send_awaits_its_receipt_until_answered_or_settled() -> None:
    outbox: Outbox[Outcome] = Outbox()
    pending = outbox.add("/queue/a", b"", None, True, None, Outcome(), lambda: "x")
    assert not awaiting(pending)  # not written yet
    pending.inner = receipt = Receipt()
    assert awaiting(pending)
    receipt.state = "broken"  # the connection ended: still owed a RECEIPT
    assert awaiting(pending)
    receipt.state = "cancelled"
    assert awaiting(pending)
    receipt.state = "answered"
    assert not awaiting(pending)
    receipt.state = "waiting"
    pending.future.finished = True  # settled (a timeout, the caller cancelled it)
    assert not awaiting(pending)


def test_a_lost_connection_blames_only_a_verdict_and_forgets_its_receipts() -> None:
    outbox: Outbox[Outcome] = Outbox()
    first, second = Written(), Written()
    outbox.written("r1", first)
    outbox.written("r2", second)
    assert outbox.connection_lost(Verdict("r2", "access denied")) is second
    assert outbox.receipts == {}
    # A break that was no verdict starts the count of unnamed refusals again.
    for _ in range(UNNAMED_REFUSALS_TO_BLAME - 1):
        outbox.written("r1", first)
        assert outbox.connection_lost(Verdict(None, "frame too large")) is None
    outbox.written("r1", first)
    assert outbox.connection_lost(None) is None
    culprit = None
    for _ in range(UNNAMED_REFUSALS_TO_BLAME):
        outbox.written("r1", first)
        culprit = outbox.connection_lost(Verdict(None, "frame too large"))
    assert culprit is first


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_outbox_needs_no_event_loop() -> None:
    # It and the raftmq modules it imports (the package's __init__ aside: that is the client).
    root = Path(failover_outbox.__file__).resolve().parents[2]
    todo, seen, outside = ["raftmq.client.failover_outbox"], set(), set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for name in _imports(root / (module.replace(".", "/") + ".py")):
            if name.startswith("raftmq."):
                todo.append(name)
            else:
                outside.add(name.split(".")[0])
    assert not outside & {"asyncio", "socket", "ssl", "selectors", "time", "threading"}, (seen, outside)


def test_a_settled_send_leaves_nothing_behind() -> None:
    """A long-lived client (a cluster bridge) once kept every receipted SEND, body included."""
    outbox: Outbox[Outcome] = Outbox()
    for number in range(1000):
        pending = outbox.add("/queue/a", b"x" * 100, None, True, None, Outcome(), lambda: "x")
        outbox.written(f"r{number}", pending)
        outbox.forget(pending)
    assert outbox.pending == {} and outbox.receipts == {}
    # A receipt id of an earlier connection may name another frame now: that one stays.
    old = outbox.add("/queue/a", b"", None, True, None, Outcome(), lambda: "x")
    outbox.written("r1", old)
    outbox.new_connection()
    subscription = Written()
    outbox.written("r1", subscription)
    outbox.forget(old)
    assert outbox.receipts == {"r1": subscription}


def test_new_dupl_ids_are_distinct_and_a_forked_child_draws_its_own() -> None:
    """Ids are a per-process random prefix and a counter: a forked child must not repeat its
    parent's (the broker would drop the child's message as a duplicate)."""
    import os

    ids = [failover_outbox.new_dupl_id() for _ in range(1000)]
    assert len(set(ids)) == 1000 and all(i.startswith("raftmq-") for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id, then leave at once
        os.write(write, failover_outbox.new_dupl_id().encode())
        os._exit(0)
    os.close(write)
    try:
        child_id = os.read(read, 200).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    parent_next = failover_outbox.new_dupl_id()
    assert child_id and child_id.rsplit("-", 1)[0] != parent_next.rsplit("-", 1)[0]
    assert child_id not in ids and child_id != parent_next

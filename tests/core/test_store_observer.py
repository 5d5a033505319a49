"""The core reports every message entering or leaving a store (raftmq.core.store_observer):
a workload that goes every way in and out, checked after each command against a ledger
(raftmq.testing.store_ledger), and a missing report of any one kind is caught."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from raftmq.core import store_observer
from raftmq.core.commands import Command, Manage
from raftmq.core.effects import Effect
from raftmq.core.message import Message
from raftmq.core.model import Store
from raftmq.testing.store_ledger import StoreLedger
from tests.core.test_broker_manage import dead_letter
from tests.helpers.broker_harness import Harness, delivers

KINDS = (store_observer.PUBLISHED, store_observer.DEAD_LETTER, store_observer.EXPIRY, store_observer.ACKED,
         store_observer.AUTO_ACKED, store_observer.DEAD_LETTERED, store_observer.EXPIRED, store_observer.TAKEN,
         store_observer.DISCARDED)


class Checked(Harness):
    """A harness that checks the ledger after every command."""

    def __init__(self, check: Callable[[], None]) -> None:
        super().__init__(max_delivery_count=2, page_size=2)
        self.check = check

    def apply(self, command: Command) -> list[Effect]:
        effects = super().apply(command)
        self.check()
        return effects


def workload(h: Harness) -> None:
    """Every way in and out: SENDs (some paged), auto and client acknowledgements, the DLQ, the
    expiry queue, a topic subscription dropped with messages ready and in flight, a purge, an
    operator's move, a temporary queue gone with its session."""
    for session in ("p", "c", "t"):
        h.connect(session)
    for i in range(6):
        h.send("p", "/queue/a", f"a{i}".encode())  # page_size 2: four of them paged
    h.subscribe("c", "auto", "/queue/a")  # auto-acknowledged, paged in as the head drains
    h.send("p", "/queue/b", b"b")
    (got,) = delivers(h.subscribe("c", "ind", "/queue/b", ack="client-individual"))
    h.ack("c", got.ack_id)
    dead_letter(h, "/queue/d", b"d")
    h.send("p", "/queue/e", b"e", {"expires": str(h.now + 10)})
    h.tick(h.now + 100)
    h.subscribe("c", "t", "/topic/t", ack="client", prefetch=1)
    h.send("p", "/topic/t", b"t1")
    h.send("p", "/topic/t", b"t2")  # one in flight, one ready
    h.unsubscribe("c", "t")
    h.send("p", "/queue/purged", b"x")
    h.apply(Manage("req", "purge", h.now, "/queue/purged"))
    h.send("p", "/queue/from", b"m")
    h.apply(Manage("req", "move", h.now, "/queue/from", target="/queue/to", every=True))
    h.send("t", "/temp-queue/replies", b"r")
    h.disconnect("t")


def test_every_way_in_and_out_is_reported() -> None:
    ledger: list[StoreLedger] = []
    h = Checked(lambda: ledger[0].check(h.broker))
    ledger.append(StoreLedger.watching(h.broker))
    workload(h)
    assert set(ledger[0].seen) == set(KINDS)  # the workload went every way
    h.broker.check_invariants()


class Forgetful:
    """Passes the core's reports on to a ledger, but one kind: a planted missing report."""

    def __init__(self, ledger: StoreLedger, forgotten: str) -> None:
        self.ledger, self.forgotten = ledger, forgotten

    def entered(self, store: Store, message: Message, origin: str) -> None:
        if origin != self.forgotten:
            self.ledger.entered(store, message, origin)

    def left(self, store: Store, message: Message, outcome: str, session: str | None) -> None:
        if outcome != self.forgotten:
            self.ledger.left(store, message, outcome, session)


@pytest.mark.parametrize("forgotten", KINDS)
def test_a_way_in_or_out_that_is_not_reported_is_caught(forgotten: str) -> None:
    ledger = StoreLedger()
    h = Checked(lambda: ledger.check(h.broker))
    h.broker.dispatch.observer = Forgetful(ledger, forgotten)
    with pytest.raises(AssertionError, match="stores hold other messages than their observer was told"):
        workload(h)

"""A connection's proposals with forwards first (raftmq.server.stomp.proposing): what may go first
goes, what follows waits for it in the client's order, a confirmed SEND is receipted when its
target confirms, and one that is not takes the store path before anything that came after it."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from raftmq.core.commands import Ack, Command, Send
from raftmq.server.stomp.decisions import Propose
from raftmq.server.stomp.proposing import BUSY_WAIT_SECONDS, Proposals


class Planned:
    def __init__(self, send: Send) -> None:
        self.send = send

    def fallback(self) -> Send:
        send = self.send
        return Send(send.session, send.destination, send.headers + "fallback\n", send.body, send.now, None,
                    send.receipt)


class Forwarder:
    """Sends to /queue/far* go first (while `link_busy`, once the link is free); the test
    answers each forward."""

    def __init__(self) -> None:
        self.forwards: list[tuple[list[Planned], Any]] = []
        self.link_busy = False
        self.free_waiters: list[Any] = []

    def plan(self, send: Send) -> Planned | None:
        return Planned(send) if send.destination.startswith("/queue/far") else None

    def busy(self, plan: Planned) -> bool:
        return self.link_busy

    def when_free(self, plan: Planned, then: Any) -> None:
        self.free_waiters.append(then)

    def forward(self, planned: Sequence[Planned], outcome: Any) -> None:
        self.forwards.append((list(planned), outcome))


class Loop:
    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[Any] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, call: Any) -> None:
        self.timers.append(call)


class Host:
    flow = None

    def __init__(self) -> None:
        self.loop = Loop()
        self.forward_first = Forwarder()
        self.proposed: list[tuple[list[Command], Any, int]] = []

    def propose_for(self, commands: Sequence[Command], proposer: Any, number: int) -> None:
        self.proposed.append((list(commands), proposer, number))


class Connection:
    held_for_redirect = False

    def __init__(self) -> None:
        self.host = Host()
        self.stomp = SimpleNamespace(cluster_connection=False, state=SimpleNamespace(ended=False))
        self.receipts: list[str] = []
        self.reading_updates = 0

    def fail(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"failed: {args}")

    def update_reading(self) -> None:
        self.reading_updates += 1

    def receipt(self, receipt_id: str) -> None:
        self.receipts.append(receipt_id)


def send(destination: str, receipt: str | None = None) -> Send:
    return Send("s", destination, "", b"x", 1, None, receipt)


def setup() -> tuple[Connection, Proposals]:
    connection = Connection()
    return connection, Proposals(connection, max_pending=100)  # type: ignore[arg-type]


def settle(connection: Connection, proposals: Proposals) -> None:
    for commands, _, number in connection.host.proposed:
        proposals.settled(number, commands, None)


def test_what_follows_forwards_waits_for_them_and_confirmed_ones_are_receipted_then() -> None:
    connection, proposals = setup()
    ack = Ack("s", 1, ack_id="a1")
    proposals.propose(Propose([send("/queue/far", "r1"), send("/queue/far", "r2"), ack, send("/queue/near", "r3")]))
    ((planned, outcome),) = connection.host.forward_first.forwards
    assert [p.send.receipt for p in planned] == ["r1", "r2"]
    assert connection.host.proposed == [] and proposals.paused and proposals.settling
    outcome(planned, 2)
    assert connection.receipts == ["r1", "r2"]
    assert [commands for commands, _, _ in connection.host.proposed] == [[ack, send("/queue/near", "r3")]]
    assert not proposals.paused


def test_a_forward_not_confirmed_is_proposed_here_before_what_came_after_it() -> None:
    connection, proposals = setup()
    first, second = send("/queue/far", "r1"), send("/queue/far", "r2")
    proposals.propose(Propose([first, second]))
    proposals.propose(Propose([send("/queue/near", "r3")]))
    ((planned, outcome),) = connection.host.forward_first.forwards
    outcome(planned, 1)  # the target stored the first; the second falls back
    assert connection.receipts == ["r1"]
    proposed = [commands for commands, _, _ in connection.host.proposed]
    assert proposed == [[Planned(second).fallback()], [send("/queue/near", "r3")]]


def test_a_send_that_may_go_first_waits_for_what_the_connection_proposed_before_it() -> None:
    """A SEND stored here may be bound for the same group: the next goes first only once it
    settled, so it cannot overtake it; and a connection that pipelines does not stay on the
    store path for ever."""
    connection, proposals = setup()
    proposals.propose(Propose([send("/queue/near")]))
    proposals.propose(Propose([send("/queue/far", "r1")]))
    proposals.propose(Propose([send("/queue/far", "r2")]))
    assert connection.host.forward_first.forwards == [] and len(connection.host.proposed) == 1
    assert proposals.paused
    settle(connection, proposals)
    assert [[p.send.receipt for p in planned] for planned, _ in connection.host.forward_first.forwards] == [
        ["r1"], ["r2"]]
    assert len(connection.host.proposed) == 1 and not proposals.paused


def test_settled_and_closing_wait_for_forwards_in_flight() -> None:
    connection, proposals = setup()
    proposals.propose(Propose([send("/queue/far", "r1")]))
    calls: list[str] = []
    proposals.when_settled(lambda: calls.append("settled"))
    proposals.when_forwarded(lambda: calls.append("forwarded"))
    assert calls == []
    ((planned, outcome),) = connection.host.forward_first.forwards
    outcome(planned, 0)  # fell back: proposed here, so not settled yet
    assert calls == ["forwarded"]
    settle(connection, proposals)
    assert calls == ["forwarded", "settled"]


def test_a_bridge_connection_never_forwards_first() -> None:
    connection, proposals = setup()
    connection.stomp.cluster_connection = True
    proposals.propose(Propose([send("/queue/far")]))
    assert connection.host.forward_first.forwards == [] and len(connection.host.proposed) == 1


def test_a_send_that_may_go_first_waits_briefly_for_its_links_queue_then_takes_the_store_path() -> None:
    """Messages of the link's store-and-forward queue not yet on the wire go first: the SEND
    waits for them (the link says when it is free); a link that stays busy for
    BUSY_WAIT_SECONDS (it cannot keep up) sends the SEND to the store path."""
    connection, proposals = setup()
    forwarder = connection.host.forward_first
    forwarder.link_busy = True
    proposals.propose(Propose([send("/queue/far", "r1")]))
    assert forwarder.forwards == [] and connection.host.proposed == [] and proposals.paused
    forwarder.link_busy = False
    for then in forwarder.free_waiters:
        then()
    assert [[p.send.receipt for p in planned] for planned, _ in forwarder.forwards] == [["r1"]]
    ((planned, outcome),) = forwarder.forwards
    outcome(planned, 1)
    forwarder.link_busy = True
    proposals.propose(Propose([send("/queue/far", "r2")]))
    assert len(forwarder.forwards) == 1 and connection.host.proposed == []
    connection.host.loop.now += BUSY_WAIT_SECONDS
    for then in connection.host.loop.timers:
        then()
    assert len(forwarder.forwards) == 1 and [c for c, _, _ in connection.host.proposed] == [[send("/queue/far", "r2")]]


def test_a_closing_connection_ends_after_what_waited_to_go_first() -> None:
    connection, proposals = setup()
    proposals.propose(Propose([send("/queue/near")]))
    proposals.propose(Propose([send("/queue/far", "r1")]))  # waits for the SEND stored here
    calls: list[str] = []
    proposals.when_forwarded(lambda: calls.append("closing"))
    assert calls == []
    settle(connection, proposals)
    assert calls == []  # r1 went first: in flight
    ((planned, outcome),) = connection.host.forward_first.forwards
    outcome(planned, 1)
    assert calls == ["closing"]

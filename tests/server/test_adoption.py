"""A session handed from a deposed leader to its successor, without sockets: the ticket (signed,
in date, its state), the two StompSessions at either end, the answer the old leader reads, and
what the successor keeps for a session until it arrives (raftmq.server.takeover)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack
import pytest

from raftmq.client.resume import resume_connect, resume_plan
from raftmq.config import NodeConfig
from raftmq.core.commands import Ack, Commit, Send, Subscribe
from raftmq.errors import ProtocolError
from raftmq.protocol.codec import FrameParser
from raftmq.protocol.frame import Frame
from raftmq.replication.commit_log import LogPosition
from raftmq.security import Principal
from raftmq.server.stomp.adoption import (
    REFUSED,
    TICKET_FIELDS,
    TICKET_FORMAT,
    TICKET_MAX_AGE_MS,
    NotTaken,
    Taken,
    Ticket,
    adopted_frame,
    farewell_frame,
    read_adoption,
    read_answer,
    read_resume,
    read_ticket,
    resume_frame,
    ticket_frame,
)
from raftmq.server.stomp.decisions import Adopt, Propose, Refuse
from raftmq.server.stomp.frames import error_frame
from raftmq.server.stomp.session import SessionState, StompSession
from raftmq.server.takeover import PARK_SECONDS, AwaitingAdoption, Parked, Takeover
from tests.server.test_stomp_session import CONNECT, NOW, Host, commands, frame

SECRET = "group-secret"


def open_session(session_id: str = "n1:b:1") -> StompSession:
    old = StompSession(Host(hand_over_secret=SECRET), session_id)
    old.receive(frame("CONNECT", {"accept-version": "1.1", "heart-beat": "0,0", "client-id": "app-7"}), NOW)
    old.connect_committed()
    old.receive(frame("SUBSCRIBE", {"destination": "/queue/a", "id": "s1", "ack": "client-individual"})
                + frame("BEGIN", {"transaction": "tx1"}), NOW)
    assert old.state is SessionState.OPEN
    return old


def refusal_of(call: Callable[[], object]) -> str:
    with pytest.raises(ProtocolError) as refused:
        call()
    assert refused.value.message == REFUSED
    return refused.value.detail or ""


def parse(data: bytes) -> Frame:
    (parsed,) = FrameParser(NodeConfig().limits, "1.2").feed(data)
    return parsed


def test_a_ticket_carries_the_session_state_and_is_refused_unsigned_stale_or_for_another_session() -> None:
    old = open_session()
    pending = [Send("n1:b:1", "/queue/b", "", b"late", NOW, "tx1", "r-late")]
    ticket = old.ticket(pending, "10.0.0.9:5000", NOW, hops=1)
    assert ticket is not None
    carried = (ticket.version, ticket.client_id, ticket.transactions, ticket.subscriptions)
    assert carried == ("1.1", "app-7", ("tx1",), ("s1",))
    wire = parse(ticket_frame(ticket, SECRET))
    assert read_ticket(wire, SECRET, NOW + 5) == ticket
    assert "not signed" in refusal_of(lambda: read_ticket(wire, "another-secret", NOW))
    tampered = Frame(wire.command, wire.headers, wire.body.replace(b"app-7", b"app-8"))
    assert "not signed" in refusal_of(lambda: read_ticket(tampered, SECRET, NOW))
    assert "out of date" in refusal_of(lambda: read_ticket(wire, SECRET, NOW + TICKET_MAX_AGE_MS + 1))
    renamed = Frame(wire.command, [(k, "n1:b:2" if k == "raftmq.adopt" else v) for k, v in wire.headers], wire.body)
    assert "another session" in refusal_of(lambda: read_ticket(renamed, SECRET, NOW))
    assert "no group secret" in refusal_of(lambda: read_ticket(wire, None, NOW))


def test_the_successor_takes_the_session_over_proposes_what_was_left_then_what_followed() -> None:
    old = open_session()
    late = Send("n1:b:1", "/queue/b", "", b"late", NOW, "tx1", "r-late")
    ticket = old.ticket([late], "10.0.0.9:5000", NOW, hops=1)
    assert ticket is not None
    # The client had begun a frame; the old leader passes its bytes on after the ticket.
    begun = frame("ACK", {"message-id": "m7", "subscription": "s1", "transaction": "tx1"})  # as 1.1 has it
    assert old.receive(begun[:9], NOW) == [] and old.unfinished() == begun[:9]
    old.handed_over("n1:b:handed-2")
    assert old.state is SessionState.RELAYED and old.closed(NOW) == []  # closing proposes no Disconnect

    new = StompSession(Host(hand_over_secret=SECRET), "n2:c:5")
    decisions = new.receive(ticket_frame(ticket, SECRET) + begun[:9], NOW)
    assert decisions == [Adopt(ticket, ticket.session_id)] and new.authenticating  # what follows waits for the claim
    assert new.receive(begun[9:] + frame("COMMIT", {"transaction": "tx1", "receipt": "c"}), NOW) == []
    decisions = new.adopted(ticket, "", NOW)
    assert new.session_id == "n1:b:1" and new.state is SessionState.OPEN and new.version == "1.1"
    assert [type(c) for c in commands(decisions)] == [Send, Ack, Commit]
    assert commands(decisions)[0] == late
    assert commands(decisions)[1].session == "n1:b:1" and commands(decisions)[2].transaction == "tx1"
    assert new.connect_committed() == (None, False)  # the client had its CONNECTED long ago
    # The subscription id it carried is known: UNSUBSCRIBE s1 is fine, s2 is not.
    assert [type(d) for d in new.receive(frame("UNSUBSCRIBE", {"id": "s1"}), NOW)] == [Propose]
    refused = [d for d in new.receive(frame("UNSUBSCRIBE", {"id": "s2"}), NOW) if isinstance(d, Refuse)]
    assert refused and refused[0].message != REFUSED


def test_a_ticket_is_refused_by_a_follower_by_a_node_without_the_secret_and_when_the_claim_fails() -> None:
    ticket = open_session().ticket([], "p", NOW, hops=1)
    assert ticket is not None
    data = ticket_frame(ticket, SECRET)
    follower = StompSession(Host(hand_over_secret=SECRET, is_leader=False, leader_hint="h:1"), "x")
    refuse = [d for d in follower.receive(data, NOW) if isinstance(d, Refuse)]
    assert refuse and refuse[0].message == REFUSED and "h:1" in refuse[0].detail
    stranger = StompSession(Host(), "y")
    assert [d.message for d in stranger.receive(data, NOW) if isinstance(d, Refuse)] == [REFUSED]
    unclaimed = StompSession(Host(hand_over_secret=SECRET), "z")
    assert unclaimed.receive(data, NOW) == [Adopt(ticket, ticket.session_id)]
    refuse = [d for d in unclaimed.adopted(None, "no such session here", NOW) if isinstance(d, Refuse)]
    assert refuse and "no such session" in refuse[0].detail and unclaimed.state is SessionState.FAILED


def test_only_an_adoption_may_pass_the_connect_size_limit() -> None:
    host = Host(NodeConfig(max_connect_frame_bytes=1024), hand_over_secret=SECRET)
    big = [Send("n1:b:1", "/queue/b", "", b"x" * 4000, NOW)]
    ticket = open_session().ticket(big, "p", NOW, hops=1)
    assert ticket is not None
    data = ticket_frame(ticket, SECRET)
    session = StompSession(host, "a")
    assert session.receive(data[:2048], NOW) == []  # still reading it
    assert session.receive(data[2048:], NOW) == [Adopt(ticket, ticket.session_id)]
    plain = StompSession(host, "b")
    padded = CONNECT[:-3] + b"x-pad:" + b"p" * 2000 + b"\n\n"  # no NUL yet: a CONNECT past the limit
    assert [d.message for d in plain.receive(padded, NOW) if isinstance(d, Refuse)] == ["frame too large"]


def test_the_old_leader_reads_the_answer_and_passes_on_only_what_follows_it() -> None:
    adopted = adopted_frame("n1:b:1")
    assert read_answer(adopted[:-1], "n1:b:1") is None
    assert read_answer(adopted + b"\nMESSAGE...", "n1:b:1") == Taken(len(adopted))
    assert isinstance(read_answer(adopted, "n1:b:2"), NotTaken)  # another session's
    refused = error_frame(REFUSED, "no such session here", "1.2")
    assert read_answer(refused, "n1:b:1") == NotTaken(f"{REFUSED}: no such session here")


@dataclass
class Log:
    position: LogPosition = field(default_factory=lambda: LogPosition(1, 4))
    leader_term: int = 5


@dataclass
class Sink:
    seen: list[object] = field(default_factory=list)

    def receipt(self, receipt_id: str) -> None:
        self.seen.append(receipt_id)

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, **options: object) -> None:
        self.seen.append((message, options))


def test_a_session_awaiting_adoption_keeps_what_this_leadership_does_for_it_not_the_old_ones() -> None:
    log = Log()
    awaiting = AwaitingAdoption("s", log)  # type: ignore[arg-type]
    awaiting.receipt("old-term")  # an entry of term 4, the old leader's: its client had it from there
    log.position = LogPosition(2, 5)
    awaiting.receipt("ours")
    awaiting.fail("message body unavailable", "d", None, wait_for_log=False)
    sink = Sink()
    assert awaiting.replay(sink) == 2  # type: ignore[arg-type]
    assert sink.seen == ["ours", ("message body unavailable", {"wait_for_log": False})]
    assert not awaiting.open_for_output


def test_a_claim_waits_for_the_take_over_and_is_refused_for_a_swept_served_or_unknown_session() -> None:
    async def scenario() -> list[str | None]:
        takeover = Takeover()
        core = {"a", "b", "c"}
        served = {"c"}
        log = Log()
        takeover.expect(sorted(core), served.__contains__, log)  # type: ignore[arg-type]
        assert sorted(takeover.awaiting) == ["a", "b"]
        takeover.swept.add("b")

        async def claim(session_id: str) -> str | None:
            return await takeover.claim(session_id, lambda: True, served.__contains__, core.__contains__)

        early = asyncio.create_task(claim("a"))
        await asyncio.sleep(0.05)
        assert not early.done()  # the earlier terms are not applied yet
        takeover.done.set()
        answers = [await early, await claim("b"), await claim("c"), await claim("zz")]
        assert takeover.adopt("a", Sink()) == 0 and "a" not in takeover.awaiting  # type: ignore[arg-type]
        return answers

    answers = asyncio.run(scenario())
    assert answers[0] is None
    assert "swept" in (answers[1] or "") and "served here" in (answers[2] or "")
    assert "no such session" in (answers[3] or "")


def test_a_principal_survives_the_trip() -> None:
    old = StompSession(Host(hand_over_secret=SECRET), "s")
    old.receive(CONNECT, NOW)
    old.connect_committed()
    ticket = old.ticket([], "p", NOW, hops=2)
    assert ticket is not None and ticket.hops == 2
    new = StompSession(Host(hand_over_secret=SECRET), "t")
    new.receive(ticket_frame(ticket, SECRET), NOW)
    new.adopted(ticket, "", NOW)
    assert new._principal == old._principal == Principal(None, frozenset({"anonymous"}))
    subscribed = commands(new.receive(frame("SUBSCRIBE", {"destination": "/queue/q", "id": "z"}), NOW))
    assert [type(c) for c in subscribed] == [Subscribe]


def test_a_resume_request_names_a_parked_session_signed_and_in_date() -> None:
    data = resume_frame("n1:b:1", SECRET, NOW)
    session = StompSession(Host(hand_over_secret=SECRET), "r")
    assert session.receive(data, NOW + 5) == [Adopt(None, "n1:b:1")] and session.authenticating
    assert read_resume(parse(data), SECRET, NOW) == "n1:b:1"
    assert "not signed" in refusal_of(lambda: read_resume(parse(data), "another-secret", NOW))
    assert "out of date" in refusal_of(lambda: read_resume(parse(data), SECRET, NOW + TICKET_MAX_AGE_MS + 1))
    forged = data.replace(b"n1:b:1", b"n1:b:2")  # the name is signed too
    assert "not signed" in refusal_of(lambda: read_resume(parse(forged), SECRET, NOW))
    stranger = StompSession(Host(), "s")
    assert [d.message for d in stranger.receive(data, NOW) if isinstance(d, Refuse)] == [REFUSED]



def test_a_going_nodes_error_lets_its_client_resume_from_the_offset_it_names() -> None:
    """The farewell ERROR (still `not the leader` naming the leader, for any client) carries a
    resume request; raftmq's client sends it back with the offset: a resume on the client's own
    socket. A relay's request has no offset; a bad offset is refused."""
    error = parse(farewell_frame("n1:b:1", "10.0.0.2:61613", 4242, "1.1", SECRET, NOW))
    assert (error.command, error.get("message"), error.get("leader")) == ("ERROR", "not the leader", "10.0.0.2:61613")
    plan = resume_plan(error)
    assert plan is not None and (plan.leader, plan.offset) == ("10.0.0.2:61613", 4242)
    session = StompSession(Host(hand_over_secret=SECRET), "r")
    assert session.receive(resume_connect(plan), NOW + 5) == [Adopt(None, "n1:b:1", 4242)]
    relays = StompSession(Host(hand_over_secret=SECRET), "r2")
    assert relays.receive(resume_frame("n1:b:1", SECRET, NOW), NOW) == [Adopt(None, "n1:b:1", None)]
    lying = resume_connect(plan).replace(b"raftmq.resume-offset:4242", b"raftmq.resume-offset:-1")
    assert "count of bytes" in refusal_of(lambda: read_adoption(parse(lying), SECRET, NOW))
    forged = resume_connect(plan).replace(b"n1:b:1", b"n1:b:2")
    assert "not signed" in refusal_of(lambda: read_resume(parse(forged), SECRET, NOW))
    assert resume_plan(parse(error_frame("not the leader", "x", "1.2", None, {"leader": "h:1"}))) is None

def test_a_parked_session_is_claimed_once_waited_for_while_still_served_and_expires() -> None:
    ticket = open_session().ticket([], "10.0.0.9:5000", NOW, hops=1)
    assert ticket is not None
    served = {ticket.session_id}
    expired: list[str] = []

    async def scenario() -> list[object]:
        loop = asyncio.get_running_loop()
        takeover = Takeover()
        log = Log()
        claim = asyncio.create_task(takeover.claim_parked(ticket.session_id, served.__contains__, loop))
        await asyncio.sleep(0.02)
        assert not claim.done()  # still served here: the relay's half-close is on its way
        served.clear()
        takeover.park(ticket, b"SEND\n", log, loop, expired.append)  # type: ignore[arg-type]
        assert ticket.session_id in takeover.awaiting  # what this leadership does for it is kept
        parked = await claim
        again = await takeover.claim_parked(ticket.session_id, served.__contains__, loop)
        takeover.park(ticket, b"", log, loop, expired.append)  # type: ignore[arg-type]
        await asyncio.sleep(PARK_SECONDS + 0.1)
        gone = takeover.unpark(ticket.session_id)
        return [parked, again, gone, takeover.resumed]

    parked, again, gone, resumed = asyncio.run(scenario())
    assert isinstance(parked, Parked) and parked.ticket == ticket and parked.unfinished == b"SEND\n"
    assert again == "no such session parked here" and resumed == 1
    assert expired == [ticket.session_id] and gone is True  # the caller disconnects it


def test_a_claim_for_a_session_awaited_from_the_predecessor_waits_for_its_ticket() -> None:
    """A relay moves to the new leader while the old one, handing its leadership over, still
    thinks it leads: the relay's resume comes first, the old leader's ticket (which the new one
    parks) after it. Refused at once, the relay's client got `ERROR not the leader` (seen in
    the hand-over test about once in ten runs under load)."""
    ticket = open_session().ticket([], "10.0.0.9:5000", NOW, hops=2)
    assert ticket is not None
    expired: list[str] = []

    async def scenario() -> tuple[object, object]:
        loop = asyncio.get_running_loop()
        takeover = Takeover()
        log = Log()
        takeover.expect([ticket.session_id], lambda _: False, log)  # type: ignore[arg-type]  # won by a transfer
        claim = asyncio.create_task(takeover.claim_parked(ticket.session_id, lambda _: False, loop))
        await asyncio.sleep(0.05)
        assert not claim.done()  # awaited from the predecessor: its ticket is on its way
        takeover.park(ticket, b"", log, loop, expired.append)  # type: ignore[arg-type]
        parked = await claim
        unknown = await takeover.claim_parked("n9:other:1", lambda _: False, loop)  # neither awaited nor served
        return parked, unknown

    parked, unknown = asyncio.run(scenario())
    assert isinstance(parked, Parked) and parked.ticket == ticket
    assert unknown == "no such session parked here"


def test_the_tickets_wire_form_is_pinned_not_read_from_the_class() -> None:
    """Format 1 on the wire: the format, then the fields in this order, whatever order `Ticket`
    declares them in (a reordered class must not swap two fields between members)."""
    assert TICKET_FIELDS == ("session_id", "version", "send_interval_ms", "receive_interval_ms", "cluster_connection",
                             "principal", "groups", "client_id", "transactions", "subscriptions", "browsers", "peer",
                             "commands", "issued_ms", "hops")
    assert set(TICKET_FIELDS) == set(Ticket.__slots__) and TICKET_FORMAT == 1
    ticket = Ticket("n1:b:1", "1.2", 10, 20, False, "alice", ("ops",), "app-7", ("tx1",), ("s1",), (), "10.0.0.9:5000",
                    b"", NOW, 1)
    connect = parse(ticket_frame(ticket, SECRET))
    assert msgpack.unpackb(connect.body) == [1, "n1:b:1", "1.2", 10, 20, False, "alice", ["ops"], "app-7", ["tx1"],
                                             ["s1"], [], "10.0.0.9:5000", b"", NOW, 1]
    assert read_ticket(connect, SECRET, NOW) == ticket

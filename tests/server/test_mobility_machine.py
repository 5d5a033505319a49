"""The relay's mobility machine (raftmq.server.stomp.mobility), sans-I/O: events in, decisions out,
every move in its table, and docs/mobility.md drawing that table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from raftmq.server.stomp import mobility
from raftmq.server.stomp.adoption import adopted_frame
from raftmq.server.stomp.mobility import TRANSITIONS, Kind, MobilityError, RelayMachine, State, diagram
from raftmq.server.stomp.relay_events import (
    ClientData,
    ClientEof,
    ClientLost,
    ClientReading,
    CloseClient,
    CloseUpstream,
    Connect,
    Connected,
    Count,
    Ended,
    Farewell,
    HalfCloseUpstream,
    LeaderSeen,
    Log,
    Release,
    ResumeHere,
    SendOff,
    ToClient,
    ToUpstream,
    Unreachable,
    UpstreamData,
    UpstreamLost,
)

SECRET = "s3cret"
CONNECTED = b"CONNECTED\nversion:1.2\nsession:n1:a:1\n\n\0"


def actions(decisions: list[object]) -> list[object]:
    """The decisions without the log lines."""
    return [decision for decision in decisions if not isinstance(decision, (Log, Count))]


def follower(**options: object) -> RelayMachine:
    settings: dict[str, object] = {"version": "1.2", "secret": SECRET, "own_address": "n3:1", **options}
    machine = RelayMachine(Kind.FOLLOWER, b"CONNECT\n\n\0", **settings)  # type: ignore[arg-type]
    assert machine.start() == [ClientReading(False), Connect(None, mobility.LEADER_WAIT_SECONDS)]
    return machine


def relaying(**options: object) -> RelayMachine:
    machine = follower(**options)
    machine.handle(Connected("n1:1", half_close=True))
    machine.handle(UpstreamData(CONNECTED, 1.0, 1000))
    assert machine.state is State.RELAYING and machine.session_id == "n1:a:1"
    return machine


def test_a_followers_relay_sends_what_waited_then_pipes_both_ways() -> None:
    machine = follower()
    assert machine.handle(ClientData(b"SEND")) == []
    assert actions(machine.handle(Connected("n1:1", half_close=True))) == [ClientReading(True),
                                                                          ToUpstream(b"CONNECT\n\n\0SEND")]
    assert machine.handle(ClientData(b"more")) == [ToUpstream(b"more")]
    assert machine.handle(UpstreamData(CONNECTED, 1.0, 1000)) == [ToClient(CONNECTED)]
    assert machine.stream_bytes == len(b"SENDmore")


def test_no_leader_reached_answers_error_and_closes() -> None:
    machine = follower()
    decisions = actions(machine.handle(Unreachable(None, "")))
    assert isinstance(decisions[0], ToClient) and b"no leader known after 2 s" in decisions[0].data
    assert decisions[1:] == [CloseClient()] and machine.state is State.CLOSING
    assert machine.handle(ClientLost()) == [Ended(session_lost=True)] and machine.state is State.ENDED


def test_a_relay_to_a_deposed_leader_moves_and_resumes_at_the_new_one() -> None:
    machine = relaying()
    assert actions(machine.handle(LeaderSeen("n2:1", 2.0))) == [ClientReading(False), HalfCloseUpstream()]
    assert machine.state is State.MOVING
    assert machine.handle(ClientData(b"late")) == []  # held until the session resumed
    assert machine.handle(UpstreamData(b"RECEIPT\n\n\0", 2.1, 2100)) == [ToClient(b"RECEIPT\n\n\0")]
    [connect] = machine.handle(UpstreamLost(2200))
    assert connect == Connect("n2:1", mobility.ADOPT_CONNECT_SECONDS) and machine.kind is Kind.RESUME
    assert b"raftmq.resume:n1:a:1" in machine.prefix
    decisions = actions(machine.handle(Connected("n2:1", half_close=True)))
    assert decisions[0] == ClientReading(False) and machine.state is State.ANSWERING
    answered = actions(machine.handle(UpstreamData(adopted_frame("n1:a:1") + b"MESSAGE", 2.3, 2300)))
    assert answered == [ToUpstream(b"late"), ClientReading(True), ToClient(b"MESSAGE")]
    assert machine.state is State.RELAYING


def test_a_resume_waits_for_the_new_leaders_claim_then_is_refused_if_no_answer_comes() -> None:
    """The new leader may hold the session's claim up to a second before it answers: the deposed
    leader's short grace does not cut the resume; past RESUME_ANSWER_SECONDS the client gets the
    refusal (not a silent close), and both sides close."""
    machine = relaying()
    machine.handle(LeaderSeen("n2:1", 2.0))
    machine.handle(UpstreamLost(2200))
    machine.handle(Connected("n2:1", half_close=True))
    assert machine.handle(LeaderSeen("n2:1", 2.3)) == []  # the shell looks once connected: the wait starts
    assert machine.recheck_at == 2.3 + mobility.RESUME_ANSWER_SECONDS
    assert machine.handle(LeaderSeen("n2:1", 2.3 + 2 * mobility.DEPOSED_GRACE_SECONDS)) == []
    assert machine.state is State.ANSWERING
    refused = actions(machine.handle(LeaderSeen("n2:1", 2.3 + mobility.RESUME_ANSWER_SECONDS)))
    assert refused == [ToClient(machine.refusal), CloseClient(), CloseUpstream()]
    assert b"could not be moved to the leader n2:1" in machine.refusal and machine.state is State.CLOSING
    assert machine.handle(ClientLost()) == [Ended(session_lost=True)]


def test_a_relay_that_resumed_and_moves_again_has_the_deposed_leaders_grace() -> None:
    machine = relaying()
    machine.handle(LeaderSeen("n2:1", 2.0))
    machine.handle(UpstreamLost(2200))
    machine.handle(Connected("n2:1", half_close=True))
    machine.handle(UpstreamData(adopted_frame("n1:a:1"), 2.3, 2300))
    assert machine.kind is Kind.RESUME and machine.state is State.RELAYING
    # the new leader is deposed in turn: the relay moves again, and waits for it as for any
    # deposed leader (not as long as for a resume's answer)
    assert actions(machine.handle(LeaderSeen("n4:1", 3.0))) == [ClientReading(False), HalfCloseUpstream()]
    assert machine.state is State.MOVING
    assert machine.recheck_at == 3.0 + mobility.DEPOSED_GRACE_SECONDS


def test_a_half_close_that_lands_while_the_relay_moves_goes_after_what_the_client_sent() -> None:
    """A read under way as the relay paused its client brings data, then the client's half-close:
    the new leader gets the resume request, what was held, and only then the half-close (a
    half-closed connection takes no more bytes), announced as the client's own (a release: the
    session ends there rather than parked for a move)."""
    machine = relaying()
    machine.handle(LeaderSeen("n2:1", 2.0))
    assert machine.handle(ClientData(b"late")) == [] and machine.handle(ClientEof()) == []
    machine.handle(UpstreamLost(2200))
    assert HalfCloseUpstream() not in machine.handle(Connected("n2:1", half_close=True))
    assert machine.handle(ClientEof()) == []  # (said again: still after the answer)
    answered = actions(machine.handle(UpstreamData(adopted_frame("n1:a:1"), 2.3, 2300)))
    assert answered == [ToUpstream(b"late"), ClientReading(True), Release("n2:1", "n1:a:1", HalfCloseUpstream())]


def test_a_half_close_that_lands_while_the_relay_moves_here_goes_with_the_session() -> None:
    machine = relaying()
    machine.handle(LeaderSeen("n3:1", 2.0))  # this node leads now
    machine.handle(ClientData(b"late"))
    machine.handle(ClientEof())
    assert actions(machine.handle(UpstreamLost(2200)))[-1] == ResumeHere("n1:a:1", b"late",
                                                                           machine.stream_bytes - 4, eof=True)


def test_a_move_to_this_node_serves_the_session_here() -> None:
    machine = relaying()
    machine.handle(LeaderSeen("n3:1", 2.0))  # this node leads now
    machine.handle(ClientData(b"late"))
    assert actions(machine.handle(UpstreamLost(2200))) == [Ended(session_lost=False),
                                                          ResumeHere("n1:a:1", b"late", machine.stream_bytes - 4)]


@pytest.mark.parametrize("why", ["tls", "eof", "no secret", "no session"])
def test_a_relay_that_cannot_move_closes_after_the_deposed_leaders_silence(why: str) -> None:
    machine = relaying(secret=None) if why == "no secret" else relaying()
    if why == "tls":
        machine.half_close = False
    elif why == "eof":
        machine.handle(ClientEof())
    elif why == "no session":
        machine.session_id = ""
    assert machine.handle(LeaderSeen("n2:1", 2.0)) == []  # the change is seen: its grace starts
    assert machine.handle(LeaderSeen("n2:1", 2.0 + mobility.DEPOSED_GRACE_SECONDS / 2)) == []
    assert actions(machine.handle(LeaderSeen("n2:1", 2.0 + mobility.DEPOSED_GRACE_SECONDS))) == [CloseClient()]
    # the client's side gone, the connection to the deposed leader goes too (it would hold the
    # session's deliveries for nobody)
    assert machine.handle(ClientLost()) == [CloseUpstream(), Ended(session_lost=True)]


def test_a_hand_over_is_refused_with_its_refusal() -> None:
    machine = RelayMachine(Kind.HAND_OVER, b"TICKET", version="1.2", secret=SECRET, own_address="n1:1",
                           target="n2:1", session_id="n1:a:1", refusal=b"ERROR\n\n\0")
    machine.start()
    assert actions(machine.handle(Connected("n2:1", half_close=True))) == [ClientReading(True), ToUpstream(b"TICKET")]
    assert machine.handle(ClientData(b"SEND")) == [ToUpstream(b"SEND")]  # the frames follow the ticket
    refused = b"ERROR\nmessage:adoption refused\nsession:n1:a:1\n\nno\0"
    assert actions(machine.handle(UpstreamData(refused, 1.0, 1000))) == [ToClient(b"ERROR\n\n\0"), CloseClient(),
                                                                         CloseUpstream()]


def test_a_parked_hand_over_sends_its_client_off_with_the_offset_to_resume_from() -> None:
    machine = RelayMachine(Kind.HAND_OVER, b"TICKET", version="1.2", secret=SECRET, own_address="n1:1",
                           target="n2:1", session_id="n1:a:1", refusal=b"ERROR\n\n\0", parked_at=42)
    machine.start()
    assert actions(machine.handle(Connected("n2:1", half_close=True)))[0] == ClientReading(False)
    [send_off] = actions(machine.handle(UpstreamData(adopted_frame("n1:a:1"), 1.0, 1000)))
    assert isinstance(send_off, SendOff) and b"raftmq.resume-offset:42" in send_off.frame


def test_a_farewell_half_closes_and_sends_the_client_off_once_the_successor_parked_it() -> None:
    machine = RelayMachine(Kind.HAND_OVER, b"TICKET", version="1.2", secret=SECRET, own_address="n1:1",
                           target="n2:1", session_id="n1:a:1", refusal=b"ERROR\n\n\0", stream_bytes=10)
    machine.start()
    machine.handle(Connected("n2:1", half_close=True))
    machine.handle(UpstreamData(adopted_frame("n1:a:1"), 1.0, 1000))
    assert machine.handle(Farewell(1000)) == [ClientReading(False), HalfCloseUpstream()]
    machine.handle(ClientData(b"12345"))  # a read under way: the client sends it again
    [send_off] = actions(machine.handle(UpstreamLost(1100)))
    assert isinstance(send_off, SendOff) and b"raftmq.resume-offset:10" in send_off.frame


SAMPLES = (Connected("n1:1", True), Unreachable(None, ""), ClientData(b"x"), ClientEof(), ClientLost(),
           UpstreamData(b"x", 1.0, 1000), UpstreamLost(1000), LeaderSeen("n1:1", 1.0), Farewell(1000))


def test_a_client_may_go_in_every_state_and_an_event_outside_a_states_row_is_refused() -> None:
    assert {type(event) for event in SAMPLES} == {event for (_state, event) in TRANSITIONS}  # every event
    for state in State:
        assert (state, ClientLost) in TRANSITIONS, state  # a client may always go
        for event in SAMPLES:
            if (state, type(event)) in TRANSITIONS:
                continue
            machine = follower()
            machine.state = state
            with pytest.raises(MobilityError, match=f"a relay in state {state.value} got {type(event).__name__}"):
                machine.handle(event)


def test_a_move_outside_the_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is held: a handler that moves where its row does not allow raises."""
    machine = relaying()
    monkeypatch.setitem(TRANSITIONS, (State.RELAYING, LeaderSeen), frozenset({State.RELAYING, State.CLOSING}))
    with pytest.raises(MobilityError, match="moved to moving on LeaderSeen"):
        machine.handle(LeaderSeen("n2:1", 2.0))


def test_the_docs_draw_the_table() -> None:
    text = (Path(__file__).parents[2] / "docs" / "mobility.md").read_text()
    assert "```mermaid\n" + diagram() + "```" in text


# Session mobility waits for events (the leader changed, a relay ended, a proposal settled, a
# flush) or for a named deadline; the one sleep in a loop left is a failed connection's retry.
MOBILITY_MODULES = ("stomp/relay.py", "stomp/relay_sides.py", "stomp/mobility.py", "stomp/serving.py",
                    "stomp/hand_over.py", "stomp/adoption.py", "stomp/connection.py", "takeover.py", "succession.py")
RETRY = "RETRY_SECONDS"


def polls(source: str) -> list[int]:
    """Lines of `asyncio.sleep` calls inside a loop, but for the named retry."""
    found = []
    for loop in (node for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.While, ast.For, ast.AsyncFor))):
        for call in (node for node in ast.walk(loop) if isinstance(node, ast.Call)):
            if ast.unparse(call.func) == "asyncio.sleep" and RETRY not in ast.unparse(call):
                found.append(call.lineno)
    return found


def test_no_polling_loop_is_left_in_mobility() -> None:
    server = Path(__file__).parents[2] / "raftmq" / "server"
    assert {name: polls((server / name).read_text()) for name in MOBILITY_MODULES} == \
        {name: [] for name in MOBILITY_MODULES}


def test_a_planted_poll_is_found() -> None:
    planted = "async def f():\n    while not done():\n        await asyncio.sleep(0.02)\n"
    assert polls(planted) == [3]
    assert polls("async def f():\n    for _ in range(9):\n        await asyncio.sleep(0.02)\n") == [3]
    assert polls("async def f():\n    while True:\n        await asyncio.sleep(min(RETRY_SECONDS, 1))\n") == []

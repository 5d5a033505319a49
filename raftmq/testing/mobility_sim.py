"""A deterministic simulator of session mobility: the production machines under any interleaving.

One client holds a socket to a follower F, whose relay (`RelayMachine`) pipes its session to the
leader L. The leadership then moves to N, and the three learn it at times the seed picks: F sees
the new leader (and moves) before or after L sees it lost (and hands the session over), while the
client goes on sending and every byte takes its own delay (in order, per direction). Each end of
each connection is driven by the same machines the nodes run: `RelayMachine` for F's relay, L's
hand-over relay and F's resume; `ServingMachine` for the session where it is served. What the
simulator models is only what is around them: the sockets (ordered, delayed, paused while their
reader does not read), the replicated log (one list every leader appends to), and a serving
node's bookkeeping (a session parks, is resumed, is adopted from a ticket) in a few lines.

`run(seed)` returns what happened; `check(outcome)` raises `MobilityViolation` unless the client
got no ERROR and every frame it sent was committed exactly once, in order (all of them, unless the
client closed its connection first, which a fifth of the seeds do). `serving_machine` and
`relay_machine` let a test plant an older rule or a bug (tests/server/test_mobility_sim.py shows
that the simulator finds the race CI once found: a relay that moves before the old leader knows it
lost its leadership).

    python -m raftmq.testing.mobility_sim --seeds 500
"""

from __future__ import annotations

import argparse
import functools
import heapq
import random
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raftmq.errors import ProtocolError
from raftmq.protocol.codec import first_frame
from raftmq.protocol.frame import RESUME_HEADER
from raftmq.server.stomp import relay_events as ev
from raftmq.server.stomp import serving as sv
from raftmq.server.stomp.adoption import adopted_frame
from raftmq.server.stomp.mobility import Kind, MobilityError, RelayMachine

SECRET = "simulated"
SESSION = "L:s1"
EOF, CLOSE = b"<eof>", b"<close>"  # what else a channel carries besides bytes
READ_UNDER_WAY_SECONDS = 0.002


class MobilityViolation(AssertionError):
    pass


@dataclass
class End:
    """One end of a connection: what it reads comes through `on`, while `reading`."""

    name: str
    on: Callable[[bytes], None] = lambda item: None
    reading: bool = True
    peer: End | None = None
    pending: deque[bytes] = field(default_factory=deque)
    closed: bool = False
    paused_at: float = -1.0


class Sim:
    def __init__(self, seed: int, serving_machine: Callable[[], sv.ServingMachine],
                 relay_machine: type[RelayMachine]) -> None:
        self.rng = random.Random(seed)
        self.relay_machine = relay_machine
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._last_arrival: dict[int, float] = {}
        self.serving_machine = serving_machine
        self.log: list[bytes] = []  # the replicated log: frames committed, by whichever leader
        self.knows = {"F": "L", "L": "L", "N": "L"}  # whom each node believes leads
        self.parked: dict[str, bytes] = {}  # at N: session -> (nothing kept but its id)
        self.client_got = b""
        self.trace: list[str] = []
        self.servers: list[SimServer] = []
        self.relays: list[SimRelay] = []

    # -- time and channels --------------------------------------------------------------------

    def at(self, delay: float, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (self.now + delay, self._seq, action))

    def run_until(self, end: float) -> None:
        while self._queue and self._queue[0][0] <= end:
            self.now, _, action = heapq.heappop(self._queue)
            action()

    def connect(self, a: str, b: str) -> tuple[End, End]:
        left, right = End(a), End(b)
        left.peer, right.peer = right, left
        return left, right

    def send(self, end: End, item: bytes) -> None:
        """`item` from `end` to its peer: after a delay of its own, in order."""
        peer = end.peer
        if peer is None or end.closed:
            return
        if item == CLOSE:
            end.closed = True
        arrival = max(self._last_arrival.get(id(peer), 0.0), self.now + self.rng.uniform(0.0005, 0.01))
        self._last_arrival[id(peer)] = arrival
        self.at(arrival - self.now, lambda: self._arrive(peer, item))

    def _arrive(self, end: End, item: bytes) -> None:
        end.pending.append(item)
        self.pump(end)

    def pump(self, end: End) -> None:
        while end.pending and (end.reading or self._under_way(end)):
            end.on(end.pending.popleft())

    def _under_way(self, end: End) -> bool:
        """A read under way as the reader paused (TLS hands over what it decrypted) lands anyway."""
        return self.now - end.paused_at < READ_UNDER_WAY_SECONDS and self.rng.random() < 0.5

    def set_reading(self, end: End, on: bool) -> None:
        if end.reading and not on:
            end.paused_at = self.now
        end.reading = on
        if on:
            self.at(0.0, lambda: self.pump(end))


class SimRelay:
    """A relay's shell in the simulator: carries out its machine's decisions on simulated ends."""

    def __init__(self, sim: Sim, node: str, client: End, machine: RelayMachine) -> None:
        self.sim, self.node, self.client, self.machine = sim, node, client, machine
        self.upstream: End | None = None
        client.on = self._from_client
        self.run(machine.start())

    def _from_client(self, item: bytes) -> None:
        if item == CLOSE:
            self.run(self.machine.handle(ev.ClientLost()))
        elif item == EOF:
            self.run(self.machine.handle(ev.ClientEof()))
        else:
            self.run(self.machine.handle(ev.ClientData(item)))

    def _from_upstream(self, end: End, item: bytes) -> None:
        if end is not self.upstream:
            return
        if item in (CLOSE, EOF):  # a served end closes whole (a half-close from it is not modelled)
            self.run(self.machine.handle(ev.UpstreamLost(0)))
        else:
            self.run(self.machine.handle(ev.UpstreamData(item, self.sim.now, 0)))

    def leader_seen(self) -> None:
        self.run(self.machine.handle(ev.LeaderSeen(self.sim.knows[self.node], self.sim.now)))

    def run(self, decisions: list[Any]) -> None:
        sim = self.sim
        for decision in decisions:
            if isinstance(decision, ev.Connect):
                target = decision.leader or sim.knows[self.node]
                mine, theirs = sim.connect(self.node, target)
                self.upstream = mine
                mine.on = functools.partial(self._from_upstream, mine)
                SimServer.accept(sim, target, theirs)
                self.run(self.machine.handle(ev.Connected(target, half_close=True)))
            elif isinstance(decision, ev.ToUpstream) and self.upstream is not None:
                sim.send(self.upstream, decision.data)
            elif isinstance(decision, ev.ToClient):
                sim.send(self.client, decision.data)
            elif isinstance(decision, ev.ClientReading):
                sim.set_reading(self.client, decision.on)
            elif isinstance(decision, ev.HalfCloseUpstream) and self.upstream is not None:
                sim.send(self.upstream, EOF)
            elif isinstance(decision, ev.CloseUpstream) and self.upstream is not None:
                sim.send(self.upstream, CLOSE)
            elif isinstance(decision, ev.CloseClient):
                sim.send(self.client, CLOSE)
            elif isinstance(decision, ev.SendOff):
                sim.send(self.client, decision.frame)
                sim.send(self.client, CLOSE)
            elif isinstance(decision, ev.ResumeHere):
                raise MobilityViolation("the follower never leads in this simulation")
            elif isinstance(decision, ev.Log):
                sim.trace.append(f"{sim.now * 1000:.1f} {self.node} {decision.event} {decision.fields}")


class SimServer:
    """A session served at `node`: frames committed as they are read, the session's mobility by
    its `ServingMachine`."""

    def __init__(self, sim: Sim, node: str, end: End) -> None:
        self.sim, self.node, self.end = sim, node, end
        self.machine = sim.serving_machine()
        self.hops, self.via_relay = 0, False
        self.started = False
        self.buffer = b""
        end.on = self._read

    @staticmethod
    def accept(sim: Sim, node: str, end: End) -> None:
        sim.servers.append(SimServer(sim, node, end))

    def _read(self, item: bytes) -> None:
        sim = self.sim
        if item == CLOSE:
            self.end.closed = True
            return
        if item == EOF:
            movable = self.machine.state is sv.Serving.SERVING
            return self._moves(sv.HalfClosed(movable, self.via_relay, self.hops, False))
        self.buffer += item
        while b"\0" in self.buffer:
            frame, self.buffer = self.buffer.split(b"\0", 1)
            frame += b"\0"
            if not self.started:
                self.started = True
                self._first(frame)
            elif sim.knows[self.node] == self.node:
                sim.log.append(frame)
            else:  # not the leader (any more): the frame is never appended
                raise MobilityViolation(f"{self.node} read {frame!r} while not leading")

    def _first(self, frame: bytes) -> None:
        sim = self.sim
        if frame.startswith(b"TICKET"):
            self.hops = int(frame.rstrip(b"\0").split()[1])
            sim.send(self.end, adopted_frame(SESSION))
            return
        parsed = first_frame(frame)
        assert parsed is not None
        resume = parsed[0].get(RESUME_HEADER)
        if resume:
            if sim.parked.pop(resume, None) is None:
                sim.send(self.end, b"ERROR\nmessage:adoption refused\n\nno such session parked here\0")
                sim.send(self.end, CLOSE)
                return
            self.hops = 1
            sim.send(self.end, adopted_frame(SESSION))
            return
        self.via_relay = True
        sim.send(self.end, f"CONNECTED\nversion:1.2\nsession:{SESSION}\n\n\0".encode())

    def leadership_gone(self) -> None:
        if self.started and not self.end.closed:
            self._moves(sv.LeadershipGone(self.sim.knows[self.node], True, self.hops))

    def _moves(self, event: sv.ServingEvent) -> None:
        sim = self.sim
        for decision in self.machine.handle(event):
            if isinstance(decision, sv.Hold):
                sim.set_reading(self.end, False)
            elif isinstance(decision, sv.AwaitNotice):
                sim.at(decision.seconds, lambda: self._moves(sv.NoticeOver(not self.end.closed, self.hops)))
            elif isinstance(decision, sv.Park):
                sim.parked[SESSION] = b""
                self.machine.handle(sv.ParkDone())
                sim.send(self.end, CLOSE)
            elif isinstance(decision, sv.EndInput):
                sim.send(self.end, CLOSE)  # what it sent has committed (at once, here): it closes
            elif isinstance(decision, sv.HandOver):
                self._hand_over(decision.leader)
            elif isinstance(decision, sv.CannotHandOver):
                sim.send(self.end, b"ERROR\nmessage:not the leader\n\n\0")
                sim.send(self.end, CLOSE)

    def _hand_over(self, leader: str) -> None:
        sim = self.sim
        self.machine.handle(sv.HandedOver())
        ticket = f"TICKET {self.hops + 1}\0".encode() + self.buffer
        machine = sim.relay_machine(Kind.HAND_OVER, ticket, version="1.2", secret=SECRET, own_address=self.node,
                               client_eof=self.machine.eof_pending, target=leader, session_id=SESSION,
                               refusal=b"ERROR\nmessage:not the leader\n\nrefused\0", outermost=False)
        sim.relays.append(SimRelay(sim, self.node, self.end, machine))


@dataclass
class Outcome:
    seed: int
    sent: list[bytes]
    committed: list[bytes]
    client_got: bytes
    trace: list[str]
    client_closed: bool  # the client went: what it sent last may not have been read


def run(seed: int, serving_machine: Callable[[], sv.ServingMachine] = sv.ServingMachine,
        relay_machine: type[RelayMachine] = RelayMachine) -> Outcome:
    sim = Sim(seed, serving_machine, relay_machine)
    rng = sim.rng
    client, at_follower = sim.connect("client", "F")

    sent: list[bytes] = []  # in the order the client sent them
    closed: list[bool] = []

    def client_sends(frame: bytes) -> None:
        if closed:
            return
        sent.append(frame)
        sim.send(client, frame)

    def connected() -> None:
        """The session is open: the client sends, and the leadership moves to N, which the three
        learn in an order and at times of the seed's choosing."""
        for number in range(rng.randint(3, 12)):
            sim.at(rng.uniform(0.0, 0.3), functools.partial(client_sends, f"SEND m{number}\n\n\0".encode()))
        if rng.random() < 0.2:  # the client goes, at any moment
            sim.at(rng.uniform(0.0, 0.4), client_goes)
        moved = rng.uniform(0.0, 0.15)
        sim.at(moved, lambda: sim.knows.update(N="N"))
        sim.at(moved + rng.uniform(0.0, 0.1), lambda: _learns(sim, "L"))
        sim.at(moved + rng.uniform(0.0, 0.1), lambda: _learns(sim, "F"))

    def client_goes() -> None:
        closed.append(True)
        sim.send(client, CLOSE)

    def client_reads(item: bytes) -> None:
        if not sim.client_got and item.startswith(b"CONNECTED"):
            connected()
        sim.client_got += item if item not in (EOF, CLOSE) else b""

    client.on = client_reads
    follower = sim.relay_machine(Kind.FOLLOWER, b"CONNECT\nraftmq.relayed:true\n\n\0", version="1.2", secret=SECRET,
                                 own_address="F")
    sim.relays.append(SimRelay(sim, "F", at_follower, follower))
    sim.run_until(5.0)
    return Outcome(seed, sent, sim.log, sim.client_got, sim.trace, bool(closed))


def _learns(sim: Sim, node: str) -> None:
    sim.knows[node] = "N"
    if node == "L":
        for server in list(sim.servers):
            if server.node == "L":
                server.leadership_gone()
    else:
        _tell_relays(sim)


def _tell_relays(sim: Sim) -> None:
    """As the shell does (raftmq.server.stomp.relay, `Relays.look`): tell each relay the leader,
    and again when the earliest of them wants it (`recheck_at`: its grace)."""
    relays = [relay for relay in sim.relays if relay.node == "F"]
    for relay in relays:
        relay.leader_seen()
    due = min((at for relay in relays if (at := relay.machine.recheck_at) is not None), default=None)
    if due is not None:
        sim.at(max(due - sim.now, 0.0), functools.partial(_tell_relays, sim))


def check(outcome: Outcome) -> None:
    if b"ERROR" in outcome.client_got:
        raise MobilityViolation(f"seed {outcome.seed}: the client got an ERROR\n" + "\n".join(outcome.trace))
    committed, sent = outcome.committed, outcome.sent
    if committed != sent[:len(committed)] or (not outcome.client_closed and committed != sent):
        raise MobilityViolation(f"seed {outcome.seed}: committed {len(outcome.committed)} of {len(outcome.sent)} "
                                f"frames, or not in order\n" + "\n".join(outcome.trace))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raftmq.testing.mobility_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    args = parser.parse_args(argv)
    failed = 0
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            check(run(seed))
        except (MobilityViolation, ProtocolError, MobilityError, sv.ServingError) as exc:
            failed += 1
            sys.stdout.write(str(exc).split("\n")[0] + "\n")
    sys.stdout.write(f"{args.seeds - failed} of {args.seeds} seeds held\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

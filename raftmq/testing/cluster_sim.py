"""A deterministic simulation of a cluster of groups: several broker cores joined by simulated
bridges that drop, delay, reorder and repeat forwards, and leaders that restart. Pure: no
asyncio, no socket, no clock; every fault is a method call, so a hypothesis state machine (or a
seeded loop) drives it and every run replays.

A `SimBridge` behaves as raftmq.server.links.bridge does, step by step: it consumes its source's
store-and-forward queue through a session of the source core (client-individual acks), sends
each delivery to the target core as a SEND from the target-side session, with the forward's
duplicate-detection id, and ACKs it in the source once the target applied it. Each step
between those can be lost or repeated:

- a forward in transit can be `drop`ped (its connection broke and the bridge started over) or
  delivered out of order or twice (`deliver(..., repeat=True)`: a resend whose first copy did
  arrive);
- a bridge `restart`s (a reconnect, or the source's new leader): its source session is
  disconnected, so what it had not acknowledged returns to the queue and is forwarded again;
- a group's leader `restart`s: its core is rebuilt from its own snapshot, and the sessions of
  the old leader (bridges, consumers) are disconnected, as the new leader's sweep does.

`SimCluster.check` raises `ClusterSimFailure` when a value was consumed twice, a stored
message's route repeats a group or exceeds max_hops, or a core breaks its own invariants;
`check_settled` (after `settle`) when a value sent is neither consumed nor waiting in exactly
one place. `BrokenBridge` cheats the way a buggy bridge would, to show the checks catch it.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, field

from raftmq.core.broker import Broker
from raftmq.core.commands import ACK_CLIENT_INDIVIDUAL, Ack, Command, Connect, Disconnect, Send, Subscribe, Tick
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver, Effect, Reject
from raftmq.errors import RaftmqError
from raftmq.protocol.header_block import block_of, header_dict, pairs_of, user_block
from raftmq.routing.bindings import encode_advert
from raftmq.routing.cluster_connection import ClusterConnection, ClusterView
from raftmq.routing.route import (
    ADVERT_HEADER,
    CONTROL_DESTINATION,
    DUPLICATE_ID_HEADER,
    FORWARD_ID_HEADER,
    ROUTE_HEADER,
    is_internal,
    outgoing,
    sf_queue,
)

QUEUE = "/queue/work"
VALUE_HEADER = "value"


class ClusterSimFailure(RaftmqError):
    """A property of the cluster broke (see the module docstring)."""


@dataclass
class Forward:
    ack_id: str
    destination: str
    headers: tuple[tuple[str, str], ...]
    body: object
    session: int  # the bridge session (generation) that received it


@dataclass
class SimGroup:
    name: str
    config: CoreConfig
    broker: Broker
    consumer: str | None = None  # session id of this group's consumer, when one is subscribed
    inbox: list[Deliver] = field(default_factory=list)  # deliveries to the consumer, not yet acked
    generation: int = 0


class SimBridge:
    def __init__(self, cluster: SimCluster, source: str, target: str) -> None:
        self.cluster = cluster
        self.source = source
        self.target = target
        self.generation = 0
        self.session = ""
        self.deliveries: list[Deliver] = []  # from the source core, not yet sent
        self.in_transit: list[Forward] = []  # sent, not yet applied by the target
        self.to_ack: list[Forward] = []  # applied by the target, not yet acknowledged at the source
        self.link_session = f"link:{source}->{target}"
        self.adverts = 0

    def open(self) -> None:
        self.generation += 1
        self.session = f"bridge:{self.source}->{self.target}:{self.generation}"
        now = self.cluster.now
        self.cluster.apply(self.source, Connect(self.session, now))
        self.cluster.apply(self.source, Subscribe(self.session, "sf", sf_queue(self.target), now, ACK_CLIENT_INDIVIDUAL,
                                                   prefetch=self.cluster.window))

    def close(self) -> None:
        """The source session ends (a reconnect, a new leader): unacknowledged deliveries go back."""
        self.cluster.apply(self.source, Disconnect(self.session, self.cluster.now))
        self.deliveries.clear()
        self.to_ack.clear()  # their ACKs would name a session that is gone

    def send_one(self) -> bool:
        if not self.deliveries:
            return False
        effect = self.deliveries.pop(0)
        assert effect.ack_id is not None
        self.in_transit.append(Forward(effect.ack_id, *self.outgoing(effect), self.generation))
        return True

    def outgoing(self, effect: Deliver) -> tuple[str, tuple[tuple[str, str], ...], object]:
        message = effect.message
        destination, headers = outgoing(pairs_of(message.headers), message.message_id, self.target)
        return destination, tuple(headers), message.body

    def deliver(self, index: int, repeat: bool = False) -> bool:
        if not self.in_transit:
            return False
        forward = self.in_transit.pop(index % len(self.in_transit))
        for _ in range(2 if repeat else 1):
            self.cluster.apply(self.target, Send(self.link_session, forward.destination, user_block(forward.headers),
                                                 forward.body, self.cluster.now))
        if forward.session == self.generation:
            self.to_ack.append(forward)
        return True

    def drop(self, index: int) -> bool:
        """A forward lost with its connection: the session behind it ends too (the real bridge
        either resends on the new connection, which `deliver(repeat=True)` stands for, or, when
        its client gives up, ends its session so the queue gets the message back)."""
        if not self.in_transit:
            return False
        self.in_transit.pop(index % len(self.in_transit))
        self.close()
        self.open()
        return True

    def ack_one(self) -> bool:
        if not self.to_ack:
            return False
        forward = self.to_ack.pop(0)
        self.cluster.apply(self.source, Ack(self.session, self.cluster.now, ack_id=forward.ack_id))
        return True

    def advertise(self) -> None:
        routing = self.cluster.groups[self.source].broker.routing
        assert routing is not None
        self.cluster.position += 1
        advert = routing.advert_for(self.target, self.cluster.position)
        self.cluster.apply(self.target, Send(self.link_session, CONTROL_DESTINATION,
                                             block_of(((ADVERT_HEADER, encode_advert(advert)),)), b"",
                                             self.cluster.now))
        self.adverts += 1


class BrokenBridge(SimBridge):
    """A bridge with the bug the checks exist for: it sends without the duplicate-detection id,
    so a forward sent again is stored again."""

    def outgoing(self, effect: Deliver) -> tuple[str, tuple[tuple[str, str], ...], object]:
        destination, headers, body = super().outgoing(effect)
        kept = tuple((n, v) for n, v in headers if n not in (FORWARD_ID_HEADER, DUPLICATE_ID_HEADER))
        return destination, kept, body


class SimCluster:
    def __init__(self, groups: list[str], links: list[tuple[str, str]], policy: str = "ON_DEMAND", max_hops: int = 1,
                 redistribution_delay_ms: int = 500, window: int = 5,
                 bridge_class: type[SimBridge] = SimBridge) -> None:
        self.now = 1_000_000
        self.position = 0
        self.window = window
        self.max_hops = max_hops
        pairs = tuple(sorted((a, b) if a < b else (b, a) for a, b in links))
        connection = ClusterConnection("sim", pairs, message_load_balancing=policy, max_hops=max_hops,
                                       redistribution_delay_ms=redistribution_delay_ms)
        self.groups: dict[str, SimGroup] = {}
        for name in groups:
            config = CoreConfig(broker_name=name, cluster=ClusterView(name, (connection,)), default_prefetch=3)
            self.groups[name] = SimGroup(name, config, Broker(config))
        self.bridges: dict[tuple[str, str], SimBridge] = {}
        for a, b in pairs:
            for source, target in ((a, b), (b, a)):
                self.bridges[(source, target)] = bridge_class(self, source, target)
        self.sent: list[str] = []
        self.consumed: dict[str, int] = {}
        for name in groups:
            self.apply(name, Connect(f"producer:{name}", self.now))
        for (source, target), bridge in self.bridges.items():
            self.apply(target, Connect(bridge.link_session, self.now))
            bridge.open()

    # -- applying commands ----------------------------------------------------------------------

    def apply(self, group: str, command: Command) -> None:
        effects = self.groups[group].broker.apply(command)
        self._route(group, effects)

    def _route(self, group: str, effects: list[Effect]) -> None:
        owner = self.groups[group]
        for effect in effects:
            if isinstance(effect, Reject):
                raise ClusterSimFailure(f"{group} rejected a command: {effect.message} {effect.detail}")
            if not isinstance(effect, Deliver):
                continue
            if effect.session == owner.consumer:
                owner.inbox.append(effect)
                continue
            for bridge in self.bridges.values():
                if bridge.source == group and bridge.session == effect.session:
                    bridge.deliveries.append(effect)

    # -- the workload ---------------------------------------------------------------------------

    def send(self, group: str, value: str, message_group: str | None = None) -> None:
        headers: tuple[tuple[str, str], ...] = ((VALUE_HEADER, value),)
        if message_group is not None:
            headers += (("JMSXGroupID", message_group),)
        self.sent.append(value)
        self.apply(group, Send(f"producer:{group}", QUEUE, block_of(headers), value.encode(), self.now))

    def subscribe(self, group: str) -> None:
        owner = self.groups[group]
        if owner.consumer is not None:
            return
        owner.generation += 1
        owner.consumer = f"consumer:{group}:{owner.generation}"
        self.apply(group, Connect(owner.consumer, self.now))
        self.apply(group, Subscribe(owner.consumer, "c", QUEUE, self.now, ACK_CLIENT_INDIVIDUAL, prefetch=3))

    def unsubscribe(self, group: str) -> None:
        owner = self.groups[group]
        if owner.consumer is not None:
            session, owner.consumer = owner.consumer, None
            owner.inbox.clear()
            self.apply(group, Disconnect(session, self.now))

    def consume(self, group: str) -> bool:
        owner = self.groups[group]
        if not owner.inbox or owner.consumer is None:
            return False
        effect = owner.inbox.pop(0)
        value = header_dict(effect.message.headers)[VALUE_HEADER]
        self.consumed[value] = self.consumed.get(value, 0) + 1
        if self.consumed[value] > 1:
            raise ClusterSimFailure(f"value {value} consumed twice")
        self.apply(group, Ack(owner.consumer, self.now, ack_id=effect.ack_id))
        return True

    def tick(self, ms: int) -> None:
        self.now += ms
        for name in self.groups:
            self.apply(name, Tick(self.now))

    # -- faults ---------------------------------------------------------------------------------

    def restart_leader(self, group: str) -> None:
        """A new leader: the core from its own snapshot, the old leader's sessions swept."""
        owner = self.groups[group]
        owner.broker = Broker.restore(owner.broker.snapshot(), owner.config)
        self.unsubscribe(group)
        for bridge in self.bridges.values():
            if bridge.source == group:
                bridge.close()
                bridge.open()

    # -- the checks -----------------------------------------------------------------------------

    def check(self) -> None:
        for name, owner in self.groups.items():
            owner.broker.check_invariants()
            for store in owner.broker.state.queues.values():
                messages = list(store.ready.values())
                for message in messages:
                    route = [v for n, v in pairs_of(message.headers) if n == ROUTE_HEADER]
                    if route:
                        hops = route[0].split(",")
                        if len(set(hops)) != len(hops) or len(hops) > self.max_hops:
                            raise ClusterSimFailure(f"{name}: {message.message_id} has route {route[0]}")

    def settle(self, rng: random.Random, rounds: int = 200) -> None:
        """No more faults: adverts, forwards, acks and ticks until nothing moves (bounded)."""
        for _ in range(rounds):
            moved = False
            for bridge in self.bridges.values():
                bridge.advertise()
                while bridge.send_one():
                    moved = True
                while bridge.deliver(0):
                    moved = True
                while bridge.ack_one():
                    moved = True
            self.tick(600)
            for name in self.groups:
                while self.consume(name):
                    moved = True
            if not moved and not any(b.deliveries or b.in_transit or b.to_ack for b in self.bridges.values()):
                return

    def waiting(self) -> dict[str, int]:
        """Each value still stored somewhere (ready or in flight, any queue), counted."""
        counts: dict[str, int] = {}
        for owner in self.groups.values():
            state = owner.broker.state
            messages = [m for store in state.queues.values() for m in store.ready.values()]
            messages += [d.message for session in state.sessions.values() for d in session.deliveries.values()]
            for message in messages:
                value = header_dict(message.headers).get(VALUE_HEADER)
                if value is not None:
                    counts[value] = counts.get(value, 0) + 1
        return counts

    def check_settled(self) -> None:
        waiting = self.waiting()
        for value in self.sent:
            where = self.consumed.get(value, 0) + waiting.get(value, 0)
            if where != 1:
                raise ClusterSimFailure(f"value {value}: consumed {self.consumed.get(value, 0)}x, stored "
                                        f"{waiting.get(value, 0)}x after settling (expected once in all)")
        internal = sum(len(s.ready) + s.in_flight for o in self.groups.values()
                       for d, s in o.broker.state.queues.items() if is_internal(d))
        if internal:
            raise ClusterSimFailure(f"{internal} messages stranded in store-and-forward queues after settling")


# -- seeded runs: `python -m raftmq.testing.cluster_sim --seeds N` ----------------------------

TOPOLOGIES: dict[str, tuple[list[str], list[tuple[str, str]], int]] = {
    "pair": (["g1", "g2"], [("g1", "g2")], 1),
    "mesh": (["g1", "g2", "g3"], [("g1", "g2"), ("g1", "g3"), ("g2", "g3")], 1),
    "mesh-3-hops": (["g1", "g2", "g3"], [("g1", "g2"), ("g1", "g3"), ("g2", "g3")], 3),
    "chain": (["g1", "g2", "g3"], [("g1", "g2"), ("g2", "g3")], 2),
    "chain-4": (["g1", "g2", "g3", "g4"], [("g1", "g2"), ("g2", "g3"), ("g3", "g4")], 3),
}
POLICIES = ("ON_DEMAND", "STRICT", "OFF_WITH_REDISTRIBUTION", "OFF", "LOCAL_FIRST")


def random_run(seed: int, steps: int = 400, bridge_class: type[SimBridge] = SimBridge) -> SimCluster:
    """A topology, a policy and `steps` random operations and faults, all from `seed`; checked
    after every step, then settled and checked again. Raises ClusterSimFailure naming the seed."""
    rng = random.Random(seed)
    topology = rng.choice(sorted(TOPOLOGIES))
    groups, links, hops = TOPOLOGIES[topology]
    policy = rng.choice(POLICIES)
    cluster = SimCluster(groups, links, policy=policy, max_hops=hops, bridge_class=bridge_class)
    keys = sorted(cluster.bridges)
    value = 0
    try:
        for _ in range(steps):
            draw = rng.random()
            group = rng.choice(groups)
            bridge = cluster.bridges[rng.choice(keys)]
            if draw < 0.2:
                value += 1
                cluster.send(group, f"v{value}", "G" if value % 3 == 0 else None)
            elif draw < 0.3:
                cluster.subscribe(group)
            elif draw < 0.35:
                cluster.unsubscribe(group)
            elif draw < 0.45:
                cluster.consume(group)
            elif draw < 0.55:
                bridge.advertise()
            elif draw < 0.65:
                bridge.send_one()
            elif draw < 0.75:
                bridge.deliver(rng.randrange(5), rng.random() < 0.3)
            elif draw < 0.78:
                bridge.drop(rng.randrange(5))
            elif draw < 0.88:
                bridge.ack_one()
            elif draw < 0.9:
                bridge.close()
                bridge.open()
            elif draw < 0.92:
                cluster.restart_leader(group)
            else:
                cluster.tick(rng.choice([100, 700]))
            cluster.check()
        cluster.subscribe(groups[0])
        cluster.settle(rng)
        cluster.check()
        cluster.check_settled()
    except ClusterSimFailure as failure:
        raise ClusterSimFailure(f"seed {seed} ({topology}, {policy}): {failure}") from failure
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Seeded runs of the cluster simulation (docs/simulator.md).")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    failed = 0
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            random_run(seed, args.steps)
        except ClusterSimFailure as failure:
            failed += 1
            sys.stdout.write(f"{failure}\n")
    sys.stdout.write(f"{args.seeds - failed} of {args.seeds} seeds passed\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

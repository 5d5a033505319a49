"""Several broker cores joined by simulated bridges that drop, delay, reorder and repeat
forwards, restart, and whose leaders restart (raftmq.testing.cluster_sim), driven by hypothesis:
no value is ever consumed twice, no route loops or outgrows max_hops, every core keeps its
invariants, and once the faults stop every value sent is consumed or waiting in exactly one
place (nothing stranded in a store-and-forward queue)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from raftmq.testing.cluster_sim import (
    POLICIES,
    TOPOLOGIES,
    BrokenBridge,
    ClusterSimFailure,
    SimBridge,
    SimCluster,
    random_run,
)

pytestmark = pytest.mark.sim



class ClusterMachine(RuleBasedStateMachine):
    cluster: SimCluster

    @initialize(topology=st.sampled_from(sorted(TOPOLOGIES)), policy=st.sampled_from(POLICIES))
    def build(self, topology: str, policy: str) -> None:
        groups, links, hops = TOPOLOGIES[topology]
        self.cluster = SimCluster(groups, links, policy=policy, max_hops=hops)
        self.names = groups
        self.bridges = sorted(self.cluster.bridges)
        self.next_value = 0

    @rule(group=st.integers(0, 3), grouped=st.booleans())
    def send(self, group: int, grouped: bool) -> None:
        self.next_value += 1
        name = self.names[group % len(self.names)]
        self.cluster.send(name, f"v{self.next_value}", "G" if grouped and self.next_value % 3 == 0 else None)

    @rule(group=st.integers(0, 3))
    def subscribe(self, group: int) -> None:
        self.cluster.subscribe(self.names[group % len(self.names)])

    @rule(group=st.integers(0, 3))
    def unsubscribe(self, group: int) -> None:
        self.cluster.unsubscribe(self.names[group % len(self.names)])

    @rule(group=st.integers(0, 3))
    def consume(self, group: int) -> None:
        self.cluster.consume(self.names[group % len(self.names)])

    @rule(bridge=st.integers(0, 11))
    def advertise(self, bridge: int) -> None:
        self.cluster.bridges[self.bridges[bridge % len(self.bridges)]].advertise()

    @rule(bridge=st.integers(0, 11))
    def send_forward(self, bridge: int) -> None:
        self.cluster.bridges[self.bridges[bridge % len(self.bridges)]].send_one()

    @rule(bridge=st.integers(0, 11), index=st.integers(0, 10), repeat=st.booleans())
    def deliver_forward(self, bridge: int, index: int, repeat: bool) -> None:
        self.cluster.bridges[self.bridges[bridge % len(self.bridges)]].deliver(index, repeat)

    @rule(bridge=st.integers(0, 11), index=st.integers(0, 10))
    def drop_forward(self, bridge: int, index: int) -> None:
        self.cluster.bridges[self.bridges[bridge % len(self.bridges)]].drop(index)

    @rule(bridge=st.integers(0, 11))
    def ack_forward(self, bridge: int) -> None:
        self.cluster.bridges[self.bridges[bridge % len(self.bridges)]].ack_one()

    @rule(bridge=st.integers(0, 11))
    def restart_bridge(self, bridge: int) -> None:
        link = self.cluster.bridges[self.bridges[bridge % len(self.bridges)]]
        link.close()
        link.open()

    @precondition(lambda self: self.next_value > 0)
    @rule(group=st.integers(0, 3))
    def restart_leader(self, group: int) -> None:
        self.cluster.restart_leader(self.names[group % len(self.names)])

    @rule(ms=st.sampled_from([100, 700]))
    def tick(self, ms: int) -> None:
        self.cluster.tick(ms)

    @invariant()
    def safe(self) -> None:
        if hasattr(self, "cluster"):
            self.cluster.check()

    def teardown(self) -> None:
        if not hasattr(self, "cluster"):
            return
        # Heal: a consumer on the first group, then forwards, acks and ticks until quiet.
        self.cluster.subscribe(self.names[0])
        self.cluster.settle(random.Random(0))
        self.cluster.check()
        self.cluster.check_settled()


ClusterMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
TestCluster = ClusterMachine.TestCase


def _faulty_run(bridge_class: type, seed: int) -> None:
    """Forwards delivered twice, bridges restarted, a consumer that moves: what dedup ids are for."""
    rng = random.Random(seed)
    cluster = SimCluster(["g1", "g2"], [("g1", "g2")], bridge_class=bridge_class)
    cluster.subscribe("g2")
    for bridge in cluster.bridges.values():
        bridge.advertise()
    for index in range(40):
        cluster.send("g1", f"v{index}")
    link = cluster.bridges[("g1", "g2")]
    for _ in range(200):
        link.send_one()
        link.deliver(rng.randrange(10), repeat=rng.random() < 0.3)
        if rng.random() < 0.2:
            link.close()
            link.open()
        link.ack_one()
        cluster.consume("g2")
        cluster.check()
    cluster.settle(rng)
    cluster.check_settled()


def test_the_simulated_bridge_survives_repeats_and_restarts() -> None:
    for seed in range(20):
        _faulty_run(SimBridge, seed)


def test_the_checks_catch_a_bridge_without_duplicate_detection() -> None:
    with pytest.raises(ClusterSimFailure, match="twice|once in all"):
        for seed in range(20):
            _faulty_run(BrokenBridge, seed)




def test_seeded_random_runs_of_every_topology_and_policy() -> None:
    for seed in range(60):
        random_run(seed, steps=400)


def test_the_seeded_runs_catch_a_bridge_without_duplicate_detection() -> None:
    caught = 0
    for seed in range(20):
        try:
            random_run(seed, steps=400, bridge_class=BrokenBridge)
        except ClusterSimFailure:
            caught += 1
    assert caught >= 10

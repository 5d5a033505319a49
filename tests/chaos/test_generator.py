"""The seeded schedule (chaos.generator): reproducible, within each nemesis's targets, and the
partition shapes cut what they say."""

from __future__ import annotations

import random

from chaos.generator import (
    NEMESES,
    NEMESIS_TARGETS,
    clock_change,
    packet_params,
    partition_grudge,
    pick_members,
    schedule,
)
from chaos.grudges import sees


def test_a_seed_gives_the_same_schedule_and_each_nemesis_keeps_to_its_targets() -> None:
    faults = schedule(3, list(NEMESES), 600)
    assert faults == schedule(3, list(NEMESES), 600) and faults != schedule(4, list(NEMESES), 600)
    assert {fault.nemesis for fault in faults} == set(NEMESES)
    for fault in faults:
        assert fault.target in NEMESIS_TARGETS[fault.nemesis]
        assert fault.at_s + fault.heal_after_s <= 600
    # Corruption never hits a majority: the group must keep good copies to repair from.
    assert all(f.target not in ("majority", "all") for f in schedule(5, ["corrupt"], 600, targets=("all", "majority")))


def test_partition_shapes() -> None:
    members = {"g1": ["g1/n1", "g1/n2", "g1/n3"], "g2": ["g2/n1", "g2/n2", "g2/n3"]}
    everyone = [k for keys in members.values() for k in keys]
    seen_shapes = set()
    for seed in range(60):
        rng = random.Random(seed)
        hit = pick_members(members["g1"], "g1/n2", "leader", seed)
        shape, grudge = partition_grudge(members, "g1", hit, rng)
        seen_shapes.add(shape)
        view = sees(grudge, everyone)
        if shape == "target":  # the leader cut off from its group, the other two together; g2 untouched
            assert view["g1/n2"] == {"g1/n2", *members["g2"]} and view["g1/n1"] == {"g1/n1", "g1/n3", *members["g2"]}
        elif shape == "groups":  # each group whole, no link between groups
            assert all(view[k] == set(members[k.split("/")[0]]) for k in everyone)
        elif shape == "bridge":  # one member sees its whole group, the other two see only it
            bridges = [k for k in members["g1"] if set(members["g1"]) <= view[k]]
            assert len(bridges) == 1
            assert all(view[k] & set(members["g1"]) == {k, bridges[0]} for k in members["g1"] if k != bridges[0])
    assert seen_shapes == {"target", "groups", "bridge"}  # a ring needs four members
    five = {"g5": [f"g5/n{i}" for i in range(1, 6)]}
    rings = [grudge for seed in range(40)
             for shape, grudge in [partition_grudge(five, "g5", ["g5/n1"], random.Random(seed))] if shape == "ring"]
    assert rings
    view = sees(rings[0], five["g5"])
    assert all(len(seen) == 3 for seen in view.values()) and len(set(view.values())) == 5  # each its own majority


def test_packet_and_clock_faults_are_seeded() -> None:
    assert packet_params(random.Random(1)) == packet_params(random.Random(1))
    kinds = {tuple(sorted(packet_params(random.Random(seed)))) for seed in range(50)}
    assert {("delay_ms", "jitter_ms"), ("loss_pct",), ("duplicate_pct",)} <= kinds
    changes = [clock_change(random.Random(seed)) for seed in range(50)]
    assert {c["mode"] for c in changes} == {"skew", "jump"} and all(c["seconds"] != 0 for c in changes)


def test_every_nemesis_and_workload_is_in_the_chaos_docs() -> None:
    from pathlib import Path

    from chaos.run import WORKLOADS

    text = (Path(__file__).resolve().parents[2] / "docs" / "chaos.md").read_text()
    missing = [name for name in (*NEMESES, *WORKLOADS) if f"`{name}`" not in text]
    assert not missing, f"docs/chaos.md says nothing of {missing}"

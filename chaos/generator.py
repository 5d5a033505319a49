"""A run's schedule, pure and seeded: the same seed gives the same faults at the same times
(against the same kinds of targets) and the same operation values, so a run replays."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chaos.grudges import Grudge, bridge, grudge, majorities_ring

TARGETS = ("leader", "one", "minority", "majority", "all")
# Which members each nemesis may hit. Corruption is repairable only while a majority keeps
# good copies; a skewed clock or a full disk is a one-node (or minority) fault by nature.
NEMESIS_TARGETS: dict[str, tuple[str, ...]] = {
    "kill": TARGETS,
    "pause": TARGETS,
    # CPU starvation (a cgroup quota) or stop-and-go signals: the process stalls at any point.
    "starve": ("leader", "one"),
    "stutter": ("leader", "one"),
    "partition": TARGETS,
    "packet": TARGETS,
    "power-loss": ("leader", "one", "minority", "all"),
    "corrupt": ("leader", "one", "minority"),
    "clock": ("leader", "one"),
    "disk-full": ("leader", "one", "minority"),
    # One member leaves its group (a committed change) and rejoins empty: one change at a time.
    # A graceful restart (SIGTERM: a leader hands over), one member: a rolling restart's step.
    "restart": ("leader", "one"),
    "membership": ("leader", "one"),
    # The leader hands its leadership over and stays up (`raftmq hand-over`): sessions move.
    "transfer": ("leader",),
    # The same, while the member hit is cut off by a partition (NATS lost acknowledged writes
    # to membership changes during partitions): it leaves while cut off, rejoins after the heal.
    "membership-partition": ("leader", "one"),
    # A group drains (scale-down) while the members hit die in the middle of it (clusters only).
    "drain": ("leader", "one", "minority"),
}
NEMESES = tuple(NEMESIS_TARGETS)


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # seconds into the run
    nemesis: str  # one of NEMESES
    target: str  # one of TARGETS
    group: int  # which group (an index into the deployment's groups, modulo their count)
    pick: int  # which members, when the target leaves a choice (seeds a Random)
    heal_after_s: float


FAULT_S = (1.5, 3.0)  # how long a fault lasts: past the election timeout
CALM_S = (3.0, 4.0)  # the calm after each heal: the cluster recovers and shows it
CLUSTER_ONLY = ("drain",)  # nemeses that need a cluster of groups


def schedule(seed: int, nemeses: list[str], time_limit_s: float, first_s: float = 2.0,
             targets: tuple[str, ...] = TARGETS) -> list[Fault]:
    """Faults until `time_limit_s`, each healed before the next: a fault lasts 1.5-3 s
    (past the election timeout), then 3-4 s of calm let the cluster recover and show it (at
    most 7 s a fault: four fit in 30 s). Several kinds are struck in rounds, each round every
    kind once in a seeded order: no kind strikes twice before every kind has struck once."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = first_s
    kinds = list(dict.fromkeys(nemeses))
    queue: list[str] = []
    while kinds:
        duration = round(rng.uniform(*FAULT_S), 3)
        if at + duration > time_limit_s:
            break
        if not queue:  # a new round: every kind once, in an order of this seed's
            queue = rng.sample(kinds, len(kinds))
        nemesis = queue.pop(0)
        allowed = [t for t in targets if t in NEMESIS_TARGETS[nemesis]] or list(NEMESIS_TARGETS[nemesis])
        faults.append(Fault(round(at, 3), nemesis, rng.choice(allowed), rng.randrange(1 << 16), rng.randrange(1 << 30),
                            duration))
        at += duration + rng.uniform(*CALM_S)
    return faults


def time_needed_for_all(seed: int, nemeses: list[str], first_s: float = 2.0,
                        targets: tuple[str, ...] = TARGETS) -> int:
    """The `--time-limit` (whole seconds) under which this seed's schedule strikes every one of
    `nemeses` at least once: the end of its first round, plus a second a fault for heals that
    take longer than planned (a restart, a repair)."""
    kinds = list(dict.fromkeys(nemeses))
    if not kinds:
        return 0
    # Every fault takes at most FAULT_S[1] + CALM_S[1]: the first round ends before this bound.
    bound = first_s + len(kinds) * (FAULT_S[1] + CALM_S[1])
    first_round = schedule(seed, kinds, bound, first_s, targets)[:len(kinds)]
    end = first_round[-1].at_s + first_round[-1].heal_after_s
    return math.ceil(end) + len(kinds)


def pick_members(members: list[str], leader: str | None, target: str, pick: int) -> list[str]:
    """Which of a group's `members` a fault hits."""
    rng = random.Random(pick)
    count = len(members)
    if target == "leader":
        return [leader] if leader is not None else [rng.choice(members)]
    if target == "one":
        return [rng.choice(members)]
    if target == "minority":
        return rng.sample(members, max(1, (count - 1) // 2))
    if target == "majority":
        return rng.sample(members, count // 2 + 1)
    return list(members)


PARTITION_SHAPES = ("target", "bridge", "ring", "groups")


def partition_grudge(members: Mapping[str, list[str]], group: str, hit: list[str],
                     rng: random.Random) -> tuple[str, Grudge]:
    """A partition's shape and who drops whom (node keys). `target`: the members hit against the
    rest of their group (each alone when all are hit): isolating the leader, a minority, halves;
    `bridge`: two halves of the group joined by one member; `ring`: a majorities ring (four
    members or more); `groups`: every group keeps its own links and loses all the others
    (clusters only)."""
    own = list(members[group])
    shapes = ["target"] + (["bridge"] if len(own) >= 3 else []) + (["ring"] if len(own) >= 4 else [])
    shapes += ["groups"] if len(members) > 1 else []
    shape = rng.choice(shapes)
    if shape == "groups":
        return shape, grudge([list(keys) for keys in members.values()])
    if shape in ("bridge", "ring"):
        rng.shuffle(own)
        return shape, bridge(own) if shape == "bridge" else majorities_ring(own)
    rest = [key for key in own if key not in hit]
    return shape, grudge([[key] for key in hit] if not rest else [hit, rest])


def packet_params(rng: random.Random) -> dict[str, Any]:
    """One of netem's kinds of trouble, with seeded strengths."""
    kind = rng.choice(("delay", "loss", "duplicate", "reorder"))
    if kind == "delay":
        return {"delay_ms": rng.randrange(50, 300), "jitter_ms": rng.randrange(0, 50)}
    if kind == "loss":
        return {"loss_pct": float(rng.randrange(5, 40))}
    if kind == "duplicate":
        return {"duplicate_pct": float(rng.randrange(10, 60))}
    return {"delay_ms": rng.randrange(10, 60), "jitter_ms": rng.randrange(5, 30),
            "reorder_pct": float(rng.randrange(10, 50))}


def clock_change(rng: random.Random) -> dict[str, Any]:
    """A wall clock set off by minutes to an hour (a bad NTP step), or a jump of seconds back or forth."""
    if rng.random() < 0.5:
        return {"mode": "skew", "seconds": rng.choice((-1, 1)) * rng.randrange(60, 3600)}
    return {"mode": "jump", "seconds": rng.choice((-1, 1)) * rng.randrange(2, 30)}

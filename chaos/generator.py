"""A run's schedule, pure and seeded: the same seed gives the same faults at the same times
(against the same kinds of targets) and the same operation values, so a run replays."""

from __future__ import annotations

import random
from dataclasses import dataclass

TARGETS = ("leader", "one", "minority", "majority", "all")


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float  # seconds into the run
    nemesis: str  # kill, pause
    target: str  # one of TARGETS
    group: int  # which group (an index into the deployment's groups, modulo their count)
    pick: int  # which members, when the target leaves a choice (seeds a Random)
    heal_after_s: float


def schedule(seed: int, nemeses: list[str], time_limit_s: float, first_s: float = 2.0,
             targets: tuple[str, ...] = TARGETS) -> list[Fault]:
    """Faults until `time_limit_s`, each healed before the next: a fault lasts 1.5-4 s
    (past the election timeout), then 3-5 s of calm let the cluster recover and show it."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = first_s
    while nemeses:
        duration = round(rng.uniform(1.5, 4.0), 3)
        if at + duration > time_limit_s:
            break
        faults.append(Fault(round(at, 3), rng.choice(nemeses), rng.choice(targets), rng.randrange(1 << 16),
                            rng.randrange(1 << 30), duration))
        at += duration + rng.uniform(3.0, 5.0)
    return faults


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

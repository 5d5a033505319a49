"""Faults on real processes, packets, files and clocks, run from the generator's schedule in a
thread of their own, each recorded in the history (process `nemesis`): `invoke`, then `ok`
with what it hit and how (or `fail` with why it could not), and the same for its `heal`.

The faults are a registry, one module a kind (chaos.faults): `kill`, `pause`, `starve`,
`stutter`, `partition`, `packet`, `power-loss`, `corrupt`, `clock`, `disk-full`, `restart`,
`transfer`, `membership`, `membership-partition` and `drain`, each module saying what its fault
does and how it heals. Which members each kind may hit is the schedule's (chaos.generator).
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

from chaos.deployment import Deployment
from chaos.environment import Environment
from chaos.faults import KINDS, Strike
from chaos.generator import NEMESES, Fault, pick_members
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, History

__all__ = ["NEMESES", "Nemesis"]


class Nemesis:
    def __init__(self, deployment: Deployment, history: History, faults: list[Fault], environment: Environment) -> None:
        self.deployment = deployment
        self.history = history
        self.faults = faults
        self.environment = environment
        self.current: str | None = None  # what is being done now, for the progress display
        self.detected: list[dict[str, Any]] = []  # damage the nodes refused to start on
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._struck: Strike | None = None  # the fault in force, until healed
        self._started = time.monotonic()

    def start(self, started: float) -> None:
        self._started = started
        self._thread.start()

    def stop(self) -> None:
        """End the schedule, heal the current fault, and start any node that is down for
        another reason (it stopped itself: a full disk), so the drain reads a whole cluster."""
        self._stop.set()
        self._thread.join(timeout=120)
        self.heal()
        down = [key for key, node in self.deployment.nodes.items() if not node.alive]
        if down:
            self.history.record(NEMESIS, INVOKE, "restart", {"nodes": down})
            refused = {key: why[-400:] for key in down if (why := self.deployment.try_start(key)) is not None}
            if refused:  # the drain goes on with the rest; the history says who stayed down and why
                self.history.record(NEMESIS, FAIL, "restart", {"nodes": down}, error=json.dumps(refused))
            else:
                self.history.record(NEMESIS, OK, "restart", {"nodes": down})

    def _run(self) -> None:
        for fault in self.faults:
            if self._wait_until(fault.at_s):
                return
            self.inject(fault)
            if self._wait_until(fault.at_s + fault.heal_after_s):
                return
            self.heal()

    def _wait_until(self, at_s: float) -> bool:
        delay = self._started + at_s - time.monotonic()
        return self._stop.wait(delay) if delay > 0 else self._stop.is_set()

    # -- injecting ----------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        deployment = self.deployment
        groups = deployment.groups()
        group = groups[fault.group % len(groups)]
        members = deployment.members(group)
        leader = deployment.leader(group, timeout=2.0) if fault.target == "leader" else None
        hit = pick_members(members, leader, fault.target, fault.pick)
        value: dict[str, Any] = {"target": fault.target, "group": group, "nodes": hit}
        self.history.record(NEMESIS, INVOKE, fault.nemesis, value)
        kind = KINDS.get(fault.nemesis)
        if kind is None:
            self.history.record(NEMESIS, FAIL, fault.nemesis, value,
                                error=f"ValueError: unknown nemesis {fault.nemesis!r}")
            return
        strike = self._struck = kind(deployment, self.environment, group, hit, random.Random(fault.pick))
        try:
            details = strike.inject()
        except Exception as exc:  # a fault that could not be made is recorded, never fatal to the run
            self.history.record(NEMESIS, FAIL, fault.nemesis, value, error=f"{type(exc).__name__}: {exc}")
            return  # healed as struck: whatever part of it took
        if details.get("nodes") is not None:
            strike.hit = details["nodes"]
        self.current = f"{fault.nemesis} {details.get('shape', fault.target)} {', '.join(strike.hit)}"
        self.history.record(NEMESIS, OK, fault.nemesis, {**value, **details})

    # -- healing ------------------------------------------------------------------------------

    def heal(self) -> None:
        """Undo the current fault; a no-op when none."""
        strike, self._struck = self._struck, None
        if strike is None or not strike.hit:
            return
        hit, kind = strike.hit, strike.name
        self.history.record(NEMESIS, INVOKE, "heal", {"nodes": hit, "of": kind})
        details: dict[str, Any] = {}
        error = None
        try:
            details = strike.heal()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        self.current = None
        if error is not None:
            self.history.record(NEMESIS, FAIL, "heal", {"nodes": hit, "of": kind}, error=error)
            return
        for key, refusal in details.get("detected", {}).items():  # damage a node refused to start on
            self.detected.append({"node": key, "refusal": refusal})
        self.history.record(NEMESIS, INFO if details.get("detected") else OK, "heal",
                            {"nodes": hit, "of": kind, **details})

"""Faults on real processes, run from the generator's schedule in a thread of their own, each
recorded in the history (process `nemesis`): `invoke` then `ok` with the nodes it hit.

- `kill`: SIGKILL, and at heal the nodes start again (same command, same data directory).
- `pause`: SIGSTOP past the election timeout, SIGCONT at heal.
- `partition`: the members hit are cut off from the rest of their group (iptables between
  their addresses, chaos.partition; `all`: every member from every other); healed by removing
  the rules.
"""

from __future__ import annotations

import threading
import time

from chaos.deployment import Deployment
from chaos.generator import Fault, pick_members
from chaos.history import INVOKE, NEMESIS, OK, History
from chaos.partition import Partition

NEMESES = ("kill", "pause", "partition")


class Nemesis:
    def __init__(self, deployment: Deployment, history: History, faults: list[Fault]) -> None:
        self.deployment = deployment
        self.history = history
        self.faults = faults
        self.current: str | None = None  # what is being done now, for the progress display
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._partition = Partition()
        self._hit: list[str] = []
        self._kind = ""

    def start(self, started: float) -> None:
        self._started = started
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.heal()

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

    def inject(self, fault: Fault) -> None:
        deployment = self.deployment
        groups = deployment.groups()
        group = groups[fault.group % len(groups)]
        members = deployment.members(group)
        leader = deployment.leader(group, timeout=2.0) if fault.target == "leader" else None
        hit = pick_members(members, leader, fault.target, fault.pick)
        value = {"target": fault.target, "group": group, "nodes": hit}
        self.history.record(NEMESIS, INVOKE, fault.nemesis, value)
        if fault.nemesis == "partition":
            rest = [key for key in members if key not in hit]
            sides = [[key] for key in hit] if not rest else [hit, rest]
            self._partition.cut([[deployment.address(key) for key in side] for side in sides])
        for key in hit:
            if fault.nemesis == "kill":
                deployment.kill(key)
            elif fault.nemesis == "pause":
                deployment.pause(key)
        self._hit, self._kind = hit, fault.nemesis
        self.current = f"{fault.nemesis} {fault.target} {', '.join(hit)}"
        self.history.record(NEMESIS, OK, fault.nemesis, value)

    def heal(self) -> None:
        """Undo the current fault (restart killed nodes, resume paused ones); a no-op when none."""
        hit, kind = self._hit, self._kind
        self._hit, self._kind = [], ""
        if not hit:
            return
        self.history.record(NEMESIS, INVOKE, "heal", {"nodes": hit})
        if kind == "kill":
            self.deployment.start(hit, wait=True)
        elif kind == "partition":
            self._partition.heal()
        else:
            for key in hit:
                self.deployment.resume(key)
        self.current = None
        self.history.record(NEMESIS, OK, "heal", {"nodes": hit})

"""Faults on real processes, packets, files and clocks, run from the generator's schedule in a
thread of their own, each recorded in the history (process `nemesis`): `invoke`, then `ok`
with what it hit and how (or `fail` with why it could not), and the same for its `heal`.

- `kill`: SIGKILL; at heal the nodes start again (same command, same data directory).
- `pause`: SIGSTOP past the election timeout; SIGCONT at heal.
- `partition`: real packets dropped between nodes (chaos.environment: iptables inside each
  node's network namespace, or between loopback addresses). Shapes: the members hit against
  the rest of their group (isolating the leader, halves...), a majorities ring, a bridge, and
  cutting only the links between groups.
- `packet`: netem delay, loss, duplication and reordering on the nodes hit.
- `power-loss`: SIGKILL, then every write the node had not fsynced is discarded (its data
  directory is on chaos.lazyfs); restart at heal.
- `corrupt`: SIGKILL, then a bit flipped in or a truncation of one of its journal or snapshot
  files (chaos.corrupt); at heal the node must start, having cut only an unacknowledged torn
  tail, or refuse and name the damage; a refusing node is repaired the operator's way.
- `clock`: the node's wall clock skewed or jumped (libfaketime, chaos.clock_fault); reset at heal.
- `disk-full`: the node's data directory's filesystem filled up; freed at heal.
- `restart`: SIGTERM, the way `raftmq restart --rolling` stops a node (a leader hands
  leadership to a caught-up follower first); started again at heal.
- `transfer`: the leader hands its leadership to a caught-up follower and stays up (a signed
  POST /leadership, as `raftmq hand-over` asks); its clients' sessions move with it. No heal.
- `membership`: the member is removed from its group (a committed configuration change; a
  leader hands over first) and killed; at heal its files are set aside and it rejoins empty
  (chaos.membership_fault), catching up from its peers.
- `membership-partition`: the member hit is cut off from its group by a partition, and
  while it is, removed from the group (through the majority side's leader) and killed; at heal
  the partition heals and it rejoins empty.
- `starve`: the node's process held to a few per cent of the CPU by a cgroup quota, so it stalls
  past the election timeout at arbitrary points of its work (chaos.cpu_fault); lifted at heal.
- `stutter`: the node's process stopped and continued in turn (0.2-1.2 s stopped, 20-400 ms
  running) until healed.
- `drain`: the group starts draining to the other groups and the members hit are killed in
  the middle of it (chaos.drain_fault); at heal they start again and the drain is cancelled.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

from chaos import drain_fault
from chaos.corrupt import damage, refusal_for_damage
from chaos.cpu_fault import CpuLimit, Stutter, starve_params
from chaos.deployment import Deployment
from chaos.environment import Environment
from chaos.generator import NEMESES, Fault, clock_change, packet_params, partition_grudge, pick_members
from chaos.history import FAIL, INFO, INVOKE, NEMESIS, OK, History
from chaos.membership_fault import leave, rejoin, transfer

__all__ = ["NEMESES", "Nemesis"]

PARTITION_SETTLE_SECONDS = 1.0


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
        self._hit: list[str] = []
        self._kind = ""
        self._started = time.monotonic()
        self._cpu: dict[str, CpuLimit | Stutter] = {}  # the starve or stutter of each node hit

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
        try:
            details = self._inject(fault, group, hit)
        except Exception as exc:  # a fault that could not be made is recorded, never fatal to the run
            self.history.record(NEMESIS, FAIL, fault.nemesis, value, error=f"{type(exc).__name__}: {exc}")
            self._hit, self._kind = hit, fault.nemesis  # heal whatever part of it took
            return
        if details.get("nodes") is not None:
            hit = details["nodes"]
        self._hit, self._kind = hit, fault.nemesis
        self.current = f"{fault.nemesis} {details.get('shape', fault.target)} {', '.join(hit)}"
        self.history.record(NEMESIS, OK, fault.nemesis, {**value, **details})

    def _inject(self, fault: Fault, group: str, hit: list[str]) -> dict[str, Any]:
        kind, deployment, environment = fault.nemesis, self.deployment, self.environment
        rng = random.Random(fault.pick)
        if kind == "kill":
            for key in hit:
                deployment.kill(key)
        elif kind == "pause":
            for key in hit:
                deployment.pause(key)
        elif kind in ("starve", "stutter"):
            params = starve_params(rng)
            for key in hit:
                pid = deployment.pid(key)
                if kind == "starve":
                    limit = self._cpu[key] = CpuLimit(pid, key)
                    limit.apply(**params)
                else:
                    stutter = self._cpu[key] = Stutter(pid, random.Random(rng.random()))
                    stutter.start()
            return {"cpu": params} if kind == "starve" else {}
        elif kind == "partition":
            members = {g: deployment.members(g) for g in deployment.groups()}
            shape, grudge = partition_grudge(members, group, hit, rng)
            environment.cut(grudge)
            return {"shape": shape, "nodes": sorted(grudge), "grudge": {k: sorted(v) for k, v in grudge.items()}}
        elif kind == "packet":
            params = packet_params(rng)
            for key in hit:
                environment.degrade(key, params)
            return {"packet": params}
        elif kind == "power-loss":
            dropped = {}
            for key in hit:
                deployment.kill(key)
            for key in hit:  # all at once: every node hit has lost power before any data is dropped
                dropped[key] = environment.lose_unsynced(key)
            return {"dropped_bytes": dropped}
        elif kind == "corrupt":
            damaged = {}
            for key in hit:
                deployment.kill(key)
                done = damage(deployment.nodes[key].member_dir, rng)
                damaged[key] = None if done is None else done.to_dict()
            return {"damage": damaged}
        elif kind == "clock":
            change = clock_change(rng)
            for key in hit:
                environment.change_clock(key, change)
            return {"clock": change}
        elif kind == "disk-full":
            filled = {key: environment.fill_disk(key) for key in hit}
            return {"filled_bytes": filled}
        elif kind == "restart":
            return {"graceful": {key: deployment.terminate(key) for key in hit}}
        elif kind == "membership":
            return {"changes": [leave(deployment, key) for key in hit]}
        elif kind == "transfer":
            return {"transfers": [transfer(deployment, key) for key in hit]}
        elif kind == "membership-partition":
            members = {g: deployment.members(g) for g in deployment.groups()}
            shape, grudge = partition_grudge(members, group, hit, rng)
            environment.cut(grudge)
            cut = {k: sorted(v) for k, v in grudge.items()}
            time.sleep(PARTITION_SETTLE_SECONDS)  # a majority that lost its leader elects another
            try:
                changes = [leave(deployment, key) for key in hit]
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}; during partition {shape} {cut}") from None
            return {"shape": shape, "grudge": cut, "changes": changes}
        elif kind == "drain":
            return drain_fault.start(deployment, group, hit)
        else:
            raise ValueError(f"unknown nemesis {kind!r}")
        return {}

    # -- healing ------------------------------------------------------------------------------

    def heal(self) -> None:
        """Undo the current fault; a no-op when none."""
        hit, kind = self._hit, self._kind
        self._hit, self._kind = [], ""
        if not hit:
            return
        self.history.record(NEMESIS, INVOKE, "heal", {"nodes": hit, "of": kind})
        details: dict[str, Any] = {}
        error = None
        try:
            details = self._heal(kind, hit)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        self.current = None
        if error is not None:
            self.history.record(NEMESIS, FAIL, "heal", {"nodes": hit, "of": kind}, error=error)
        else:
            self.history.record(NEMESIS, INFO if details.get("detected") else OK, "heal",
                                {"nodes": hit, "of": kind, **details})

    def _heal(self, kind: str, hit: list[str]) -> dict[str, Any]:
        deployment, environment = self.deployment, self.environment
        if kind in ("kill", "power-loss", "restart"):
            deployment.start(hit, wait=True)
        elif kind == "pause":
            for key in hit:
                deployment.resume(key)
        elif kind in ("starve", "stutter"):
            stops = {}
            for key in hit:
                held = self._cpu.pop(key, None)
                if isinstance(held, Stutter):
                    stops[key] = held.stop()["stops"]
                elif held is not None:
                    held.release()
            return {"stops": stops} if stops else {}
        elif kind == "partition":
            environment.heal_network()
        elif kind == "packet":
            environment.restore_packets()
        elif kind == "clock":
            for key in hit:
                environment.reset_clock(key)
        elif kind == "disk-full":
            for key in hit:
                environment.free_disk(key)
            # A node may stop on a full disk (saying why): started again once there is room, as
            # a supervisor would (`raftmq up --restart on-failure`).
            restarted = [key for key in hit if not deployment.nodes[key].alive]
            deployment.start(restarted, wait=True)
            return {"restarted": restarted} if restarted else {}
        elif kind == "corrupt":
            return self._restart_damaged(hit)
        elif kind == "membership":
            return {"changes": [rejoin(deployment, key, environment.set_aside) for key in hit]}
        elif kind == "membership-partition":
            environment.heal_network()
            return {"changes": [rejoin(deployment, key, environment.set_aside) for key in hit]}
        elif kind == "drain":
            return drain_fault.stop(deployment, hit)
        return {}

    def _restart_damaged(self, hit: list[str]) -> dict[str, Any]:
        """Start each damaged node. One that refuses because of the damage has detected it (what
        we want); it is then repaired as an operator would: its directory moved aside (kept for
        the audit) and the node started empty, to resync from its peers. One that refuses for
        any other reason is a harness failure."""
        detected = {}
        for key in hit:
            refusal = self.deployment.try_start(key)
            if refusal is None:
                continue
            reason = refusal_for_damage(refusal)
            if reason is None:
                raise RuntimeError(f"{key} did not start after corruption, and not because of it: {refusal[-400:]}")
            detected[key] = reason[-400:]
            self.detected.append({"node": key, "refusal": reason[-400:]})
            self.environment.set_aside(key)
            self.deployment.start([key], wait=True)
        return {"detected": detected} if detected else {}

"""CPU faults on a node's process, so that a leader stalls at arbitrary points of its work (between
a lease check and a write, say), not only where a signal happens to land:

- `starve`: the process (every thread) is moved into a cgroup of its own with a CPU quota of 1-5
  ms in a period of 0.2-1 s (0.1-2.5 % of a core, below what a node serving the workload needs):
  it runs a few milliseconds, then stalls for the rest of the period, often longer than the
  election timeout. cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us`). How hard it bit (periods
  held back, for how long) is read from `cpu.stat` at the heal and recorded with it.
- `stutter`: SIGSTOP and SIGCONT in turn from a thread of its own, stopped 0.2-1.2 s, running
  20-400 ms, until healed.

Both are seeded by the fault's pick (the strengths) and recorded in the history by the nemesis.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from pathlib import Path
from typing import Any

from raftmq import processes

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "raftmq-chaos-"


def starve_params(rng: random.Random) -> dict[str, int]:
    """A quota of 1-5 ms in a 200-1000 ms period: stalls of 195-999 ms for a process that needs
    more (a quota in per cent of the period, as this once was, 2-15 %, was more than a leader
    under the chaos workload uses: it never held one back)."""
    period_us = rng.randrange(200_000, 1_000_001, 50_000)
    return {"period_us": period_us, "quota_us": rng.randrange(1_000, 5_001, 500)}


class CpuLimit:
    """One process held to a CPU quota in a cgroup of its own, and let go again."""

    def __init__(self, pid: int, name: str, root: Path = CGROUP_ROOT) -> None:
        self.name = name
        self.pid = pid
        self.v2 = (root / "cgroup.controllers").exists()
        self.base = root if self.v2 else root / "cpu"
        self.path = self.base / f"{PREFIX}{name.replace('/', '-')}"
        self.home: Path | None = None  # the cgroup the process came from

    def apply(self, quota_us: int, period_us: int) -> None:
        if not self.base.is_dir():
            raise RuntimeError(f"no cgroup CPU controller at {self.base}")
        self.home = self.base / self._current().lstrip("/")
        self.path.mkdir(exist_ok=True)
        if self.v2:
            control = self.base / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                control.write_text("+cpu")
            (self.path / "cpu.max").write_text(f"{quota_us} {period_us}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(period_us))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota_us))
        (self.path / "cgroup.procs").write_text(str(self.pid))

    def throttled(self) -> dict[str, int]:
        """How hard the quota bit so far (from cpu.stat): periods that ended, periods in which the
        process was held back, and for how long in all (ms)."""
        try:
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if " " in line)
        except OSError:
            return {}
        held_ms = int(stat["throttled_usec"]) // 1000 if "throttled_usec" in stat \
            else int(stat.get("throttled_time", 0)) // 1_000_000
        return {"periods": int(stat.get("nr_periods", 0)), "throttled_periods": int(stat.get("nr_throttled", 0)),
                "throttled_ms": held_ms}

    def release(self) -> None:
        """Move the process back where it was (if it still lives) and remove the cgroup."""
        if not self.path.exists():
            return
        # The quota lifted first: a task moved out while throttled stays off the CPU until a later
        # period of its old group ends (seen here: up to 0.75 s), so it would stay starved after the heal.
        if self.v2:
            (self.path / "cpu.max").write_text("max")
        else:
            (self.path / "cpu.cfs_quota_us").write_text("-1")
        home = self.home if self.home is not None and self.home.is_dir() else self.base
        procs = self.path / "cgroup.procs"
        for pid in procs.read_text().split():
            try:
                (home / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # gone meanwhile
        self.path.rmdir()

    def _current(self) -> str:
        """The process's cgroup path under this hierarchy (from /proc/PID/cgroup)."""
        for line in Path(f"/proc/{self.pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (self.v2 and controllers == "") or (not self.v2 and "cpu" in controllers.split(",")):
                return path
        return "/"


def clear_stale(root: Path = CGROUP_ROOT) -> list[str]:
    """Remove cgroups an earlier run left behind (their processes are gone); their names."""
    removed = []
    for base in (root, root / "cpu"):
        if not base.is_dir():
            continue
        for path in base.glob(f"{PREFIX}*"):
            try:
                path.rmdir()
                removed.append(path.name)
            except OSError:
                pass  # still holds a process
    return removed


class Stutter:
    """SIGSTOP / SIGCONT in turn until `stop()`; the process is left running."""

    def __init__(self, pid: int, rng: random.Random, stopped_s: tuple[float, float] = (0.2, 1.2),
                 running_s: tuple[float, float] = (0.02, 0.4)) -> None:
        self.pid, self.rng = pid, rng
        self.stopped_s, self.running_s = stopped_s, running_s
        self.stops = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stutter-{pid}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.is_set():
            if not processes.send_signal(self.pid, signal.SIGSTOP):
                return
            self.stops += 1
            self._halt.wait(self.rng.uniform(*self.stopped_s))
            processes.send_signal(self.pid, signal.SIGCONT)
            self._halt.wait(self.rng.uniform(*self.running_s))

    def stop(self) -> dict[str, Any]:
        self._halt.set()
        self._thread.join(timeout=5)
        processes.send_signal(self.pid, signal.SIGCONT)
        return {"stops": self.stops}


def usable(root: Path = CGROUP_ROOT) -> str | None:
    """None when `starve` can run here, else why not."""
    if os.geteuid() != 0:
        return "the starve nemesis needs root (cgroups)"
    if not (root / "cgroup.controllers").exists() and not (root / "cpu").is_dir():
        return f"no cgroup CPU controller under {root}"
    return None

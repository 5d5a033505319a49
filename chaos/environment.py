"""The machinery under a chaos run's nodes that its nemeses act through: where each node runs
(a network namespace of its own when the run cuts or degrades packets, else a loopback address
of its own), what its data directory
sits on (a lazyfs for power loss, a small filesystem for disk-full), and its clock (libfaketime).
Only what the chosen nemeses need is set up; what cannot be set up here is refused at the start
with the reason (`Unavailable`), never skipped silently.

The nemesis speaks in node keys (`g1/n2`); this module turns them into hosts, mounts and clock
files. At the end, `teardown` writes the lazyfs caches through (what a running machine's page
cache would have done), unmounts everything and leaves every node's files in its data directory
inside the run directory, where the Spark audit reads them.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from chaos import clock_fault as clock
from chaos import cpu_fault, disk, lazyfs, netns
from chaos.deployment import Deployment
from chaos.placement import host_addresser, loopback_addresser, place, shape
from cluster.topology import Topology
from raftmq.errors import FaultUnavailable, RaftmqError

NETWORK_NEMESES = ("partition", "packet", "membership-partition")
DISK_BYTES = 64 * 2**20  # the disk-full nemesis's filesystem per node: room for a run, quickly filled


class Unavailable(FaultUnavailable):
    """A nemesis needs something this machine cannot give (root, FUSE, namespaces, libfaketime)."""


def requirements(nemeses: Iterable[str]) -> list[str]:
    """Why the chosen nemeses cannot run here (empty: they can)."""
    chosen = set(nemeses)
    problems = []
    checks: tuple[tuple[str, Callable[[], str | None]], ...] = (
        ("partition", netns.available), ("membership-partition", netns.available),
        ("packet", functools.partial(netns.available, packet_faults=True)),
        ("power-loss", lazyfs.available), ("clock", clock.available), ("disk-full", disk.available),
        ("starve", cpu_fault.usable))
    for nemesis, check in checks:
        reason = check() if nemesis in chosen else None
        if reason is not None:
            problems.append(f"{nemesis}: {reason}")
    return problems


class Environment:
    def __init__(self, run_dir: Path, nemeses: Iterable[str]) -> None:
        self.run_dir = run_dir
        self.nemeses = frozenset(nemeses)
        self.network: netns.Network | None = None
        self.hosts: dict[str, str] = {}  # node key -> network host
        self.lazy: dict[str, lazyfs.LazyFS] = {}
        self.disks: dict[str, disk.SmallDisk] = {}
        self.clocks: dict[str, clock.ClockControl] = {}
        self.deployment: Deployment | None = None
        self._set_aside = 0

    # -- building ---------------------------------------------------------------------------

    def place(self, source: Path) -> Topology:
        """The topology at `source`, its nodes moved to hosts of their own (in the run directory)."""
        problems = requirements(self.nemeses)
        if problems:
            raise Unavailable("; ".join(problems))
        sizes = shape(source)
        if self.nemeses & set(NETWORK_NEMESES):
            self.network = netns.Network("c", sum(sizes))
            self.network.create()
            hosts, i = [], 0
            for size in sizes:
                hosts.append([self.network.address(h) for h in self.network.hosts[i:i + size]])
                i += size
            return place(source, self.run_dir, host_addresser(hosts), password=secrets.token_hex(16))
        return place(source, self.run_dir, loopback_addresser())

    def prepare(self, deployment: Deployment) -> None:
        """Give each node its host, data directory and clock before it first starts."""
        self.deployment = deployment
        for i, (key, node) in enumerate(deployment.nodes.items()):
            name = key.replace("/", "-")
            if self.network is not None:
                self.hosts[key] = self.network.hosts[i]
                node.prefix = tuple(self.network.exec_prefix(self.hosts[key]))
            data = node.member_dir
            if "disk-full" in self.nemeses:
                small = disk.SmallDisk(self.run_dir / "disks" / name, DISK_BYTES)
                small.mount()
                self.disks[key] = small
            if "power-loss" in self.nemeses:
                backing = ((self.disks[key].mountpoint / "backing") if key in self.disks
                           else self.run_dir / "lazyfs" / name)
                fs = lazyfs.LazyFS(backing, data, self.run_dir / "logs" / f"lazyfs-{name}.log")
                fs.mount()
                self.lazy[key] = fs
            elif key in self.disks:
                data.parent.mkdir(parents=True, exist_ok=True)
                if data.exists():
                    data.rmdir()
                data.symlink_to(self.disks[key].mountpoint)
            if "clock" in self.nemeses:
                control = clock.ClockControl(self.run_dir / "clocks" / name)
                self.clocks[key] = control
                node.env = control.environ()

    def teardown(self) -> None:
        """After the nodes stopped: write caches through, unmount, leave the files in place."""
        if "starve" in self.nemeses:
            cpu_fault.clear_stale()  # a starved node that died before its heal left its cgroup
        if self.network is not None:
            self.network.destroy()
            self.network = None
        for key, fs in self.lazy.items():
            try:
                fs.flush()
            except (OSError, RaftmqError):
                pass  # a dead lazyfs lost its cache: what the backing directory holds is the truth
            fs.unmount()
            self._pull(fs.backing, fs.mountpoint)
        self.lazy.clear()
        for key, small in self.disks.items():
            data = self._node_dir(key)
            if data.is_symlink():
                data.unlink()
                self._pull(small.mountpoint, data)
            small.unmount()
        self.disks.clear()
        for key, control in self.clocks.items():
            control.reset()
            if self.deployment is not None:
                for pid in self.deployment.nodes[key].pids:  # libfaketime's files of killed processes
                    with contextlib.suppress(RaftmqError):
                        clock.remove_leftovers(pid)
        self.clocks.clear()

    @staticmethod
    def _pull(source: Path, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            for item in source.iterdir():
                if item.name != "backing":
                    shutil.move(str(item), str(target / item.name))

    def _node_dir(self, key: str) -> Path:
        assert self.deployment is not None
        return self.deployment.nodes[key].member_dir

    # -- what the nemesis does ----------------------------------------------------------------

    def cut(self, grudge: Mapping[str, Iterable[str]]) -> None:
        if self.network is None:
            raise Unavailable("partitions need the nodes in network namespaces")
        self.network.cut({self.hosts[a]: frozenset(self.hosts[b] for b in dropped) for a, dropped in grudge.items()})

    def heal_network(self) -> None:
        if self.network is not None:
            self.network.heal()

    def degrade(self, key: str, params: Mapping[str, Any]) -> None:
        if self.network is None:
            raise Unavailable("packet faults need the nodes in network namespaces")
        self.network.degrade(self.hosts[key], **params)

    def restore_packets(self) -> None:
        if self.network is not None:
            self.network.restore_all()

    def lose_unsynced(self, key: str) -> int:
        return self.lazy[key].lose_unsynced()

    def change_clock(self, key: str, change: Mapping[str, Any]) -> None:
        control = self.clocks[key]
        if change["mode"] == "skew":
            control.skew(float(change["seconds"]))
        else:
            control.jump(float(change["seconds"]))

    def reset_clock(self, key: str) -> None:
        self.clocks[key].reset()

    def fill_disk(self, key: str) -> int:
        return self.disks[key].fill()

    def free_disk(self, key: str) -> None:
        self.disks[key].free()

    def set_aside(self, key: str) -> Path:
        """Move a node's files out of its data directory (kept for the audit) so it starts empty
        and resyncs from its peers: what an operator does with a member whose files are damaged."""
        data = self._node_dir(key)
        self._set_aside += 1
        aside = self.run_dir / "set-aside" / f"{key.replace('/', '-')}.{self._set_aside}"
        self._pull(data, aside)
        return aside

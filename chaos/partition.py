"""Network partitions between a group's members: iptables DROP rules between the members'
own loopback addresses (every node listens on, and sends its Raft traffic from, an address of
its own: 127.0.10.x in the runs `chaos` sets up), so faults hit real packets while clients,
which connect from elsewhere, still reach every side. Needs root and iptables.

Rules are inserted into INPUT with a comment naming the run, and removed at heal; `clear`
removes any left behind by a harness that died.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from raftmq.errors import RaftmqError

COMMENT = "raftmq-chaos"


class PartitionUnavailable(RaftmqError):
    """No iptables, not root, or nodes that share an address."""


def _iptables() -> str:
    path = shutil.which("iptables")
    if path is None:
        raise PartitionUnavailable("the partition nemesis needs iptables (apt-get install -y iptables) and root")
    return path


def rules_for(sides: Sequence[Sequence[str]]) -> list[list[str]]:
    """DROP rules cutting every address of one side off from every address of the others."""
    rules = []
    for i, side in enumerate(sides):
        for j, other in enumerate(sides):
            if i != j:
                for a in side:
                    for b in other:
                        rules.append(["INPUT", "-s", f"{a}/32", "-d", f"{b}/32", "-m", "comment", "--comment", COMMENT,
                                      "-j", "DROP"])
    return rules


class Partition:
    def __init__(self) -> None:
        self._added: list[list[str]] = []

    def cut(self, sides: Sequence[Sequence[str]]) -> None:
        addresses = [a for side in sides for a in side]
        if len(set(addresses)) != len(addresses):
            raise PartitionUnavailable(f"nodes share an address ({addresses}): a partition needs one address per node")
        iptables = _iptables()
        for rule in rules_for(sides):
            result = subprocess.run([iptables, "-w", "-I", *rule], capture_output=True, text=True, timeout=10)
            if result.returncode != 0:
                self.heal()
                raise PartitionUnavailable(f"iptables refused a rule: {result.stderr.strip()}")
            self._added.append(rule)

    def heal(self) -> None:
        if not self._added:
            return
        iptables = _iptables()
        for rule in self._added:
            subprocess.run([iptables, "-w", "-D", *rule], capture_output=True, timeout=10)
        self._added = []


def clear() -> int:
    """Remove every rule a chaos run added (by its comment); how many there were."""
    iptables = shutil.which("iptables")
    if iptables is None:
        return 0
    listed = subprocess.run([iptables, "-w", "-S", "INPUT"], capture_output=True, text=True, timeout=10).stdout
    removed = 0
    for line in listed.splitlines():
        if COMMENT in line and line.startswith("-A INPUT "):
            subprocess.run([iptables, "-w", "-D", *line.split()[1:]], capture_output=True, timeout=10)
            removed += 1
    return removed

"""The cluster under test: every node a real process started in the run directory (so its
journals and snapshots end up there), found, killed, paused and restarted by pid, never by
name. Built from a topology (a preset, a topology file or a group file; cluster.topology)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.topology import Topology
from raftmq import processes
from raftmq.errors import ProcessNotReady

READY_LINE = "raftmq node listening on "
READY_TIMEOUT_SECONDS = 30.0
# How a node starts: the installed raftmq. A run may name another command that takes the same
# arguments (tests/helpers/unsafe_node.py: a node with a planted bug, for the harness's own test).
NODE_COMMAND = (sys.executable, "-m", "raftmq", "node")


@dataclass
class NodeHandle:
    group: str
    id: str
    client: str
    admin: str
    mqtt: str | None  # its MQTT listener (None: it has none)
    argv: tuple[str, ...]
    logs: Path
    member_dir: Path  # its journals and snapshots (absolute)
    prefix: tuple[str, ...] = ()  # run it through this (e.g. `ip netns exec NS`: the program keeps the pid)
    env: dict[str, str] | None = None  # its whole environment (None: the harness's), e.g. libfaketime's
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)  # every incarnation's, for what a killed process leaves behind
    paused: bool = False
    starts: int = 0

    @property
    def log(self) -> Path:
        """This incarnation's output: one file per start, so each start waits for its own line."""
        return self.logs / f"{self.group}-{self.id}.{self.starts}.log"

    @property
    def key(self) -> str:
        return f"{self.group}/{self.id}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Deployment:
    def __init__(self, topology: Topology, workdir: Path, node_command: tuple[str, ...] = NODE_COMMAND) -> None:
        self.topology = topology
        self.workdir = workdir
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.nodes: dict[str, NodeHandle] = {}
        for group, member in topology.members():
            if group.generated_text is not None and not group.config_path.exists():
                group.config_path.parent.mkdir(parents=True, exist_ok=True)
                group.config_path.write_text(group.generated_text, encoding="utf-8")
            argv = (*node_command, "--config", str(group.config_path.resolve()), "--node", member.id)
            if topology.cluster_connections and topology.source is not None:
                argv += ("--topology", str(topology.source.resolve()))
            member_dir = workdir / group.config.member_dir(member.id)
            handle = NodeHandle(group.name, member.id, member.client, member.admin or "", member.mqtt, argv,
                                workdir / "logs", member_dir)
            self.nodes[handle.key] = handle

    # -- processes ------------------------------------------------------------------------------

    def start(self, keys: list[str] | None = None, wait: bool = True) -> None:
        chosen = [self.nodes[k] for k in keys] if keys is not None else list(self.nodes.values())
        for node in chosen:
            if node.alive:
                continue
            node.starts += 1
            node.member_dir.mkdir(parents=True, exist_ok=True)
            node.proc = processes.spawn(node.prefix + node.argv, node.log, cwd=self.workdir, new_session=True,
                                        env=node.env)
            node.pids.append(node.proc.pid)
            node.paused = False
        if wait:
            for node in chosen:
                assert node.proc is not None
                processes.wait_for_line(node.proc, node.log, READY_LINE, READY_TIMEOUT_SECONDS)

    def try_start(self, key: str) -> str | None:
        """Start one node and wait for it; None when it is up, else its last words (it exited or
        never became ready: a member refusing damaged files says so and exits)."""
        try:
            self.start([key], wait=True)
        except ProcessNotReady as exc:
            self.kill(key)
            return str(exc)
        return None

    def kill(self, key: str) -> None:
        node = self.nodes[key]
        if node.proc is not None:
            processes.kill(node.proc)  # SIGCONT first: a paused process dies at once
        node.paused = False

    def terminate(self, key: str, grace: float = 15.0) -> bool:
        """SIGTERM, as an operator's restart does (a leader hands leadership over first); SIGKILL
        past `grace` seconds. True when it stopped within the grace."""
        node = self.nodes[key]
        if not node.alive or node.proc is None:
            return True
        processes.send_signal(node.proc.pid, signal.SIGTERM)
        try:
            node.proc.wait(timeout=grace)
            return True
        except subprocess.TimeoutExpired:
            self.kill(key)
            return False

    def pid(self, key: str) -> int:
        """The running process of `key` (RuntimeError when it is not running)."""
        node = self.nodes[key]
        if not node.alive or node.proc is None:
            raise RuntimeError(f"{key} is not running")
        return node.proc.pid

    def pause(self, key: str) -> None:
        node = self.nodes[key]
        if node.alive and node.proc is not None and processes.send_signal(node.proc.pid, signal.SIGSTOP):
            node.paused = True

    def resume(self, key: str) -> None:
        node = self.nodes[key]
        if node.proc is not None and node.paused:
            processes.send_signal(node.proc.pid, signal.SIGCONT)
        node.paused = False

    def stop(self) -> None:
        for key in self.nodes:
            self.resume(key)
            self.kill(key)

    # -- observation ------------------------------------------------------------------------------

    def status(self, key: str, timeout: float = 1.0) -> dict[str, Any] | None:
        node = self.nodes[key]
        if not node.alive or node.paused or not node.admin:
            return None
        try:
            with urllib.request.urlopen(f"http://{node.admin}/status", timeout=timeout) as response:
                status: dict[str, Any] = json.load(response)
                return status
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def leader(self, group: str, timeout: float = 5.0) -> str | None:
        """The key of the node of `group` that says it leads (None when none does in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for key, node in self.nodes.items():
                if node.group == group:
                    status = self.status(key, timeout=0.5)
                    if status and status.get("role") == "leader":
                        return key
            time.sleep(0.05)
        return None

    def address(self, key: str) -> str:
        """The host a node listens on (and, in a group, sends its Raft traffic from)."""
        return self.nodes[key].client.rsplit(":", 1)[0]

    def groups(self) -> list[str]:
        return [spec.name for spec in self.topology.groups]

    def members(self, group: str) -> list[str]:
        return [key for key, node in self.nodes.items() if node.group == group]

    def url(self, group: str) -> str:
        return "failover:(" + ",".join(f"stomp://{self.nodes[k].client}" for k in self.members(group)) + ")"

    def mqtt(self, group: str) -> tuple[str, ...]:
        """Each member's MQTT address, in the order of `url`'s members ("" where a member has none)."""
        return tuple(self.nodes[k].mqtt or "" for k in self.members(group))

"""Start, find and stop the node processes of a topology.

Each member runs as `python -m raftmq node --config GROUP.toml --node ID` in its own session
(a Ctrl-C in the terminal reaches `raftmq up` only, which then stops the nodes itself), with
stdout and stderr in `<member data dir>/node.log`. The state file (`<state dir>/cluster.json`)
records every node's pid, argv and start time: `raftmq down` signals a pid only while
/proc/<pid> still shows that very process, never by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from raftmq.config import split_address
from raftmq.errors import RaftmqError
from raftmq.ops.status_view import NodeAddress, collect_status
from raftmq.ops.topology import Topology

STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
STATE_VERSION = 1
NODE_LOG = "node.log"
UP_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1


class ClusterError(RaftmqError):
    """`up` / `down` cannot proceed; the message is one line naming the problem."""


@dataclass(frozen=True, slots=True)
class NodeProcess:
    group: str
    id: str
    client: str
    raft: str
    admin: str
    pid: int
    start_time: int  # /proc/<pid>/stat field 22: tells a reused pid from ours
    argv: tuple[str, ...]
    log: str

    def address(self) -> NodeAddress:
        return NodeAddress(self.group, self.id, self.client, self.admin, self.pid)


@dataclass(frozen=True, slots=True)
class ClusterState:
    topology: str
    state_dir: str
    nodes: tuple[NodeProcess, ...]
    launcher_pid: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "topology": self.topology, "state_dir": self.state_dir,
                "launcher_pid": self.launcher_pid, "nodes": [asdict(node) for node in self.nodes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterState:
        nodes = tuple(NodeProcess(**{**node, "argv": tuple(node["argv"])}) for node in data["nodes"])
        return cls(data["topology"], data["state_dir"], nodes, data.get("launcher_pid", 0))


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def read_state(state_dir: Path) -> ClusterState | None:
    path = state_path(state_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"{path}: unreadable cluster state ({exc}); remove it once no node of that cluster runs") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        raise ClusterError(f"{path}: not a raftmq cluster state file (version {STATE_VERSION})")
    try:
        return ClusterState.from_json(data)
    except (KeyError, TypeError) as exc:
        raise ClusterError(f"{path}: malformed cluster state ({exc})") from None


def write_state(state: ClusterState) -> Path:
    path = state_path(Path(state.state_dir))
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)
    return path


def remove_state(state_dir: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        state_path(state_dir).unlink()


@contextlib.contextmanager
def cluster_lock(state_dir: Path) -> Iterator[None]:
    """Two `up` (or `up` and `down`) at once on one state directory: the second one fails."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        handle = open(state_dir / LOCK_FILE, "a+b")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise ClusterError(f"{state_dir}: cannot create the cluster's data directory ({exc.strerror or exc})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterError(f"{state_dir}: another raftmq up/down is working on this cluster") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- process identity --------------------------------------------------------------------------


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot, or None when there is no such live process (a
    zombie counts as gone: it has exited, only its exit status waits to be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_our_node(node: NodeProcess) -> bool:
    """True while `node.pid` is still the process we started (same argv, same start time)."""
    if process_start_time(node.pid) != node.start_time:
        return False
    try:
        cmdline = Path(f"/proc/{node.pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return tuple(part.decode(errors="replace") for part in cmdline.split(b"\0") if part) == node.argv


def running_nodes(state: ClusterState) -> list[NodeProcess]:
    return [node for node in state.nodes if is_our_node(node)]


# -- starting ---------------------------------------------------------------------------------


def check_ports_free(topology: Topology) -> None:
    """Bind each address once (as the node will); the first one taken fails, by name."""
    for group, member in topology.members():
        for kind in ("client", "raft", "admin"):
            address = getattr(member, kind)
            host, port = split_address(address)
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
                # Like the nodes' listeners: a closed connection's TIME_WAIT does not block us.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((host, port))
                except OSError as exc:
                    raise ClusterError(f"{group.name}/{member.id}: {kind} address {address} is not available ({exc.strerror or exc})") from None


def launch(topology: Topology, python: str = sys.executable) -> tuple[ClusterState, dict[int, subprocess.Popen[bytes]]]:
    """Start every member; write the state file. Returns the state and our child processes.
    On any failure the members already started are stopped before the error propagates."""
    for group in topology.groups:
        if group.generated_text is not None:
            group.config_path.parent.mkdir(parents=True, exist_ok=True)
            group.config_path.write_text(group.generated_text, encoding="utf-8")
    started: list[NodeProcess] = []
    children: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for group, member in topology.members():
            member_dir = group.config.member_dir(member.id).resolve()
            try:
                member_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ClusterError(f"{group.name}/{member.id}: cannot create data directory {member_dir} ({exc.strerror or exc})") from None
            argv = (python, "-m", "raftmq", "node", "--config", str(group.config_path), "--node", member.id)
            log_path = member_dir / NODE_LOG
            with open(log_path, "ab") as log:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            children[process.pid] = process
            start_time = process_start_time(process.pid)
            started.append(NodeProcess(group.name, member.id, member.client, member.raft, member.admin or "",
                                       process.pid, start_time or 0, argv, str(log_path)))
        state = ClusterState(topology.name, str(topology.state_dir), tuple(started), os.getpid())
        write_state(state)
    except BaseException:
        stop_nodes(ClusterState(topology.name, str(topology.state_dir), tuple(started)), children, grace=2.0)
        raise
    return state, children


def wait_until_up(
    state: ClusterState,
    children: dict[int, subprocess.Popen[bytes]] | None = None,
    timeout: float = UP_TIMEOUT_SECONDS,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Poll every node's /status until each group has a leader; return that summary.
    A node that exits meanwhile, or the deadline, raises ClusterError."""
    deadline = time.monotonic() + timeout
    addresses = [node.address() for node in state.nodes]
    while True:
        for node in state.nodes:
            child = children.get(node.pid) if children else None
            exited = child.poll() is not None if child is not None else not is_our_node(node)
            if exited:
                raise ClusterError(f"{node.group}/{node.id} exited while starting: {last_log_line(Path(node.log))}")
        summary = collect_status(addresses)
        if on_poll is not None:
            on_poll(summary)
        if all(group["leader"] is not None for group in summary["groups"]):
            return summary
        if time.monotonic() >= deadline:
            waiting = ", ".join(group["name"] for group in summary["groups"] if group["leader"] is None)
            raise ClusterError(f"no leader elected within {timeout:g} s in group(s) {waiting}; see the node.log files under {state.state_dir}")
        time.sleep(POLL_SECONDS)


def last_log_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"(no log at {path})"
    return lines[-1].strip() if lines else f"(empty log {path})"


# -- stopping ---------------------------------------------------------------------------------


def stop_nodes(
    state: ClusterState,
    children: dict[int, subprocess.Popen[bytes]] | None = None,
    grace: float = STOP_GRACE_SECONDS,
) -> list[NodeProcess]:
    """SIGTERM every node still ours (a leader hands leadership over itself), wait up to
    `grace` seconds, then SIGKILL what is left. Returns the nodes that needed SIGKILL."""
    children = children or {}

    def alive(node: NodeProcess) -> bool:
        child = children.get(node.pid)
        if child is not None:
            return child.poll() is None  # also reaps our own exited children
        return is_our_node(node)

    remaining = [node for node in state.nodes if alive(node)]
    for node in remaining:
        _signal(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while remaining and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        remaining = [node for node in remaining if alive(node)]
    killed = [node for node in remaining if alive(node)]
    for node in killed:
        _signal(node.pid, signal.SIGKILL)
    for node in killed:
        child = children.get(node.pid)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=grace)
        else:
            _wait_gone(node, grace)
    return killed


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(node: NodeProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while is_our_node(node) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)

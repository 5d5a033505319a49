"""Start, find and stop the node processes of a topology.

Each member runs as `python -m raftmq node --config GROUP.toml --node ID` in its own session
(a Ctrl-C in the terminal reaches `raftmq up` only, which then stops the nodes itself), with
stdout and stderr in `<member data dir>/node.log`. The state file (`<state dir>/cluster.json`)
records every node's pid, argv and start time, and the same of the launcher (the attached
`raftmq up`, or the supervisor a detached one leaves behind, see raftmq.ops.supervisor):
`raftmq down` signals a pid only while /proc/<pid> still shows that very process, never by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cluster.topology import PRESETS, Topology, preset_path
from raftmq.config import split_address
from raftmq.errors import ConfigError, DeploymentError
from raftmq.ops.status_view import NodeAddress, collect_status
from raftmq.processes import bind_error, is_same_process, own_identity, process_start_time, send_signal, spawn

STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
STATE_VERSION = 1
NODE_LOG = "node.log"
UP_TIMEOUT_SECONDS = 30.0
STOP_GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1
# How long `down` waits for a launcher it had to SIGKILL to be gone.
KILL_WAIT_SECONDS = 5.0
RELEASE_SIGNAL = signal.SIGUSR1

# NodeProcess.state
RUNNING = "running"
RESTARTING = "restarting"  # exited; the supervisor starts it again after a back-off
DOWN = "down"  # exited, not restarted (restart = "never", or a clean exit)
GAVE_UP = "gave-up"  # exited once more after its restart limit


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
    restarts: int = 0
    state: str = RUNNING
    last_exit: str | None = None  # how it last ended ("killed by SIGKILL at 12:00:01"), for status
    mqtt: str | None = None  # its MQTT address, if it has one

    def address(self) -> NodeAddress:
        return NodeAddress(self.group, self.id, self.client, self.admin, self.pid, self.restarts, self.last_exit,
                           self.mqtt)


@dataclass(frozen=True, slots=True)
class DeploymentState:
    topology: str
    state_dir: str
    nodes: tuple[NodeProcess, ...]
    launcher_pid: int = 0
    launcher_start_time: int = 0
    launcher_argv: tuple[str, ...] = ()
    detached: bool = False  # the launcher is a supervisor process (`up --detach`)
    ready: bool = False  # every group had a leader (a detached `up` waits for this)
    restart: str = "never"  # the restart policy's mode, for status
    # The options of `raftmq up` that name the topology (`topology_selection`): how the other
    # commands find it without options. None: a state file written before it was recorded.
    selection: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "topology": self.topology, "state_dir": self.state_dir,
                "launcher_pid": self.launcher_pid, "launcher_start_time": self.launcher_start_time,
                "launcher_argv": list(self.launcher_argv), "detached": self.detached, "ready": self.ready,
                "restart": self.restart, "selection": None if self.selection is None else list(self.selection),
                "nodes": [asdict(node) for node in self.nodes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeploymentState:
        nodes = tuple(NodeProcess(**{**node, "argv": tuple(node["argv"])}) for node in data["nodes"])
        selection = data.get("selection")
        return cls(data["topology"], data["state_dir"], nodes, data.get("launcher_pid", 0),
                   data.get("launcher_start_time", 0), tuple(data.get("launcher_argv", ())),
                   bool(data.get("detached", False)), bool(data.get("ready", False)), data.get("restart", "never"),
                   None if selection is None else tuple(str(part) for part in selection))

    def with_node(self, node: NodeProcess) -> DeploymentState:
        return dataclasses.replace(self, nodes=(*self.nodes, node))

    def without_node(self, key: tuple[str, str]) -> DeploymentState:
        return dataclasses.replace(self, nodes=tuple(n for n in self.nodes if (n.group, n.id) != key))

    def replace_node(self, node: NodeProcess) -> DeploymentState:
        return dataclasses.replace(self, nodes=tuple(node if (n.group, n.id) == (node.group, node.id) else n
                                                     for n in self.nodes))


def topology_selection(topology: Topology) -> tuple[str, ...]:
    """The options of `raftmq up` that name `topology`: () for the built-in default,
    ("--preset", NAME) for a preset, else ("--config", ABSOLUTE PATH)."""
    if topology.source is None:
        return ()
    source = Path(topology.source).resolve()
    with contextlib.suppress(ConfigError):  # a preset not on disk (a zip) is not this file
        if topology.name in PRESETS and source == preset_path(topology.name).resolve():
            return ("--preset", topology.name)
    return ("--config", str(source))


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def read_state(state_dir: Path) -> DeploymentState | None:
    path = state_path(state_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DeploymentError(f"{path}: unreadable cluster state ({exc}); "
                              "remove it once no node of that cluster runs") from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        raise DeploymentError(f"{path}: not a raftmq cluster state file (version {STATE_VERSION})")
    try:
        return DeploymentState.from_json(data)
    except (KeyError, TypeError) as exc:
        raise DeploymentError(f"{path}: malformed cluster state ({exc})") from None


def write_state(state: DeploymentState) -> Path:
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
        raise DeploymentError(f"{state_dir}: cannot create the cluster's data directory "
                              f"({exc.strerror or exc})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DeploymentError(f"{state_dir}: another raftmq up/down is working on this cluster") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- process identity --------------------------------------------------------------------------


def is_our_node(node: NodeProcess) -> bool:
    return is_same_process(node.pid, node.start_time, node.argv)


def launcher_alive(state: DeploymentState) -> bool:
    """The `raftmq up` (or its detached supervisor) that owns the nodes still runs."""
    return is_same_process(state.launcher_pid, state.launcher_start_time, state.launcher_argv)


def running_nodes(state: DeploymentState) -> list[NodeProcess]:
    return [node for node in state.nodes if is_our_node(node)]


# -- starting ---------------------------------------------------------------------------------


def check_ports_free(topology: Topology) -> None:
    """Bind each address once (as the node will); the first one taken fails, by name."""
    for group, member in topology.members():
        for kind in ("client", "raft", "admin"):
            check_port_free(getattr(member, kind), f"{group.name}/{member.id}: {kind} address")


def check_port_free(address: str, label: str) -> None:
    """DeploymentError `<label> <address> is not available (why)` unless it can be bound."""
    error = bind_error(*split_address(address))  # as the nodes' listeners bind: TIME_WAIT does not block
    if error is not None:
        raise DeploymentError(f"{label} {address} is not available ({error.strerror or error})")


def check_data_dirs(topology: Topology) -> None:
    """Every directory `up` writes (the state directory, each member's) is a directory we can
    write, or can be created (missing parents too, like `mkdir -p`): else one line naming the
    node, the directory and what is wrong. Creates nothing."""
    _check_usable_dir(topology.state_dir, f"cluster {topology.name!r}: state directory")
    for group, member in topology.members():
        _check_usable_dir(group.config.member_dir(member.id).resolve(), f"{group.name}/{member.id}: data directory")


def _check_usable_dir(path: Path, label: str) -> None:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        culprit = "it" if existing == path else str(existing)
        raise DeploymentError(f"{label} {path} is unusable: {culprit} is a file, not a directory")
    probe = existing / f".raftmq-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if existing == path:
            raise DeploymentError(f"{label} {path} is not writable ({reason})") from None
        raise DeploymentError(f"{label} {path} cannot be created: {existing}, its nearest existing parent, "
                              f"is not writable ({reason})") from None


def start_node(argv: tuple[str, ...], log_path: Path, note: str | None = None) -> subprocess.Popen[bytes]:
    """One member process in its own session, stdout and stderr appended to `log_path`."""
    return spawn(argv, log_path, append=True, note=None if note is None else f"raftmq up: {note}", new_session=True)


def launch(
    topology: Topology, python: str = sys.executable, detached: bool = False
) -> tuple[DeploymentState, dict[int, subprocess.Popen[bytes]]]:
    """Start every member; write the state file, with this process as the launcher. Returns
    the state and our child processes. On any failure the members already started are
    stopped before the error propagates."""
    for group in topology.groups:
        group.config.require_password()  # every member started here needs its group's
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
                raise DeploymentError(f"{group.name}/{member.id}: cannot create data directory {member_dir} "
                                      f"({exc.strerror or exc})") from None
            argv: tuple[str, ...] = (python, "-m", "raftmq", "node", "--config", str(group.config_path),
                                     "--node", member.id)
            if topology.cluster_connections and topology.source is not None:
                argv += ("--topology", str(topology.source.resolve()))  # the group's place in the cluster
            log_path = member_dir / NODE_LOG
            process = start_node(argv, log_path)
            children[process.pid] = process
            start_time = process_start_time(process.pid)
            started.append(NodeProcess(group.name, member.id, member.client, member.raft,
                                       group.config.admin_endpoint(member) or "",
                                       process.pid, start_time or 0, argv, str(log_path), mqtt=member.mqtt))
        pid, start_time, own_argv = own_identity()
        state = DeploymentState(topology.name, str(topology.state_dir), tuple(started), pid, start_time, own_argv,
                                detached, False, topology.restart.mode, topology_selection(topology))
        write_state(state)
    except BaseException:
        stop_nodes(DeploymentState(topology.name, str(topology.state_dir), tuple(started)), children, grace=2.0)
        raise
    return state, children


def wait_until_up(
    state: DeploymentState,
    children: dict[int, subprocess.Popen[bytes]] | None = None,
    timeout: float = UP_TIMEOUT_SECONDS,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
    collect: Callable[[list[NodeAddress]], dict[str, Any]] = collect_status,
) -> dict[str, Any]:
    """Poll every node's /status (`collect`) until every node answers and each group has a
    leader; return that summary. A leader alone is not enough: two nodes of three elect one
    while the third may still be failing to start. A node that exits meanwhile, or the
    deadline, raises DeploymentError."""
    deadline = time.monotonic() + timeout
    addresses = [node.address() for node in state.nodes]
    while True:
        for node in state.nodes:
            child = children.get(node.pid) if children else None
            exited = child.poll() is not None if child is not None else not is_our_node(node)
            if exited:
                raise DeploymentError(f"{node.group}/{node.id} exited while starting: {last_log_line(Path(node.log))}")
        summary = collect(addresses)
        if on_poll is not None:
            on_poll(summary)
        silent = [f"{group['name']}/{row['id']}" for group in summary["groups"] for row in group["nodes"]
                  if not row["up"]]
        leaderless = [group["name"] for group in summary["groups"] if group["leader"] is None]
        if not silent and not leaderless:
            return summary
        if time.monotonic() >= deadline:
            if leaderless:
                raise DeploymentError(f"no leader elected within {timeout:g} s in group(s) {', '.join(leaderless)}; "
                                      f"see the node.log files under {state.state_dir}")
            raise DeploymentError(f"{', '.join(silent)} did not answer within {timeout:g} s; "
                                  f"see the node.log files under {state.state_dir}")
        time.sleep(POLL_SECONDS)


def last_log_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return f"(no log at {path})"
    return lines[-1].strip() if lines else f"(empty log {path})"


# -- stopping ---------------------------------------------------------------------------------


def stop_launcher(state: DeploymentState, timeout: float) -> bool:
    """Ask the launcher to stop the cluster itself (SIGTERM): it is the nodes' parent, so it
    stops each one gracefully (leaders hand over) and reaps it before it exits; wait for that.
    Left to `down` instead, the nodes would be re-parented and, where PID 1 does not reap,
    linger as zombies. SIGKILL past `timeout` (then `down` stops what is left by pid). True
    when a launcher was running."""
    if not launcher_alive(state) or state.launcher_pid == os.getpid():
        return False
    send_signal(state.launcher_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while launcher_alive(state) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    if launcher_alive(state):
        send_signal(state.launcher_pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while launcher_alive(state) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
    return True


def stop_nodes(
    state: DeploymentState,
    children: dict[int, subprocess.Popen[bytes]] | None = None,
    grace: float = STOP_GRACE_SECONDS,
) -> list[NodeProcess]:
    """SIGTERM every node still ours (a leader hands leadership over itself), wait up to
    `grace` seconds, then SIGKILL what is left. Returns the nodes that needed SIGKILL."""
    return stop_running_nodes(state, children, grace)[1]


def stop_running_nodes(
    state: DeploymentState,
    children: dict[int, subprocess.Popen[bytes]] | None = None,
    grace: float = STOP_GRACE_SECONDS,
) -> tuple[list[NodeProcess], list[NodeProcess]]:
    """`stop_nodes`, returning (the nodes that were running and were stopped, those of them
    that needed SIGKILL): what `stopped_line` reports."""
    children = children or {}

    def alive(node: NodeProcess) -> bool:
        child = children.get(node.pid)
        if child is not None:
            return child.poll() is None  # also reaps our own exited children
        return is_our_node(node)

    running = [node for node in state.nodes if alive(node)]
    remaining = list(running)
    for node in remaining:
        send_signal(node.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while remaining and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        remaining = [node for node in remaining if alive(node)]
    killed = [node for node in remaining if alive(node)]
    for node in killed:
        send_signal(node.pid, signal.SIGKILL)
    for node in killed:
        child = children.get(node.pid)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=grace)
        else:
            _wait_gone(node, grace)
    return running, killed


def stopped_line(stopped: int, killed: int) -> str:
    """What `raftmq down` and a launcher that stops its cluster (an attached `raftmq up`, the
    detached supervisor) say: the nodes that were running and were stopped (one that had
    already exited, shown `down` by `raftmq status`, is not counted)."""
    return f"stopped {stopped} node(s)" + (f"; {killed} needed SIGKILL" if killed else "")


def _wait_gone(node: NodeProcess, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while is_our_node(node) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)

"""Watching the node processes of `raftmq up`: report a node that exits, restart it if the
topology asks for it (`[topology] restart = "on-failure"`), and keep the state file current.

The attached `raftmq up` runs a `Supervisor` under its live view. A detached one leaves a
supervisor process behind (`raftmq up --supervise`, its own session, output in
`<state dir>/supervisor.log`): it launches the nodes itself, so it is their parent and learns
each exit status, and `up --detach` returns once it has written `ready` to the state file.

Signals, to either kind of launcher:
- SIGINT / SIGTERM / SIGHUP: stop the cluster (each node gracefully), wait for every node (the
  launcher is their parent: it reaps them, none is left to be adopted) and exit. `raftmq down`
  sends SIGTERM and waits for the launcher to exit;
- SIGUSR1: exit at once and leave the nodes running (to whoever stops them by pid).

A node can also be restarted on request (`raftmq restart --rolling`, raftmq.ops.rolling): a
request file in the state directory names it; the supervisor stops it gracefully (SIGTERM: a
leader hands over first) and starts it again at once, whatever the restart policy, without
counting it against `max_restarts`.
A launcher that is killed outright leaves the nodes running; `down` still finds them in the
state file and stops them by verified pid.
"""

from __future__ import annotations

import collections
import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType

from cluster.topology import RESTART_ON_FAILURE, RestartPolicy
from raftmq.ops.launcher import (
    DOWN,
    GAVE_UP,
    RELEASE_SIGNAL,
    RESTARTING,
    RUNNING,
    DeploymentState,
    NodeProcess,
    is_our_node,
    last_log_line,
    start_node,
    write_state,
)
from raftmq.ops.rolling_requests import (
    JOIN,
    clear_member_request,
    clear_restart_request,
    member_requests,
    requested_restarts,
)
from raftmq.processes import process_start_time, send_signal

SUPERVISOR_LOG = "supervisor.log"
POLL_SECONDS = 0.2
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_HANDLED = (*STOP_SIGNALS, RELEASE_SIGNAL)

Report = Callable[[str], None]
NodeKey = tuple[str, str]


class Stop(KeyboardInterrupt):
    """SIGINT / SIGTERM / SIGHUP: stop the cluster (unwinds like Ctrl-C)."""


class Released(BaseException):
    """SIGUSR1 from `raftmq down`: leave the nodes running and exit; `down` stops them."""


# While a restart is half done (the process started, the state file not yet written), a
# signal is only noted here and acted on right after. Not a signal mask: the new node would
# inherit it and never see the SIGTERM that stops it.
_holding = False
_deferred: list[int] = []


def _raise_for(signum: int, _frame: FrameType | None) -> None:
    if _holding:
        _deferred.append(signum)
        return
    if signum == RELEASE_SIGNAL:
        raise Released()
    raise Stop(signal.Signals(signum).name)


@contextlib.contextmanager
def launcher_signals() -> Iterator[None]:
    """Turn the launcher's signals into `Stop` / `Released` for the duration."""
    previous = {sig: signal.signal(sig, _raise_for) for sig in _HANDLED}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Defer our signals to the end of the block: a restarted node must be in the state file
    before anything may unwind, or no one would ever stop it."""
    global _holding
    _holding = True
    try:
        yield
    finally:
        _holding = False
        if _deferred:
            signum = _deferred[0]
            _deferred.clear()
            _raise_for(signum, None)


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "exited (status unknown: not our child)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with status {returncode}"


class Supervisor:
    """Polls the nodes of `state` (our children where we have them), reports each exit with
    its status and the last line of the node's log, and restarts per `policy`:
    "on-failure" restarts a node that did not exit with status 0, after `policy.delay(n)`
    seconds (n: its restarts within the window), at most `max_restarts` times per window.
    Every change is written to the state file (`raftmq status` shows it)."""

    def __init__(
        self,
        state: DeploymentState,
        children: dict[int, subprocess.Popen[bytes]],
        policy: RestartPolicy,
        report: Report,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.children = children
        self.policy = policy
        self._report = report
        self._clock = clock
        self._recent: dict[NodeKey, collections.deque[float]] = {}
        self._due: dict[NodeKey, float] = {}
        self._requested: set[NodeKey] = set()  # stopped on request: started again at once
        self._leaving: set[NodeKey] = set()  # removed from its group: stopped for good

    @property
    def settled(self) -> bool:
        """Every node is down for good: nothing runs and no restart is due."""
        return all(node.state in (DOWN, GAVE_UP) for node in self.state.nodes)

    def poll(self) -> None:
        self._take_requests()
        self._take_member_requests()
        for node in self.state.nodes:
            if node.state == RUNNING:
                exited, code = self._exit_status(node)
                if exited:
                    self._exited(node, code)
            elif node.state == RESTARTING and self._clock() >= self._due[(node.group, node.id)]:
                self._restart(node)

    def _exit_status(self, node: NodeProcess) -> tuple[bool, int | None]:
        child = self.children.get(node.pid)
        if child is not None:
            code = child.poll()
            return code is not None, code
        return not is_our_node(node), None

    def _take_requests(self) -> None:
        state_dir = Path(self.state.state_dir)
        for key in requested_restarts(state_dir):
            node = next((n for n in self.state.nodes if (n.group, n.id) == key), None)
            if node is None or key in self._requested:
                continue
            self._requested.add(key)
            if node.state == RUNNING and self._exit_status(node)[0] is False:
                self._report(f"{node.group}/{node.id} (pid {node.pid}) restarting on request")
                send_signal(node.pid, signal.SIGTERM)
            else:  # not running: start it now
                self._due[key] = self._clock()
                self._update(replace(node, state=RESTARTING))

    def _take_member_requests(self) -> None:
        """A member joining its group is started (`raftmq group add-node`); one that left it
        is stopped gracefully and forgotten (`remove-node`)."""
        state_dir = Path(self.state.state_dir)
        for kind, key, spec in member_requests(state_dir):
            node = next((n for n in self.state.nodes if (n.group, n.id) == key), None)
            if kind == JOIN:
                if node is None:
                    self._join(key, spec)
                clear_member_request(state_dir, kind, key)
            elif node is None:
                clear_member_request(state_dir, kind, key)
            elif key not in self._leaving:
                self._leaving.add(key)
                if node.state == RUNNING and self._exit_status(node)[0] is False:
                    self._report(f"{node.group}/{node.id} (pid {node.pid}) left its group: stopping it")
                    send_signal(node.pid, signal.SIGTERM)
                else:
                    self._forget(node)

    def _join(self, key: NodeKey, spec: dict[str, object]) -> None:
        parts = spec.get("argv")
        argv = tuple(str(part) for part in parts) if isinstance(parts, list) else ()
        if not argv:
            self._report(f"{key[0]}/{key[1]}: a join request without a command; ignored")
            return
        log_path = Path(str(spec.get("log", "")))
        with signals_held():
            try:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                process = start_node(argv, log_path, "joined its group")
            except OSError as exc:
                self._report(f"{key[0]}/{key[1]}: cannot start it ({exc})")
                return
            self.children[process.pid] = process
            node = NodeProcess(key[0], key[1], str(spec.get("client", "")), str(spec.get("raft", "")),
                               str(spec.get("admin", "")),
                               process.pid, process_start_time(process.pid) or 0, argv, str(log_path),
                               mqtt=str(spec["mqtt"]) if spec.get("mqtt") else None)
            self.state = self.state.with_node(node)
            write_state(self.state)
        self._report(f"{key[0]}/{key[1]} joined its group: started as pid {process.pid}")

    def _forget(self, node: NodeProcess) -> None:
        key = (node.group, node.id)
        self._leaving.discard(key)
        self.state = self.state.without_node(key)
        write_state(self.state)
        clear_member_request(Path(self.state.state_dir), "leave", key)
        self._report(f"{node.group}/{node.id} left its group and is stopped")

    def _exited(self, node: NodeProcess, code: int | None) -> None:
        self.children.pop(node.pid, None)
        now = self._clock()
        key = (node.group, node.id)
        how = describe_exit(code)
        if key in self._leaving:
            self._forget(node)
            return
        last_exit = f"{how} at {time.strftime('%H:%M:%S')}"
        if key in self._requested:
            self._due[key] = now
            self._update(replace(node, state=RESTARTING, last_exit=f"{last_exit} (restart requested)"))
            self._report(f"{node.group}/{node.id} (pid {node.pid}) {how} on request; starting it again")
            return
        recent = self._recent.setdefault(key, collections.deque())
        while recent and recent[0] <= now - self.policy.window_s:
            recent.popleft()
        if self.policy.mode != RESTART_ON_FAILURE:
            state, decision = DOWN, "not restarted (restart = \"never\")"
        elif code == 0:
            state, decision = DOWN, "not restarted (it exited cleanly)"
        elif len(recent) >= self.policy.max_restarts:
            state = GAVE_UP
            decision = (f"not restarted again: {len(recent)} restart(s) within {self.policy.window_s:g} s "
                        f"reached max_restarts = {self.policy.max_restarts}")
        else:
            delay = self.policy.delay(len(recent))
            self._due[key] = now + delay
            state = RESTARTING
            decision = (f"restarting in {delay:g} s (restart {len(recent) + 1} of at most "
                        f"{self.policy.max_restarts} within {self.policy.window_s:g} s)")
        self._update(replace(node, state=state, last_exit=last_exit))
        self._report(f"{node.group}/{node.id} (pid {node.pid}) {how}; "
                     f"last log line: {last_log_line(Path(node.log))}; {decision}")

    def _restart(self, node: NodeProcess) -> None:
        key = (node.group, node.id)
        restarts = node.restarts + 1
        with signals_held():
            try:
                process = start_node(node.argv, Path(node.log), f"restart {restarts}")
            except OSError as exc:
                self._update(replace(node, state=GAVE_UP, last_exit=f"{node.last_exit}; restart failed: {exc}"))
                self._report(f"{node.group}/{node.id}: cannot restart it ({exc}); it stays down")
                return
            self.children[process.pid] = process
            if key in self._requested:  # not a failure: no count against max_restarts
                self._requested.discard(key)
                clear_restart_request(Path(self.state.state_dir), key)
            else:
                self._recent.setdefault(key, collections.deque()).append(self._clock())
            started = replace(node, pid=process.pid, start_time=process_start_time(process.pid) or 0,
                              restarts=restarts, state=RUNNING)
            self._update(started)
        self._report(f"{node.group}/{node.id} restarted as pid {process.pid} (restart {restarts})")

    def _update(self, node: NodeProcess) -> None:
        self.state = self.state.replace_node(node)
        write_state(self.state)


def timestamped(write: Callable[[str], None]) -> Report:
    return lambda line: write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}")

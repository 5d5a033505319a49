"""What `raftmq up` does after its checks: run the cluster attached (live view and supervisor
in this process), or start a detached supervisor process and wait until it reports the
cluster up; and the detached supervisor's own life (`raftmq up --supervise`).

See raftmq.ops.supervisor for the signals a launcher answers and how it restarts nodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from cluster.topology import Topology
from raftmq.errors import DeploymentError, RaftmqError
from raftmq.ops.launcher import (
    POLL_SECONDS,
    STOP_GRACE_SECONDS,
    DeploymentState,
    last_log_line,
    launch,
    read_state,
    remove_state,
    stop_nodes,
    stop_running_nodes,
    stopped_line,
    wait_until_up,
    write_state,
)
from raftmq.ops.status_view import collect_status, render_status
from raftmq.ops.supervisor import POLL_SECONDS as SUPERVISE_POLL_SECONDS
from raftmq.ops.supervisor import SUPERVISOR_LOG, Released, Stop, Supervisor, launcher_signals, timestamped

FAILED_PREFIX = "raftmq up failed: "
# Beyond --timeout, what a detached `up` allows its supervisor to start Python and the nodes.
SUPERVISOR_START_SLACK_SECONDS = 15.0
REFRESH_SECONDS = 1.0


# -- attached ----------------------------------------------------------------------------------


def run_attached(topology: Topology, state: DeploymentState, children: dict[int, subprocess.Popen[bytes]]) -> None:
    """The live view, with the supervisor reporting (and restarting) nodes above it, until
    Ctrl-C / SIGTERM (stop every node gracefully), SIGUSR1 from `raftmq down` (leave the nodes
    to it) or every node being down for good. Call within `launcher_signals()`."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 120)  # a log keeps whole tables

    def say(line: str) -> None:
        console.print(Text(line), soft_wrap=True)  # one line per event, however narrow the terminal

    supervisor = Supervisor(state, children, topology.restart, say)
    released = False

    def view() -> Any:
        return render_status(collect_status([node.address() for node in supervisor.state.nodes]))

    try:
        try:
            with Live(view(), console=console, auto_refresh=False) as live:
                refreshed = time.monotonic()
                while not supervisor.settled:
                    supervisor.poll()
                    if time.monotonic() - refreshed >= REFRESH_SECONDS:
                        live.update(view(), refresh=True)
                        refreshed = time.monotonic()
                    time.sleep(SUPERVISE_POLL_SECONDS)
        finally:
            if not console.is_terminal:
                console.line()  # Live leaves its last frame without a newline off a terminal
        say("every node has exited")
    except Released:
        released = True
        say("raftmq down is stopping the cluster; leaving the nodes to it")
    except KeyboardInterrupt:
        say("stopping the cluster (leaders hand over, then each node exits)...")
    finally:
        if not released:
            with launcher_signals_ignored():
                stopped, killed = stop_running_nodes(supervisor.state, supervisor.children)
                remove_state(topology.state_dir)
    if not released:
        say(stopped_line(len(stopped), len(killed)))


@contextlib.contextmanager
def launcher_signals_ignored() -> Iterator[None]:
    """A second Ctrl-C while the nodes stop must not leave some of them running."""
    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in sigs}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -- detached: the `up --detach` side ------------------------------------------------------------


def start_detached(
    topology: Topology, forwarded: list[str], timeout: float, python: str = sys.executable
) -> tuple[DeploymentState, dict[str, Any]]:
    """Start `raftmq up --supervise` (its own session, output in <state dir>/supervisor.log)
    and wait until it has written a ready state file; returns that state and a status summary.
    On failure every process it started is stopped and the state file removed."""
    log_path = topology.state_dir / SUPERVISOR_LOG
    argv = [python, "-m", "raftmq", "up", "--supervise", *forwarded, "--timeout", f"{timeout:g}"]
    with open(log_path, "ab") as log:
        supervisor = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
    try:
        deadline = time.monotonic() + timeout + SUPERVISOR_START_SLACK_SECONDS
        while True:
            code = supervisor.poll()
            if code is not None:
                raise DeploymentError(_failure(log_path, code))
            state = read_state(topology.state_dir)
            if state is not None and state.launcher_pid == supervisor.pid and state.ready:
                break
            if time.monotonic() >= deadline:
                raise DeploymentError(f"the supervisor (pid {supervisor.pid}) did not report the cluster up within "
                                   f"{timeout + SUPERVISOR_START_SLACK_SECONDS:g} s; see {log_path}")
            time.sleep(POLL_SECONDS)
        return state, collect_status([node.address() for node in state.nodes])
    except BaseException:
        _abandon(supervisor, topology.state_dir)
        raise


def _failure(log_path: Path, code: int) -> str:
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        if FAILED_PREFIX in line:
            return line.split(FAILED_PREFIX, 1)[1]
    return f"the supervisor exited with status {code}: {last_log_line(log_path)}"


def _abandon(supervisor: subprocess.Popen[bytes], state_dir: Path) -> None:
    """SIGTERM: the supervisor stops its nodes; past the grace, SIGKILL it and stop them here."""
    if supervisor.poll() is None:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout=STOP_GRACE_SECONDS + 5)
        except subprocess.TimeoutExpired:
            supervisor.kill()
            supervisor.wait(timeout=STOP_GRACE_SECONDS)
    state = read_state(state_dir)
    if state is not None:
        stop_nodes(state, grace=2.0)
        remove_state(state_dir)


# -- detached: the supervisor process -------------------------------------------------------------


def supervise_detached(topology: Topology, timeout: float) -> int:
    """`raftmq up --supervise`: launch the nodes, wait for leaders, write `ready`, then watch
    the nodes until told to stop (SIGTERM: stop them; SIGUSR1: leave them to `raftmq down`)
    or until every node is down for good. Returns the process's exit status."""
    report = timestamped(click.echo)
    with launcher_signals():
        try:
            state, children = launch(topology, detached=True)
        except (RaftmqError, OSError, Stop, Released) as exc:  # launch stopped what it started
            report(f"{FAILED_PREFIX}{exc}")
            return 1
        supervisor = Supervisor(state, children, topology.restart, report)
        try:
            try:
                wait_until_up(state, children, timeout)
            except DeploymentError as exc:
                report(f"{FAILED_PREFIX}{exc}")
                with launcher_signals_ignored():
                    stop_nodes(state, children)
                    remove_state(topology.state_dir)
                return 1
            supervisor.state = dataclasses.replace(supervisor.state, ready=True)
            write_state(supervisor.state)
            report(f"cluster {topology.name!r} is up: {len(state.nodes)} node(s), restart = {topology.restart.mode!r}")
            while not supervisor.settled:
                supervisor.poll()
                time.sleep(SUPERVISE_POLL_SECONDS)
            report("every node is down and none is due for a restart; the supervisor exits "
                   "(the state file stays for `raftmq status`; `raftmq down` clears it)")
            return 0
        except Released:
            report("raftmq down took over: leaving the nodes to it")
            return 0
        except Stop as stop:
            report(f"{stop}: stopping the cluster")
            with launcher_signals_ignored():
                stopped, killed = stop_running_nodes(supervisor.state, supervisor.children)
                remove_state(topology.state_dir)
            report(stopped_line(len(stopped), len(killed)))
            return 0

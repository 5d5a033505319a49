"""The supervisor's restart policy, on real (tiny) child processes and a clock the test moves:
reports, back-off, the restart limit and its window, clean exits, and the state file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.topology import RestartPolicy
from raftmq.ops import supervisor as supervisor_module
from raftmq.ops.launcher import (
    DOWN,
    GAVE_UP,
    RESTARTING,
    RUNNING,
    DeploymentState,
    NodeProcess,
    read_state,
    start_node,
    write_state,
)
from raftmq.ops.rolling_requests import (
    JOIN,
    LEAVE,
    member_requests,
    request_member,
    request_restart,
    requested_restarts,
)
from raftmq.ops.supervisor import Supervisor, describe_exit
from raftmq.processes import process_argv, process_start_time

pytestmark = pytest.mark.integration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """One fake node (a Python one-liner) under a Supervisor; every process is waited for."""

    def __init__(self, tmp_path: Path, script: str, policy: RestartPolicy) -> None:
        self.log = tmp_path / "a.log"
        argv = (sys.executable, "-c", script)
        process = start_node(argv, self.log)
        node = NodeProcess("g", "a", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", process.pid,
                           process_start_time(process.pid) or 0, argv, str(self.log))
        self.state_dir = tmp_path
        write_state(DeploymentState("t", str(tmp_path), (node,)))
        self.clock = Clock()
        self.lines: list[str] = []
        self.supervisor = Supervisor(read_state(tmp_path), {process.pid: process}, policy,  # type: ignore[arg-type]
                                     self.lines.append, self.clock)

    @property
    def node(self) -> NodeProcess:
        return self.supervisor.state.nodes[0]

    def wait_exit(self) -> None:
        child = self.supervisor.children.get(self.node.pid)
        if child is not None:  # else the poll that signalled it already saw it exit (and reaped it)
            child.wait(timeout=10)

    def poll(self) -> None:
        self.supervisor.poll()
        assert read_state(self.state_dir) == self.supervisor.state  # every change is written

    def close(self) -> None:
        for child in self.supervisor.children.values():
            if child.poll() is None:
                child.kill()
            child.wait(timeout=10)


@pytest.fixture
def rigs() -> list[Rig]:
    made: list[Rig] = []
    yield made
    for rig in made:
        rig.close()


FAILING = "print('boom: disk on fire', flush=True); raise SystemExit(3)"


def test_on_failure_backs_off_doubles_and_gives_up_at_the_limit(tmp_path: Path, rigs: list[Rig]) -> None:
    rig = Rig(tmp_path, FAILING, RestartPolicy("on-failure", max_restarts=2, window_s=60, backoff_ms=1000))
    rigs.append(rig)
    first_pid = rig.node.pid
    rig.wait_exit()
    rig.poll()
    assert rig.node.state == RESTARTING and rig.node.last_exit is not None
    assert rig.node.last_exit.startswith("exited with status 3 at ")
    assert rig.lines == [f"g/a (pid {first_pid}) exited with status 3; last log line: boom: disk on fire; "
                         "restarting in 1 s (restart 1 of at most 2 within 60 s)"]
    rig.clock.now += 0.9
    rig.poll()
    assert rig.node.pid == first_pid and len(rig.lines) == 1  # not yet
    rig.clock.now += 0.1
    rig.poll()
    assert rig.node.state == RUNNING and rig.node.pid != first_pid and rig.node.restarts == 1
    assert rig.lines[-1] == f"g/a restarted as pid {rig.node.pid} (restart 1)"
    assert "--- raftmq up: restart 1 ---" in rig.log.read_text()  # the log says where each run begins

    rig.wait_exit()
    rig.poll()
    assert "restarting in 2 s (restart 2 of at most 2 within 60 s)" in rig.lines[-1]  # the back-off doubled
    rig.clock.now += 2
    rig.poll()
    assert rig.node.restarts == 2 and rig.node.state == RUNNING

    rig.wait_exit()
    rig.poll()
    assert rig.node.state == GAVE_UP and rig.supervisor.settled
    assert rig.lines[-1].endswith("not restarted again: 2 restart(s) within 60 s reached max_restarts = 2")
    rig.clock.now += 600
    rig.poll()
    assert rig.node.state == GAVE_UP and rig.node.restarts == 2  # giving up is final


def test_restarts_older_than_the_window_do_not_count(tmp_path: Path, rigs: list[Rig]) -> None:
    rig = Rig(tmp_path, FAILING, RestartPolicy("on-failure", max_restarts=1, window_s=10, backoff_ms=0))
    rigs.append(rig)
    rig.wait_exit()
    rig.poll()
    rig.poll()  # no back-off: restarted on the next poll
    assert rig.node.restarts == 1 and rig.node.state == RUNNING
    rig.wait_exit()
    rig.clock.now += 11  # that restart left the window
    rig.poll()
    assert rig.node.state == RESTARTING and "restart 1 of at most 1 within 10 s" in rig.lines[-1]
    rig.poll()
    assert rig.node.restarts == 2
    rig.wait_exit()
    rig.poll()  # within 10 s of the last one: the limit
    assert rig.node.state == GAVE_UP


def test_never_reports_the_signal_and_leaves_the_node_down(tmp_path: Path, rigs: list[Rig]) -> None:
    script = "import time; print('serving', flush=True); time.sleep(30)"
    rig = Rig(tmp_path, script, RestartPolicy("never"))
    rigs.append(rig)
    rig.poll()
    assert rig.node.state == RUNNING and rig.lines == []
    deadline = time.monotonic() + 10
    while "serving" not in rig.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = rig.node.pid
    os.kill(pid, signal.SIGKILL)
    rig.wait_exit()
    rig.poll()
    assert rig.node.state == DOWN and rig.supervisor.settled
    assert rig.lines == [f"g/a (pid {pid}) was killed by SIGKILL; last log line: serving; "
                         "not restarted (restart = \"never\")"]
    assert rig.node.last_exit is not None and rig.node.last_exit.startswith("was killed by SIGKILL at ")


def test_on_failure_leaves_a_clean_exit_alone(tmp_path: Path, rigs: list[Rig]) -> None:
    rig = Rig(tmp_path, "print('bye', flush=True)", RestartPolicy("on-failure", backoff_ms=0))
    rigs.append(rig)
    rig.wait_exit()
    rig.poll()
    rig.poll()
    assert rig.node.state == DOWN and rig.node.restarts == 0
    assert rig.lines[-1].endswith("exited with status 0; last log line: bye; not restarted (it exited cleanly)")


def test_exit_descriptions() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(-signal.SIGTERM) == "was killed by SIGTERM"
    assert describe_exit(None).startswith("exited (status unknown")


def test_a_node_that_is_not_our_child_is_noticed_through_proc(tmp_path: Path) -> None:
    """After a supervisor restart of `up` (or for any pid we did not start), /proc tells."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd, /proc shows our own command line
        while process_argv(sleeper.pid) != tuple(sleeper.args) and time.monotonic() < deadline:
            time.sleep(0.01)
        node = NodeProcess("g", "b", "", "", "", sleeper.pid, process_start_time(sleeper.pid) or 0,
                           tuple(sleeper.args), "nolog")
        write_state(DeploymentState("t", str(tmp_path), (node,)))
        lines: list[str] = []
        never = RestartPolicy("never")
        supervisor = Supervisor(read_state(tmp_path), {}, never, lines.append)  # type: ignore[arg-type]
        supervisor.poll()
        assert lines == []
        sleeper.kill()
        sleeper.wait(timeout=10)
        supervisor.poll()
        assert supervisor.state.nodes[0].state == DOWN and "exited (status unknown" in lines[0]
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        sleeper.wait(timeout=10)


@pytest.mark.parametrize("exits_at_once", [False, True])
def test_a_requested_restart_stops_and_starts_the_node_under_never_without_counting_it(
        tmp_path: Path, rigs: list[Rig], monkeypatch: pytest.MonkeyPatch, exits_at_once: bool) -> None:
    if exits_at_once:  # the node is gone before the poll that signalled it looks (a busy machine's timing)
        def signal_and_wait(pid: int, sig: int) -> None:
            os.kill(pid, sig)
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, left for the supervisor to reap

        monkeypatch.setattr(supervisor_module, "send_signal", signal_and_wait)
    script = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(30)"
    rig = Rig(tmp_path, script, RestartPolicy("never", max_restarts=1))
    rigs.append(rig)
    first = rig.node.pid
    for round_ in (1, 2):  # more than max_restarts: requests are not failures
        before = rig.node.pid
        request_restart(tmp_path, ("g", "a"))
        rig.poll()  # SIGTERM sent
        rig.wait_exit()
        rig.poll()  # noticed: due at once
        rig.poll()  # started again
        assert rig.node.state == RUNNING and rig.node.pid != before and rig.node.restarts == round_
        assert requested_restarts(tmp_path) == []  # the request is done
    assert rig.node.pid != first
    assert any("restarting on request" in line for line in rig.lines)


def test_a_joining_member_is_started_and_a_leaving_one_stopped_and_forgotten(tmp_path: Path, rigs: list[Rig]) -> None:
    script = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(30)"
    rig = Rig(tmp_path, script, RestartPolicy("on-failure"))
    rigs.append(rig)
    argv = [sys.executable, "-c", script]
    request_member(tmp_path, JOIN, ("g", "b"), {"argv": argv, "log": str(tmp_path / "b.log"), "client": "127.0.0.1:4",
                                                 "raft": "127.0.0.1:5", "admin": "127.0.0.1:6"})
    rig.poll()  # started, written to the state file
    joined = next(n for n in rig.supervisor.state.nodes if n.id == "b")
    assert joined.state == RUNNING and joined.argv == tuple(argv) and joined.admin == "127.0.0.1:6"
    assert member_requests(tmp_path) == []
    request_member(tmp_path, LEAVE, ("g", "a"))
    leaving_node = next(n for n in rig.supervisor.state.nodes if n.id == "a")
    leaving = rig.supervisor.children[leaving_node.pid]
    rig.poll()  # SIGTERM sent; the same poll may already see it exit (a fast child)
    leaving.wait(timeout=10)
    rig.poll()  # exited: forgotten, not restarted (even under on-failure)
    assert [n.id for n in rig.supervisor.state.nodes] == ["b"]
    assert member_requests(tmp_path) == []
    assert any("left its group and is stopped" in line for line in rig.lines)

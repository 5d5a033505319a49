"""Real clusters under `raftmq up`'s supervisor: the test preset end to end (up --detach, send,
browse, receive, status, a killed node reported, down), restarts on failure with the
supervisor then killed, and an attached `up` that `raftmq down` takes over.

Every process started here is stopped by pid in a `finally`, whatever the test's outcome."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from raftmq.ops.launcher import DOWN, DeploymentState, NodeProcess, is_our_node, launcher_alive, read_state, stop_nodes

pytestmark = pytest.mark.integration

WriteGroup = Callable[..., Path]
COMMAND_TIMEOUT = 40
WAIT = 15.0


def raftmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, cwd=cwd, check=False)


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def node(state_dir: Path, node_id: str) -> NodeProcess:
    state = read_state(state_dir)
    assert state is not None
    return next(n for n in state.nodes if n.id == node_id)


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"  # exited; only its parent (init) has yet to reap it


def running_with(argument: str) -> list[int]:
    """Live (not zombie) processes with `argument` on their command line: only to check."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argument.encode() in cmdline and not gone(int(entry.name)):
                found.append(int(entry.name))
    return found


def cleanup(states: list[DeploymentState | None]) -> None:
    for state in states:
        if state is None:
            continue
        if launcher_alive(state):
            os.kill(state.launcher_pid, signal.SIGKILL)
        stop_nodes(state, grace=2.0)


def test_test_preset_end_to_end(tmp_path: Path) -> None:
    state_dir = tmp_path / ".raftmq"
    seen: list[DeploymentState | None] = []
    try:
        up = raftmq("up", "--detach", "--preset", "test", "--timeout", "25", cwd=tmp_path)
        state = read_state(state_dir)
        seen.append(state)
        assert up.returncode == 0, up.stdout + up.stderr
        assert state is not None and state.detached and state.ready and launcher_alive(state)
        assert f"restart: never (supervisor pid {state.launcher_pid})" in up.stdout
        assert ("clients: failover:(stomp://127.0.0.1:61713,stomp://127.0.0.1:61714,stomp://127.0.0.1:61715)"
                in up.stdout)

        # The commands find the running local cluster without options.
        sent = raftmq("send", "/queue/e2e", "hello", "--count", "3", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        browsed = raftmq("queue", "browse", "/queue/e2e", cwd=tmp_path)
        assert browsed.returncode == 0 and browsed.stdout == "hello\n" * 3, browsed.stdout + browsed.stderr
        received = raftmq("receive", "/queue/e2e", "--count", "3", cwd=tmp_path)
        assert received.returncode == 0 and received.stdout == "hello\n" * 3, received.stderr
        status = raftmq("status", "--json", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        (group,) = json.loads(status.stdout)["groups"]
        assert len(group["nodes"]) == 3 and [row["role"] for row in group["nodes"]].count("leader") == 1

        victim = node(state_dir, "n2")
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: node(state_dir, "n2").state == DOWN, "the supervisor to notice n2")
        status = raftmq("status", "--json", cwd=tmp_path)
        assert status.returncode == 1, status.stdout  # a node does not answer
        rows = {row["id"]: row for row in json.loads(status.stdout)["groups"][0]["nodes"]}
        assert rows["n2"]["up"] is False and rows["n2"]["last_exit"].startswith("was killed by SIGKILL at ")
        assert rows["n1"]["up"] and rows["n3"]["up"] and "last_exit" not in rows["n1"]
        view = raftmq("status", "--once", cwd=tmp_path)
        assert "down (was killed by SIGKILL" in view.stdout, view.stdout
        log = (state_dir / "supervisor.log").read_text()
        assert f"t1/n2 (pid {victim.pid}) was killed by SIGKILL; last log line: " in log
        assert 'not restarted (restart = "never")' in log

        down = raftmq("down", cwd=tmp_path)
        assert down.returncode == 0 and down.stdout == "stopped 2 node(s)\n", down.stdout + down.stderr
        # down asks the supervisor to stop its nodes
        assert "SIGTERM: stopping the cluster" in (state_dir / "supervisor.log").read_text()
        assert gone(state.launcher_pid) and all(gone(n.pid) for n in state.nodes)
        assert read_state(state_dir) is None
    finally:
        cleanup([*seen, read_state(state_dir)])


def test_on_failure_restarts_and_down_survives_a_killed_supervisor(write_group: WriteGroup, tmp_path: Path) -> None:
    write_group("g1")
    state_dir = tmp_path / "state"
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[topology]\ndata_dir = "{state_dir}"\nrestart = "on-failure"\nrestart_backoff_ms = 100\n'
                        '[[group]]\nfile = "g1.toml"\n')
    seen: list[DeploymentState | None] = []
    try:
        up = raftmq("up", "--detach", "--config", str(topology), "--timeout", "25", cwd=tmp_path)
        state = read_state(state_dir)
        seen.append(state)
        assert up.returncode == 0 and state is not None, up.stdout + up.stderr
        victim = node(state_dir, "n1")
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: node(state_dir, "n1").restarts == 1 and is_our_node(node(state_dir, "n1")), "n1's restart")
        seen.append(read_state(state_dir))
        restarted = node(state_dir, "n1")
        assert restarted.pid != victim.pid and restarted.last_exit is not None

        def answers_again() -> bool:
            status = raftmq("status", "--json", "--config", str(topology), cwd=tmp_path)
            rows = {row["id"]: row for row in json.loads(status.stdout)["groups"][0]["nodes"]}
            return status.returncode == 0 and rows["n1"]["up"] and rows["n1"]["restarts"] == 1

        wait_for(answers_again, "the restarted n1 to rejoin")
        log = (state_dir / "supervisor.log").read_text()
        assert f"g1/n1 (pid {victim.pid}) was killed by SIGKILL; last log line: " in log
        assert "restarting in 0.1 s (restart 1 of at most 5 within 60 s)" in log
        assert f"g1/n1 restarted as pid {restarted.pid} (restart 1)" in log

        os.kill(state.launcher_pid, signal.SIGKILL)  # the supervisor dies; the nodes run on
        wait_for(lambda: gone(state.launcher_pid), "the supervisor to die")
        down = raftmq("down", "--config", str(topology), cwd=tmp_path)
        assert down.returncode == 0 and down.stdout == "stopped 3 node(s)\n", down.stdout + down.stderr
        assert all(gone(n.pid) for n in (*state.nodes, restarted))
        assert read_state(state_dir) is None
    finally:
        cleanup([*seen, read_state(state_dir)])


def test_attached_up_reports_restarts_and_stops_its_nodes_for_down(write_group: WriteGroup, tmp_path: Path) -> None:
    config = write_group("g2")
    state_dir = tmp_path / "g2"
    output = tmp_path / "up.out"
    seen: list[DeploymentState | None] = []
    with open(output, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "raftmq", "up", "--config", str(config), "--restart", "on-failure",
                               "--timeout", "25"], stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_for(lambda: "clients: failover:" in output.read_text() or up.poll() is not None, "the cluster", 30)
        state = read_state(state_dir)
        seen.append(state)
        assert state is not None and up.poll() is None and not state.detached, output.read_text()
        assert state.launcher_pid == up.pid and launcher_alive(state)
        victim = node(state_dir, "n3")
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: "g2/n3 restarted as pid" in output.read_text(), "the restart report")
        seen.append(read_state(state_dir))
        text = output.read_text()
        report = next(line for line in text.splitlines() if f"(pid {victim.pid}) was killed" in line)
        assert report.startswith(f"g2/n3 (pid {victim.pid}) was killed by SIGKILL; last log line: ")  # one line
        assert report.endswith("restarting in 0.5 s (restart 1 of at most 5 within 60 s)")

        down = raftmq("down", "--config", str(config), cwd=tmp_path)
        assert down.returncode == 0 and down.stdout == "stopped 3 node(s)\n", down.stdout + down.stderr
        assert up.wait(timeout=20) == 0, output.read_text()
        # down asks up to stop its nodes
        assert "stopping the cluster (leaders hand over, then each node exits)" in output.read_text()
        restarted = seen[-1]
        assert restarted is not None and all(gone(n.pid) for n in (*state.nodes, *restarted.nodes))
        assert read_state(state_dir) is None
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=10)
        cleanup([*seen, read_state(state_dir)])


def test_a_node_that_fails_while_starting_is_one_line(write_group: WriteGroup, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from raftmq.cli import main

    config = write_group("g3")
    meta = tmp_path / "g3" / "n2" / "raft" / "raft.journal.meta"
    meta.parent.mkdir(parents=True)
    meta.write_bytes(b"\x93\x01\x02\x03 not raft metadata")
    result = CliRunner().invoke(main, ["up", "--detach", "--config", str(config), "--timeout", "20"],
                                catch_exceptions=False)
    try:
        assert result.exit_code == 1, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "Error: g3/n2 exited while starting: raftmq node n2: "), result.stderr
        assert "raft.journal.meta: unreadable Raft metadata" in lines[0]
        assert read_state(tmp_path / "g3") is None  # the supervisor stopped n1 and n3 and cleared the state
        log = (tmp_path / "g3" / "supervisor.log").read_text()
        assert "raftmq up failed: g3/n2 exited while starting" in log
        assert running_with(str(config)) == []  # n1 and n3 were stopped too
    finally:
        cleanup([read_state(tmp_path / "g3")])

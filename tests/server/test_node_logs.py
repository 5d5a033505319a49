"""What real node processes log: JSON lines in a member's directory, the console on stderr,
leadership and client events, and never a credential."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import stomp

from raftmq.logs import LEVEL_ENV, LOG_FILE_NAME
from raftmq.processes import free_ports
from tests.helpers.group_harness import READY_LINE, Group

pytestmark = pytest.mark.integration

GROUP_PASSWORD = "group-pw-5f1c9e"
PASSCODE = "passcode-8d27a4"
WAIT = 15.0


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    complete = text[: text.rfind("\n") + 1]  # a line being written is read next time
    return [json.loads(line) for line in complete.splitlines()]


def wait_for_event(path: Path, event: str, timeout: float = WAIT, **fields: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    lines: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        lines = read_json_lines(path)
        for line in lines:
            if line["event"] == event and all(line.get(key) == value for key, value in fields.items()):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no {event} {fields} in {path} within {timeout}s: {[line['event'] for line in lines]}")


def wait_ready(proc: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path) -> str:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        text = stdout_path.read_text(errors="replace")
        if READY_LINE in text:
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"not ready (exit {proc.poll()}): {stderr_path.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT)
        raise


def test_group_member_logs_json_lines_without_credentials(tmp_path: Path) -> None:
    client_port, raft_port, admin_port = free_ports(3)
    data_dir = tmp_path / "data"
    config = tmp_path / "group.toml"
    config.write_text(
        f'[group]\nname = "logs"\ndata_dir = "{data_dir}"\npassword = "{GROUP_PASSWORD}"\n'
        f'[[node]]\nid = "n1"\nclient = "127.0.0.1:{client_port}"\nraft = "127.0.0.1:{raft_port}"\n'
        f'admin = "127.0.0.1:{admin_port}"\n'
    )
    stdout_path, stderr_path = tmp_path / "stdout", tmp_path / "stderr"
    log_path = data_dir / "n1" / LOG_FILE_NAME
    env = {**os.environ, LEVEL_ENV: "debug"}  # the most talkative level must not leak either
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--config", str(config), "--node", "n1"],
                                stdout=stdout, stderr=stderr, env=env)
    try:
        wait_ready(proc, stdout_path, stderr_path)
        leader = wait_for_event(log_path, "raft.leader_changed", role="leader")
        assert leader["node"] == "n1" and leader["leader"] == f"127.0.0.1:{client_port}" and leader["term"] >= 1

        conn = stomp.Connection12([("127.0.0.1", client_port)], heartbeats=(0, 0))
        conn.connect("bob", PASSCODE, wait=True, headers={"client-id": "logs-test"})
        conn.send("/queue/logs", "hello", receipt="r1")
        conn.disconnect(receipt="bye")
        connected = wait_for_event(log_path, "client.connected")
        assert connected["login"] == "bob" and connected["client_id"] == "logs-test" and connected["version"] == "1.2"
        assert connected["peer"].startswith("127.0.0.1:")
        closed = wait_for_event(log_path, "client.disconnected", session=connected["session"])
        assert closed["connected_s"] >= 0
    finally:
        code = stop(proc)
    assert code == 0
    assert stdout_path.read_text().startswith(f"raftmq node listening on 127.0.0.1:{client_port} (durable: data in ")

    lines = read_json_lines(log_path)
    assert lines and log_path.read_text(encoding="utf-8").endswith("\n")
    for line in lines:
        assert {"timestamp", "level", "logger", "event"} <= set(line), line
    events = [line["event"] for line in lines]
    for event in ("node.started", "node.listening", "raft.leader_changed", "client.connected", "client.disconnected",
                  "node.stopped"):
        assert event in events, events
    assert "debug" in {line["level"] for line in lines}  # the level came from the environment

    console = stderr_path.read_text(encoding="utf-8")
    # Not a terminal: one key=value line per event, the same events as the file.
    console_lines = console.splitlines()
    assert console_lines and all(line.startswith("timestamp=") for line in console_lines), console[-2000:]
    assert len(console_lines) == len(lines)
    assert "Traceback" not in console
    for secret in (GROUP_PASSWORD, PASSCODE):
        assert secret not in log_path.read_text(encoding="utf-8")
        assert secret not in console


def test_followers_log_the_leader_and_its_successor(tmp_path: Path) -> None:
    group = Group(tmp_path, size=3)
    logs = {node_id: group.data_dir / node_id / LOG_FILE_NAME for node_id in group.members}
    try:
        group.start()
        first = group.leader()
        term = wait_for_event(logs[first], "raft.leader_changed", role="leader")["term"]
        for node_id in group.members:
            if node_id != first:
                wait_for_event(logs[node_id], "raft.leader_changed", role="follower",
                               leader=group.members[first].client)

        group.signal(first, signal.SIGTERM)  # graceful: hands leadership over
        assert group.wait_exit(first) == 0
        rest = tuple(node_id for node_id in group.members if node_id != first)
        second = group.leader(among=rest)
        follower = next(node_id for node_id in rest if node_id != second)
        line = wait_for_event(logs[second], "raft.leader_changed", role="leader")
        assert line["term"] > term
        line = wait_for_event(logs[follower], "raft.leader_changed", role="follower",
                              leader=group.members[second].client)
        assert line["term"] > term
    finally:
        group.close()


def test_single_node_console_is_pretty_on_a_terminal_and_writes_no_file(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    master, slave = pty.openpty()
    stdout_path = tmp_path / "stdout"
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", LEVEL_ENV)}
    work = tmp_path / "cwd"
    work.mkdir()
    with open(stdout_path, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{port}", "--in-memory"],
            stdout=stdout, stderr=slave, stdin=subprocess.DEVNULL, cwd=work, env=env)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + WAIT
        while b"node.listening" not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
    finally:
        stop(proc)
        os.close(master)
    text = seen.decode(errors="replace")
    assert "node.listening" in text, text
    assert "\x1b[" in text  # coloured
    assert "timestamp=" not in text and "event=" not in text  # not the plain key=value lines
    assert stdout_path.read_text() == (f"raftmq node listening on 127.0.0.1:{port} "
                                       "(in memory: nothing survives a restart)\n")
    assert list(work.iterdir()) == []  # no data directory, no --log-file: console only


def test_single_node_log_file_option(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    log_path = tmp_path / "logs" / "node.jsonl"
    stdout_path, stderr_path = tmp_path / "stdout", tmp_path / "stderr"
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{port}", "--in-memory",
                                 "--log-file", str(log_path), "--log-level", "warning"], stdout=stdout, stderr=stderr)
    try:
        wait_ready(proc, stdout_path, stderr_path)
        conn = stomp.Connection([("127.0.0.1", port)], heartbeats=(0, 0))
        conn.connect("alice", PASSCODE, wait=True)
        conn.disconnect()
    finally:
        assert stop(proc) == 0
    assert log_path.exists()
    assert read_json_lines(log_path) == []  # nothing at warning or above on a clean run
    assert stderr_path.read_text() == ""

    unwritable = stdout_path / "node.jsonl"  # under a regular file
    proc = subprocess.run([sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{port}", "--in-memory",
                           "--log-file", str(unwritable)], capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stdout == ""
    assert f"raftmq node: cannot write the log file {unwritable}: " in proc.stderr

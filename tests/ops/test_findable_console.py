"""What a user sees of the admin port and the console: the single `raftmq node` serves them on
127.0.0.1:8160 and says where (a taken port is named, with the options), `raftmq up` and
`raftmq status` name each member's console, and the small CLI messages (a port out of range, a
send with no cluster running, a receive that got nothing)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.topology import default_topology
from raftmq.cli import main
from raftmq.ops.cli import _print_endpoints
from raftmq.ops.launcher import DeploymentState, NodeProcess
from raftmq.ops.status_view import NodeAddress, render_to_string, summarise
from raftmq.processes import free_port

DEFAULT_ADMIN = "127.0.0.1:8160"
NODES = [NodeAddress("g1", f"n{i}", f"127.0.0.1:{61000 + i}", f"127.0.0.1:{8160 + i}", 100 + i) for i in (1, 2)]


def leader_status() -> dict[str, object]:
    return {"role": "leader", "term": 3, "commit_index": 5, "applied_index": 5, "health": "ok", "sessions": 0}


def test_status_names_each_members_console() -> None:
    summary = summarise([(NODES[0], {**leader_status(), "role": "follower"}), (NODES[1], leader_status())])
    assert summary["groups"][0]["consoles"] == {"n1": "http://127.0.0.1:8161/", "n2": "http://127.0.0.1:8162/"}
    text = render_to_string(summary, width=120)
    assert "console: n1 http://127.0.0.1:8161/, n2 http://127.0.0.1:8162/ (master)" in text
    tls = summarise([(NodeAddress("g1", "n1", "c:1", "https://127.0.0.1:8161"), leader_status())])
    assert tls["groups"][0]["consoles"] == {"n1": "https://127.0.0.1:8161/"}


def test_up_prints_each_members_console(tmp_path: Path) -> None:
    topology = default_topology(tmp_path / ".raftmq")
    nodes = tuple(NodeProcess(group.name, member.id, member.client, member.raft, group.config.admin_endpoint(member)
                              or "", 1, 1, (), str(tmp_path / member.id / "node.log"))
                  for group, member in topology.members())
    state = DeploymentState(topology.name, str(topology.state_dir), nodes)
    summary = {"groups": [{"name": "g1", "leader": "n2", "term": 1}]}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _print_endpoints(topology, state, summary, "raftmq down", False)
    assert "console: http://127.0.0.1:8161/,http://127.0.0.1:8162/,http://127.0.0.1:8163/" in printed.getvalue()


@pytest.mark.parametrize("option", ["--listen", "--admin", "--mqtt"])
def test_a_port_out_of_range_is_named(option: str) -> None:
    result = CliRunner().invoke(main, ["node", option, "127.0.0.1:99999"])
    assert result.exit_code == 2
    assert "port 99999 is out of range (1-65535)" in result.output, result.output


@pytest.mark.integration
def test_send_with_no_cluster_running_asks_whether_one_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ./.raftmq/ here: send tries the default URL. (Were a broker on 61613, it would answer;
    the suite's nodes use free ports, and `raftmq up --preset test` its own.)"""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["send", "/queue/q", "hi", "--connect-timeout", "0.5"])
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert line.startswith("Error: cannot connect to stomp://127.0.0.1:61613 (default): "), line
    assert line.endswith("; is a cluster running? (`raftmq up`)"), line


@pytest.mark.integration
def test_receive_that_got_nothing_says_how_long_it_waited(broker: tuple[str, int]) -> None:
    url = f"stomp://{broker[0]}:{broker[1]}"
    queue = f"/queue/empty.{os.getpid()}"
    result = CliRunner().invoke(main, ["receive", queue, "--timeout", "0.3", "--url", url])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"waited 0.3 s and got nothing from {queue} (--timeout waits longer)\n"


def start_node(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """`raftmq node` as the README runs it (no RAFTMQ_ADMIN: the suite's conftest sets it off)."""
    env = {key: value for key, value in os.environ.items() if key != "RAFTMQ_ADMIN"}
    out, err = tmp_path / f"{name}.stdout", tmp_path / f"{name}.stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--in-memory", *args],
                                cwd=tmp_path, stdout=stdout, stderr=stderr, env=env)
    return proc, out, err


def wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], err: Path) -> str:
    deadline = time.monotonic() + 20
    while text not in path.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, err.read_text()[-2000:]
        time.sleep(0.05)
    return path.read_text()


def stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.integration
def test_the_single_node_serves_its_console_on_loopback_and_says_where(tmp_path: Path) -> None:
    """The README's `raftmq node`: the admin port on 127.0.0.1:8160 (the only test that takes it),
    its URL on stdout, /status and the console there; a second node finds the port taken and
    runs without one, saying so; asked for a taken port by name, a node refuses to start;
    `--admin off` opens none."""
    with socket.socket() as probe:  # the fixed port must be free for this test to say anything
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", 8160))
    first, out, err = start_node(tmp_path, "first", "--listen", f"127.0.0.1:{free_port()}")
    second = None
    try:
        text = wait_for(out, "console:", first, err)
        assert text.splitlines()[1] == f"console: http://{DEFAULT_ADMIN}/ (and /status, /metrics, /health)"
        with urllib.request.urlopen(f"http://{DEFAULT_ADMIN}/status", timeout=5) as answer:
            assert json.loads(answer.read())["role"] == "leader"
        with urllib.request.urlopen(f"http://{DEFAULT_ADMIN}/", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/html") and b"<html" in answer.read()
        with urllib.request.urlopen(f"http://{DEFAULT_ADMIN}/metrics", timeout=5) as answer:
            assert answer.status == 200

        second, out2, err2 = start_node(tmp_path, "second", "--listen", f"127.0.0.1:{free_port()}")
        assert "console:" not in wait_for(out2, "listening on", second, err2)
        warning = err2.read_text()
        assert (f"raftmq node: the admin port {DEFAULT_ADMIN} is taken by another process (another raftmq node?): "
                "this node runs without /status, /metrics and the console; --admin HOST:PORT picks another port, "
                "--admin off silences this") in warning, warning

        env = {key: value for key, value in os.environ.items() if key != "RAFTMQ_ADMIN"}
        refused = subprocess.run([sys.executable, "-m", "raftmq", "node", "--in-memory", "--mqtt", "off", "--listen",
                                  f"127.0.0.1:{free_port()}", "--admin", DEFAULT_ADMIN], capture_output=True,
                                 text=True, timeout=30, env=env, cwd=tmp_path)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.strip() == (f"Error: the admin port {DEFAULT_ADMIN} is taken by another process: "
                                          "--admin HOST:PORT picks another, --admin off runs the node without one")
    finally:
        stop(first, *([second] if second else []))
    off, out3, err3 = start_node(tmp_path, "off", "--listen", f"127.0.0.1:{free_port()}", "--admin", "off")
    try:
        assert "console:" not in wait_for(out3, "listening on", off, err3)
    finally:
        stop(off)
    assert "console:" not in out3.read_text() and err3.read_text().count("taken") == 0

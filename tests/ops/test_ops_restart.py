"""`raftmq restart --rolling` on a real cluster under `raftmq up --detach`, while a failover
producer and consumer keep working: every node gets a new pid, followers before the leader,
no receipted message is lost, and the clients see nothing worse than a failover. The order
itself (raftmq.ops.rolling.restart_order) is checked without processes.

Every process started here is stopped by pid in a `finally`."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import DeploymentState, NodeProcess, read_state, running_nodes, stop_launcher, stop_nodes
from raftmq.ops.rolling import restart_order
from raftmq.protocol.frame import Frame

COMMAND_TIMEOUT = 90


def node(group: str, node_id: str) -> NodeProcess:
    return NodeProcess(group, node_id, "", "", "", 1, 0, (), "")


def test_followers_go_first_and_each_groups_leader_last() -> None:
    nodes = [node("g1", "n1"), node("g1", "n2"), node("g1", "n3"), node("g2", "n1"), node("g2", "n2")]
    roles = {("g1", "n1"): "leader", ("g1", "n2"): "follower", ("g2", "n2"): "leader"}  # g1/n3, g2/n1 unknown
    order = [(n.group, n.id) for n in restart_order(nodes, roles)]
    assert order == [("g1", "n2"), ("g1", "n3"), ("g1", "n1"), ("g2", "n1"), ("g2", "n2")]


def raftmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT, cwd=cwd, check=False)


class Traffic:
    """A producer (receipts) and a consumer (client acks) on the group's failover URL, in a
    thread of their own, until `stop`; what was receipted, what was received, client errors."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.receipted: set[bytes] = set()
        self.received: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()  # no more sends
        self._finished = threading.Event()  # drained: close the clients
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, drain: float) -> None:
        deadline = time.monotonic() + drain
        self._stop.set()
        while not self.receipted <= set(self.received) and time.monotonic() < deadline:
            time.sleep(0.1)
        self._finished.set()
        self._thread.join(timeout=drain)

    async def _run(self) -> None:
        consumer = await connect_failover(self.url)
        producer = await connect_failover(self.url)

        def on_message(frame: Frame) -> None:
            self.received.append(frame.body)
            consumer.ack_nowait(frame)

        consumer.subscribe("/queue/rolling", ack="client-individual", prefetch=100, callback=on_message)
        index = 0
        try:
            while not self._stop.is_set():
                body = f"r{index:06d}".encode()
                try:
                    await producer.send("/queue/rolling", body, receipt=True)
                    self.receipted.add(body)
                except Exception as exc:  # a failover client surfaces nothing short of giving up
                    self.errors.append(repr(exc))
                index += 1
                await asyncio.sleep(0.005)
            while not self._finished.is_set():
                await asyncio.sleep(0.1)
        finally:
            await producer.close()
            await consumer.close()


@contextlib.contextmanager
def detached_cluster(config: Path, state_dir: Path, cwd: Path) -> Iterator[tuple[DeploymentState, str]]:
    """`raftmq up --detach` of a group file: its state and a failover URL of its members;
    every node stopped by pid at the end."""
    try:
        up = raftmq("up", "--detach", "--config", str(config), "--timeout", "25", cwd=cwd)
        assert up.returncode == 0, up.stdout + up.stderr
        before = read_state(state_dir)
        assert before is not None
        yield before, "failover:(" + ",".join(f"stomp://{n.client}" for n in before.nodes) + ")?randomize=false"
    finally:
        state = read_state(state_dir)
        if state is not None:
            stop_launcher(state, timeout=15)
            stop_nodes(read_state(state_dir) or state)
            assert not running_nodes(read_state(state_dir) or state)


@pytest.mark.integration
def test_a_rolling_restart_under_load_restarts_every_node_and_loses_nothing(
        tmp_path: Path, write_group: Callable[..., Path]) -> None:
    config = write_group("g1", 3)
    state_dir = tmp_path / "g1"
    with detached_cluster(config, state_dir, tmp_path) as (before, url):
        traffic = Traffic(url)
        traffic.start()
        time.sleep(1.0)
        restart = raftmq("restart", "--rolling", "--config", str(config), cwd=tmp_path)
        assert restart.returncode == 0, restart.stdout + restart.stderr
        time.sleep(1.0)
        traffic.stop(drain=20)
        after = read_state(state_dir)
        assert after is not None
        assert all(a.pid != b.pid for a, b in zip(after.nodes, before.nodes, strict=True))
        lines = [line for line in restart.stdout.splitlines() if line.endswith(": restarting")]
        assert len(lines) == 3 and "(leader," in lines[-1] and all("(follower," in line for line in lines[:2])
        assert "restarted 3 node(s)" in restart.stdout
        assert traffic.errors == []
        assert len(traffic.receipted) > 100
        missing = traffic.receipted - set(traffic.received)
        assert not missing, f"{len(missing)} receipted messages never arrived, e.g. {sorted(missing)[:3]}"

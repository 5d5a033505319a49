"""`raftmq status --json / --once` (click CliRunner) against a real running group: exit code,
connections, rates and dead letters after real traffic from stomp-py; exit 1 once a node is
down. The members are `raftmq node` processes, stopped by pid whatever the outcome."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import stomp
from click.testing import CliRunner, Result

from raftmq.ops.cli import status_command

pytestmark = pytest.mark.integration
WAIT = 10.0


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.receipts: queue.Queue = queue.Queue()

    def on_message(self, frame) -> None:  # noqa: ANN001
        self.messages.put(frame)

    def on_receipt(self, frame) -> None:  # noqa: ANN001
        if frame.headers["receipt-id"] == "dead":
            self.receipts.put("dead")


class Members:
    def __init__(self, config: Path, ids: list[str]) -> None:
        self.config = config
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.outputs = {node_id: config.parent / f"{node_id}.out" for node_id in ids}
        for node_id in ids:
            with open(self.outputs[node_id], "wb") as out:
                self.procs[node_id] = subprocess.Popen(
                    [sys.executable, "-m", "raftmq", "node", "--config", str(config), "--node", node_id],
                    stdout=out, stderr=subprocess.STDOUT,
                )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 20
        for node_id, proc in self.procs.items():
            while "raftmq node listening on" not in self.outputs[node_id].read_text(errors="replace"):
                assert proc.poll() is None and time.monotonic() < deadline, self.outputs[node_id].read_text()[-2000:]
                time.sleep(0.05)

    def kill(self, node_id: str) -> None:
        proc = self.procs[node_id]
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def close(self) -> None:
        for node_id in self.procs:
            self.kill(node_id)


@pytest.fixture
def running_group(write_group: Callable[..., Path]) -> Iterator[Members]:
    config = write_group("live")
    members = Members(config, ["n1", "n2", "n3"])
    try:
        members.wait_ready()
        yield members
    finally:
        members.close()


def status(config: Path, *args: str) -> Result:
    return CliRunner().invoke(status_command, ["--config", str(config), *args])


def until(config: Path, ready: Callable[[dict], bool] = lambda _summary: True, timeout: float = WAIT) -> Result:
    """`status --json` until it exits 0 with a summary `ready` accepts (or the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        result = status(config, "--json")
        if result.exit_code == 0 and ready(json.loads(result.output)) or time.monotonic() >= deadline:
            return result
        time.sleep(0.2)


def test_status_json_and_once_against_a_running_group(running_group: Members) -> None:
    config = running_group.config
    # Right after the election a follower may not have heard the leader yet (health
    # "unavailable") while the group is already up: wait until every member reports it.
    first = until(config, lambda summary: all(row["health"] == "ok" for g in summary["groups"] for row in g["nodes"]))
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    (group,) = summary["groups"]
    assert summary["ok"] and group["ok"] and group["leaders"] == 1 and group["nodes_up"] == 3
    assert all(row["health"] == "ok" and row["pid"] == running_group.procs[row["id"]].pid for row in group["nodes"])
    leader = next(row for row in group["nodes"] if row["id"] == group["leader"])
    host, port = leader["client"].rsplit(":", 1)

    conn = stomp.Connection12([(host, int(port))], timeout=WAIT, reconnect_attempts_max=1)
    listener = Listener()
    conn.set_listener("t", listener)
    conn.connect(wait=True)
    try:
        for i in range(3):
            conn.send("/queue/orders", f"o{i}", receipt=f"r{i}")
        conn.subscribe("/queue/orders", id="s", ack="client-individual")
        frames = [listener.messages.get(timeout=WAIT) for _ in range(3)]
        conn.ack(frames[0].headers["ack"])
        doomed = frames[1]
        for attempt in range(10):  # the 10th NACK reaches max_delivery_count: to the DLQ
            conn.nack(doomed.headers["ack"], receipt="dead" if attempt == 9 else None)
            if attempt < 9:
                doomed = listener.messages.get(timeout=WAIT)
                assert doomed.headers["message-id"] == frames[1].headers["message-id"]
        assert listener.receipts.get(timeout=WAIT) == "dead"

        def settled(summary: dict) -> bool:
            data = summary["groups"][0]
            orders = data["destinations"].get("/queue/orders", {})
            return data["dead_letter"].get("depth") == 1 and (orders.get("enqueue_rate") or 0) > 0

        result = until(config, settled)
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)["groups"][0]
        orders = data["destinations"]["/queue/orders"]
        assert (orders["enqueued"], orders["dequeued"], orders["dead_lettered"], orders["in_flight"]) == (3, 1, 1, 1)
        assert data["dead_letter"] == {"destination": "/queue/DLQ", "depth": 1, "dead_lettered": 1}
        assert data["sessions"] == 1
        connections = {row["id"]: row["connections"] for row in data["nodes"]}
        assert connections[group["leader"]] == 1 and sum(connections.values()) == 1

        once = status(config, "--once")
        assert once.exit_code == 0, once.output
        text = once.output
        assert f"group live: master {group['leader']}" in text and "3/3 nodes up, 1 sessions" in text
        assert "dead-letter queue /queue/DLQ: 1 waiting, 1 dead-lettered in all" in text
        rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
                for line in text.splitlines() if line.startswith("│")}
        depth, consumers, in_flight, enqueue_rate, _dequeue_rate, enqueued, dequeued, dead = rows["/queue/orders"]
        assert (depth, consumers, in_flight, enqueued, dequeued, dead) == ("0", "1", "1", "3", "1", "1")
        assert float(enqueue_rate) > 0
        assert rows["/queue/DLQ"][0] == "1"  # waiting in the DLQ
        assert rows[group["leader"]][0] == "master" and rows[group["leader"]][6] == "1"  # conns
    finally:
        conn.disconnect()

    victim = next(row["id"] for row in group["nodes"] if row["id"] != group["leader"])
    running_group.kill(victim)
    down = status(config, "--json")
    assert down.exit_code == 1, down.output
    rows = {row["id"]: row for row in json.loads(down.output)["groups"][0]["nodes"]}
    assert rows[victim]["up"] is False and rows[victim]["health"] == "down"
    assert status(config, "--once").exit_code == 1

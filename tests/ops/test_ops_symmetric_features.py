"""Wildcards, temporary queues, schedules on the symmetric preset (three groups of three, `raftmq up`), with
stomp.py clients: a wildcard queue consumer on g2 draws from g1; a RabbitMQ-style requester on
g3 gets its answer from a responder on g1; a message scheduled on g1 reaches its consumer on
g2 on time; `raftmq manage` lists every group's destinations, retries g1's dead letter, and
the console answers on a member's admin port. Every process is stopped by pid in a `finally`."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import stomp

from raftmq.ops.launcher import DeploymentState, read_state
from tests.ops.test_ops_up_supervised import cleanup, raftmq

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def client(state: DeploymentState, group: str, listener: Any | None = None) -> stomp.Connection12:
    """A connection to the group's first member (a follower relays to its leader)."""
    host, port = next(node.client for node in state.nodes if node.group == group).split(":")
    connection = stomp.Connection12([(host, int(port))])
    if listener is not None:
        connection.set_listener("", listener)
    connection.connect(wait=True)
    return connection


def wait_until(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition()


class Responder(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.connection: stomp.Connection12 | None = None

    def on_message(self, frame: Any) -> None:
        assert self.connection is not None
        self.connection.send(frame.headers["reply-to"], frame.body.upper())


def test_wildcards_temporary_queues_schedules_and_management_across_the_symmetric_preset(tmp_path: Path) -> None:
    seen: list[DeploymentState | None] = []
    connections: list[stomp.Connection12] = []
    try:
        up = raftmq("up", "--detach", "--preset", "symmetric", "--timeout", "90", cwd=tmp_path)
        state = read_state(tmp_path / ".raftmq")
        seen.append(state)
        assert up.returncode == 0 and state is not None, up.stdout + up.stderr

        wild, later, answers = (stomp.listener.TestListener() for _ in range(3))
        consumer = client(state, "g2", wild)  # a stomp.py listener hears its whole connection: one each
        consumer.subscribe("/queue/orders.>", id="wild", ack="auto")
        waiting = client(state, "g2", later)
        waiting.subscribe("/queue/later", id="later", ack="auto")
        responder = Responder()
        serving = client(state, "g1", responder)
        responder.connection = serving
        serving.subscribe("/queue/rpc", id="rpc", ack="auto")
        producer = client(state, "g1")
        requester = client(state, "g3", answers)
        connections += [consumer, waiting, serving, producer, requester]
        time.sleep(2.0)  # bindings reach every group

        for name in ("orders.eu", "orders.us.east", "other"):
            producer.send(f"/queue/{name}", name)
        sent_at = time.time()
        producer.send("/queue/later", "scheduled", headers={"AMQ_SCHEDULED_DELAY": "1500"})
        requester.send("/queue/rpc", "ping", headers={"reply-to": "/temp-queue/answers"})

        wait_until(lambda: len(wild.message_list) >= 2 and answers.message_list and later.message_list)
        assert sorted(body for _h, body in wild.message_list) == ["orders.eu", "orders.us.east"]
        [(headers, body)] = answers.message_list
        assert body == "PING" and headers["subscription"] == "/temp-queue/answers"
        assert time.time() - sent_at >= 1.5 and [body for _h, body in later.message_list] == ["scheduled"]

        def other_waits_on_g1() -> bool:  # a member answers from its replica: a follower may be a moment behind
            listed = raftmq("manage", "destinations", "--json", cwd=tmp_path)
            assert listed.returncode == 0, listed.stderr
            rows = json.loads(listed.stdout)
            assert {row["group"] for row in rows} == {"g1", "g2", "g3"}
            return any(row["group"] == "g1" and row["destination"] == "/queue/other" and row["depth"] == 1
                       for row in rows)

        wait_until(other_waits_on_g1, timeout=15.0)
        moved = raftmq("manage", "move", "--group", "g1", "--from", "/queue/other", "--to", "/queue/orders.moved",
                       "--all", cwd=tmp_path)
        assert moved.returncode == 0 and "moved 1" in moved.stdout, moved.stdout + moved.stderr
        wait_until(lambda: len(wild.message_list) == 3)

        admin = next(node.admin for node in state.nodes if node.group == "g3")
        with urllib.request.urlopen(f"http://{admin}/", timeout=10) as page:
            assert b"raftmq" in page.read()
        with urllib.request.urlopen(f"http://{admin}/api/overview", timeout=10) as answer:
            overview = json.loads(answer.read())
        assert set(overview["peers"]) == {"g1", "g2"}
        assert all(len(members) == 3 for members in overview["peers"].values())
    finally:
        for connection in connections:
            if connection.is_connected():
                connection.disconnect()
        cleanup([*seen, read_state(tmp_path / ".raftmq")])

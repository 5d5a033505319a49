"""The status view: summarising /status answers and rendering them to a string console."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from raftmq.ops.status_view import NodeAddress, collect_status, render_to_string, summarise


def node_status(role: str, term: int, commit: int, applied: int, destinations: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"node": "x", "role": role, "term": term, "commit_index": commit, "applied_index": applied, "sessions": 2,
            "failure": None, "broker": {"sessions": 2, "destinations": destinations or {}}}


QUEUE = {"depth": 7, "in_flight": 3, "consumers": 2, "enqueued": 40, "dequeued": 30, "expired": 0, "dead_lettered": 1}
NODES = [NodeAddress("g1", f"n{i}", f"127.0.0.1:{61000 + i}", f"127.0.0.1:{62000 + i}", 100 + i) for i in (1, 2, 3)]


def test_summary_roles_lag_and_destinations_come_from_the_leader() -> None:
    summary = summarise([
        (NODES[0], node_status("follower", 4, 120, 95)),
        (NODES[1], node_status("leader", 4, 120, 118, {"/queue/orders": QUEUE})),
        (NODES[2], None),
    ])
    (group,) = summary["groups"]
    assert group["leader"] == "n2" and group["term"] == 4 and group["commit_index"] == 120 and group["nodes_up"] == 2
    rows = {row["id"]: row for row in group["nodes"]}
    assert rows["n1"]["lag"] == 25 and rows["n2"]["lag"] == 2
    assert rows["n3"] == {"id": "n3", "client": "127.0.0.1:61003", "admin": "127.0.0.1:62003", "pid": 103, "up": False, "role": "down"}
    assert group["destinations"] == {"/queue/orders": QUEUE}
    json.dumps(summary)  # what --json prints


def test_during_a_hand_over_the_higher_term_is_the_leader() -> None:
    summary = summarise([(NODES[0], node_status("leader", 3, 10, 10)), (NODES[1], node_status("leader", 4, 12, 12))])
    assert summary["groups"][0]["leader"] == "n2"


def test_rendered_view_shows_master_slave_down_and_queues() -> None:
    summary = summarise([
        (NODES[0], node_status("follower", 4, 120, 95)),
        (NODES[1], node_status("leader", 4, 120, 120, {"/queue/orders": QUEUE})),
        (NODES[2], None),
    ])
    text = render_to_string(summary, width=100)
    assert "group g1: master n2, term 4, 2/3 nodes up" in text
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "slave" in lines["n1"] and "25" in lines["n1"] and "127.0.0.1:61001" in lines["n1"]
    assert "master" in lines["n2"] and "127.0.0.1:61002" in lines["n2"]
    assert "down" in lines["n3"] and "103" in lines["n3"]
    cells = [cell.strip() for cell in lines["/queue/orders"].split("│")[1:-1]]
    assert cells == ["/queue/orders", "7", "2", "3", "40", "30", "1"]  # depth, consumers, in-flight, ...


def test_a_group_without_leader_says_so() -> None:
    text = render_to_string(summarise([(NODES[0], None), (NODES[1], node_status("follower", 2, 5, 5))]))
    assert "group g1: NO MASTER, 1/2 nodes up" in text and "destinations" not in text


@pytest.fixture
def fake_admin() -> Iterator[str]:
    """An HTTP server answering /status like a leader's admin port."""
    answer = json.dumps(node_status("leader", 9, 33, 33, {"/queue/a": QUEUE})).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = answer if self.path == "/status" else b"{}"
            self.send_response(200 if self.path == "/status" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_collect_status_asks_each_node_and_marks_silent_ones_down(fake_admin: str) -> None:
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        silent = f"127.0.0.1:{closed.getsockname()[1]}"
        nodes = [NodeAddress("g", "up", "127.0.0.1:1", fake_admin), NodeAddress("g", "gone", "127.0.0.1:2", silent)]
        summary = collect_status(nodes, timeout=1.0)
    (group,) = summary["groups"]
    assert group["leader"] == "up" and group["term"] == 9 and group["destinations"] == {"/queue/a": QUEUE}
    assert [(row["id"], row["role"], row["up"]) for row in group["nodes"]] == [("up", "leader", True), ("gone", "down", False)]

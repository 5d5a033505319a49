"""The status view: summarising /status answers and rendering them to a string console."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from raftmq import processes
from raftmq.ops.status_view import NodeAddress, collect_status, render_to_string, summarise


def node_status(role: str, term: int, commit: int, applied: int, destinations: dict[str, Any] | None = None,
                dead: int = 0, health: str = "ok") -> dict[str, Any]:
    return {"node": "x", "role": role, "term": term, "commit_index": commit, "applied_index": applied, "sessions": 2,
            "failure": None, "health": health, "pid": 4242,
            "rates": {"enqueue_rate": 12.5, "dequeue_rate": 10.0, "enqueued": 40, "dequeued": 30,
                      "destinations": {name: RATES[name] for name in destinations or {}}},
            "broker": {"sessions": 5, "destinations": destinations or {},
                       "dead_letter": {"destination": "/queue/DLQ", "depth": dead, "dead_lettered": dead}}}


QUEUE = {"depth": 7, "in_flight": 3, "consumers": 2, "enqueued": 40, "dequeued": 30, "expired": 0, "dead_lettered": 1}
DLQ = {"depth": 1, "in_flight": 0, "consumers": 0, "enqueued": 1, "dequeued": 0, "expired": 0, "dead_lettered": 0}
RATES = {"/queue/orders": {"enqueue_rate": 12.5, "dequeue_rate": 10.0},
         "/queue/DLQ": {"enqueue_rate": 0.1, "dequeue_rate": 0.0},
         "/queue/a": {"enqueue_rate": 1.0, "dequeue_rate": 2.0}}
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
    assert rows["n3"] == {"id": "n3", "client": "127.0.0.1:61003", "admin": "127.0.0.1:62003", "pid": 103, "up": False,
                          "role": "down", "health": "down"}
    assert rows["n1"]["connections"] == 2 and rows["n1"]["health"] == "ok"
    assert group["destinations"] == {"/queue/orders": {**QUEUE, **RATES["/queue/orders"]}}  # the leader's rates beside
    assert group["sessions"] == 5 and group["rates"]["enqueue_rate"] == 12.5
    assert group["ok"] is False and summary["ok"] is False  # n3 is down
    json.dumps(summary)  # what --json prints


def test_the_mqtt_column_shows_only_where_a_member_has_an_mqtt_port() -> None:
    plain = render_to_string(summarise([(NODES[0], node_status("leader", 4, 1, 1))]), width=120)
    assert "mqtt" not in plain
    with_mqtt = [NodeAddress("g1", "n1", "127.0.0.1:61001", "127.0.0.1:62001", 101, mqtt="127.0.0.1:1883"),
                 NodeAddress("g1", "n2", "127.0.0.1:61002", "127.0.0.1:62002", 102)]
    summary = summarise([(with_mqtt[0], node_status("leader", 4, 1, 1)), (with_mqtt[1], None)])
    assert [row.get("mqtt") for row in summary["groups"][0]["nodes"]] == ["127.0.0.1:1883", None]
    text = render_to_string(summary, width=140)
    header = next(line for line in text.splitlines() if "client" in line and "node" in line)
    assert [cell.strip() for cell in header.split("┃")[1:-1]][-3:] == ["client", "mqtt", "pid"], header
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[1:-1]]
            for line in text.splitlines() if line.startswith("│")}
    assert rows["n1"][-3:] == ["127.0.0.1:61001", "127.0.0.1:1883", "101"]
    assert rows["n2"][-3:] == ["127.0.0.1:61002", "-", "102"]


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
    # depth, consumers, in-flight, enq/s, deq/s, enqueued, dequeued, dead-lettered
    assert cells == ["/queue/orders", "7", "2", "3", "12.5", "10.0", "40", "30", "1"]


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


@pytest.mark.integration
def test_collect_status_asks_each_node_and_marks_silent_ones_down(fake_admin: str) -> None:
    silent = f"127.0.0.1:{processes.free_port()}"  # a port nobody listens on
    nodes = [NodeAddress("g", "up", "127.0.0.1:1", fake_admin), NodeAddress("g", "gone", "127.0.0.1:2", silent)]
    summary = collect_status(nodes, timeout=1.0)
    (group,) = summary["groups"]
    assert group["leader"] == "up" and group["term"] == 9
    assert group["destinations"] == {"/queue/a": {**QUEUE, **RATES["/queue/a"]}}
    assert [(row["id"], row["role"], row["up"]) for row in group["nodes"]] == [("up", "leader", True),
                                                                               ("gone", "down", False)]


def test_exit_verdict_needs_every_node_up_and_exactly_one_leader() -> None:
    up = summarise([(NODES[0], node_status("follower", 4, 9, 9)), (NODES[1], node_status("leader", 4, 9, 9))])
    assert up["ok"] and up["groups"][0]["leaders"] == 1
    leaderless = summarise([(NODES[0], node_status("follower", 4, 9, 9, health="unavailable")),
                            (NODES[1], node_status("follower", 4, 9, 9, health="unavailable"))])
    assert not leaderless["ok"] and leaderless["groups"][0]["leaders"] == 0
    two = summarise([(NODES[0], node_status("leader", 3, 9, 9)), (NODES[1], node_status("leader", 4, 9, 9))])
    assert not two["ok"] and two["groups"][0]["leaders"] == 2
    # One group fine, another with a node down: not ok overall.
    other = NodeAddress("g2", "m1", "127.0.0.1:1", "127.0.0.1:2")
    mixed = summarise([(NODES[0], node_status("leader", 4, 9, 9)), (other, None)])
    assert [group["ok"] for group in mixed["groups"]] == [True, False] and not mixed["ok"]


def test_view_shows_health_rates_connections_and_highlights_dead_letters() -> None:
    from rich.console import Console

    from raftmq.ops.status_view import render_status

    summary = summarise([
        (NODES[0], node_status("follower", 4, 9, 9, health="unavailable")),
        (NODES[1], node_status("leader", 4, 9, 9, {"/queue/orders": QUEUE, "/queue/DLQ": DLQ}, dead=1)),
    ])
    console = Console(file=io.StringIO(), record=True, width=120, force_terminal=True, color_system="standard")
    console.print(render_status(summary))
    text = console.export_text(clear=False)
    assert "master n2, term 4, 2/2 nodes up, 5 sessions, 12.5 in / 10.0 out msg/s" in text
    assert "dead-letter queue /queue/DLQ: 1 waiting, 1 dead-lettered in all" in text
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in text.splitlines() if line.startswith("│")}
    assert rows["n1"][:2] == ["slave", "unavailable"] and rows["n2"][:2] == ["master", "ok"]
    assert rows["n1"][6] == "2"  # conns
    assert rows["/queue/DLQ"] == ["1", "0", "0", "0.1", "0.0", "1", "0", "0"]
    styled = console.export_text(styles=True)
    bold_red = "\x1b[1;31m"
    assert f"{bold_red}/queue/DLQ" in styled  # messages wait in the DLQ
    assert f"{bold_red}1 waiting" in styled
    assert f"{bold_red}unavailable" in styled
    assert f"{bold_red}/queue/orders" not in styled  # nothing waits there to be looked at
    quiet = summarise([(NODES[1], node_status("leader", 4, 9, 9, {"/queue/DLQ": {**DLQ, "depth": 0}}))])
    console = Console(file=io.StringIO(), record=True, width=120, force_terminal=True, color_system="standard")
    console.print(render_status(quiet))
    styled = console.export_text(styles=True)
    assert bold_red not in styled and "0 waiting" in styled


def test_rates_show_as_dashes_until_known() -> None:
    status = node_status("leader", 1, 1, 1, {"/queue/orders": QUEUE})
    status["rates"] = {"enqueue_rate": None, "dequeue_rate": None,
                       "destinations": {"/queue/orders": {"enqueue_rate": None, "dequeue_rate": None}}}
    text = render_to_string(summarise([(NODES[1], status)]), width=120)
    cells = [line.split("│")[2:-1] for line in text.splitlines() if "/queue/orders" in line][0]
    assert [cell.strip() for cell in cells][3:5] == ["-", "-"] and "msg/s" not in text


def test_the_cluster_table_shows_where_each_queue_s_messages_go() -> None:
    hot = {**QUEUE, "forwarded": 90, "arrived": 15}

    def leader(group: str, rates: dict[str, float]) -> tuple[NodeAddress, dict[str, Any]]:
        status = node_status("leader", 2, 5, 5)
        status["broker"]["destinations"] = {"/queue/hot": hot}
        status["rates"]["destinations"] = {"/queue/hot": rates}
        return NodeAddress(group, "n1", "127.0.0.1:61001", "127.0.0.1:62001", 101), status

    summary = summarise([
        leader("g1", {"enqueue_rate": 120.0, "dequeue_rate": 118.0, "forward_rate": 30.0, "arrive_rate": 20.0}),
        leader("g2", {"enqueue_rate": 25.0, "dequeue_rate": 25.0, "forward_rate": 0.0, "arrive_rate": 25.0}),
    ])
    view = summary["cluster"]["/queue/hot"]
    assert view["g1"] == {"depth": 7, "consumers": 2, "local_rate": 100.0, "forward_rate": 30.0, "arrive_rate": 20.0}
    assert view["g2"]["local_rate"] == 0.0
    text = render_to_string(summary, width=160)
    assert "local 100 · out 30 · in 20" in text and "local 0 · out 0 · in 25" in text
    unknown = summarise([leader("g1", {"enqueue_rate": None, "dequeue_rate": None}),  # type: ignore[dict-item]
                         leader("g2", {})])
    assert unknown["cluster"]["/queue/hot"]["g1"]["local_rate"] is None
    assert "· out" not in render_to_string(unknown, width=160)
    assert "msg/s stored where they were sent (local)" in text


def test_the_links_table_shows_each_discovered_groups_presence() -> None:
    status = node_status("leader", 2, 5, 5)
    status["cluster"] = {"links": [
        {"from": "g1", "to": "g2", "state": "connected", "forwarded": 5, "waiting": 0, "in_flight": 0,
         "presence": "up", "forwarded_first": 7, "fell_back": 2},
        {"from": "g1", "to": "g3", "state": "retrying", "retry_in_s": 1, "forwarded": 0, "waiting": 4, "in_flight": 0,
         "last_error": "connection refused", "presence": "down"},
        {"from": "g1", "to": "g4", "state": "connected", "forwarded": 0, "waiting": 0, "in_flight": 0},  # a static link
    ], "draining": None, "drained": 0}
    text = render_to_string(summarise([(NodeAddress("g1", "n1", "127.0.0.1:1", "127.0.0.1:2"), status)]), width=160)
    header = next(line for line in text.splitlines() if line.startswith("┃") and "presence" in line)
    assert [cell.strip() for cell in header.split("┃")[1:-1]][:4] == ["from", "to", "presence", "state"]
    rows = {(row[0], row[1]): row for row in ([cell.strip() for cell in line.split("│")[1:-1]]
                                             for line in text.splitlines() if line.startswith("│ g1"))}
    assert rows[("g1", "g2")][2:6] == ["up", "connected", "5", "7 (fell back: 2)"]
    assert rows[("g1", "g3")][2:4] == ["down", "retrying in 1 s"]
    assert rows[("g1", "g4")][2] == "-"

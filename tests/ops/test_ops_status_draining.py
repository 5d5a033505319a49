"""What a draining group looks like: in `raftmq status` (table and --json) and in the admin
port's /status, /health and /metrics of each member. A draining group turns every client away,
so it must not read `3/3 ok` and nothing else."""

from __future__ import annotations

import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from raftmq.ops.status_view import render_to_string, summarise
from raftmq.server.admin.metrics import HEALTH_OK, exposition, health, metrics_registry, readiness
from tests.ops.test_ops_status_view import NODES, QUEUE, node_status


def draining(role: str, to: list[str] | None, moved: int, destinations: dict[str, Any] | None = None) -> dict[str, Any]:
    status = node_status(role, 5, 40, 40, destinations)
    status["leader"] = "n2"
    status["cluster"] = {"group": "g1", "links": [], "reachable": {}, "bindings": {}, "forwarded": {},
                         "redistributed": 0, "draining": to, "drained": moved, "unroutable": 0}
    return status


def cells(text: str) -> dict[str, list[str]]:
    return {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in text.splitlines() if line.startswith("│")}


def test_a_draining_group_says_so_in_the_table_and_the_json() -> None:
    summary = summarise([
        (NODES[0], draining("follower", ["g2", "g3"], 120)),
        (NODES[1], draining("leader", ["g2", "g3"], 120, {"/queue/orders": QUEUE})),  # 7 ready, 3 in flight
        (NODES[2], draining("follower", ["g2", "g3"], 120)),
    ])
    (group,) = summary["groups"]
    assert group["state"] == "draining"
    assert group["drain"] == {"state": "draining", "to": ["g2", "g3"], "moved": 120, "left": 10}
    assert group["ok"] and summary["ok"]  # the exit status: every node answers, one leader
    json.dumps(summary)
    text = render_to_string(summary, width=200)
    assert "group g1: master n2, term 5, 3/3 nodes up, DRAINING, 5 sessions" in text
    assert "group g1 is DRAINING to g2, g3: 120 moved, 10 left; it turns every client away" in text
    rows = cells(text)
    assert [rows[node][1] for node in ("n1", "n2", "n3")] == ["draining"] * 3  # the health column: not "ok"


def test_a_drained_group_holds_nothing_and_any_member_tells() -> None:
    empty = {**QUEUE, "depth": 0, "in_flight": 0}
    summary = summarise([(NODES[0], draining("follower", [], 130)),
                         (NODES[1], draining("leader", [], 130, {"/queue/orders": empty}))])
    (group,) = summary["groups"]
    assert group["state"] == "drained" and group["drain"] == {"state": "drained", "to": [], "moved": 130, "left": 0}
    text = render_to_string(summary, width=200)
    assert "2/2 nodes up, DRAINED," in text
    assert "group g1 is DRAINED to every group it reaches: 130 moved, nothing left; it turns every client away" in text
    assert [cells(text)[node][1] for node in ("n1", "n2")] == ["drained"] * 2
    # No leader answers: a follower's replica still says the group drains (what is left: unknown).
    leaderless = summarise([(NODES[0], draining("follower", ["g2"], 3)), (NODES[1], None)])
    assert leaderless["groups"][0]["drain"] == {"state": "draining", "to": ["g2"], "moved": 3, "left": None}


def test_a_group_that_does_not_drain_is_serving() -> None:
    summary = summarise([(NODES[1], draining("leader", None, 0))])
    assert summary["groups"][0]["state"] == "serving" and summary["groups"][0]["drain"] is None
    text = render_to_string(summary, width=200)
    assert "DRAIN" not in text and cells(text)["n2"][1] == "ok"


def test_the_admin_status_of_a_draining_member_gives_the_reason_and_metrics_count_it() -> None:
    status = draining("follower", ["g2"], 42)
    verdict, reason = health(status)
    assert verdict == HEALTH_OK  # /health stays 200: the member serves its role
    assert reason == ("draining (raftmq group drain): the group turns every client away and moves what it holds "
                      "to g2; 42 moved so far")
    assert readiness(status) == (True, None)  # /ready means what it meant
    assert health(draining("leader", None, 0)) == (HEALTH_OK, None)
    assert health(node_status("leader", 1, 1, 1)) == (HEALTH_OK, None)  # no cluster at all
    samples = {sample.name: sample.value for family in text_string_to_metric_families(
        exposition(metrics_registry(lambda: {**status, "group": "g1"})).decode()) for sample in family.samples}
    assert samples["raftmq_cluster_draining"] == 1 and samples["raftmq_cluster_drained_total"] == 42
    assert samples["raftmq_up"] == 1

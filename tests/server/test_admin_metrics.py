"""The admin port's `/metrics` (Prometheus) and `/health` on real node processes, driven by
stomp-py: values follow real sends, acks, nacks to the DLQ and disconnects; a member that
cannot reach a quorum answers 503."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.group_file import load_group_config
from raftmq.config import load_node_config
from raftmq.errors import ConfigError
from raftmq.processes import free_ports
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import connect

pytestmark = pytest.mark.integration

Samples = list[tuple[str, dict[str, str], float]]


def get(port: int, path: str, timeout: float = 2.0) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def scrape(port: int) -> Samples:
    code, content_type, body = get(port, "/metrics")
    assert code == 200 and content_type.startswith("text/plain"), (code, content_type)
    families = text_string_to_metric_families(body.decode())
    return [(s.name, s.labels, s.value) for family in families for s in family.samples]


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for n, found_labels, v in samples
             if n == name and all(found_labels.get(k) == want for k, want in labels.items())]
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def health(port: int) -> tuple[int, dict[str, Any]]:
    code, content_type, body = get(port, "/health")
    assert content_type == "application/json"
    return code, json.loads(body)


def wait_for(check: Any, timeout: float = 10.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() >= deadline:
            return result
        time.sleep(interval)


def test_metrics_follow_sends_acks_dead_letters_and_disconnects(tmp_path: Path) -> None:
    group = Group(tmp_path)
    queue = "/queue/monitored"
    try:
        group.start()
        leader_id = group.leader()
        leader = group.members[leader_id]
        followers = [m for i, m in group.members.items() if i != leader_id]
        before = scrape(leader.admin_port)
        assert value(before, "raftmq_raft_leader", group="test", node=leader_id) == 1
        assert value(before, "raftmq_connections") == 0
        assert not [s for s in before if s[1].get("destination") == queue]
        for member in group.members.values():
            code, answer = health(member.admin_port)
            assert code == 200 and answer["status"] == "ok" and answer["group"] == "test", answer

        conn, listener = connect(("127.0.0.1", leader.client_port))
        try:
            for i in range(5):
                conn.send(queue, f"m{i}", receipt=f"r{i}")
                listener.receipt(f"r{i}")
            sent = scrape(leader.admin_port)
            assert value(sent, "raftmq_destination_enqueued_total", destination=queue, type="queue") == 5
            assert value(sent, "raftmq_destination_depth", destination=queue) == 5
            assert value(sent, "raftmq_connections") == 1 and value(sent, "raftmq_sessions") == 1
            rates = wait_for(
                lambda: group.status(leader_id)["rates"]["destinations"][queue]["enqueue_rate"] is not None, 3)
            assert rates, "no enqueue rate within 3 s"
            status = group.status(leader_id)
            assert status["rates"]["destinations"][queue]["enqueue_rate"] > 0 and status["rates"]["enqueue_rate"] > 0
            assert "enqueue_rate" not in status["broker"]["destinations"][queue]  # replicated state only there
            assert value(scrape(leader.admin_port), "raftmq_destination_enqueue_rate", destination=queue) > 0

            conn.subscribe(queue, id="s", ack="client-individual")
            frames = [listener.message() for _ in range(5)]
            for frame in frames[:3]:
                conn.ack(frame.headers["ack"])
            # NACK the fourth until its delivery count reaches max_delivery_count (10): the DLQ.
            doomed = frames[3]
            for attempt in range(10):
                last = attempt == 9
                conn.nack(doomed.headers["ack"], receipt="dead" if last else None)
                if not last:
                    doomed = listener.message()
                    assert doomed.headers["message-id"] == frames[3].headers["message-id"]
            listener.receipt("dead")
            settled = scrape(leader.admin_port)
            assert value(settled, "raftmq_destination_dequeued_total", destination=queue) == 3
            assert value(settled, "raftmq_destination_dead_lettered_total", destination=queue) == 1
            assert value(settled, "raftmq_destination_in_flight", destination=queue) == 1  # the fifth, unacked
            assert value(settled, "raftmq_destination_consumers", destination=queue) == 1
            assert value(settled, "raftmq_destination_depth", destination=queue) == 0
            assert value(settled, "raftmq_dead_letter_depth") == 1
            assert value(settled, "raftmq_destination_depth", destination="/queue/DLQ") == 1

            # Followers applied the same commands: the same counters, another role, no clients.
            commit = int(value(settled, "raftmq_raft_commit_index"))
            for follower in followers:
                group.wait_applied(follower.id, commit)
                seen = scrape(follower.admin_port)
                assert value(seen, "raftmq_raft_leader", node=follower.id) == 0
                assert value(seen, "raftmq_connections") == 0 and value(seen, "raftmq_sessions") == 1
                for name in ("enqueued_total", "dequeued_total", "dead_lettered_total"):
                    metric = f"raftmq_destination_{name}"
                    assert value(seen, metric, destination=queue) == value(settled, metric, destination=queue), name
                assert value(seen, "raftmq_raft_replication_lag") >= 0
        finally:
            conn.disconnect()

        # The unacknowledged fifth message returns to the queue when its session ends.
        def returned() -> Samples | None:
            samples = scrape(leader.admin_port)
            done = value(samples, "raftmq_connections") == 0 and value(samples, "raftmq_sessions") == 0
            return samples if done else None

        after = wait_for(returned, 10)
        assert after, "the session did not end within 10 s"
        assert value(after, "raftmq_destination_depth", destination=queue) == 1
        assert value(after, "raftmq_destination_in_flight", destination=queue) == 0
        assert value(after, "raftmq_destination_consumers", destination=queue) == 0
        assert value(after, "raftmq_apply_failures_total") == 0
        assert value(after, "raftmq_raft_journal_bytes") > 0
    finally:
        group.close()


def test_health_is_503_until_the_member_has_a_leader(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        group.start("n1")  # one of three: no quorum, no leader
        port = group.members["n1"].admin_port
        time.sleep(1.0)  # longer than an election timeout: it has tried and failed
        code, answer = health(port)
        assert code == 503 and answer["status"] == "unavailable" and answer["leader"] is None, answer
        assert answer["role"] == "follower" and answer["node"] == "n1" and answer["reason"]
        samples = scrape(port)
        assert value(samples, "raftmq_up", group="test", node="n1") == 0
        assert value(samples, "raftmq_raft_leader") == 0
        assert group.status("n1")["health"] == "unavailable"

        group.start("n2")  # a quorum: one of them leads, the other follows it
        both = wait_for(lambda: all(health(group.members[i].admin_port)[0] == 200 for i in ("n1", "n2")), 15)
        assert both, [health(group.members[i].admin_port) for i in ("n1", "n2")]
        roles = sorted(health(group.members[i].admin_port)[1]["role"] for i in ("n1", "n2"))
        assert roles == ["follower", "leader"]
        assert value(scrape(port), "raftmq_up") == 1
    finally:
        group.close()


def test_a_single_node_serves_its_admin_port_when_configured(tmp_path: Path) -> None:
    client, admin = free_ports(2)
    config = tmp_path / "node.toml"
    config.write_text(f'[node]\nname = "solo"\nport = {client}\nadmin = "127.0.0.1:{admin}"\n')
    stdout = tmp_path / "node.out"
    with open(stdout, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--config", str(config)],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        ready = wait_for(lambda: "raftmq node listening on" in stdout.read_text() or proc.poll() is not None, 15)
        assert ready and proc.poll() is None, stdout.read_text()
        code, answer = health(admin)
        assert code == 200 and answer == {**answer, "status": "ok", "role": "leader", "group": "solo", "node": "solo"}
        conn, listener = connect(("127.0.0.1", client))
        try:
            for i in range(2):
                conn.send("/queue/solo", "x", receipt=f"r{i}")
                listener.receipt(f"r{i}")
            samples = scrape(admin)
        finally:
            conn.disconnect()
        enqueued = value(samples, "raftmq_destination_enqueued_total", destination="/queue/solo", group="solo",
                         node="solo")
        assert enqueued == 2
        assert value(samples, "raftmq_connections") == 1
        assert value(samples, "raftmq_raft_commit_index") == value(samples, "raftmq_raft_applied_index") > 0
        assert get(admin, "/nope")[0] == 404
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 0, stdout.read_text()[-2000:]


def test_admin_addresses_are_checked_where_they_are_configured(tmp_path: Path) -> None:
    node = tmp_path / "node.toml"
    node.write_text('[node]\nadmin = "localhost"\n')
    with pytest.raises(ConfigError, match=r"node\.toml: node\.admin: expected host:port"):
        load_node_config(node)
    group = tmp_path / "group.toml"
    group.write_text('[group]\nname = "g"\ndata_dir = "d"\n[server]\nadmin = "127.0.0.1:9"\n'
                     '[[node]]\nid = "n1"\nclient = "127.0.0.1:1"\nraft = "127.0.0.1:2"\n')
    with pytest.raises(ConfigError, match=r"group\.toml: server\.admin: set by each \[\[node\]\]"):
        load_group_config(group)


def test_node_admin_option_serves_health_and_is_checked(tmp_path: Path) -> None:
    client, admin = free_ports(2)
    stdout = tmp_path / "node.out"
    with open(stdout, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{client}",
                                 "--in-memory", "--admin", f"127.0.0.1:{admin}"], stdout=out, stderr=subprocess.STDOUT)
    try:
        ready = wait_for(lambda: "raftmq node listening on" in stdout.read_text() or proc.poll() is not None, 15)
        assert ready and proc.poll() is None, stdout.read_text()
        code, answer = health(admin)
        assert code == 200 and answer["status"] == "ok" and answer["role"] == "leader"
    finally:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    bad = subprocess.run([sys.executable, "-m", "raftmq", "node", "--admin", "nowhere"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2 and "--admin" in bad.stderr and "expected HOST:PORT" in bad.stderr, bad.stderr

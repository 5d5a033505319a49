"""The admin port's management API on a real 3-member group, driven over HTTP while stomp.py
clients produce and consume: destinations with their figures, connections and consumers,
DLQ retry and move, purge, delete, closing a connection; a follower passes a change on to the
leader (over HTTPS with the caller's own login when the group has [tls]); the overview names
the group, not the node; logins and ACLs as STOMP's (docs/management.md)."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import websocket

from raftmq.client.admin import AdminAccess
from raftmq.passwords import hash_password
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import connect
from tests.helpers.tls_certs import make_certificates

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def call(group: Group, node: str, method: str, path: str, body: dict[str, Any] | None = None,
         login: tuple[str, str] | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    member = group.members[node]
    data = json.dumps(body).encode() if body is not None else None
    sent = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(f"http://{member.host}:{member.admin_port}{path}", data=data, method=method,
                                     headers={**sent, **(headers or {})})
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def destination_row(group: Group, node: str, name: str, **kw: Any) -> dict[str, Any] | None:
    status, answer = call(group, node, "GET", "/api/destinations", **kw)
    assert status == 200, answer
    return next((row for row in answer["destinations"] if row["destination"] == name), None)


def wait_for(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_destinations_dlq_retry_purge_delete_and_connections(tmp_path: Path) -> None:
    group = Group(tmp_path, core={"max_delivery_count": 2})
    group.start()
    try:
        leader = group.leader()
        follower = next(node for node in group.members if node != leader)
        address = (group.members[leader].host, group.members[leader].client_port)
        producer, _ = connect(address)
        for i in range(5):
            producer.send("/queue/orders", f"order-{i}", headers={"colour": "red" if i % 2 else "blue"})
        consumer, listener = connect(address, headers={"client-id": "billing"})
        consumer.subscribe("/queue/orders", id="s1", ack="client-individual", headers={"activemq.prefetchSize": "1"})
        frame = listener.message()
        for _ in range(2):  # max_delivery_count 2: two NACKs and it is dead
            consumer.nack(frame.headers["ack"])
            if _ == 0:
                frame = listener.message()
        wait_for(lambda: (destination_row(group, leader, "/queue/DLQ") or {}).get("depth") == 1)
        # A follower reads its own replica, which applies what the leader did a moment later.
        row = wait_for(lambda: (found := destination_row(group, follower, "/queue/orders"))
                       and found["dead_lettered"] == 1 and found)
        assert row["kind"] == "queue" and row["consumers"] == 1 and row["internal"] is False
        # A lone group (no cluster of groups) is named by its group file, on every member.
        for node in group.members:
            status, overview = call(group, node, "GET", "/api/overview")
            assert status == 200 and (overview["group"], overview["node"]) == ("test", node), overview
            assert overview["drain"] is None

        browser_like = websocket.create_connection(f"ws://{address[0]}:{address[1]}/ws", timeout=10)
        browser_like.send("CONNECT\naccept-version:1.2\nhost:/\nclient-id:web\n\n\0")
        assert browser_like.recv().startswith("CONNECTED")
        status, answer = call(group, leader, "GET", "/api/connections")
        assert status == 200
        billing = next(c for c in answer["connections"] if c["client_id"] == "billing")
        assert billing["version"] == "1.2" and billing["subscriptions"] == 1 and billing["since"] > 0
        web = next(c for c in answer["connections"] if c["client_id"] == "web")
        assert (billing["transport"], web["transport"]) == ("tcp", "ws")
        browser_like.close()
        status, answer = call(group, leader, "GET", "/api/consumers")
        [sub] = [c for c in answer["consumers"] if c["destination"] == "/queue/orders"]
        assert sub["sub_id"] == "s1" and sub["ack"] == "client-individual" and sub["prefetch"] == 1 and sub["active"]

        status, answer = call(group, leader, "GET", "/api/messages?destination=/queue/DLQ")
        [dead] = answer["messages"]
        assert dead["original_destination"] == "/queue/orders" and dead["body"].startswith("order-")
        # Why it died and after how many deliveries (the copy's own count starts again).
        assert (dead["dead_letter_reason"], dead["dead_letter_deliveries"]) == ("max-deliveries", 2), dead
        assert "max_delivery_count 2" in dead["dead_letter_cause"]

        # A change passed on by a member already is not passed on again: it names the leader's admin port.
        status, answer = call(group, follower, "POST", "/api/messages/retry", {"from": "/queue/DLQ", "all": True},
                              headers={"X-Raftmq-Forwarded": "1"})
        assert status == 409 and answer["leader_admin"] == f"127.0.0.1:{group.members[leader].admin_port}"
        # A change asked of a follower is passed on to the leader, whose answer it gives.
        retry = {"from": "/queue/DLQ", "ids": [dead["message_id"]]}
        status, answer = call(group, follower, "POST", "/api/messages/retry", retry)
        assert (status, answer) == (200, {"ok": True, "moved": 1, "skipped": 0})
        wait_for(lambda: destination_row(group, follower, "/queue/DLQ")["depth"] == 0)

        consumer.disconnect()
        status, answer = call(group, leader, "POST", "/api/messages/move",
                              {"from": "/queue/orders", "to": "/queue/red", "selector": "colour = 'red'"})
        assert status == 200 and answer["moved"] == 2
        status, answer = call(group, leader, "POST", "/api/destinations/purge", {"destination": "/queue/orders"})
        assert status == 200 and answer["purged"] == 3
        status, answer = call(group, leader, "POST", "/api/destinations/create", {"destination": "/queue/new"})
        assert (status, answer) == (200, {"ok": True, "created": 1})

        # Delete a queue a stomp.py consumer is on: it gets an ERROR, the queue is gone everywhere.
        watcher, watching = connect(address)
        watcher.subscribe("/queue/red", id="w", ack="client-individual")
        watching.message()
        status, answer = call(group, leader, "POST", "/api/destinations/delete", {"destination": "/queue/red"})
        assert status == 200 and answer["deleted"] == 1
        assert "destination deleted" in watching.errors.get(timeout=5).headers["message"]
        wait_for(lambda: destination_row(group, follower, "/queue/red") is None)

        # Close the producer's connection.
        status, answer = call(group, leader, "GET", "/api/connections")
        session = answer["connections"][0]["session"]
        status, answer = call(group, leader, "POST", "/api/connections/close", {"session": session})
        assert (status, answer) == (200, {"ok": True, "closed": 1})
        assert call(group, leader, "POST", "/api/destinations/purge", {"destination": "/queue/none"})[0] == 400
        assert call(group, leader, "POST", "/api/destinations/purge", {"destination": 5})[0] == 400
        producer.disconnect()
    finally:
        group.close()


PASS = "ops-pass-31"


def test_logins_and_acls_decide_who_reads_and_who_changes(tmp_path: Path) -> None:
    group = Group(tmp_path)
    text = group.config_path.read_text()
    text += f'[[user]]\nname = "ops"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["ops"]\n'
    text += f'[[user]]\nname = "app"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["apps"]\n'
    text += '[[acl]]\nqueue = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    text += '[[acl]]\ntopic = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    text += '[[acl]]\nqueue = "app.>"\nread = ["apps", "ops"]\nwrite = ["apps", "ops"]\nadmin = ["ops"]\n'
    group.config_path.write_text(text)
    group.admin_access = AdminAccess(login="app", passcode=PASS)  # /status needs a login too
    group.start()
    try:
        leader = group.leader()
        ops, app = ("ops", PASS), ("app", PASS)
        for name in ("/queue/app.jobs", "/queue/secret"):
            assert call(group, leader, "POST", "/api/destinations/create", {"destination": name}, login=ops)[0] == 200
        assert call(group, leader, "GET", "/api/destinations")[0] == 401
        assert call(group, leader, "GET", "/api/destinations", login=("ops", "wrong"))[0] == 401
        status, answer = call(group, leader, "GET", "/api/destinations", login=app)
        assert status == 200 and [row["destination"] for row in answer["destinations"]] == ["/queue/app.jobs"]
        jobs = {"destination": "/queue/app.jobs"}
        status, answer = call(group, leader, "POST", "/api/destinations/purge", jobs, login=app)
        assert status == 403 and "may not administer /queue/app.jobs" in answer["error"]
        assert call(group, leader, "GET", "/api/connections", login=app)[0] == 403
        assert call(group, leader, "GET", "/api/connections", login=ops)[0] == 200
        assert call(group, leader, "POST", "/api/destinations/purge", jobs, login=ops)[0] == 200
    finally:
        group.close()


def test_a_follower_passes_a_change_on_to_the_leader_over_https_with_the_callers_login(tmp_path: Path) -> None:
    server, _client = make_certificates(tmp_path / "certs")
    group = Group(tmp_path)
    text = group.config_path.read_text()
    text += f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n'
    for user, role in (("ops", "ops"), ("app", "apps")):
        text += f'[[user]]\nname = "{user}"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["{role}"]\n'
    text += '[[acl]]\nqueue = ">"\nread = ["ops", "apps"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    group.config_path.write_text(text)
    group.admin_access = AdminAccess(ca_file=str(server.ca), login="ops", passcode=PASS)
    group.start()
    try:
        leader = group.leader()
        follower = next(node for node in group.members if node != leader)
        admin = f"https://127.0.0.1:{group.members[follower].admin_port}"

        def post(access: AdminAccess, path: str, body: dict[str, Any]) -> tuple[int, Any]:
            code, data = access.request(admin, path, 15, "POST", json.dumps(body).encode(), "application/json")
            return code, json.loads(data)

        ops, app = group.admin_access, AdminAccess(ca_file=str(server.ca), login="app", passcode=PASS)
        made = {"destination": "/queue/tls.made"}
        assert post(ops, "/api/destinations/create", made) == (200, {"ok": True, "created": 1})
        code, data = AdminAccess(ca_file=str(server.ca), login="ops", passcode=PASS).request(
            f"https://127.0.0.1:{group.members[leader].admin_port}", "/api/destinations", 5)
        assert code == 200 and "/queue/tls.made" in [row["destination"] for row in json.loads(data)["destinations"]]
        code, answer = post(app, "/api/destinations/purge", made)
        assert code == 403 and "may not administer /queue/tls.made" in answer["error"], answer
        assert post(AdminAccess(ca_file=str(server.ca), login="ops", passcode="wrong"), "/api/destinations/purge",
                    {"destination": "/queue/tls.made"})[0] == 401
        assert post(ops, "/api/destinations/purge", made) == (200, {"ok": True, "purged": 0})
        for member in group.members.values():
            assert "Traceback" not in member.stderr(), member.stderr()[-3000:]
    finally:
        group.close()


def test_raftmq_manage_commands_follow_the_leader_from_a_follower(tmp_path: Path) -> None:
    import subprocess
    import sys

    group = Group(tmp_path, core={"max_delivery_count": 1})
    group.start()
    try:
        leader = group.leader()
        follower = next(node for node in group.members if node != leader)
        admin = ["--admin", f"127.0.0.1:{group.members[follower].admin_port}"]
        address = (group.members[leader].host, group.members[leader].client_port)
        conn, listener = connect(address)
        conn.subscribe("/queue/jobs", id="s", ack="client-individual")
        conn.send("/queue/jobs", "job-1")
        conn.nack(listener.message().headers["ack"])  # max_delivery_count 1: dead at once
        conn.disconnect()

        def manage(*args: str) -> str:
            done = subprocess.run([sys.executable, "-m", "raftmq", "manage", *args, *admin],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            return done.stdout

        wait_for(lambda: (destination_row(group, follower, "/queue/DLQ") or {}).get("depth") == 1)
        listed = manage("messages", "/queue/DLQ")
        assert "(from /queue/jobs) deliveries=1 [max-deliveries: " in listed, listed
        assert manage("retry", "--all").strip() == "moved 1, skipped 0"
        rows = json.loads(manage("destinations", "--json"))
        jobs = next(row for row in rows if row["destination"] == "/queue/jobs")
        assert jobs["group"] == "cluster"
        assert wait_for(lambda: destination_row(group, follower, "/queue/jobs")["depth"] == 1)
        assert manage("purge", "/queue/jobs").strip() == "purged 1"
    finally:
        group.close()

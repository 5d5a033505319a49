"""The admin port secured like the client port: HTTPS with the group's certificate, logins on
everything but the probes (/health, /ready, /live) and the members' signed requests; what
`raftmq manage`, `raftmq hand-over` and the members themselves do over it; and the refusal to
start with a Raft or admin port off loopback and nothing guarding it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from raftmq.client.admin import AdminAccess
from raftmq.core.commands import Send
from raftmq.security import TlsConfig
from raftmq.server.admin.http import AdminServer, fetch_bodies
from raftmq.server.admin.metrics import READY_MAX_LAG, readiness
from raftmq.server.replica.bodies import BodyStore
from raftmq.storage.journal import Journal
from raftmq.tls import admin_ssl_context, member_client_tls
from tests.helpers import group_harness
from tests.helpers.bodies import store_entry
from tests.helpers.group_harness import Group
from tests.helpers.tls_certs import make_certificates

PASS = "s3cret-admin"
CLI_TIMEOUT = 60


def raftmq(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True, timeout=CLI_TIMEOUT,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def secured_group(tmp_path: Path) -> tuple[Group, str]:
    """A group with [tls] and one operator login; returns it and its CA file."""
    return group_harness.secured_group(tmp_path, PASS)


@pytest.mark.integration
def test_a_tls_group_with_logins_serves_its_admin_port_over_https_to_logged_in_operators(tmp_path: Path) -> None:
    group, ca = secured_group(tmp_path)
    group.start()
    try:
        leader = group.leader()
        follower = next(node for node in group.members if node != leader)
        admin = f"https://127.0.0.1:{group.members[follower].admin_port}"
        anonymous = AdminAccess(ca_file=ca)
        for path in ("/health", "/ready", "/live"):  # probes need no login
            code, body = anonymous.request(admin, path, 5)
            assert code == 200, (path, body)
        assert json.loads(anonymous.request(admin, "/ready", 5)[1])["ready"] is True
        for path in ("/status", "/metrics", "/api/overview", "/"):
            assert anonymous.request(admin, path, 5)[0] == 401, path
            assert AdminAccess(ca, "ops", "wrong").request(admin, path, 5)[0] == 401, path
            assert group.admin_access.request(admin, path, 5)[0] == 200, path
        # Plain HTTP gets nothing from a TLS port; a client that does not trust the CA neither.
        with pytest.raises(OSError):
            anonymous.request(admin.replace("https://", ""), "/health", 5)
        with pytest.raises(OSError):
            AdminAccess().request(admin, "/health", 5)
        # `raftmq manage` over HTTPS with a login, from a follower (it follows the leader for a change).
        env = {"RAFTMQ_TLS_CA": ca, "RAFTMQ_LOGIN": "ops", "RAFTMQ_PASSCODE": PASS}
        made = raftmq("manage", "create", "/queue/over-tls", "--admin", admin, env=env)
        assert made.returncode == 0, made.stderr
        listed = raftmq("manage", "destinations", "--admin", admin, "--json", env=env)
        assert listed.returncode == 0 and "/queue/over-tls" in listed.stdout, listed.stderr
        refused = raftmq("manage", "destinations", "--admin", admin, env={**env, "RAFTMQ_PASSCODE": "wrong"})
        assert refused.returncode != 0 and "401" in refused.stderr
        # `raftmq hand-over` asks the leader's own admin port (pinned to the group's certificate).
        handed = raftmq("hand-over", env={"RAFTMQ_CONFIG": str(group.config_path), "RAFTMQ_NODE": leader})
        assert handed.returncode == 0 and "handed its leadership over" in handed.stdout, handed.stderr
        assert group.leader() != leader
        idle = raftmq("hand-over", env={"RAFTMQ_CONFIG": str(group.config_path), "RAFTMQ_NODE": leader})
        assert idle.returncode == 0 and "does not lead" in idle.stdout, idle.stderr
    finally:
        group.close()


@pytest.mark.integration
def test_members_fetch_bodies_over_https_only_from_a_port_with_the_groups_certificate(tmp_path: Path) -> None:
    """What a member catching up from a snapshot does: POST /bodies to the others' admin ports,
    here HTTPS only. It trusts a port presenting the group's certificate, and no other."""
    ours, _ = make_certificates(tmp_path / "ours")
    theirs, _ = make_certificates(tmp_path / "theirs", ca_name="another CA")
    own_tls = TlsConfig(str(ours.cert), str(ours.key))
    with Journal(tmp_path / "journal") as journal:
        store = BodyStore(journal)
        for index in range(1, 4):
            store_entry(store, index, 1, [Send("s", "/queue/q", "", f"b{index}".encode(), 0)])
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        servers = [AdminServer(lambda: {"role": "test"}, store, None, "127.0.0.1", 0, "pw", ssl=admin_ssl_context(tls))
                   for tls in (own_tls, TlsConfig(str(theirs.cert), str(theirs.key)))]
        for server in servers:
            asyncio.run_coroutine_threadsafe(server.start(), loop).result(5)
        try:
            ours_port, theirs_port = (server.port for server in servers)
            fetched = fetch_bodies([("127.0.0.1", ours_port)], [1, 3], "pw", budget=5.0, tls=member_client_tls(own_tls))
            assert [index for index, _records in fetched] == [1, 3]
            client_tls = member_client_tls(own_tls)
            assert fetch_bodies([("127.0.0.1", theirs_port)], [1], "pw", budget=2.0, tls=client_tls) == []
            assert fetch_bodies([("127.0.0.1", ours_port)], [1], "pw", budget=2.0) == []  # plain HTTP: nothing
        finally:
            for server in servers:
                asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()


def test_readiness_means_healthy_a_member_and_caught_up() -> None:
    base = {"role": "follower", "leader": "127.0.0.1:1", "applied_index": 50, "commit_index": 50,
            "raft": {"node": "a:1", "members": ["a:1", "b:1", "c:1"]}}
    assert readiness(base) == (True, None)
    assert readiness({**base, "leader": None})[0] is False
    assert readiness({**base, "failure": "journal unwritable"})[0] is False
    assert readiness({**base, "raft": {"node": "d:1", "members": ["a:1", "b:1", "c:1"]}})[1].startswith("not a member")
    behind = {**base, "applied_index": 49 - READY_MAX_LAG}
    assert readiness(behind)[1].startswith("catching up")
    assert readiness({**base, "applied_index": 50 - READY_MAX_LAG})[0] is True
    assert readiness({**base, "bodies": {"missing_indexes": 3}})[1].startswith("fetching 3")
    assert readiness({"role": "leader"}) == (True, None)  # a node in memory: no Raft group


@pytest.mark.integration
@pytest.mark.parametrize("case", ["raft", "raft-bind", "admin", "admin-tls-only", "admin-single"])
def test_a_member_refuses_to_start_with_a_port_off_loopback_and_nothing_guarding_it(tmp_path: Path, case: str) -> None:
    group = Group(tmp_path)
    text = group.config_path.read_text()
    args: list[str] = ["node", "--config", str(group.config_path), "--node", "n1"]
    env: dict[str, str] = {}
    n1 = group.members["n1"]
    if case == "raft":
        text = text.replace(f'"127.0.0.1:{n1.raft_port}"', f'"0.0.0.0:{n1.raft_port}"')
        expected = f"raft = '0.0.0.0:{n1.raft_port}' is off loopback, so the group needs a password"
    elif case == "raft-bind":
        env["RAFTMQ_BIND_HOST"] = "0.0.0.0"
        expected = "(bound on 0.0.0.0: --bind-host, RAFTMQ_BIND_HOST or [server] bind_host) is off loopback"
    elif case in ("admin", "admin-tls-only"):
        text = text.replace(f'"127.0.0.1:{n1.admin_port}"', f'"0.0.0.0:{n1.admin_port}"')
        if case == "admin-tls-only":
            server, _ = make_certificates(tmp_path / "certs")
            text += f'[tls]\ncert_file = "{server.cert}"\nkey_file = "{server.key}"\n'
            expected = "needs TLS and logins; missing: logins ([[user]] tables)"
        else:
            expected = "needs TLS and logins; missing: [tls] (cert_file, key_file) and logins ([[user]] tables)"
    else:
        args = ["node", "--admin", "0.0.0.0:1", "--data-dir", str(tmp_path / "single")]
        expected = "admin = '0.0.0.0:1' is off loopback, so the admin port needs TLS and logins"
    group.config_path.write_text(text)
    refused = raftmq(*args, env=env, cwd=tmp_path)
    assert refused.returncode == 78  # EX_CONFIG: the systemd unit does not restart on it
    assert expected in refused.stderr, refused.stderr
    if case != "admin-single":
        assert str(group.config_path) in refused.stderr and "node n1" in refused.stderr
    assert "listening" not in refused.stdout


@pytest.mark.integration
def test_an_open_admin_port_off_loopback_is_allowed_when_asked_for(tmp_path: Path) -> None:
    """`[security] allow_open_admin = true` (a private test network, as the chaos harness's)."""
    group = Group(tmp_path)
    n1 = group.members["n1"]
    text = group.config_path.read_text().replace(f'"127.0.0.1:{n1.admin_port}"', f'"0.0.0.0:{n1.admin_port}"')
    group.config_path.write_text(text + "[security]\nallow_open_admin = true\n")
    group.start()
    try:
        group.leader()
        assert AdminAccess().request(f"127.0.0.1:{n1.admin_port}", "/live", 5)[0] == 200
    finally:
        group.close()

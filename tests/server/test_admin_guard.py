"""The admin port and the WebSocket handshake of a real 3-member group, over real sockets, against
what a web page may make them do (raftmq.web_guard; docs/operations.md, "What the admin port
refuses"): a name the port is not known by is refused on every path; a page of another origin
changes nothing, and a listed origin (`admin_origins`) may; a browser's change carries the
console's token; what scripts, probes and members send keeps working; each refusal is logged."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from raftmq.client.admin import AdminAccess
from raftmq.passwords import hash_password
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PASS = "guard-pass"
LISTED = "https://admin.example"  # a reverse proxy's origin, in admin_origins
QUEUE = "/queue/guarded"
TIMEOUT = 10.0
PATHS = [("GET", "/status"), ("GET", "/metrics"), ("GET", "/health"), ("GET", "/ready"), ("GET", "/live"),
         ("GET", "/"), ("GET", "/console.js"), ("GET", "/api/overview"), ("GET", "/api/session"),
         ("GET", "/api/destinations"), ("POST", "/api/destinations/purge"), ("POST", "/api/destinations/delete"),
         ("POST", "/api/connections/close"), ("POST", "/membership"), ("POST", "/leadership"), ("POST", "/bodies"),
         ("OPTIONS", "/api/destinations/purge"), ("GET", "/no-such-path")]


def basic(login: str, passcode: str) -> str:
    return "Basic " + base64.b64encode(f"{login}:{passcode}".encode()).decode()


OPS = basic("ops", PASS)
APP = basic("app", PASS)


def ask(port: int, method: str, path: str, headers: dict[str, str] | None = None,
        body: dict[str, Any] | bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request (its Host our own unless `headers` name one): status, headers (lower case), body."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        connection.request(method, path, data, {"Host": f"127.0.0.1:{port}", **(headers or {})})
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def depth(port: int) -> int:
    code, _, data = ask(port, "GET", "/api/destinations", {"Authorization": OPS})
    assert code == 200, data
    return next((d["depth"] for d in json.loads(data)["destinations"] if d["destination"] == QUEUE), 0)


@pytest.fixture
def group(tmp_path: Path) -> Any:
    group = Group(tmp_path, server={"admin_origins": [LISTED], "host_names": ["broker.example"]})
    text = group.config_path.read_text()
    for name, groups in (("ops", "ops"), ("app", "app")):
        text += f'[[user]]\nname = "{name}"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["{groups}"]\n'
    text += '[[acl]]\nqueue = ">"\nread = ["ops", "app"]\nwrite = ["ops", "app"]\nadmin = ["ops", "app"]\n'
    text += '[[acl]]\ntopic = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
    group.config_path.write_text(text)
    group.admin_access = AdminAccess(login="ops", passcode=PASS)
    group.start()
    try:
        yield group
    finally:
        group.close()


def test_only_known_names_are_answered_and_strangers_change_nothing(group: Group) -> None:
    leader = group.leader()
    port = group.members[leader].admin_port
    conn, listener = connect(("127.0.0.1", group.members[leader].client_port),
                             headers={"login": "ops", "passcode": PASS})
    try:
        for i in range(3):
            conn.send(QUEUE, f"m{i}", receipt=f"r{i}")
            listener.receipt(f"r{i}")
        assert depth(port) == 3

        # DNS rebinding: a page of evil.example resolving to 127.0.0.1 gets nothing, on any path.
        for method, path in PATHS:
            for host in ("evil.example", "evil.example:%d" % port, "127.0.0.1.nip.io"):
                headers = {"Host": host, "Authorization": OPS, "Content-Type": "application/json"}
                code, _, data = ask(port, method, path, headers, {"destination": QUEUE} if method == "POST" else None)
                assert code == 421, (method, path, host, code, data)
        # A configured name and the loopback names are answered.
        for host in ("broker.example", f"broker.example:{port}", "localhost", f"[::1]:{port}"):
            assert ask(port, "GET", "/health", {"Host": host})[0] == 200, host

        # Pages of another origin: the request and its variants change nothing.
        stranger = {"Authorization": OPS, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/json"):
            code, _, data = ask(port, "POST", "/api/destinations/purge", {**stranger, "Content-Type": content_type},
                                {"destination": QUEUE})
            assert code == 403 and "evil.example" in json.loads(data)["error"], (content_type, code, data)
        code, headers, _ = ask(port, "OPTIONS", "/api/destinations/purge",
                               {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
        assert code == 403 and "access-control-allow-origin" not in headers
        # The console's own origin without its token, or with another login's token.
        own = {"Authorization": OPS, "Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin",
               "Content-Type": "application/json"}
        code, _, data = ask(port, "POST", "/api/destinations/purge", own, {"destination": QUEUE})
        assert code == 403 and json.loads(data)["token"] == "invalid", data
        apps_token = json.loads(ask(port, "GET", "/api/session", {"Authorization": APP})[2])["token"]
        code, _, _ = ask(port, "POST", "/api/destinations/purge", {**own, "X-Raftmq-Token": apps_token},
                         {"destination": QUEUE})
        assert code == 403
        # A script's change that is not JSON.
        code, _, _ = ask(port, "POST", "/api/destinations/purge", {"Authorization": OPS, "Content-Type": "text/plain"},
                         {"destination": QUEUE})
        assert code == 415
        assert depth(port) == 3  # nothing purged
        conn.send(QUEUE, "still here", receipt="alive")  # and the connection was not closed
        listener.receipt("alive")
        assert depth(port) == 4

        # The console's own page with its token purges; the answer says the API is not cached.
        session = json.loads(ask(port, "GET", "/api/session", {"Authorization": OPS})[2])
        assert session["login"] == "ops" and session["token_header"] == "X-Raftmq-Token"
        code, headers, data = ask(port, "POST", "/api/destinations/purge", {**own, "X-Raftmq-Token": session["token"]},
                                  {"destination": QUEUE})
        assert (code, json.loads(data)) == (200, {"ok": True, "purged": 4})
        assert headers["cache-control"] == "no-store" and headers["x-frame-options"] == "DENY"
        assert "access-control-allow-origin" not in headers  # the own origin needs no grant
    finally:
        conn.disconnect()
    logs = group.members[leader].stderr()
    assert logs.count("admin.refused") >= len(PATHS) * 3, "every refusal is logged"
    assert "Traceback" not in logs


def test_a_listed_origin_is_granted_and_scripts_probes_and_members_keep_working(group: Group) -> None:
    leader = group.leader()
    follower = next(node for node in group.members if node != leader)
    port = group.members[leader].admin_port
    conn, listener = connect(("127.0.0.1", group.members[leader].client_port),
                             headers={"login": "ops", "passcode": PASS})
    try:
        conn.send(QUEUE, "x", receipt="r")
        listener.receipt("r")
    finally:
        conn.disconnect()
    # A reverse proxy's origin in admin_origins: its preflight is granted, and its page's change too.
    code, headers, _ = ask(port, "OPTIONS", "/api/destinations/purge",
                           {"Origin": LISTED, "Access-Control-Request-Method": "POST",
                            "Access-Control-Request-Headers": "content-type,x-raftmq-token"})
    assert code == 204 and headers["access-control-allow-origin"] == LISTED, headers
    assert headers["access-control-allow-credentials"] == "true"
    assert "X-Raftmq-Token" in headers["access-control-allow-headers"]
    assert ask(port, "OPTIONS", "/api/destinations/purge")[0] == 204  # no Origin: no grant asked, none given
    token = json.loads(ask(port, "GET", "/api/session", {"Authorization": OPS, "Origin": LISTED})[2])["token"]
    code, headers, data = ask(port, "POST", "/api/destinations/purge",
                              {"Authorization": OPS, "Origin": LISTED, "Sec-Fetch-Site": "cross-site",
                               "Content-Type": "application/json", "X-Raftmq-Token": token}, {"destination": QUEUE})
    assert (code, json.loads(data)["purged"]) == (200, 1) and headers["access-control-allow-origin"] == LISTED

    # Scripts, probes, Prometheus: no Origin, no token.
    for path in ("/health", "/ready", "/live"):
        assert ask(port, "GET", path, {"Host": f"localhost:{port}"})[0] == 200, path
    assert ask(port, "GET", "/metrics", {"Authorization": OPS})[0] == 200
    assert ask(port, "GET", "/status", {"Authorization": OPS})[0] == 200
    assert ask(port, "GET", "/health", {"Host": ""})[0] == 421
    # A follower passes a script's change on to the leader, and the overview reads every
    # member's /health over the members' own admin addresses (the names they are known by).
    code, _, data = ask(group.members[follower].admin_port, "POST", "/api/destinations/create",
                        {"Authorization": OPS, "Content-Type": "application/json"}, {"destination": "/queue/made"})
    assert code == 200, data
    code, _, data = ask(group.members[follower].admin_port, "GET", "/api/overview", {"Authorization": OPS})
    assert code == 200 and {m["health"] for m in json.loads(data)["members"]} == {"ok"}, data


def handshake(port: int, host: str, origin: str | None) -> bytes:
    """The first line of the client port's answer to a WebSocket upgrade asking for `host`."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        sent_origin = f"Origin: {origin}\r\n" if origin else ""
        sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {host}\r\n{sent_origin}Upgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: v12.stomp\r\n\r\n".encode())
        data = b""
        deadline = time.monotonic() + TIMEOUT
        while b"\r\n" not in data and time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.partition(b"\r\n")[0]


def test_a_browsers_websocket_handshake_is_answered_only_for_known_names(group: Group) -> None:
    leader = group.leader()
    port = group.members[leader].client_port
    # A rebound page: its origin is its own name (a loopback address as far as DNS goes).
    assert handshake(port, f"evil.example:{port}", f"http://evil.example:{port}").startswith(b"HTTP/1.1 403")
    for host in (f"127.0.0.1:{port}", "localhost", "broker.example"):
        assert handshake(port, host, "http://localhost:3000").startswith(b"HTTP/1.1 101"), host
    # A client that is not a browser, reaching the port by a name of its own (a Service's).
    assert handshake(port, "g1-client.raftmq.svc", None).startswith(b"HTTP/1.1 101")
    assert "client.websocket_refused" in group.members[leader].stderr()

"""Cross-site request forgery against the web console, in a real headless Chromium against a
real 3-member group (docs/operations.md, "What the admin port refuses"; raftmq.web_guard).

A page served from another origin (another port of this machine: same-site, cross-origin)
makes the browser send what any page may send without asking: a `fetch` in `no-cors` mode
with a text body, an HTML form posted as `text/plain` (JSON smuggled in a field's name), and
a JSON `fetch` in `cors` mode (which the browser preflights). Each kind tries to purge a
queue, delete another one and close a client's connection on the leader's admin port (each
kind its own, so what gets through says which kind did); with logins,
the operator's credentials are cached by the browser (it opened the console first) and sent
along. Nothing is purged, deleted or closed, and the leader logs each refusal. The console
itself, opened in the same browser afterwards, still purges.

The control (every checker must be shown to catch what it exists for): the same page fires
the same attacks at a recording HTTP server of a third origin that grants any preflight, and
the test checks that it received each of them as the browser really sends it (the text body,
the form's smuggled JSON, the JSON POST after its preflight; with logins, the cached
credentials too). So the attempts are real; the broker's refusal is what stops them.

Needs Debian's chromium and chromium-driver and selenium (tests/helpers/browser.py).
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from raftmq.client.admin import AdminAccess
from raftmq.passwords import hash_password
from raftmq.processes import free_ports
from tests.helpers.browser import accept_dialog, browser, status_line, wait_until
from tests.helpers.group_harness import Group
from tests.helpers.stomp_raw import connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VICTIM = "/queue/victim"  # the attacks purge /queue/victim.<kind>
KEEP = "/queue/keep"  # and delete /queue/keep.<kind>
COUNT = 5  # messages in each
PASS = "ops-csrf-pass-58"
OPS = ("ops", PASS)
API_TIMEOUT = 10.0
PAGE_WAIT = 20.0  # the console refreshes every 2 s
ATTACK_WAIT = 45.0  # the whole attack page: 18 attempts, each form's frame waited for at most 5 s
KINDS = ("no-cors", "form", "cors")
OPS_PATHS = {"purge": "/api/destinations/purge", "delete": "/api/destinations/delete",
             "close": "/api/connections/close"}

# The attacker's page. Its configuration (targets, bodies) comes in a JSON script element.
ATTACK_SCRIPT = r"""
"use strict";
const config = JSON.parse(document.getElementById("config").textContent);
window.results = [];

function record(target, kind, op, outcome) {
  window.results.push({ target: target, kind: kind, op: op, outcome: outcome });
}

// (1) A "simple" request: no preflight, the body goes as text/plain, the answer is opaque.
async function noCors(target, url, op, body) {
  try {
    const response = await fetch(url, { method: "POST", mode: "no-cors", credentials: "include",
                                        body: JSON.stringify(body) });
    record(target, "no-cors", op, response.type);
  } catch (error) {
    record(target, "no-cors", op, "rejected: " + error.name);
  }
}

// (2) A form posted as text/plain: the body is name=value, so a name of '{"destination":
// "...","x":"' and a value of '"}' make it JSON. Posted into a frame of its own, so the page
// stays; done when that frame loads the answer (or after 5 s).
let frames = 0;
function form(target, url, op, body) {
  return new Promise((resolve) => {
    const frame = document.createElement("iframe");
    frame.name = "attack-frame-" + (frames += 1);
    frame.src = "/blank";
    frame.addEventListener("load", () => {
      let settled = false;
      const finish = (outcome) => {
        if (!settled) {
          settled = true;
          record(target, "form", op, outcome);
          resolve();
        }
      };
      frame.addEventListener("load", () => finish("loaded"));
      setTimeout(() => finish("no load event within 5 s"), 5000);
      const element = document.createElement("form");
      element.method = "POST";
      element.enctype = "text/plain";
      element.action = url;
      element.target = frame.name;
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = JSON.stringify(body).slice(0, -1) + ',"x":"';
      input.value = '"}';
      element.appendChild(input);
      document.body.appendChild(element);
      element.submit();
    }, { once: true });
    document.body.appendChild(frame);
  });
}

// (3) JSON, as the console sends it: the browser asks first (a preflight), and sends it
// only if the answer grants this origin.
async function cors(target, url, op, body) {
  try {
    const response = await fetch(url, { method: "POST", mode: "cors", credentials: "include",
                                        headers: { "Content-Type": "application/json" },
                                        body: JSON.stringify(body) });
    record(target, "cors", op, "status " + response.status);
  } catch (error) {
    record(target, "cors", op, "rejected: " + error.name);
  }
}

async function attack() {
  const kinds = { "no-cors": noCors, "form": form, "cors": cors };
  for (const target of config.targets) {
    for (const kind of config.kinds) {
      for (const [op, path] of Object.entries(config.paths)) {
        await kinds[kind](target.name, target.base + path, op, config.bodies[kind][op]);
      }
    }
  }
  document.title = "done";
}

attack().catch((error) => {
  record("page", "page", "page", "failed: " + error);
  document.title = "done";
});
"""


def attack_page(config: dict[str, Any]) -> bytes:
    data = json.dumps(config).replace("<", "\\u003c")  # never ends the script element
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>cute cats</title></head><body>\n'
            f'<p>Nothing to see here.</p>\n<script type="application/json" id="config">{data}</script>\n'
            f"<script>{ATTACK_SCRIPT}</script>\n</body></html>\n").encode()


# -- the other origins: the attacker's page, and the recorder ------------------------------------


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Site:
    """A small HTTP server on a port of its own (an origin of its own), in a thread.
    `page`: what GET / answers (the attacker's page); None: a recorder, which grants every
    preflight and answers every POST 200, and records every request. `login`: GET / wants
    this HTTP Basic login (so a browser opened on it caches it)."""

    port: int
    page: bytes | None = None
    login: tuple[str, str] | None = None
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def posts(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "POST" and s.path == path]

    def preflights(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "OPTIONS" and s.path == path]


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # quiet

        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            with site.lock:
                site.seen.append(Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))

        def _send(self, code: int, body: bytes, content_type: str = "text/html; charset=utf-8",
                  extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in {"Content-Type": content_type, "Content-Length": str(len(body)),
                                "Cache-Control": "no-store", **(extra or {})}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _grant(self) -> dict[str, str]:
            return {"Access-Control-Allow-Origin": self.headers.get("Origin") or "*",
                    "Access-Control-Allow-Credentials": "true"}

        def do_GET(self) -> None:  # noqa: N802
            self._record()
            if self.path == "/blank":
                self._send(200, b"<!DOCTYPE html><title>blank</title>")
                return
            if site.login is not None:
                expected = "Basic " + base64.b64encode(f"{site.login[0]}:{site.login[1]}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self._send(401, b"login required", "text/plain", {"WWW-Authenticate": 'Basic realm="recorder"'})
                    return
            self._send(200, site.page if site.page is not None else b"<!DOCTYPE html><title>recorder</title>")

        def do_OPTIONS(self) -> None:  # noqa: N802
            self._record()  # a preflight: granted to anyone (the broker's is not)
            self._send(204, b"", "text/plain", {**self._grant(), "Access-Control-Allow-Methods": "POST",
                                                "Access-Control-Allow-Headers": "Content-Type",
                                                "Access-Control-Max-Age": "0"})

        def do_POST(self) -> None:  # noqa: N802
            self._record()
            self._send(200, b'{"ok": true}\n', "application/json", self._grant())

    return Handler


@contextlib.contextmanager
def serving(site: Site) -> Iterator[Site]:
    server = ThreadingHTTPServer(("127.0.0.1", site.port), _handler(site))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- the broker, seen from Python (no Origin: not a browser's request) -----------------------------


def call(port: int, method: str, path: str, body: dict[str, Any] | None = None,
         login: tuple[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
    if login is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def depths(port: int, login: tuple[str, str] | None) -> dict[str, int]:
    code, answer = call(port, "GET", "/api/destinations", login=login)
    assert code == 200, (code, answer)
    return {row["destination"]: row["depth"] for row in answer["destinations"]}


def sessions(port: int, login: tuple[str, str] | None) -> list[str]:
    code, answer = call(port, "GET", "/api/connections", login=login)
    assert code == 200, (code, answer)
    return [row["session"] for row in answer["connections"]]


def refusals(group: Group, node: str) -> list[dict[str, Any]]:
    """The `admin.refused` events of a member's JSON log."""
    path = group.data_dir / node / "raftmq.log.jsonl"
    found = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") == "admin.refused":
                found.append(event)
    return found


def results_of(driver: Any) -> list[dict[str, str]]:
    return list(driver.execute_script("return window.results || [];"))


def console_ready(driver: Any) -> bool:
    """The console finished a refresh and shows no error (a 401 would be one)."""
    polls = int(driver.execute_script("return Number(document.body.dataset.polls || 0);"))
    state = driver.execute_script("const s = document.getElementById('status'); return s ? s.dataset.state : '';")
    return polls >= 1 and state == "ok"


# -- the test --------------------------------------------------------------------------------------


@pytest.mark.parametrize("logins", [False, True], ids=["without-logins", "with-logins"])
def test_a_page_of_another_origin_changes_nothing_and_the_console_still_purges(tmp_path: Path, logins: bool) -> None:
    from selenium.webdriver.common.by import By

    # Longer election timeouts than the default 300-600 ms: with Chromium starting on a loaded
    # machine, a member stalled that long would start an election, and a leadership blip ends
    # the leader's STOMP connections ("not the leader"), which would read as one the attacks
    # closed. Elections are not what this test is about.
    group = Group(tmp_path, raft={"election_timeout_min_ms": 1500, "election_timeout_max_ms": 3000})
    login = OPS if logins else None
    if logins:
        text = group.config_path.read_text()
        text += f'[[user]]\nname = "ops"\npassword_hash = "{hash_password(PASS)}"\ngroups = ["ops"]\n'
        text += '[[acl]]\nqueue = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
        text += '[[acl]]\ntopic = ">"\nread = ["ops"]\nwrite = ["ops"]\nadmin = ["ops"]\n'
        group.config_path.write_text(text)
        group.admin_access = AdminAccess(login="ops", passcode=PASS)  # /status needs a login too
    stomp_login = {"login": OPS[0], "passcode": OPS[1]} if logins else {}
    attacker_port, recorder_port = free_ports(2)
    group.start()
    clients: dict[str, tuple[Any, Any]] = {}
    try:
        leader = group.leader()
        member = group.members[leader]
        admin = member.admin_port
        console = f"http://127.0.0.1:{admin}"

        # What each kind of attack wants gone (its own, so that what gets through shows which
        # kind did): a queue to purge and one to delete, COUNT messages each, and a client's
        # connection to close.
        for kind in KINDS:
            clients[kind] = connect((member.host, member.client_port),
                                    headers={"client-id": f"victim-{kind}", **stomp_login})
        conn, listener = clients[KINDS[0]]
        for kind in KINDS:
            for destination in (victim(kind), keep(kind)):
                for i in range(COUNT):
                    conn.send(destination, f"{destination} {i}", receipt=f"{destination}-{i}")
                    listener.receipt(f"{destination}-{i}")
        code, answer = call(admin, "GET", "/api/connections", login=login)
        assert code == 200, (code, answer)
        session = {row["client_id"]: row["session"] for row in answer["connections"]}
        bodies = {kind: {"purge": {"destination": victim(kind)}, "delete": {"destination": keep(kind)},
                         "close": {"session": session[f"victim-{kind}"]}} for kind in KINDS}
        assert damage(admin, login, bodies) == []

        recorder = Site(recorder_port, login=OPS if logins else None)
        config = {"targets": [{"name": "broker", "base": console}, {"name": "recorder", "base": recorder.origin}],
                  "kinds": list(KINDS), "paths": OPS_PATHS, "bodies": bodies}
        attacker = Site(attacker_port, page=attack_page(config))
        with serving(attacker), serving(recorder), browser(tmp_path / "browser") as driver:
            if logins:
                # The operator logs in to the console: Chromium takes the login from the URL's
                # userinfo on a top-level navigation, answers the port's 401 with it and keeps
                # it in its HTTP auth cache for that origin, as if typed into its login dialog
                # (which a headless browser cannot show). The same for the recorder, to see
                # that the browser sends a cached login along with each attempt of another
                # origin's page (which is what makes these attacks worth anything).
                driver.get(f"http://{OPS[0]}:{OPS[1]}@127.0.0.1:{admin}/")
                wait_until(lambda: console_ready(driver), "the console loads with the cached login", PAGE_WAIT, driver)
                driver.get(f"http://{OPS[0]}:{OPS[1]}@127.0.0.1:{recorder_port}/")
                wait_until(lambda: driver.title == "recorder", "the recorder's page loads with its login", PAGE_WAIT)
            else:
                driver.get(f"{console}/")
                wait_until(lambda: console_ready(driver), "the console loads", PAGE_WAIT, driver)

            # The operator visits the attacker's page.
            driver.get(f"{attacker.origin}/")
            wait_until(lambda: driver.title == "done", "the attack page's attempts all settle", ATTACK_WAIT)
            results = results_of(driver)
            outcomes = {(r["target"], r["kind"], r["op"]): r["outcome"] for r in results}
            assert len(outcomes) == len(results) == 2 * len(KINDS) * len(OPS_PATHS), results

            # The control: the recorder got each attempt, as the browser sends it.
            check_recorder(recorder, attacker.origin, bodies, logins, outcomes)

            # Nothing purged, deleted or closed; the connections still work.
            harm = damage(admin, login, bodies)
            assert harm == [], f"the attacks did harm: {harm}"
            for kind, (client, heard) in clients.items():
                assert heard.errors.empty(), (kind, heard.errors.get().headers)
                client.send(victim(kind), "still here", receipt=f"after-{kind}")
                heard.receipt(f"after-{kind}")

            # The broker: a no-cors fetch gets an opaque answer whatever it is; the JSON POST
            # never goes out (its preflight is refused).
            for op in OPS_PATHS:
                assert outcomes[("broker", "no-cors", op)] == "opaque", outcomes
                assert outcomes[("broker", "cors", op)] == "rejected: TypeError", outcomes

            # The leader refused each attempt (the JSON one: its preflight), and logged it.
            refused = [r for r in refusals(group, leader) if r.get("origin") == attacker.origin]
            for path in OPS_PATHS.values():
                posts = [r for r in refused if (r.get("method"), r.get("path")) == ("POST", path)]
                preflights = [r for r in refused if (r.get("method"), r.get("path")) == ("OPTIONS", path)]
                assert len(posts) == 2 and len(preflights) == 1, (path, refused)
                assert all(r.get("status") == 403 for r in posts + preflights), refused

            # The console itself, in the same browser (with its cached login), still purges.
            target = victim("form")
            driver.get(f"{console}/")
            purge = wait_until(lambda: driver.find_element(
                By.CSS_SELECTOR, f'#destinations-table button[data-action="purge"][data-destination="{target}"]'),
                f"the console offers Purge on {target}", PAGE_WAIT, driver)
            purge.click()
            assert target in accept_dialog(driver)
            wait_until(lambda: f"Purge {target}: purged {COUNT + 1}" in status_line(driver),
                       f"the console reports {target} purged", PAGE_WAIT, driver)
            now = depths(admin, login)
            assert now[target] == 0 and now[victim("no-cors")] == now[victim("cors")] == COUNT + 1, now
        for node in group.members.values():
            assert "Traceback" not in node.stderr(), node.stderr()[-3000:]
    finally:
        for client, _ in clients.values():
            with contextlib.suppress(Exception):
                client.disconnect()
        group.close()


def victim(kind: str) -> str:
    return f"{VICTIM}.{kind}"


def keep(kind: str) -> str:
    return f"{KEEP}.{kind}"


def damage(admin: int, login: tuple[str, str] | None, bodies: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    """What the attacks did, as the admin API shows it: each queue purged or deleted and each
    connection closed ([] when nothing)."""
    now = depths(admin, login)
    alive = sessions(admin, login)
    done = []
    for kind, wanted in bodies.items():
        purged, deleted = wanted["purge"]["destination"], wanted["delete"]["destination"]
        if now.get(purged) != COUNT:
            done.append(f"{kind}: purged {purged} (depth {now.get(purged)})")
        if deleted not in now:
            done.append(f"{kind}: deleted {deleted}")
        elif now[deleted] != COUNT:
            done.append(f"{kind}: emptied {deleted} (depth {now[deleted]})")
        if wanted["close"]["session"] not in alive:
            done.append(f"{kind}: closed {wanted['close']['session']}")
    return done


def check_recorder(recorder: Site, origin: str, bodies: dict[str, dict[str, dict[str, str]]], logins: bool,
                   outcomes: dict[tuple[str, str, str], str]) -> None:
    """The recorder (which grants any preflight) received, for each change: the no-cors POST
    with its JSON as text/plain, the form's POST with the smuggled JSON, and the JSON POST
    after its preflight; each from the attacker's origin, with the operator's cached login when
    the browser has one."""
    authorization = "Basic " + base64.b64encode(f"{OPS[0]}:{OPS[1]}".encode()).decode()
    for op, path in OPS_PATHS.items():
        posts = recorder.posts(path)
        assert len(posts) == len(KINDS), (op, posts)
        for seen in posts:
            assert seen.headers.get("origin") == origin, seen
            assert seen.headers.get("sec-fetch-site") == "same-site", seen  # another port of 127.0.0.1
            assert seen.headers.get("authorization") == (authorization if logins else None), seen
        no_cors, form, sent = posts  # in the page's order (KINDS)
        assert no_cors.headers["content-type"].startswith("text/plain"), no_cors
        assert json.loads(no_cors.body) == bodies["no-cors"][op], no_cors
        assert form.headers["content-type"].startswith("text/plain")
        assert form.headers.get("sec-fetch-mode") == "navigate"
        assert json.loads(form.body) == {**bodies["form"][op], "x": "="}, form  # JSON, as the broker reads it
        assert sent.headers["content-type"] == "application/json", sent
        assert json.loads(sent.body) == bodies["cors"][op], sent
        [preflight] = recorder.preflights(path)
        assert preflight.headers.get("access-control-request-method") == "POST", preflight
        assert "content-type" in preflight.headers.get("access-control-request-headers", ""), preflight
        assert "authorization" not in preflight.headers, preflight  # a preflight never carries one
        assert (outcomes[("recorder", "no-cors", op)], outcomes[("recorder", "cors", op)]) == ("opaque", "status 200")
        assert outcomes[("recorder", "form", op)] == "loaded", outcomes

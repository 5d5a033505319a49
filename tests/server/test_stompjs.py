"""@stomp/stompjs 7, the STOMP client of most browser apps, against a real node over WebSocket:
in Node (with the `ws` package) and in headless Chromium, on a page this test serves. Both run
tests/js/scenario.js: connect with 1 s heart-beats, receipted SENDs back on a queue, a 1 MiB
binary message, a topic message to two subscriptions, then an idle spell and one more message
on the same connection; then a 16 MiB binary message on a connection with 10 s heart-beats
(stompjs parses a frame byte by byte, too long for 1 s heart-beats on a loaded machine).

The JavaScript packages are pinned in tests/js/package-lock.json and installed by `npm ci` into
tests/js/node_modules the first time (under a lock: workers share the folder). A missing node
or npm fails the test with what to install, never skips it."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftmq.processes import free_port
from tests.helpers.browser import browser, javascript_errors, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

JS = Path(__file__).resolve().parents[1] / "js"
NPM_TIMEOUT = 180
STEPS = [
    "connected: 1.2",
    "receipted texts: text 0|text 1|text 2",
    "binary 1048576: same bytes",
    "topic: a:to everyone|b:to everyone",
    "after idle: connected",
    "after idle message: still here",
    "binary 16777216: same bytes (10 s heart-beats)",
]
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stompjs over WebSocket</title>
<script src="stomp.umd.min.js"></script><script src="scenario.js"></script></head>
<body><script>
window.report = null;
runScenario(StompJs, () => new WebSocket(%s, ["v12.stomp", "v11.stomp", "v10.stomp"]), {idleMs: 2500})
  .then((report) => { window.report = report; });
</script></body></html>
"""


def installed() -> Path:
    """tests/js/node_modules, installed from the lock file if it is not yet."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"the stompjs tests need {tool}: as root, `python3 -m chaos.system_packages` "
                        "(or apt-get install -y nodejs npm)", pytrace=False)
    modules = JS / "node_modules"
    with open(JS / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = modules / ".raftmq-lock-copy.json"
        lock_text = (JS / "package-lock.json").read_text()
        if not (stamp.exists() and stamp.read_text() == lock_text):
            done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                                  capture_output=True, text=True, timeout=NPM_TIMEOUT, check=False)
            if done.returncode != 0:
                pytest.fail(f"npm ci in {JS} failed: {done.stderr[-2000:]}", pytrace=False)
            stamp.write_text(lock_text)
    return modules


def test_stompjs_in_node(address: tuple[str, int]) -> None:
    installed()
    url = f"ws://{address[0]}:{address[1]}/ws"
    done = subprocess.run(["node", "stompjs_node.mjs", url, "2500"], cwd=JS, capture_output=True, text=True,
                          timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"stderr": done.stderr}
    assert report.get("ok") and report["steps"] == STEPS, report
    assert report["heartBeat"] == "1000,1000"


@contextlib.contextmanager
def page_server(ws_url: str) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving the page, stompjs's browser bundle and the scenario."""
    files = {
        "/index.html": (PAGE % json.dumps(ws_url)).encode(),
        "/stomp.umd.min.js": (JS / "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js").read_bytes(),
        "/scenario.js": (JS / "scenario.js").read_bytes(),
    }
    handler = functools.partial(_Handler, files)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Handler(http.server.BaseHTTPRequestHandler):
    def __init__(self, files: dict[str, bytes], *args: Any) -> None:
        self._files = files
        super().__init__(*args)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = self._files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        kind = "text/html" if self.path.endswith(".html") else "text/javascript"
        self.send_header("content-type", f"{kind}; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def test_stompjs_in_a_browser_page(address: tuple[str, int], tmp_path: Path) -> None:
    installed()
    with page_server(f"ws://{address[0]}:{address[1]}/ws") as page, browser(tmp_path / "browser") as driver:
        driver.get(page)
        report = wait_until(lambda: driver.execute_script("return window.report"), "the page's stompjs scenario",
                            timeout=90, driver=driver)
        assert report.get("ok") and report["steps"] == STEPS, (report, javascript_errors(driver))

"""@stomp/stompjs 7, the STOMP client of most browser apps, against a real node over WebSocket:
in Node (with the `ws` package) and in headless Chromium, on a page this test serves. Both run
tests/js/scenario.js: connect with 1 s heart-beats, receipted SENDs back on a queue, a 1 MiB
binary message, a topic message to two subscriptions, then an idle spell and one more message
on the same connection; then a 16 MiB binary message on a connection with 10 s heart-beats
(stompjs parses a frame byte by byte, too long for 1 s heart-beats on a loaded machine).

The JavaScript packages are pinned in tests/js/package-lock.json and installed by `npm ci` into
tests/js/node_modules the first time (tests/helpers/javascript.py). A missing node or npm fails
the test with what to install, never skips it."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers.browser import browser, javascript_errors, wait_until
from tests.helpers.javascript import JS, installed, serve_files

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

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


def test_stompjs_in_node(address: tuple[str, int]) -> None:
    installed()
    url = f"ws://{address[0]}:{address[1]}/ws"
    done = subprocess.run(["node", "stompjs_node.mjs", url, "2500"], cwd=JS, capture_output=True, text=True,
                          timeout=120, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {"stderr": done.stderr}
    assert report.get("ok") and report["steps"] == STEPS, report
    assert report["heartBeat"] == "1000,1000"


def page_server(ws_url: str) -> contextlib.AbstractContextManager[str]:
    """An HTTP server on 127.0.0.1 serving the page, stompjs's browser bundle and the scenario."""
    return serve_files({
        "/index.html": (PAGE % json.dumps(ws_url)).encode(),
        "/stomp.umd.min.js": (JS / "node_modules/@stomp/stompjs/bundles/stomp.umd.min.js").read_bytes(),
        "/scenario.js": (JS / "scenario.js").read_bytes(),
    })


def test_stompjs_in_a_browser_page(address: tuple[str, int], tmp_path: Path) -> None:
    installed()
    with page_server(f"ws://{address[0]}:{address[1]}/ws") as page, browser(tmp_path / "browser") as driver:
        driver.get(page)
        report = wait_until(lambda: driver.execute_script("return window.report"), "the page's stompjs scenario",
                            timeout=90, driver=driver)
        assert report.get("ok") and report["steps"] == STEPS, (report, javascript_errors(driver))

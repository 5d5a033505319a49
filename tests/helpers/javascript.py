"""The JavaScript clients of the tests (tests/js): installed from the lock file the first time,
and pages served to headless Chromium from 127.0.0.1."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raftmq.processes import free_port

JS = Path(__file__).resolve().parents[1] / "js"
NPM_TIMEOUT = 180


def installed() -> Path:
    """tests/js/node_modules, installed from the lock file if it is not yet."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"the JavaScript clients' tests need {tool}: as root, `python3 -m chaos.system_packages` "
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


@contextlib.contextmanager
def serve_files(files: dict[str, bytes]) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving `files` (path -> bytes); yields the URL of /index.html."""
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

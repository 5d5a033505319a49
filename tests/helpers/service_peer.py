"""The test's side of a service process (tests/helpers/service_process.py): start it (inside a
network namespace: `prefix`), ask it things over its stdin and stdout, kill or stop it by pid."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Peer:
    """One service process, driven over its stdin and stdout (tests/helpers/service_process.py)."""

    def __init__(self, prefix: Sequence[str], name: str, data: Path, uri: str, password: str) -> None:
        self.name = name
        with open(data / f"{name}.stderr", "a") as stderr:
            self.process = subprocess.Popen(
                [*prefix, sys.executable, "-m", "tests.helpers.service_process", name, str(data / name), uri,
                 password],
                cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                start_new_session=True)
        assert self.ask(None, timeout=60) == {"ready": name}

    def ask(self, line: str | None, timeout: float = 60) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if line is not None:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                answer = self.process.stdout.readline()
                assert answer, f"{self.name} exited ({self.process.poll()})"
                return dict(json.loads(answer))
        raise AssertionError(f"{self.name}: no answer to {line!r} within {timeout} s")

    def links(self) -> dict[str, str]:
        return dict(self.ask("links")["links"])

    def received(self) -> list[str]:
        return list(self.ask("received")["received"])

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write("stop\n")
                self.process.stdin.flush()
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def until(predicate: Callable[[], object], timeout: float) -> bool:
    """Whether `predicate()` came true within `timeout` seconds (asked every 0.1 s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False

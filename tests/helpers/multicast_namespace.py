"""A network namespace whose loopback carries multicast (tests of discovery and of peer-to-peer
brokers: nothing they send reaches a real network). Removed when the block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)


@contextlib.contextmanager
def loopback_namespace(prefix: str) -> Iterator[str]:
    """The namespace's name; skips the test where this machine cannot make one."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    made = run("ip", "netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        for command in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "multicast", "on"],
                        ["ip", "route", "add", "224.0.0.0/4", "dev", "lo"]):
            done = run("ip", "netns", "exec", name, *command)
            assert done.returncode == 0, done.stderr
        yield name
    finally:
        run("ip", "netns", "delete", name)

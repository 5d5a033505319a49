"""UDP multicast discovery (Artemis's broadcast and discovery groups) on real processes inside
a network namespace this test creates: its loopback carries the multicast (never a real
network). The scenario runs in the namespace (tests/helpers/discovery_udp_scenario.py) and
reports what it saw."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def namespace() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a network namespace")
    name = f"rmqdisc{uuid.uuid4().hex[:6]}"
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


@pytest.mark.parametrize("password", [None, "s3cret"])
def test_groups_find_each_other_by_multicast_and_one_that_goes_is_shown_down(
        namespace: str, tmp_path: Path, password: str | None) -> None:
    argv = ["ip", "netns", "exec", namespace, sys.executable, "-m", "tests.helpers.discovery_udp_scenario",
            str(tmp_path)]
    if password:
        argv.append(password)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=150, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["g1_found_g2_s"] is not None and seen["g1_links_before_g3"] == ["g2"]
    assert seen["g1_found_g3_s"] is not None and seen["g3_found_g1_s"] is not None
    assert seen["g1_shows_g2_down_s"] is not None and seen["g1_g2_state"] in ("retrying", "connecting", "failed")

"""UDP multicast discovery (Artemis's broadcast and discovery groups) on real processes inside
a network namespace this test creates: its loopback carries the multicast (never a real
network). The scenario runs in the namespace (tests/helpers/discovery_udp_scenario.py) and
reports what it saw."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.multicast_namespace import loopback_namespace

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace() -> Iterator[str]:
    with loopback_namespace("rmqdisc") as name:
        yield name


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

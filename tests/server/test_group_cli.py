"""`raftmq node --config GROUP.toml --node ID`: what the operator is told when it is misused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", "node", *args], capture_output=True, text=True,
                          timeout=30, cwd=REPO)


@pytest.mark.integration
def test_group_config_needs_a_known_member_and_no_listen() -> None:
    group = "configs/group.toml"
    missing = run("--config", group)
    assert missing.returncode != 0 and "needs --node (one of: n1, n2, n3)" in missing.stderr
    unknown = run("--config", group, "--node", "n9")
    assert unknown.returncode != 0 and "configs/group.toml: group g1: no member 'n9'" in unknown.stderr
    listen = run("--config", group, "--node", "n1", "--listen", "127.0.0.1:7000")
    not_for_members = "--listen, --admin, --mqtt, --data-dir and --in-memory do not apply to a group"
    assert listen.returncode != 0 and not_for_members in listen.stderr
    admin = run("--config", group, "--node", "n1", "--admin", "127.0.0.1:7001")
    assert admin.returncode != 0 and not_for_members in admin.stderr
    single = run("--config", "configs/node.toml", "--node", "n1")
    assert single.returncode != 0 and "--node needs a group configuration" in single.stderr
    for result in (missing, unknown, listen, admin, single):
        assert "Traceback" not in result.stderr and result.stdout == ""

"""Files a new user meets first: configs/node.toml names every key of `[node]` (each with its
default, or commented out where it has none), and git ignores what `raftmq chaos` writes."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from raftmq.config import NodeConfig, load_node_config

REPO = Path(__file__).resolve().parents[2]
# NodeConfig fields that are no key of [node]: tables of their own, or filled from a topology.
NOT_NODE_KEYS = {"limits", "core", "security", "cluster_peers", "cluster_broadcast", "cluster_group_clients",
                 "cluster_hubs_file"}


def test_configs_node_toml_names_every_node_key() -> None:
    text = (REPO / "configs" / "node.toml").read_text(encoding="utf-8")
    node_table = text.split("\n[limits]")[0]
    keys = [field.name for field in dataclasses.fields(NodeConfig) if field.name not in NOT_NODE_KEYS]
    missing = [key for key in keys if not re.search(rf"^(# )?{key} = ", node_table, re.MULTILINE)]
    assert missing == [], f"configs/node.toml does not mention {missing}"
    assert re.search(r"^# admin = \"127\.0\.0\.1:\d+\"", node_table, re.MULTILINE)  # a single node's admin port
    assert load_node_config(REPO / "configs" / "node.toml") == NodeConfig()  # still only the defaults


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and the checkout")
def test_git_ignores_the_chaos_runs_directory() -> None:
    result = subprocess.run(["git", "check-ignore", "-q", "runs/20240101-000000-queue-kill-s1/report.html"],
                            cwd=REPO, capture_output=True, timeout=30, check=False)
    assert result.returncode == 0, "runs/ (raftmq chaos's output) is not in .gitignore"

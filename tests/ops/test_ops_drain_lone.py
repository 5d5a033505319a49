"""`raftmq group drain` on a group that is in no cluster of groups: one line saying a lone
group has nowhere to drain to, said before anything is sent when a member's /status tells
(it has no `cluster`), and in place of the broker's `reserved destination` when none answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cluster.topology import Topology, load_topology
from raftmq.cli import main
from raftmq.embedded import EmbeddedBroker
from raftmq.errors import DeploymentError
from raftmq.ops import drain
from raftmq.processes import free_ports

pytestmark = pytest.mark.integration

LONE = "group 'g1' is not in a cluster of groups: a lone group has nowhere to drain to"


@pytest.fixture(scope="module")
def embedded() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


def lone_group(tmp_path: Path, client: str, admin: str) -> Path:
    (raft,) = free_ports(1)
    path = tmp_path / "g1.toml"
    path.write_text("\n".join(["[group]", 'name = "g1"', f"data_dir = {json.dumps(str(tmp_path / 'g1'))}", "",
                               "[[node]]", 'id = "n1"', f'client = "{client}"', f'raft = "127.0.0.1:{raft}"',
                               f'admin = "{admin}"']) + "\n")
    return path


def test_a_lone_group_is_refused_before_anything_is_sent(embedded: EmbeddedBroker, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (client,) = [f"{host}:{port}" for host, port in embedded.addresses]
    config = lone_group(tmp_path, client, embedded.admin_addresses[0])
    sent: list[Any] = []

    async def tell(*args: Any) -> None:
        sent.append(args)

    monkeypatch.setattr(drain, "_tell", tell)
    for argv in (["group", "drain", "g1", "--no-wait"], ["group", "drain", "g1", "--cancel"]):
        result = CliRunner().invoke(main, [*argv, "--config", str(config)], catch_exceptions=False)
        assert result.exit_code == 1 and result.stderr.startswith(f"Error: {LONE}"), result.output
        assert len(result.stderr.strip().splitlines()) == 1
    assert sent == []


def test_without_its_status_the_brokers_refusal_says_the_same(embedded: EmbeddedBroker, tmp_path: Path) -> None:
    (client,) = [f"{host}:{port}" for host, port in embedded.addresses]
    (silent,) = free_ports(1)  # nobody answers /status there: the drain is sent, and refused
    topology: Topology = load_topology(lone_group(tmp_path, client, f"127.0.0.1:{silent}"))
    with pytest.raises(DeploymentError) as refused:
        drain.drain_group(topology, "g1", (), wait=False, report=lambda _line: None)
    assert str(refused.value).startswith(LONE)

"""In-process MQTT for the tests (EmbeddedBroker): a 3-member group whose members each listen for
MQTT, or a single node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cluster.group_file import GroupConfig, GroupMember
from raftmq.config import NodeConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.processes import free_ports


def mqtt_group(data_dir: Path | str, size: int = 3) -> tuple[GroupConfig, dict[str, int], dict[str, int]]:
    """(the group, each member's MQTT port, each member's client port), on free loopback ports."""
    ports = free_ports(3 * size)
    members = tuple(GroupMember(id=f"n{i + 1}", client=f"127.0.0.1:{ports[3 * i]}",
                                raft=f"127.0.0.1:{ports[3 * i + 1]}", mqtt=f"127.0.0.1:{ports[3 * i + 2]}")
                    for i in range(size))
    group = GroupConfig(name="g", data_dir=str(data_dir), members=members, server=NodeConfig())
    mqtt = {member.id: ports[3 * i + 2] for i, member in enumerate(members)}
    return group, mqtt, {member.id: ports[3 * i] for i, member in enumerate(members)}


def mqtt_node() -> Iterator[int]:
    """A single in-process node serving MQTT on a free loopback port: its port, while it runs
    (a test's fixture yields from it)."""
    mqtt = free_ports(1)[0]
    with EmbeddedBroker(config=NodeConfig(mqtt=f"127.0.0.1:{mqtt}")):
        yield mqtt

"""Helpers for the `raftmq up / down / status` tests: group files on free loopback ports."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from raftmq.processes import free_ports


def group_file_text(name: str, data_dir: Path, ports: list[int], size: int = 3, admin: bool = True,
                    mqtt: list[int] | None = None) -> str:
    lines = ["[group]", f"name = {json.dumps(name)}", f"data_dir = {json.dumps(str(data_dir))}"]
    for i in range(size):
        client, raft, admin_port = ports[3 * i: 3 * i + 3]
        lines += ["", "[[node]]", f'id = "n{i + 1}"', f'client = "127.0.0.1:{client}"', f'raft = "127.0.0.1:{raft}"']
        if admin:
            lines.append(f'admin = "127.0.0.1:{admin_port}"')
        if mqtt:
            lines.append(f'mqtt = "127.0.0.1:{mqtt[i]}"')
    return "\n".join(lines) + "\n"


@pytest.fixture
def write_group(tmp_path: Path) -> Callable[..., Path]:
    """write_group(name="g1", size=3, ports=None, admin=True, mqtt=False) -> path of a group file
    whose data directory is tmp_path/<name>; `mqtt`: each member listens for MQTT too."""

    handed_out: set[int] = set()  # free_ports may hand the same free port to two groups of one test

    def fresh_ports(count: int) -> list[int]:
        for _ in range(50):
            ports = free_ports(count)
            if not handed_out & set(ports):
                handed_out.update(ports)
                return ports
        raise RuntimeError(f"no {count} free ports distinct from {sorted(handed_out)}")

    def write(name: str = "g1", size: int = 3, ports: list[int] | None = None, admin: bool = True,
              mqtt: bool = False) -> Path:
        ports = ports if ports is not None else fresh_ports(3 * size)
        path = tmp_path / f"{name}.toml"
        text = group_file_text(name, tmp_path / name, ports, size, admin, fresh_ports(size) if mqtt else None)
        path.write_text(text, encoding="utf-8")
        return path

    return write

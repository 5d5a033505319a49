"""Where a chaos run's nodes live: every node on an address of its own, so faults can cut real
packets between any two of them.

`place` copies a topology's files (a preset's, or the user's topology or group file) into the
run directory, rewriting only each node's `client`, `raft`, `admin` and `mqtt` addresses and each
group's `data_dir` (to `data/<group>`, inside the run directory, where the audit reads it);
every other setting is kept byte for byte. Two kinds of address:

- `loopback`: 127.0.<10+g>.<n> (a /8 every Linux host routes to itself), free ports: runs whose
  faults need no network of their own.
- `netns`: the hosts of a chaos.netns Network (one network namespace per node, veth pairs on a
  bridge), fixed ports (each host is alone on its address); partitions and packet faults act
  on each namespace's own interface.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from cluster.group_file import load_group_config
from cluster.topology import Topology, load_topology, preset_path
from raftmq.errors import ConfigError
from raftmq.processes import free_ports

CLIENT_PORT, RAFT_PORT, ADMIN_PORT, MQTT_PORT = 61613, 62613, 8161, 1883
_DATA_DIR = re.compile(r'^(\s*data_dir\s*=\s*)"[^"\n]*"', re.MULTILINE)

# (group index, member index) -> (client, raft, admin, mqtt) addresses
Addresser = Callable[[int, int], tuple[str, str, str, str]]


def loopback_addresser() -> Addresser:
    def address(group: int, member: int) -> tuple[str, str, str, str]:
        host = f"127.0.{10 + group}.{member + 1}"
        client, raft, admin, mqtt = free_ports(4, host)
        return f"{host}:{client}", f"{host}:{raft}", f"{host}:{admin}", f"{host}:{mqtt}"

    return address


def host_addresser(hosts: list[list[str]]) -> Addresser:
    """Fixed ports on given hosts: `hosts[g][m]` is member m of group g's own address."""

    def address(group: int, member: int) -> tuple[str, str, str, str]:
        host = hosts[group][member]
        return f"{host}:{CLIENT_PORT}", f"{host}:{RAFT_PORT}", f"{host}:{ADMIN_PORT}", f"{host}:{MQTT_PORT}"

    return address


def source_of(preset: str, topology_file: str | None) -> Path:
    return Path(topology_file).resolve() if topology_file is not None else preset_path(preset)


def shape(source: Path) -> list[int]:
    """How many members each group of the topology at `source` has."""
    return [len(group.config.members) for group in load_topology(source).groups]


def move_uris(text: str, moved: dict[str, str]) -> str:
    """A topology's text with each member's client address moved wherever it appears after
    `//` ([[network_connector]] uris: `static:(stomp://HOST:PORT,...)`); a longer port that
    merely starts with the same digits is left alone."""
    for old, new in moved.items():
        text = re.sub(r"(?<=//)" + re.escape(old) + r"(?!\d)", new, text)
    return text


def move_members(text: str, moved: dict[str, str]) -> str:
    """A discovery members file (`{"groups": {"g2": ["host:port", ...]}}`) with each member's
    client address moved."""
    data = json.loads(text)
    groups = data.get("groups", {}) if isinstance(data, dict) else {}
    data["groups"] = {name: [moved.get(address, address) for address in addresses]
                      for name, addresses in groups.items()}
    return json.dumps(data, indent=2) + "\n"


def _discovery_files(source: Path) -> list[Path]:
    """The members files of the topology's file-based discovery groups (beside it)."""
    topology = load_topology(source)
    files = []
    for connection in topology.cluster_connections:
        discovery = connection.discovery
        if discovery is not None and discovery.file is not None and discovery.file not in files:
            files.append(discovery.file)
    return files


def open_admin(text: str) -> str:
    """A group file whose members' admin ports stay open off loopback (the harness reads
    /status on the namespaces' private network, without TLS or logins)."""
    if re.search(r"^\s*allow_open_admin\s*=", text, flags=re.MULTILINE):
        return text
    if re.search(r"^\[security\]", text, flags=re.MULTILINE):
        return re.sub(r"^\[security\][^\n]*\n", lambda match: match.group(0) + "allow_open_admin = true\n", text,
                      count=1, flags=re.MULTILINE)
    return text.rstrip("\n") + "\n\n[security]\nallow_open_admin = true  # the chaos harness's private network\n"


def place(source: Path, run_dir: Path, addresser: Addresser, password: str | None = None) -> Topology:
    """The topology at `source`, copied into `run_dir/topology/` with its nodes moved. Off
    loopback a group needs a password (its Raft port unpickles what it receives): `password`
    is given to every group that has none."""
    original = load_topology(source)
    target = run_dir / "topology"
    target.mkdir(parents=True, exist_ok=True)
    moved: dict[str, str] = {}  # client addresses, for the topology's network connector URIs
    for g, group in enumerate(original.groups):
        path = group.config_path
        text = path.read_text(encoding="utf-8") if group.generated_text is None else group.generated_text
        config = load_group_config(path)
        for m, member in enumerate(config.members):
            new = addresser(g, m)
            for old, replacement in zip((member.client, member.raft, member.admin, member.mqtt), new, strict=True):
                if old is None:
                    continue
                if text.count(f'"{old}"') != 1:
                    raise ConfigError(f"{path}: address {old} of {group.name}/{member.id} must appear exactly once "
                                      "to be moved")
                text = text.replace(f'"{old}"', f'"{replacement}"')
            moved[member.client] = new[0]
            if member.admin is None:  # the nemeses read /status: every node gets an admin port
                raise ConfigError(f"{path}: node {member.id} has no admin address; a chaos run needs one per node")
        text, count = _DATA_DIR.subn(lambda match: f'{match.group(1)}"data/{group.name}"', text, count=1)
        if count != 1:
            raise ConfigError(f"{path}: no data_dir to move into the run directory")
        if password is not None and config.password is None:
            text = _DATA_DIR.sub(lambda match: f'{match.group(0)}\npassword = "{password}"', text, count=1)
        if password is not None:
            text = open_admin(text)
        (target / path.name).write_text(text, encoding="utf-8")
    if source.resolve() != original.groups[0].config_path.resolve() or len(original.groups) > 1:
        (target / source.name).write_text(move_uris(source.read_text(encoding="utf-8"), moved), encoding="utf-8")
        for connection_file in _discovery_files(source):
            relative = connection_file.relative_to(source.parent.resolve())
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_text(move_members(connection_file.read_text(encoding="utf-8"), moved),
                                           encoding="utf-8")
    return load_topology(target / source.name)

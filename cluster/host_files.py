"""What one host of a cluster needs to run its node the way `deploy/systemd/raftmq@.service`
does: the topology and every group file (bridges read their neighbours' members), each group's
`data_dir` moved under the host's state directory, and the node's environment file
(`RAFTMQ_CONFIG`, `RAFTMQ_TOPOLOGY`, `RAFTMQ_NODE` and the secrets the files name by
`password_env` / `cluster_password_env`).

`render_host` builds them as text (nothing is written); `raftmq deploy render` writes them.
Files the configuration names beside it (TLS certificates and keys, discovery files) are
listed in `HostFiles.referenced`: the operator puts them in place, as secrets are not copied
into rendered files.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cluster.topology import Topology
from raftmq.errors import ConfigError

_DATA_DIR = re.compile(r'^(\s*data_dir\s*=\s*)"[^"\n]*"', re.MULTILINE)
_ENV_KEYS = ("password_env", "cluster_password_env")
_FILE_KEYS = ("cert_file", "key_file", "ca_file", "tls_ca_file", "file")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class HostFiles:
    instance: str  # the systemd instance: raftmq@INSTANCE, whose settings are INSTANCE.env
    group: str
    node: str
    files: dict[str, str]  # path relative to the configuration directory -> text
    secrets: tuple[str, ...]  # environment variables the node needs (the files name them)
    referenced: tuple[str, ...]  # files the configuration names, relative to the configuration directory

    @property
    def env_name(self) -> str:
        return f"{self.instance}.env"


def instance_name(topology: Topology, group: str, node: str) -> str:
    """The node id where it names one node of the cluster, else GROUP-NODE."""
    owners = [g.name for g, member in topology.members() if member.id == node]
    return node if owners == [group] else f"{group}-{node}"


def find_member(topology: Topology, node: str, group: str | None = None) -> str:
    """The group of node `node` (`group` picks one where several groups have a node of that id)."""
    owners = [g.name for g, member in topology.members() if member.id == node and (group is None or g.name == group)]
    if not owners:
        known = ", ".join(f"{g.name}/{m.id}" for g, m in topology.members())
        raise ConfigError(f"{topology.source}: no node {node!r}{f' in group {group!r}' if group else ''} "
                          f"(nodes: {known})")
    if len(owners) > 1:
        raise ConfigError(f"{topology.source}: node {node!r} is in groups {', '.join(owners)}: say which with --group")
    return owners[0]


def render_host(topology: Topology, node: str, *, group: str | None = None, config_dir: PurePosixPath,
                state_dir: PurePosixPath) -> HostFiles:
    """The files of the host of `node`, as they will be at `config_dir` (e.g. /etc/raftmq),
    with every group's data under `state_dir` (e.g. /var/lib/raftmq)."""
    if topology.source is None:
        raise ConfigError("a host's files come from a topology or group file, not the built-in cluster")
    source = topology.source.resolve()
    base = source.parent
    owner = find_member(topology, node, group)
    files: dict[str, str] = {}
    secrets: list[str] = []
    referenced: list[str] = []
    paths = [source, *(spec.config_path.resolve() for spec in topology.groups)]
    for path in dict.fromkeys(paths):
        try:
            relative = path.relative_to(base)
        except ValueError:
            raise ConfigError(f"{path}: a group file of {source} must be in its directory or below it") from None
        text = path.read_text(encoding="utf-8")
        spec = next((spec for spec in topology.groups if spec.config_path.resolve() == path), None)
        if spec is not None:
            data_dir = state_dir / spec.name
            text, count = _DATA_DIR.subn(lambda m: f'{m.group(1)}"{data_dir}"', text, count=1)
            if count != 1:
                raise ConfigError(f"{path}: no [group] data_dir to move under {state_dir}")
        files[str(relative)] = text
        raw = tomllib.loads(text)
        secrets.extend(_values(raw, _ENV_KEYS))
        directory = relative.parent
        for name in _values(raw, _FILE_KEYS):
            if name.endswith(".toml") and any(str(directory / name) == str(p.relative_to(base)) for p in paths
                                              if p.is_relative_to(base)):
                continue  # a group file: rendered above
            referenced.append(str(directory / name) if not Path(name).is_absolute() else name)
    for name in secrets:
        if not ENV_NAME.match(name):
            raise ConfigError(f"{source}: {name!r} is no environment variable name")
    owner_spec = next(spec for spec in topology.groups if spec.name == owner)
    config = config_dir / owner_spec.config_path.resolve().relative_to(base)
    env = {"RAFTMQ_CONFIG": str(config), "RAFTMQ_NODE": node}
    if len(topology.groups) > 1 or topology.cluster_connections:
        env["RAFTMQ_TOPOLOGY"] = str(config_dir / source.relative_to(base))
    instance = instance_name(topology, owner, node)
    lines = [f"# raftmq@{instance}: node {node} of group {owner} (rendered by `raftmq deploy render`)"]
    lines += [f"{key}={value}" for key, value in env.items()]
    files[f"{instance}.env"] = "\n".join(lines) + "\n"
    return HostFiles(instance, owner, node, files, tuple(dict.fromkeys(secrets)), tuple(dict.fromkeys(referenced)))


def _values(raw: object, keys: tuple[str, ...]) -> list[str]:
    """Every string value of `keys` anywhere in a parsed TOML document."""
    found: list[str] = []
    if isinstance(raw, dict):
        for key, value in raw.items():
            if key in keys and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_values(value, keys))
    elif isinstance(raw, list):
        for item in raw:
            found.extend(_values(item, keys))
    return found

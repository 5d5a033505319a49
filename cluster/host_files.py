"""What one host of a cluster needs to run its node the way `deploy/systemd/raftmq@.service`
does: the topology and every group file (bridges read their neighbours' members), each group's
`data_dir` moved under the host's state directory, and the node's environment file
(`RAFTMQ_CONFIG`, `RAFTMQ_TOPOLOGY`, `RAFTMQ_NODE` and the secrets the files name by
`password_env` / `cluster_password_env`).

`render_host` builds them as text (nothing is written); `raftmq deploy render` writes them.
Files the configuration names (TLS certificates, keys and CAs, discovery files) need not exist
where it is rendered: they are listed, each at its path on the host and with the key that names
it, in `HostFiles.to_place` and in the file `INSTANCE.to-place.txt` among the rendered ones.
The operator puts them in place, as secrets are not copied into rendered files.
`HostFiles.loopback_only` says when every address of the members is a loopback one (a
configuration for one machine: other hosts could not reach them), and `loopback_among_others`
names the client and Raft addresses that are loopback ones among addresses that are not (a
member the others, on their hosts, could not reach; an admin port kept on loopback is no
mistake); nothing is resolved.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import PurePosixPath

from cluster.topology import Topology
from raftmq.config import split_address
from raftmq.errors import ConfigError
from raftmq.web_guard import is_loopback_name

_DATA_DIR = re.compile(r'^(\s*data_dir\s*=\s*)"[^"\n]*"', re.MULTILINE)
_ENV_KEYS = ("password_env", "cluster_password_env")
_FILE_KEYS = ("cert_file", "key_file", "ca_file", "tls_ca_file", "file")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ADDRESS_KINDS = ("client", "raft", "admin", "mqtt")


@dataclass(frozen=True, slots=True)
class NamedFile:
    """A file the configuration names, for the operator to put in place on the host."""

    path: str  # where it must be on the host (absolute)
    named_by: str  # the rendered files and keys naming it: "group.toml tls.cert_file"


@dataclass(frozen=True, slots=True)
class HostFiles:
    instance: str  # the systemd instance: raftmq@INSTANCE, whose settings are INSTANCE.env
    group: str
    node: str
    files: dict[str, str]  # path relative to the configuration directory -> text
    secrets: tuple[str, ...]  # environment variables the node needs (the files name them)
    to_place: tuple[NamedFile, ...]  # files the configuration names, which the operator puts in place
    addresses: tuple[str, ...]  # every member's client, raft, admin and mqtt address ("host:port")
    reached: tuple[str, ...] = ()  # every member's client and raft address: the others reach these

    @property
    def env_name(self) -> str:
        return f"{self.instance}.env"

    @property
    def to_place_name(self) -> str:
        return f"{self.instance}.to-place.txt"

    @property
    def loopback_only(self) -> bool:
        """Every address is a loopback one (127.0.0.0/8, ::1, localhost): one machine's configuration."""
        return bool(self.addresses) and all(is_loopback_name(split_address(a)[0]) for a in self.addresses)

    @property
    def loopback_among_others(self) -> tuple[str, ...]:
        """The client and Raft addresses that are loopback ones, where not all addresses are."""
        if self.loopback_only:
            return ()
        return tuple(a for a in self.reached if is_loopback_name(split_address(a)[0]))


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
    to_place: list[NamedFile] = []
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
        secrets.extend(value for _, value in _values(raw, _ENV_KEYS))
        directory = relative.parent
        for key, name in _values(raw, _FILE_KEYS):
            if name.endswith(".toml") and any(str(directory / name) == str(p.relative_to(base)) for p in paths
                                              if p.is_relative_to(base)):
                continue  # a group file: rendered above
            on_host = name if PurePosixPath(name).is_absolute() else str(config_dir / directory / name)
            to_place.append(NamedFile(on_host, f"{relative} {key}"))
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
    naming: dict[str, list[str]] = {}  # one line per file, with every key that names it
    for item in to_place:
        naming.setdefault(item.path, []).append(item.named_by)
    placed = tuple(NamedFile(path, ", ".join(keys)) for path, keys in naming.items())
    files[f"{instance}.to-place.txt"] = _listing(instance, node, owner, placed)
    addresses = tuple(getattr(member, kind) for _, member in topology.members() for kind in _ADDRESS_KINDS
                      if getattr(member, kind) is not None)
    reached = tuple(getattr(member, kind) for _, member in topology.members() for kind in ("client", "raft"))
    return HostFiles(instance, owner, node, files, tuple(dict.fromkeys(secrets)), placed, addresses, reached)


def _listing(instance: str, node: str, group: str, placed: tuple[NamedFile, ...]) -> str:
    """INSTANCE.to-place.txt: one path a line, each with the key that names it."""
    lines = [f"# Files to put in place on the host of node {node} of group {group} (raftmq@{instance}) before",
             "# starting it: the configuration names them; `raftmq deploy render` does not copy them.",
             "# Keys: mode 0640, group raftmq. One path a line, then the file and key naming it."]
    width = max((len(item.path) for item in placed), default=0)
    lines += [f"{item.path.ljust(width)}  # {item.named_by}" for item in placed] or ["# (none)"]
    return "\n".join(lines) + "\n"


def _values(raw: object, keys: tuple[str, ...], where: str = "") -> list[tuple[str, str]]:
    """(dotted key, value) of every string value of `keys` anywhere in a parsed TOML document."""
    found: list[tuple[str, str]] = []
    if isinstance(raw, dict):
        for key, value in raw.items():
            dotted = f"{where}.{key}" if where else key
            if key in keys and isinstance(value, str):
                found.append((dotted, value))
            else:
                found.extend(_values(value, keys, dotted))
    elif isinstance(raw, list):
        for i, item in enumerate(raw):
            found.extend(_values(item, keys, f"{where}[{i}]"))
    return found

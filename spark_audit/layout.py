"""Where things are in a chaos run directory (docs/chaos.md, "The run directory"), read on the
driver: which runs an argument names, each run's groups and members, the core configuration
each group's members ran with, and the files the readers turn into tables. Small files only
(run.json, topology, metadata): nothing here reads a journal. A directory of embedded brokers'
data directories (data/<group>/embedded.json, no run.json) is a run too (spark_audit.embedded_runs)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raftmq.core.config import CoreConfig
from raftmq.errors import AuditError, ConfigError
from spark_audit.embedded_runs import (
    EMBEDDED_FILE,
    EMBEDDED_WORKLOAD,
    embedded_cores,
    embedded_records,
    is_embedded_data_dir,
    max_hops,
)
from spark_audit.faults import RunFaults, read_faults

if TYPE_CHECKING:
    from cluster.topology import Topology

RUN_FILE = "run.json"
HISTORY_FILE = "history.jsonl"
NEMESIS_FILE = "nemesis.jsonl"
NODE_LOG_FILE = "raftmq.log.jsonl"
SEGMENT_NAME = re.compile(r"^\d{20}\.seg$")  # a body-journal segment (docs/journal-format.md)


@dataclass(frozen=True, slots=True)
class MemberFiles:
    run: str
    group: str
    node: str
    directory: str  # data/<group>/<node>


@dataclass(frozen=True, slots=True)
class Run:
    name: str  # the run directory's name: unique within one audit
    path: str
    workload: str  # run.json's; embedded brokers' runs: EMBEDDED_WORKLOAD (no client history)
    groups: tuple[str, ...]
    members: tuple[MemberFiles, ...]
    max_hops: int  # the longest route a cluster connection allows (0: one group, nothing forwards)
    faults: RunFaults | None = None  # what struck (run.json); None: embedded brokers', no nemesis


def is_run(path: Path) -> bool:
    """A chaos run directory (it has run.json), or embedded brokers' (data/<group>/embedded.json)."""
    return (path / RUN_FILE).is_file() or bool(embedded_records(path))


def expand(paths: list[str]) -> list[Path]:
    """Run directories named by `paths`: a run directory itself (it has run.json, or embedded
    brokers' data/<group>/embedded.json), or a directory whose children are run directories.
    Sorted, without repeats; a path that is neither is an error naming it."""
    found: dict[Path, None] = {}
    for text in paths:
        path = Path(text)
        if is_run(path):
            found[path.resolve()] = None
        elif is_embedded_data_dir(path):
            raise AuditError(f"{path}: one embedded broker's data directory; audit the directory that holds "
                             f"it as data/{path.name}/ (docs/audit.md, \"Embedded brokers\")")
        elif path.is_dir():
            children = sorted(child for child in path.iterdir() if is_run(child))
            if not children:
                raise AuditError(f"{path}: neither a run directory (no {RUN_FILE}, no data/<group>/{EMBEDDED_FILE}) "
                                 "nor a directory of runs")
            for child in children:
                found[child.resolve()] = None
        else:
            raise AuditError(f"{path}: no such run directory")
    names = [p.name for p in found]
    if len(set(names)) != len(names):
        raise AuditError("two run directories share a name; audit them separately")
    return list(found)


def read_run(path: Path) -> Run:
    embedded = not (path / RUN_FILE).is_file() and bool(embedded_records(path))
    meta: Any = {}
    if not embedded:
        try:
            meta = json.loads((path / RUN_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise AuditError(f"{path / RUN_FILE}: unreadable ({exc})") from None
    workload = EMBEDDED_WORKLOAD if embedded else str(meta.get("options", {}).get("workload", "queue"))
    data = path / "data"
    members = []
    groups = []
    for group_dir in sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []:
        nodes = sorted(p for p in group_dir.iterdir() if p.is_dir() and (p / "raft").is_dir())
        if nodes:
            groups.append(group_dir.name)
        members += [MemberFiles(path.name, group_dir.name, node.name, str(node)) for node in nodes]
    if not members:
        raise AuditError(f"{path}: no member data under data/<group>/<node>/raft")
    # embedded brokers: each group's embedded.json read now, so a bad one is named before Spark starts
    hops = max_hops(embedded_cores(path, groups)) if embedded else _max_hops(path, meta)
    return Run(path.name, str(path), workload, tuple(groups), tuple(members), hops,
               None if embedded else read_faults(meta))


def _placed_topology(path: Path, meta: dict[str, object]) -> Path:
    placed = meta.get("placed")
    candidates = [Path(str(placed))] if placed else []
    candidates += sorted((path / "topology").glob("*.toml"))
    for candidate in candidates:
        # run.json names the absolute path at run time: a copied run keeps it under topology/
        local = path / "topology" / candidate.name
        for option in (local, candidate):
            if option.is_file():
                return option
    raise AuditError(f"{path}: no topology file under topology/")


def _max_hops(path: Path, meta: dict[str, object]) -> int:
    topology = _load(path, meta)
    return max((connection.max_hops for connection in topology.cluster_connections), default=0)


def _load(path: Path, meta: dict[str, object]) -> Topology:
    from cluster.topology import load_topology

    try:
        return load_topology(_placed_topology(path, meta))
    except ConfigError as exc:
        raise AuditError(f"{path}: {exc}") from None


def core_configs(run: Run) -> dict[str, CoreConfig]:
    """The broker core's configuration each group's members ran with: what a replay needs to
    decide as they did (broker name, limits, the group's view of the cluster)."""
    from cluster.node_settings import node_cluster_settings

    path = Path(run.path)
    if run.workload == EMBEDDED_WORKLOAD:
        return embedded_cores(path, run.groups)
    meta = json.loads((path / RUN_FILE).read_text())
    topology = _load(path, meta)
    configs = {}
    for spec in topology.groups:
        first = spec.config.members[0].id
        core = spec.config.node_config(first).core
        view, _peers = node_cluster_settings(topology, spec.name)
        if view is not None:
            core = dataclasses.replace(core, cluster=view)
        configs[spec.name] = core
    missing = set(run.groups) - set(configs)
    if missing:
        raise AuditError(f"{path}: data for group(s) {sorted(missing)} that the topology does not name")
    return configs


def segment_files(directory: str) -> list[str]:
    """A member's segment files, in index order (names sort like indexes)."""
    bodies = os.path.join(directory, "bodies")
    if not os.path.isdir(bodies):
        return []
    return [os.path.join(bodies, name) for name in sorted(os.listdir(bodies)) if SEGMENT_NAME.match(name)]

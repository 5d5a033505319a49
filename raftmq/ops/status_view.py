"""The cluster status view: every node's admin `/status`, summarised per group.

`collect_status` asks each node (in parallel, every wait bounded) and returns plain JSON-able
data (what `raftmq status --json` prints); `render_status` turns that data into rich tables and
never does I/O, so tests render it to a string console (`render_to_string`).
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

STATUS_TIMEOUT_SECONDS = 1.0
MAX_PARALLEL_REQUESTS = 16

# Operators of ActiveMQ and Artemis read master/slave; Raft says leader/follower.
ROLE_NAMES = {"leader": "master", "follower": "slave"}


@dataclass(frozen=True, slots=True)
class NodeAddress:
    group: str
    id: str
    client: str
    admin: str
    pid: int | None = None


def fetch_status(admin: str, timeout: float = STATUS_TIMEOUT_SECONDS) -> dict[str, Any] | None:
    """A node's `/status` as a dict, or None when it does not answer (or answers garbage)."""
    try:
        with urllib.request.urlopen(f"http://{admin}/status", timeout=timeout) as answer:
            status = json.loads(answer.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def collect_status(nodes: Sequence[NodeAddress], timeout: float = STATUS_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Ask every node at once; summarise per group (see `summarise`)."""
    if not nodes:
        return {"groups": []}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_REQUESTS, len(nodes))) as pool:
        answers = list(pool.map(lambda node: fetch_status(node.admin, timeout), nodes))
    return summarise(list(zip(nodes, answers, strict=True)))


def summarise(answers: Sequence[tuple[NodeAddress, dict[str, Any] | None]]) -> dict[str, Any]:
    """Pure: per group, each node's role, term, indexes and lag, and the leader's destinations.

    Lag is the leader's commit index minus the node's applied index: how far that node's
    broker state trails what the group has committed (None when no leader answers)."""
    groups: dict[str, list[tuple[NodeAddress, dict[str, Any] | None]]] = {}
    for node, status in answers:
        groups.setdefault(node.group, []).append((node, status))
    summary = []
    for name, members in groups.items():
        leaders = [(node, status) for node, status in members if status is not None and status.get("role") == "leader"]
        # Two leaders answer during a hand-over; the higher term is the current one.
        leader = max(leaders, key=lambda pair: _int(pair[1].get("term")) or 0, default=None)
        leader_commit = _int(leader[1].get("commit_index")) if leader is not None else None
        nodes = [_node_row(node, status, leader_commit) for node, status in members]
        destinations = leader[1].get("broker", {}).get("destinations", {}) if leader is not None else {}
        summary.append({
            "name": name,
            "leader": leader[0].id if leader is not None else None,
            "term": _int(leader[1].get("term")) if leader is not None else None,
            "commit_index": leader_commit,
            "nodes_up": sum(1 for row in nodes if row["up"]),
            "nodes": nodes,
            "destinations": destinations if isinstance(destinations, dict) else {},
        })
    return {"groups": summary}


def _node_row(node: NodeAddress, status: dict[str, Any] | None, leader_commit: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"id": node.id, "client": node.client, "admin": node.admin, "pid": node.pid, "up": status is not None}
    if status is None:
        return {**row, "role": "down"}
    applied = _int(status.get("applied_index"))
    return {
        **row,
        "role": status.get("role", "unknown"),
        "term": _int(status.get("term")),
        "commit_index": _int(status.get("commit_index")),
        "applied_index": applied,
        "lag": None if leader_commit is None or applied is None else max(0, leader_commit - applied),
        "sessions": _int(status.get("sessions")),
        "failure": status.get("failure"),
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- rendering (pure) -------------------------------------------------------------------------


def render_status(summary: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    for group in summary.get("groups", []):
        parts.append(_nodes_table(group))
        if group["destinations"]:
            parts.append(_destinations_table(group))
    if not parts:
        parts.append(Text("no groups"))
    return Group(*parts)


def _nodes_table(group: dict[str, Any]) -> Table:
    leader = group["leader"]
    title = f"group {group['name']}: " + (
        f"master {leader}, term {group['term']}" if leader is not None else "NO MASTER"
    ) + f", {group['nodes_up']}/{len(group['nodes'])} nodes up"
    table = Table(title=title, title_justify="left")
    numeric = ("term", "commit", "applied", "lag", "sessions", "pid")
    for column in ("node", "role", "term", "commit", "applied", "lag", "sessions"):
        table.add_column(column, justify="right" if column in numeric else "left", min_width=6 if column == "role" else None)
    # An address cut to "127.0.0.…" is useless: narrower consoles squeeze the other columns.
    table.add_column("client", no_wrap=True, min_width=max((len(row["client"]) for row in group["nodes"]), default=6))
    table.add_column("pid", justify="right")
    for row in group["nodes"]:
        if not row["up"]:
            table.add_row(row["id"], Text("down", style="bold red"), "-", "-", "-", "-", "-", row["client"], _text(row["pid"]))
            continue
        role = ROLE_NAMES.get(row["role"], row["role"])
        role_text = Text(role, style="bold green" if role == "master" else "")
        if row.get("failure"):
            role_text.append(f" (failed: {row['failure']})", style="red")
        table.add_row(
            row["id"], role_text, _text(row["term"]), _text(row["commit_index"]), _text(row["applied_index"]),
            _text(row["lag"]), _text(row["sessions"]), row["client"], _text(row["pid"]),
        )
    return table


def _destinations_table(group: dict[str, Any]) -> Table:
    table = Table(title=f"group {group['name']}: destinations", title_justify="left")
    columns = ("depth", "consumers", "in_flight", "enqueued", "dequeued", "dead_lettered")
    table.add_column("destination")
    for column in columns:
        table.add_column(column.replace("_", "-"), justify="right")
    for destination in sorted(group["destinations"]):
        counters = group["destinations"][destination]
        table.add_row(destination, *(_text(counters.get(column)) for column in columns))
    return table


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def render_to_string(summary: dict[str, Any], width: int = 120) -> str:
    """The view as plain text (no colours), e.g. for tests and `--once` into a pipe."""
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(render_status(summary))
    return console.file.getvalue()  # type: ignore[attr-defined]

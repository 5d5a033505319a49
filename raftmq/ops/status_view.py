"""The cluster status view: every node's admin `/status`, summarised per group.

`collect_status` asks each node (in parallel, every wait bounded) and returns plain JSON-able
data (what `raftmq status --json` prints); `render_status` turns that data into rich tables and
never does I/O, so tests render it to a string console (`render_to_string`).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from raftmq.client.admin import AdminAccess
from raftmq.config import console_url
from raftmq.errors import ClientError
from raftmq.ops.cluster_view import cluster_table, cluster_view, links_table
from raftmq.ops.tables import new_table
from raftmq.routing.route import INTERNAL_PREFIXES

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
    restarts: int = 0  # by `raftmq up`'s supervisor (its state file)
    last_exit: str | None = None  # how the node last ended, e.g. "was killed by SIGKILL at 12:00:01"
    mqtt: str | None = None  # its MQTT address, if it has one


def fetch_status(admin: str, timeout: float = STATUS_TIMEOUT_SECONDS,
                 access: AdminAccess | None = None) -> dict[str, Any] | None:
    """A node's `/status` as a dict, or None when it does not answer (or answers garbage, or
    refuses the login). `admin`: "host:port", or "https://host:port"; `access`: the CA and
    login (default: from the environment, `AdminAccess.from_environment`)."""
    try:
        code, data = (access or AdminAccess.from_environment()).request(admin, "/status", timeout)
        status = json.loads(data) if code == 200 else None
    except (OSError, ValueError, ClientError):
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
    """Pure: per group, each node's role, health, term, indexes, lag and connections, and the
    leader's view of the group's state: destinations (with rates), sessions, dead letters.

    Lag is the leader's commit index minus the node's applied index: how far that node's
    broker state trails what the group has committed (None when no leader answers).
    `ok` (per group and overall) is what `raftmq status` exits with: every node answered
    and each group has exactly one leader. `state` is `serving`, or `draining` / `drained`
    while `raftmq group drain` has it turn every client away (see `drain_summary`)."""
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
        broker = _dict(leader[1].get("broker")) if leader is not None else {}
        rates = _dict(leader[1].get("rates")) if leader is not None else {}
        # The leader's rates shown beside its counters: one row per destination.
        destination_rates = _dict(rates.get("destinations"))
        destinations = {
            name: {**counters, **_dict(destination_rates.get(name))} if isinstance(counters, dict) else counters
            for name, counters in _dict(broker.get("destinations")).items()
        }
        nodes_up = sum(1 for row in nodes if row["up"])
        drain = drain_summary(leader[1] if leader is not None else next((st for _n, st in members if st), None))
        summary.append({
            "name": name,
            "ok": nodes_up == len(nodes) and len(leaders) == 1,
            "leader": leader[0].id if leader is not None else None,
            "leaders": len(leaders),
            "term": _int(leader[1].get("term")) if leader is not None else None,
            "commit_index": leader_commit,
            "nodes_up": nodes_up,
            "state": "serving" if drain is None else drain["state"],
            "drain": drain,
            "sessions": _int(broker.get("sessions")),
            "rates": {key: value for key, value in rates.items() if key != "destinations"},
            "dead_letter": _dict(broker.get("dead_letter")),
            "expiry": _dict(broker.get("expiry")),
            "nodes": nodes,
            "consoles": {node.id: url for node, _status in members if (url := console_url(node.admin)) is not None},
            "destinations": destinations,
            "links": list((_dict(leader[1].get("cluster")).get("links") or []) if leader is not None else []),
        })
    return {"ok": all(group["ok"] for group in summary), "groups": summary, "cluster": cluster_view(summary)}


def held(status: dict[str, Any]) -> int:
    """Messages a group's leader still holds: every destination's ready and in-flight ones
    (its store-and-forward queues' too)."""
    destinations = _dict(_dict(status.get("broker")).get("destinations"))
    return sum(int(d.get("depth") or 0) + int(d.get("in_flight") or 0)
               for d in destinations.values() if isinstance(d, dict))


def drain_summary(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """None unless the group drains (`raftmq group drain`, the node's `cluster.draining`;
    the state is replicated, so any member tells): `to` (the groups it moves to; [] for every
    group it reaches), `moved` (messages moved so far, `cluster.drained`), `left` (what the
    leader still holds; None when `status` is not the leader's) and `state`: `drained` once
    the leader holds nothing (the group can be stopped), else `draining`. Either way the
    group turns every client away."""
    cluster = _dict((status or {}).get("cluster"))
    if cluster.get("draining") is None or status is None:
        return None
    left = held(status) if status.get("role") == "leader" else None
    return {"state": "drained" if left == 0 else "draining", "to": [str(g) for g in cluster["draining"]],
            "moved": _int(cluster.get("drained")) or 0, "left": left}


def _node_row(node: NodeAddress, status: dict[str, Any] | None, leader_commit: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"id": node.id, "client": node.client, "admin": node.admin, "pid": node.pid,
                           "up": status is not None}
    if node.mqtt:
        row["mqtt"] = node.mqtt
    if node.restarts or node.last_exit:  # what `raftmq up`'s supervisor saw (its state file)
        row.update(restarts=node.restarts, last_exit=node.last_exit)
    if status is None:
        return {**row, "role": "down", "health": "down"}
    applied = _int(status.get("applied_index"))
    return {
        **row,
        "pid": node.pid if node.pid is not None else _int(status.get("pid")),
        "role": status.get("role", "unknown"),
        "health": status.get("health", "unknown"),
        "term": _int(status.get("term")),
        "commit_index": _int(status.get("commit_index")),
        "applied_index": applied,
        "lag": None if leader_commit is None or applied is None else max(0, leader_commit - applied),
        "connections": _int(status.get("sessions")),
        "failure": status.get("failure"),
    }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# -- rendering (pure) -------------------------------------------------------------------------


def render_status(summary: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = []
    for group in summary.get("groups", []):
        parts.append(_nodes_table(group))
        if group.get("consoles"):
            parts.append(_consoles_line(group))
        if group.get("drain") is not None:
            parts.append(_drain_line(group))
        if any(not name.startswith(INTERNAL_PREFIXES) for name in group["destinations"]):
            parts.append(_destinations_table(group))
        parts.append(_dead_letter_line(group))
    links = [link for group in summary.get("groups", []) for link in group.get("links", [])]
    if links:
        parts.append(links_table(links))
    if summary.get("cluster"):
        parts.append(cluster_table(summary["cluster"]))
    if not parts:
        parts.append(Text("no groups"))
    return Group(*parts)


def _nodes_table(group: dict[str, Any]) -> Table:
    leader = group["leader"]
    title = Text(f"group {group['name']}: ")
    if leader is None:
        title.append("NO MASTER", style="bold red")
    else:
        title.append(f"master {leader}, term {group['term']}")
    title.append(f", {group['nodes_up']}/{len(group['nodes'])} nodes up",
                 style="" if group["nodes_up"] == len(group["nodes"]) else "bold red")
    drain = group.get("drain")
    if drain is not None:  # `_drain_line` under the table says more
        title.append(f", {drain['state'].upper()}", style=DRAIN_STYLE)
    if group.get("sessions") is not None:
        title.append(f", {group['sessions']} sessions")
    rates = group.get("rates") or {}
    if rates.get("enqueue_rate") is not None:
        title.append(f", {_rate(rates['enqueue_rate'])} in / {_rate(rates['dequeue_rate'])} out msg/s")
    table = new_table(title)
    numeric = ("term", "commit", "applied", "lag", "conns")
    for column in ("node", "role", "health", "term", "commit", "applied", "lag", "conns"):
        table.add_column(column, justify="right" if column in numeric else "left",
                         min_width=6 if column == "role" else None)
    # An address cut to "127.0.0.…" is useless: narrower consoles squeeze the other columns.
    table.add_column("client", no_wrap=True, min_width=max((len(row["client"]) for row in group["nodes"]), default=6))
    mqtt = any(row.get("mqtt") for row in group["nodes"])
    if mqtt:
        table.add_column("mqtt", no_wrap=True, min_width=max(len(row.get("mqtt") or "-") for row in group["nodes"]))
    table.add_column("pid", justify="right")
    for row in group["nodes"]:
        addresses = (row["client"], row.get("mqtt") or "-") if mqtt else (row["client"],)
        if not row["up"]:
            down = Text("down", style="bold red")
            if row.get("last_exit"):
                down.append(f" ({row['last_exit']})", style="red")
            table.add_row(row["id"], down, "-", "-", "-", "-", "-", "-", *addresses, _text(row["pid"]))
            continue
        role = ROLE_NAMES.get(row["role"], row["role"])
        role_text = Text(role, style="bold green" if role == "master" else "")
        if row.get("failure"):
            role_text.append(f" (failed: {row['failure']})", style="red")
        if row.get("restarts"):
            role_text.append(f" (restarted {row['restarts']}x)", style="yellow")
        health = Text(str(row.get("health")), style="green" if row.get("health") == "ok" else "bold red")
        if drain is not None and row.get("health") == "ok":  # it serves its role, and turns every client away
            health = Text(drain["state"], style=DRAIN_STYLE)
        table.add_row(
            row["id"], role_text, health, _text(row["term"]), _text(row["commit_index"]), _text(row["applied_index"]),
            _text(row["lag"]), _text(row.get("connections")), *addresses, _text(row["pid"]),
        )
    return table


DRAIN_STYLE = "bold yellow"


def _consoles_line(group: dict[str, Any]) -> Text:
    """Where each member's web console opens (any member's works; a follower's passes changes on)."""
    consoles = group["consoles"]
    leader = group.get("leader")
    return Text("console: " + ", ".join(f"{node} {url}" + (" (master)" if node == leader else "")
                                          for node, url in consoles.items()))


def _drain_line(group: dict[str, Any]) -> Text:
    drain = group["drain"]
    to = ", ".join(drain["to"]) or "every group it reaches"
    left = "" if drain["left"] is None else f", {drain['left']} left"
    if drain["state"] == "drained":
        text = (f"group {group['name']} is DRAINED to {to}: {drain['moved']} moved, nothing left; "
                f"it turns every client away (stop it, or `raftmq group drain {group['name']} --cancel`)")
    else:
        text = f"group {group['name']} is DRAINING to {to}: {drain['moved']} moved{left}; it turns every client away"
    return Text(text, style=DRAIN_STYLE)


# (header, counter key) of the destinations table.
DESTINATION_COLUMNS = (
    ("depth", "depth"), ("cons", "consumers"), ("in flight", "in_flight"), ("enq/s", "enqueue_rate"),
    ("deq/s", "dequeue_rate"), ("enqueued", "enqueued"), ("dequeued", "dequeued"), ("dead lettered", "dead_lettered"),
)


def _destinations_table(group: dict[str, Any]) -> Table:
    table = new_table(f"group {group['name']}: destinations")
    names = group["destinations"]
    table.add_column("destination", no_wrap=True, min_width=max((len(name) for name in names), default=11))
    for header, _key in DESTINATION_COLUMNS:
        table.add_column(header, justify="right")
    dead_letter_queue = group.get("dead_letter", {}).get("destination")
    for destination in sorted(group["destinations"]):
        if destination.startswith(INTERNAL_PREFIXES):
            continue  # store-and-forward queues: the links table shows what waits in them
        counters = group["destinations"][destination]
        cells: list[Text | str] = []
        for _header, key in DESTINATION_COLUMNS:
            value = counters.get(key)
            cell = _rate(value) if key.endswith("_rate") else _text(value)
            cells.append(Text(cell, style="bold red") if key == "dead_lettered" and value else cell)
        # Messages waiting in the dead-letter queue need someone's attention.
        dead = destination == dead_letter_queue and bool(counters.get("depth"))
        table.add_row(Text(destination, style="bold red") if dead else destination, *cells)
    return table


def _dead_letter_line(group: dict[str, Any]) -> Text:
    dead_letter = group.get("dead_letter") or {}
    depth, total = dead_letter.get("depth"), dead_letter.get("dead_lettered")
    if not dead_letter or group["leader"] is None:
        return Text("")
    line = Text(f"dead-letter queue {dead_letter.get('destination')}: ")
    line.append(f"{depth} waiting", style="bold red" if depth else "")
    line.append(f", {total} dead-lettered in all")
    return line


def _rate(value: Any) -> str:
    return "-" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:.1f}"


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def render_to_string(summary: dict[str, Any], width: int = 120) -> str:
    """The view as plain text (no colours), e.g. for tests and `--once` into a pipe."""
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(render_status(summary))
    return str(console.file.getvalue())  # type: ignore[attr-defined]  # a StringIO here

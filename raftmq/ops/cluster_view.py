"""The cluster part of `raftmq status`: the links between groups and each destination across
the groups. Pure: it reads the summary `raftmq.ops.status_view.summarise` builds from every
node's /status (the links come from each group's leader, which runs the bridges)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from raftmq.ops.tables import new_table
from raftmq.routing.route import INTERNAL_PREFIXES


def cluster_view(groups: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each destination across the cluster: per group (from each leader), depth and consumers,
    and where its messages go, in msg/s over the rates' window: `local_rate` stored here from
    this group's own producers, `forward_rate` sent on towards other groups, `arrive_rate`
    stored here from other groups (None while unknown). Empty for a single group (its
    destinations table says it all)."""
    if len(groups) < 2:
        return {}
    view: dict[str, dict[str, dict[str, Any]]] = {}
    for group in groups:
        for destination, counters in group["destinations"].items():
            if destination.startswith(INTERNAL_PREFIXES) or not isinstance(counters, dict):
                continue
            enqueue, arrive = counters.get("enqueue_rate"), counters.get("arrive_rate")
            view.setdefault(destination, {})[group["name"]] = {
                "depth": counters.get("depth"), "consumers": counters.get("consumers"),
                "local_rate": None if enqueue is None or arrive is None else round(max(0.0, enqueue - arrive), 2),
                "forward_rate": counters.get("forward_rate"), "arrive_rate": arrive,
            }
    return view


def links_table(links: list[dict[str, Any]]) -> Table:
    """One row per link. `presence` is what discovery knows of the neighbouring group: `up`
    while its leader announces it, `down` once it stopped (it disappeared: its link retries
    until it comes back); `-` for a link the topology names (no discovery)."""
    table = new_table("links (cluster bridges, run by each group's master)")
    counts = ("forwarded", "first", "waiting", "in flight")
    for column in ("from", "to", "presence", "state", *counts, "last error"):
        table.add_column(column, justify="right" if column in counts else "left")
    table.caption = ("forwarded: through the store-and-forward queue; first: sent before being stored "
                     "(fell back: set out first, then stored)")
    for link in links:
        state = str(link.get("state"))
        if state == "retrying" and link.get("retry_in_s") is not None:
            state = f"retrying in {link['retry_in_s']} s"
        style = "green" if state == "connected" else "bold red"
        error = "" if link.get("state") == "connected" else _text(link.get("last_error"))
        presence = link.get("presence")
        presence_text = Text(_text(presence), style={"up": "green", "down": "bold red"}.get(str(presence), ""))
        table.add_row(_text(link.get("from")), _text(link.get("to")), presence_text, Text(state, style=style),
                      _text(link.get("forwarded")), _first(link), _text(link.get("waiting")),
                      _text(link.get("in_flight")), error)
    return table


def _first(link: dict[str, Any]) -> str:
    first, fell_back = link.get("forwarded_first"), link.get("fell_back")
    return _text(first) + (f" (fell back: {fell_back})" if fell_back else "")


def cluster_table(view: dict[str, dict[str, dict[str, Any]]]) -> Table:
    groups = sorted({group for per_group in view.values() for group in per_group})
    table = new_table("destinations across the cluster: depth / consumers per group")
    table.add_column("destination", no_wrap=True)
    for group in groups:
        table.add_column(group, justify="right")
    for destination in sorted(view):
        cells = []
        for group in groups:
            counters = view[destination].get(group)
            if counters is None:
                cells.append("-")
                continue
            cell = f"{_text(counters['depth'])} / {_text(counters['consumers'])}"
            if counters.get("local_rate") is not None:
                table.caption = ("msg/s stored where they were sent (local), sent on to other groups (out), "
                                 "come from them (in)")
                cell += (f"\nlocal {_per_second(counters['local_rate'])}"
                         f" · out {_per_second(counters.get('forward_rate'))}"
                         f" · in {_per_second(counters.get('arrive_rate'))}")
            cells.append(cell)
        table.add_row(destination, *cells)
    return table


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _per_second(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:.1f}"

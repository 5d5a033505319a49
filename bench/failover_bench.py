"""Leader kill -9 → publishes resume, over K kills of a 3-node raftmq group, with a loss check.

    .venv/bin/python -m bench.failover_bench [--kills 20] [--window 4] [--json out.json]

A producer using raftmq.client.failover publishes 1 KiB persistent messages with receipts
(`--window` in flight) the whole time. K times: find the leader (the member that accepts a
STOMP CONNECT), kill -9 it, and time from just before the kill to the first RECEIPT that
arrives over a connection made after the kill ("publishes resume"); restart the killed node
and wait until all three members agree on one leader and have applied what it had committed.
At the end the producer stops, a consumer drains the queue, and every receipted message must
be there exactly once. Every step has a timeout; node processes are stopped by pid.
Docs: docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.failover_load import FailoverProducer, drain
from bench.node_group import NodeGroup, install_signal_handlers

console = Console(width=None if sys.stdout.isatty() else 120)  # logs keep whole tables
# Reconnect fast and keep trying: a kill must cost an election, not the client's back-off.
CLIENT_OPTIONS = ("randomize=false&initialReconnectDelay=10&maxReconnectDelay=100&maxReconnectAttempts=-1"
                  "&connectTimeout=2000&timeout=30000")


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100): with 20 samples, p99 is the maximum."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


async def _steady(producer: FailoverProducer, group: NodeGroup, receipts: int, timeout: float) -> None:
    """Until the producer got `receipts` receipts from its current connection."""
    since = time.monotonic()
    deadline = since + timeout
    while producer.receipts_since(since) < receipts:
        if time.monotonic() > deadline:
            raise TimeoutError(f"producer did not get {receipts} receipts within {timeout:g} s")
        group.check_alive()
        await asyncio.sleep(0.02)


async def _kill_once(number: int, producer: FailoverProducer, group: NodeGroup, args: dict[str, Any]) -> dict[str, Any]:
    leader = await asyncio.to_thread(group.find_leader, args["step_timeout"])
    member = group.members[leader]
    on_leader = producer.address == f"{member.client[0]}:{member.client[1]}"
    before = await asyncio.to_thread(group.status, leader)
    term_before = (before or {}).get("term")
    killed_at = time.monotonic()
    watch = producer.arm(killed_at)
    await asyncio.to_thread(group.kill9, leader)
    row: dict[str, Any] = {"kill": number, "killed": leader, "producer_was_on_leader": on_leader}
    try:
        await asyncio.wait_for(watch.fired.wait(), args["step_timeout"])
    except TimeoutError:
        row["resume_ms"] = None
        row["error"] = f"publishes did not resume within {args['step_timeout']:g} s"
        return row
    row["resume_ms"] = round((watch.resumed_at - killed_at) * 1000, 2)  # type: ignore[operator]
    row["reconnect_ms"] = None if watch.reconnected_at is None else round((watch.reconnected_at - killed_at) * 1000, 2)
    row["reconnected_to"] = watch.reconnected_to
    row["resent"] = watch.resent
    term_resumed = await asyncio.to_thread(_highest_term, group, leader)
    restart_at = time.monotonic()
    await asyncio.to_thread(group.start, leader)
    live = await asyncio.to_thread(group.wait_live, args["step_timeout"])
    row["new_leader"] = live["leader"]
    # Terms the group went through: 1 is one clean election, more means split votes; a term
    # started by the restarted member (it timed out before hearing the leader) disrupts it.
    row["elections"] = None if term_before is None or term_resumed is None else term_resumed - term_before
    row["restart_elections"] = None if term_resumed is None else live["term"] - term_resumed
    row["rejoin_s"] = round(time.monotonic() - restart_at, 3)
    return row


def _highest_term(group: NodeGroup, dead: str) -> int | None:
    terms = [s.get("term") for node_id in group.members if node_id != dead and (s := group.status(node_id))]
    return max((t for t in terms if t is not None), default=None)


async def _run(group: NodeGroup, args: dict[str, Any]) -> dict[str, Any]:
    destination = f"/queue/failover-{uuid.uuid4().hex[:8]}"
    url = group.failover_url(CLIENT_OPTIONS)
    producer = FailoverProducer(url, destination, args["window"])
    await producer.start(args["step_timeout"])
    kills: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        for number in range(1, args["kills"] + 1):
            await _steady(producer, group, args["steady_receipts"], args["step_timeout"])
            row = await _kill_once(number, producer, group, args)
            kills.append(row)
            shown = "—" if row.get("resume_ms") is None else f"{row['resume_ms']:.0f} ms"
            console.print(f"[dim]kill {number}: {row['killed']} → resume {shown}, "
                          f"new leader {row.get('new_leader')}, rejoin {row.get('rejoin_s')} s[/]")
            if row.get("resume_ms") is None:
                break
        await _steady(producer, group, args["steady_receipts"], args["step_timeout"])
    finally:
        await producer.stop(args["step_timeout"])
    publish_seconds = time.monotonic() - started
    stats = producer.stats
    console.print(f"draining {len(stats.receipted):,} receipted messages from {destination}")
    leader = await asyncio.to_thread(group.find_leader, args["step_timeout"])
    drained = await drain(group.failover_url(CLIENT_OPTIONS), destination, stats.receipted,
                          args["drain_idle"], args["drain_timeout"])
    status = await asyncio.to_thread(group.status, leader)
    queue = ((status or {}).get("broker", {}).get("destinations", {}) or {}).get(destination, {})
    lost = sorted(stats.receipted - drained.seen)
    latencies = [row["resume_ms"] for row in kills if row.get("resume_ms") is not None]
    return {
        "destination": destination,
        "client_url": url,
        "kills": kills,
        "resume_ms": {
            "count": len(latencies),
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "max": max(latencies) if latencies else None,
        },
        "kills_with_split_votes": sum(1 for row in kills if (row.get("elections") or 0) > 1),
        "restarts_starting_a_term": sum(1 for row in kills if (row.get("restart_elections") or 0) > 0),
        "reconnect_ms_p50": percentile([r["reconnect_ms"] for r in kills if r.get("reconnect_ms") is not None], 50),
        "rejoin_s_max": max((r["rejoin_s"] for r in kills if "rejoin_s" in r), default=None),
        "sent": stats.sent,
        "receipted": len(stats.receipted),
        "unconfirmed": stats.sent - len(stats.receipted),
        "unconfirmed_reasons": stats.failed,
        "publish_seconds": round(publish_seconds, 3),
        "drained": {"deliveries": drained.deliveries, "distinct": drained.distinct, "redelivered": drained.redelivered,
                    "foreign": drained.foreign, "seconds": round(drained.seconds, 3), "timed_out": drained.timed_out},
        "lost": len(lost),
        "lost_sample": lost[:20],
        "duplicated": drained.duplicated,
        "stored_on_leader": queue.get("enqueued"),
        "queue_after_drain": {k: queue.get(k) for k in ("depth", "in_flight")},
        "rss_kib": group.rss(),
    }


def _render(report: dict[str, Any]) -> None:
    kills = Table(title="kill -9 of the leader", title_justify="left")
    for column in ("#", "killed", "on it", "reconnect ms", "resume ms", "resent", "elections", "new leader",
                   "rejoin s"):
        kills.add_column(column, justify="right")
    for row in report["kills"]:
        kills.add_row(str(row["kill"]), row["killed"], "yes" if row["producer_was_on_leader"] else "[red]no[/]",
                      _num(row.get("reconnect_ms")), _num(row.get("resume_ms")), _num(row.get("resent")),
                      _num(row.get("elections")),
                      str(row.get("new_leader", "—")), _num(row.get("rejoin_s")))
    console.print(kills)
    resume = report["resume_ms"]
    summary = Table(title="failover summary", title_justify="left")
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    summary.add_row("kills measured", f"{resume['count']} of {report['settings']['kills']}")
    for key in ("p50", "p99", "max"):
        summary.add_row(f"publishes resume {key}", "—" if resume[key] is None else f"{resume[key]:.0f} ms")
    summary.add_row("kills that needed more than one election", f"{report['kills_with_split_votes']}")
    summary.add_row("restarts that started a new term", f"{report['restarts_starting_a_term']}")
    summary.add_row("receipted / sent", f"{report['receipted']:,} / {report['sent']:,}")
    summary.add_row("stored on the leader (enqueued)", _num(report["stored_on_leader"]))
    summary.add_row("lost (receipted, not delivered)", _flag(report["lost"]))
    summary.add_row("duplicated (delivered twice)", _flag(report["duplicated"]))
    summary.add_row("redelivered while draining", _num(report["drained"]["redelivered"]))
    for name, kib in report["rss_kib"].items():
        summary.add_row(f"RSS {name}", "—" if kib is None else f"{kib / 1024:.1f} MiB")
    goal = resume["p99"] is not None and resume["count"] == report["settings"]["kills"] and resume["p99"] <= 1000
    summary.add_row("goal: p99 ≤ 1 s over all kills", "[green]met[/]" if goal else "[red]not met[/]")
    console.print(summary)


def _num(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if isinstance(value, float) and value >= 100 else f"{value:,}"


def _flag(value: int) -> str:
    return f"[bold red]{value:,}[/]" if value else "0"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--kills", "-k", default=20, show_default=True, type=click.IntRange(1, 1000), help="Leader kills.")
@click.option("--window", default=4, show_default=True, type=click.IntRange(1, 1000),
              help="Receipts the producer keeps in flight (1 = wait for each).")
@click.option("--steady-receipts", default=200, show_default=True, type=click.IntRange(1),
              help="Receipts after a rejoin (and before the first kill) before the next kill.")
@click.option("--step-timeout", default=60.0, show_default=True, type=click.FloatRange(1),
              help="Seconds any one step may take (leader found, resume, rejoin).")
@click.option("--drain-idle", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="After every receipted message arrived, wait this long for duplicates.")
@click.option("--drain-timeout", default=300.0, show_default=True, type=click.FloatRange(1),
              help="Seconds the final drain may take in all.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write the report as JSON.")
@click.option("--keep", is_flag=True, help="Keep the group's temp dir (config, logs, data).")
def main(kills: int, window: int, steady_receipts: int, step_timeout: float, drain_idle: float,
         drain_timeout: float, json_path: str | None, keep: bool) -> None:
    """kill -9 the leader of a 3-node raftmq group K times under a receipted producer."""
    install_signal_handlers()
    args = {"kills": kills, "window": window, "steady_receipts": steady_receipts, "step_timeout": step_timeout,
            "drain_idle": drain_idle, "drain_timeout": drain_timeout}
    with NodeGroup.create(size=3) as group:
        group.keep_files = keep
        console.print(f"starting a 3-node group in {group.root}")
        try:
            leader = group.start_all(timeout=step_timeout)
            group.wait_live(timeout=step_timeout)
            console.print(f"leader {leader}; producer window {window}; {kills} kills")
            report = asyncio.run(_run(group, args))
        except Exception:
            console.print(f"[red]stopped early; config, logs and data kept in {group.root}[/]")
            raise
    report["settings"] = {**args, "size": 1024, "persistent": True,
                          "config": "configs/group.toml (addresses and data_dir replaced)"}
    report["argv"] = sys.argv
    _render(report)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"wrote {json_path}")
    failed = report["lost"] or report["duplicated"] or report["resume_ms"]["count"] < kills
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

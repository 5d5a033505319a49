"""raftmq (3-node group) and RabbitMQ (3-node quorum queue) measured in one sitting.

    .venv/bin/python -m bench.side_by_side [--messages 10000] [--repeat 3] [--json out.json]

1. Starts a 3-node raftmq group (`raftmq node --config ... --node nI`) on free loopback ports
   in a temp dir, finds its leader, runs every case with `raftmq bench` against it, records
   each node's RSS, stops the group.
2. Starts the 3-node RabbitMQ cluster with $RAFTMQ_PEERS_DIR/start_rabbitmq.sh, runs the same
   cases with the same bench arguments (plus vhost, guest login and x-queue-type:quorum),
   records the beam RSS, stops it with stop_rabbitmq.sh (unless it was already running).
The brokers run one after the other, so neither's idle CPU (Erlang schedulers spin) taxes the
other on this 2-core machine. Cases: 1 KiB persistent messages, client-individual ACK per
message; 4P×4C with 100 receipts in flight per producer, and 1P×1C waiting for each receipt.
With --repeat N each figure is the median of N runs (loss and duplicates are summed).
Docs: docs/benchmarks.md.
"""

from __future__ import annotations

import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from bench.bench_cases import (
    CASES,
    COUNTS,
    METRICS,
    bench_command,
    combine,
    declare_queue,
    new_destination,
    ratios,
    run_bench,
    targets,
)
from bench.node_group import NodeGroup, install_signal_handlers
from bench.peer_rabbitmq import CONNECT_ARGS, QUEUE_ARGS, RabbitCluster, missing_reason, peers_dir

console = Console(width=None if sys.stdout.isatty() else 120)  # logs keep whole tables


def _warmup(messages: int) -> int:
    return min(1000, messages // 10)


# Set from the command line: --duration (sustained runs) and --case (which cases).
RUN: dict[str, Any] = {"duration": None, "cases": CASES}


def _run_cases(label: str, url: str, broker_args: tuple[str, ...], messages: int, repeat: int,
               processes: int, check: Any = None) -> dict[str, dict[str, Any]]:
    """Every case `repeat` times against one broker: {case key: {"combined", "runs", "commands"}}."""
    out: dict[str, dict[str, Any]] = {}
    duration = RUN["duration"]
    for case in RUN["cases"]:
        runs, commands = [], []
        for attempt in range(repeat):
            destination = new_destination(case)
            declare_queue(url, destination, broker_args)
            command = bench_command(url, case, destination, messages, _warmup(messages), processes, broker_args,
                                    Path("result.json"), duration)
            commands.append(shlex.join(command))
            console.print(f"[dim]{label}: {case.title}, run {attempt + 1}/{repeat}[/]")
            started = time.monotonic()
            result = run_bench(command, messages, duration)
            if check is not None:
                check()
            runs.append(result)
            console.print(
                f"[dim]  {result['consume_rate']:,.0f} msg/s e2e, receipt p50 "
                f"{result['receipt_latency_ms'].get('p50')} ms, lost {result['lost']}, "
                f"dup {result['duplicated']}, errors {result['errors']} ({time.monotonic() - started:.1f} s)[/]"
            )
        out[case.key] = {"combined": combine(runs), "runs": runs, "commands": commands}
    return out


def _measure_raftmq(messages: int, repeat: int, processes: int, keep: bool) -> dict[str, Any]:
    with NodeGroup.create(size=3, overrides=RUN.get("overrides")) as group:
        console.print(f"raftmq: starting a 3-node group in {group.root}")
        try:
            leader = group.start_all(timeout=60)
            live = group.wait_live(timeout=60)
            member = group.members[leader]
            console.print(f"raftmq: leader {leader} at {member.client_url} (group agrees: {live['leader']})")
            results = _run_cases("raftmq", member.client_url, (), messages, repeat, processes, group.check_alive)
            leader_after = group.find_leader(timeout=10)
            rss = group.rss()
            pids = {node_id: m.pid for node_id, m in group.members.items()}
        except Exception:
            console.print(f"[red]raftmq: stopped early; config, logs and data kept in {group.root}[/]")
            raise
        group.keep_files = keep
    return {
        "results": results,
        "rss_kib": rss,
        "pids": pids,
        "leader": leader,
        "leader_changed_during_runs": leader_after != leader,
        "config": "configs/group.toml (addresses and data_dir replaced)",
    }


def _measure_rabbitmq(messages: int, repeat: int, processes: int) -> dict[str, Any]:
    with RabbitCluster() as cluster:
        console.print(f"rabbitmq: starting the 3-node cluster ({peers_dir()}/start_rabbitmq.sh cluster)")
        cluster.start()
        if cluster.was_running:
            console.print("[yellow]rabbitmq: the cluster was already running; it stays up afterwards[/]")
        results = _run_cases("rabbitmq", cluster.url, CONNECT_ARGS + QUEUE_ARGS, messages, repeat, processes)
        rss = cluster.rss()
    return {"results": results, "rss_kib": rss, "url": cluster.url, "was_running": cluster.was_running}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "msg/s":
        return f"{value:,.0f}"
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _render(report: dict[str, Any]) -> None:
    ours = report["raftmq"]["results"]
    theirs = (report.get("rabbitmq") or {}).get("results", {})
    for case in RUN["cases"]:
        table = Table(title=f"{case.title} — 1 KiB persistent, ACK per message, "
                            f"median of {report['settings']['repeat']}", title_justify="left")
        table.add_column("figure")
        table.add_column("raftmq", justify="right")
        table.add_column("RabbitMQ quorum", justify="right")
        table.add_column("raftmq ÷ RabbitMQ", justify="right")
        a = ours[case.key]["combined"]
        b = theirs.get(case.key, {}).get("combined", {})
        ratio = report["ratios"].get(case.key, {})
        for label, key, unit, higher in METRICS:
            r = ratio.get(key)
            better = r is not None and ((r > 1) if higher else (r < 1))
            r_text = "—" if r is None else (f"[green]{r:.2f}×[/]" if better else f"[red]{r:.2f}×[/]")
            table.add_row(f"{label} ({unit})", _fmt(a.get(key), unit), _fmt(b.get(key), unit), r_text)
        for key in COUNTS:
            table.add_row(key, _flag(a.get(key)), _flag(b.get(key)), "")
        console.print(table)
    rss = Table(title="RSS after the runs (VmRSS)", title_justify="left")
    rss.add_column("process")
    rss.add_column("MiB", justify="right")
    for name, kib in report["raftmq"]["rss_kib"].items():
        rss.add_row(f"raftmq {name}", "—" if kib is None else f"{kib / 1024:.1f}")
    for name, kib in (report.get("rabbitmq") or {}).get("rss_kib", {}).items():
        rss.add_row(f"RabbitMQ {name} (beam)", "—" if kib is None else f"{kib / 1024:.1f}")
    console.print(rss)
    goals = Table(title="Goals (the high-availability aims)", title_justify="left")
    goals.add_column("goal")
    goals.add_column("measured", justify="right")
    goals.add_column("limit", justify="right")
    goals.add_column("met")
    for goal in report["targets"]:
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: "not measured"}[goal["met"]]
        goals.add_row(goal["goal"], _fmt(goal["value"], "ms"), _fmt(goal["limit"], "ms"), met)
    console.print(goals)


def _flag(value: int | None) -> str:
    if value is None:
        return "—"
    return f"[bold red]{value:,}[/]" if value else "0"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", "-n", default=10_000, show_default=True, type=click.IntRange(100),
              help="Measured messages per run (each case, each broker); a tenth more (≤1000) warm up first.")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 20),
              help="Runs per case; figures are medians.")
@click.option("--skip-rabbitmq", is_flag=True, help="Measure raftmq only.")
@click.option("--processes", default=1, show_default=True, type=click.IntRange(1, 16),
              help="raftmq bench --processes (the same for both brokers).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), help="Write the report as JSON.")
@click.option("--keep", is_flag=True, help="Keep the raftmq group's temp dir (config, logs, data).")
@click.option("--duration", type=click.FloatRange(1, None), default=None,
              help="Send for this many seconds per run (a sustained run) instead of --messages.")
@click.option("--case", "case_keys", multiple=True, type=click.Choice([c.key for c in CASES]), help="Only these cases.")
@click.option("--server", "server_settings", multiple=True, metavar="KEY=VALUE",
              help="A [server] setting of the raftmq group file (an int), e.g. fair_queue_depth=200.")
def main(messages: int, repeat: int, skip_rabbitmq: bool, processes: int, json_path: str | None, keep: bool,
         duration: float | None, case_keys: tuple[str, ...], server_settings: tuple[str, ...]) -> None:
    """raftmq vs RabbitMQ quorum queues, same bench, same machine, one sitting."""
    install_signal_handlers()
    RUN["duration"] = duration
    RUN["cases"] = tuple(c for c in CASES if not case_keys or c.key in case_keys)
    if server_settings:
        RUN["overrides"] = {"server": {k: int(v) for k, v in (item.split("=", 1) for item in server_settings)}}
    if not skip_rabbitmq and (reason := missing_reason()):
        raise click.ClickException(f"{reason}\n(or pass --skip-rabbitmq)")
    report: dict[str, Any] = {
        "settings": {"messages": messages, "warmup": _warmup(messages), "repeat": repeat, "processes": processes,
                     "size": 1024, "persistent": True, "ack": "client-individual", "duration": duration,
                     "server": dict(RUN.get("overrides", {}).get("server", {})),
                     "cases": [case.__dict__ for case in RUN["cases"]]},
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": _cpus()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": sys.argv,
    }
    report["raftmq"] = _measure_raftmq(messages, repeat, processes, keep)
    report["rabbitmq"] = None if skip_rabbitmq else _measure_rabbitmq(messages, repeat, processes)
    report["ratios"] = {}
    if report["rabbitmq"] is not None:
        for case in RUN["cases"]:
            report["ratios"][case.key] = ratios(report["raftmq"]["results"][case.key]["combined"],
                                                report["rabbitmq"]["results"][case.key]["combined"])
    report["targets"] = targets({
        case.key: {
            "raftmq": report["raftmq"]["results"][case.key]["combined"],
            "rabbitmq": report["rabbitmq"]["results"][case.key]["combined"] if report["rabbitmq"] else None,
        }
        for case in RUN["cases"]
    })
    _render(report)
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2, sort_keys=False, default=str) + "\n")
        console.print(f"wrote {json_path}")
    lost = sum(broker["results"][c.key]["combined"]["lost"] for broker in (report["raftmq"], report["rabbitmq"])
               if broker for c in RUN["cases"])
    sys.exit(1 if lost else 0)


def _cpus() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


if __name__ == "__main__":
    main()

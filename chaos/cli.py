"""`raftmq chaos run` and `raftmq chaos list` (listed by raftmq.cli)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chaos.checker import QueueResult
from chaos.environment import requirements
from chaos.generator import CLUSTER_ONLY, TARGETS
from chaos.nemesis import NEMESES
from chaos.run import WORKLOADS, Progress, RunOptions, check_options, group_count, run, summary_row
from chaos.workload import NeedsCluster

PRESETS = ("default", "five-node", "symmetric", "chain", "symmetric-lite")


@click.group("chaos")
def chaos_command() -> None:
    """Jepsen-style fault-injection runs against a real cluster (docs/chaos.md)."""


@chaos_command.command("list")
def list_command() -> None:
    """The workloads and nemeses a run can use."""
    click.echo(f"workloads: {', '.join(WORKLOADS)}")
    for name, workload in WORKLOADS.items():
        click.echo(f"  {name:<13} {workload.summary}")
    click.echo(f"nemeses:   {', '.join(NEMESES)}  (--nemesis all: every one)")
    click.echo(f"presets:   {', '.join(PRESETS)}  (or --topology FILE)")


@chaos_command.command("run")
@click.option("--preset", type=click.Choice(PRESETS), default="default", show_default=True)
@click.option("--topology", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A topology or group file instead of a preset.")
@click.option("--workload", type=click.Choice(list(WORKLOADS)), default="queue", show_default=True,
              help="cross-group needs a cluster (--preset symmetric, chain or symmetric-lite).")
@click.option("--nemesis", "nemesis", default="kill", show_default=True,
              help=f"A comma list of {', '.join(NEMESES)}, 'all', or 'none'.")
@click.option("--target", "target", default="",
              help=f"Whom faults may hit: a '|' or comma list of {', '.join(TARGETS)} "
                   "(default: each nemesis's own choice).")
@click.option("--time-limit", type=click.FloatRange(1, None), default=30.0, show_default=True,
              help="Seconds of faults and load.")
@click.option("--rate", type=click.FloatRange(0.1, None), default=50.0, show_default=True,
              help="Sends per second, in all.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Producers (and consumers).")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same faults and values.")
@click.option("--out", type=click.Path(file_okay=False), default="runs", show_default=True)
@click.option("--backlog", is_flag=True,
              help="Consumers wait for the drain: everything sent stays queued through the faults.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
def run_command(preset: str, topology: str | None, workload: str, nemesis: str, target: str, time_limit: float,
                rate: float, concurrency: int, seed: int, out: str, backlog: bool, as_json: bool) -> None:
    """Start a cluster, run a workload while faults strike, heal, drain, check.

    Exit status 0 only when the run is valid: nothing acknowledged lost, nothing unexpected,
    nothing stored twice."""
    names = list(NEMESES) if nemesis == "all" else [] if nemesis == "none" else [n.strip() for n in nemesis.split(",")]
    unknown = [n for n in names if n not in NEMESES]
    if unknown:
        raise click.BadParameter(f"unknown nemesis {unknown[0]!r} (known: {', '.join(NEMESES)})",
                                 param_hint="--nemesis")
    targets = tuple(t.strip() for t in target.replace(",", "|").split("|") if t.strip()) or TARGETS
    wrong = [t for t in targets if t not in TARGETS]
    if wrong:
        raise click.BadParameter(f"unknown target {wrong[0]!r} (known: {', '.join(TARGETS)})", param_hint="--target")
    options = RunOptions(preset, topology, workload, tuple(names), time_limit, rate, concurrency, seed, Path(out),
                         targets, backlog)
    if nemesis == "all" and group_count(options) < 2:  # every nemesis that can strike one group
        options = dataclasses.replace(options, nemeses=tuple(n for n in names if n not in CLUSTER_ONLY),
                                      asked=tuple(names))
    usable(options)
    console = Console(stderr=True)
    with Live(Text("starting the cluster..."), console=console, transient=True, refresh_per_second=4) as live:

        def show(progress: Progress) -> None:
            line = Text(live_line(progress, workload))
            if progress.fault:
                line.append(f"  fault: {progress.fault}", style="bold red")
            live.update(line)

        run_dir, result = run(options, show)
    row = summary_row(run_dir, result)
    if as_json:
        click.echo(json.dumps(row, indent=2))
    else:
        common = ("attempted", "acknowledged", "failed", "indeterminate", "received", "deliveries", "lost",
                  "lost_middle", "unexpected", "recovered", "redelivered", "stored_duplicates", "unavailable_max_s")
        own = [k for k, v in row.items() if k not in QueueResult.__dataclass_fields__ and isinstance(v, int | float)
               and not isinstance(v, bool) and k not in ("run", "time_needed_for_all_s")]
        for key in (*common, *own):  # the workload's own counts after the common ones
            click.echo(f"{key:<26} {row[key]}")
        for line in strike_lines(row):
            click.echo(line)
        click.echo(f"{'verdict':<26} {'valid' if result.valid else 'INVALID'}")
        click.echo(f"{'run directory':<26} {run_dir}")
    sys.exit(0 if result.valid else 1)


def live_line(progress: Progress, workload: str) -> str:
    """The progress line in the summary's words: deliveries count redeliveries too (the
    summary's `received` counts distinct values)."""
    counts = progress.counts
    sends = "transactions " if workload == "transactions" else ""
    return (f"{progress.phase} {progress.elapsed_s:5.1f}s  {sends}acknowledged {counts.get('ok', 0)}"
            f"  failed {counts.get('fail', 0)}  indeterminate {counts.get('info', 0)}"
            f"  deliveries {counts.get('receive', 0)}")


def strike_lines(row: dict[str, Any]) -> list[str]:
    """The summary's lines on faults: those that struck, with counts, and each asked-for kind
    that did not, with why (and the time a run with this seed needs for all of them)."""
    struck = row.get("faults_struck") or {}
    lines = [f"{'faults struck':<26} " + (", ".join(f"{kind} ×{count}" for kind, count in struck.items())
                                            if struck else "none")]
    why: dict[str, str] = row.get("not_struck_why") or {}
    by_reason: dict[str, list[str]] = {}
    for kind, reason in why.items():
        by_reason.setdefault(reason, []).append(kind)
    for reason, kinds in by_reason.items():
        lines.append(f"{'not struck':<26} {', '.join(kinds)} ({reason})")
    return lines


@chaos_command.command("matrix")
@click.option("--preset", type=click.Choice(PRESETS), default="default", show_default=True)
@click.option("--topology", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--workload", type=click.Choice(list(WORKLOADS)), default="queue", show_default=True)
@click.option("--scenarios", default="kill,pause", show_default=True,
              help="Comma-separated scenarios, each a nemesis or several joined by '+' (kill+pause), optionally "
                   "@ the members they may hit joined by '|' (power-loss@all, kill@leader|one).")
@click.option("--seeds", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--first-seed", type=int, default=0, show_default=True)
@click.option("--time-limit", type=click.FloatRange(1, None), default=60.0, show_default=True)
@click.option("--rate", type=click.FloatRange(0.1, None), default=50.0, show_default=True)
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default="runs", show_default=True)
def matrix_command(preset: str, topology: str | None, workload: str, scenarios: str, seeds: int, first_seed: int,
                   time_limit: float, rate: float, concurrency: int, out: str) -> None:
    """Every scenario × seed as one run each, then one summary table (and matrix-<time>.json in
    --out). Exit status 0 only when every run is valid."""
    rows = []
    console = Console(stderr=True)
    parsed = [(scenario, *scenario_of(scenario)) for scenario in [s.strip() for s in scenarios.split(",") if s.strip()]]
    for _scenario, names, _targets in parsed:
        usable(RunOptions(preset, topology, workload, names))
    for scenario, names, targets in parsed:
        for seed in range(first_seed, first_seed + seeds):
            console.print(f"run {workload} {scenario} seed {seed} ...")
            options = RunOptions(preset, topology, workload, names, time_limit, rate, concurrency, seed, Path(out),
                                 targets)
            try:
                run_dir, result = run(options)
            except Exception as exc:  # a harness failure is a row of its own, never a valid run
                console.print(f"run {scenario} seed {seed} failed: {type(exc).__name__}: {exc}", style="bold red")
                rows.append({"workload": workload, "scenario": scenario, "seed": seed, "valid": False,
                             "error": f"{type(exc).__name__}: {exc}"})
                continue
            rows.append({"workload": workload, "scenario": scenario, "seed": seed, **summary_row(run_dir, result)})
    print_rows(f"raftmq chaos matrix: {workload}", rows)
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"matrix-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(rows, indent=2))
    sys.exit(0 if all(row["valid"] for row in rows) else 1)


@chaos_command.command("table")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
def table_command(runs: tuple[Path, ...]) -> None:
    """One summary table of finished runs: run directories, or directories holding them.
    Exit status 0 only when every run is valid."""
    dirs = sorted(d for path in runs for d in ([path] if (path / "run.json").exists() else path.iterdir())
                  if (d / "run.json").exists())
    rows = [row_of(d) for d in dirs]
    print_rows(f"raftmq chaos runs ({len(rows)})", rows)
    sys.exit(0 if rows and all(row["valid"] for row in rows) else 1)


def row_of(run_dir: Path) -> dict[str, Any]:
    """A summary row from a run directory; a run with no results.json ended in a harness error.
    `scenario` is what was asked (`all` for every kind); `struck`, the faults that struck, with
    counts, where run.json records them (runs made before it did have none)."""
    record = json.loads((run_dir / "run.json").read_text())
    options = record["options"]
    targets = options.get("targets") or list(TARGETS)
    asked = record.get("nemeses_asked") or options.get("asked") or options["nemeses"]
    kinds = "all" if set(asked) == set(NEMESES) else "+".join(options["nemeses"])
    scenario = kinds + ("" if set(targets) == set(TARGETS) else "@" + "|".join(targets))
    row: dict[str, Any] = {"scenario": scenario, "seed": options["seed"], "run": run_dir.name}
    if isinstance(record.get("faults_struck"), dict):
        row["struck"] = ", ".join(f"{kind} ×{count}" for kind, count in record["faults_struck"].items()) or "none"
    results = run_dir / "results.json"
    if not results.exists():
        return {**row, "valid": False, "error": "no results"}
    return {**row, **json.loads(results.read_text())}


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    table = Table(title=title, title_justify="left")
    columns: tuple[str, ...] = ("scenario", "seed", "attempted", "acknowledged", "lost", "stored_duplicates",
                                "unexpected", "unavailable_max_s", "valid")
    if any("stale_plain" in row for row in rows):  # stale runs among them: their own verdict's counts
        columns = (*columns[:-1], "terms", "stale_plain", "stale_own", "valid")
    if any("struck" in row for row in rows):
        columns = (columns[0], "struck", *columns[1:])
    for column in columns:
        table.add_column(column.replace("_", " "), justify="left" if column in ("scenario", "struck") else "right")
    for row in rows:
        table.add_row(*(str(row.get(c, "")) if c != "valid" else
                        ("valid" if row[c] else "ERROR" if "error" in row else "INVALID") for c in columns))
    Console(width=None if sys.stdout.isatty() else 160).print(table)  # a pipe gets every column whole


def scenario_of(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`kill+pause@leader|one` -> (("kill", "pause"), ("leader", "one")); no @: every target."""
    nemeses, _, targets = text.partition("@")
    names = tuple(n.strip() for n in nemeses.split("+"))
    unknown = [n for n in names if n not in NEMESES]
    if unknown:
        raise click.BadParameter(f"unknown nemesis {unknown[0]!r} (known: {', '.join(NEMESES)})",
                                 param_hint="--scenarios")
    chosen = tuple(t.strip() for t in targets.split("|")) if targets else TARGETS
    wrong = [t for t in chosen if t not in TARGETS]
    if wrong:
        raise click.BadParameter(f"unknown target {wrong[0]!r} (known: {', '.join(TARGETS)})", param_hint="--scenarios")
    return names, chosen


def usable(options: RunOptions) -> None:
    """A click error, before anything starts, when the workload cannot run on this deployment."""
    try:
        check_options(options)
    except NeedsCluster as exc:
        raise click.BadParameter(str(exc), param_hint="--preset / --topology") from None
    problems = requirements(options.nemeses)
    if problems:
        raise click.UsageError("this machine cannot run these nemeses: " + "; ".join(problems))

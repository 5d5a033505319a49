"""`raftmq audit RUN_DIR [RUN_DIR ...]`: one Spark job over chaos run directories (docs/audit.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import click

from raftmq.errors import RaftmqError

FINDINGS_SHOWN = 10  # under the table; the report has the rest
SPARK_LOG = "audit-spark.log"  # beside audit.html: the driver JVM's stdout and stderr


@click.command("audit")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--master", metavar="URL", help="Spark master, e.g. spark://HOST:PORT (default: local[*]).")
@click.option("--remote", metavar="URL", help="A Spark Connect server, e.g. sc://HOST:PORT, instead of --master.")
@click.option("--out", type=click.Path(file_okay=False), help="Where audit.json and audit.html go "
              "(default: the run directory for one run, else the directory holding the runs).")
@click.option("--sample", default=20, show_default=True, type=click.IntRange(1, 10_000),
              help="Findings kept per run and check in the report.")
@click.option("--json", "as_json", is_flag=True, help="Print audit.json instead of the table.")
def audit_command(run_dirs: tuple[str, ...], master: str | None, remote: str | None, out: str | None, sample: int,
                  as_json: bool) -> None:
    """Prove from what every node stored that nothing acknowledged was lost, nothing was stored
    twice, no replicas diverged and no two leaders shared a term.

    RUN_DIR is a chaos run directory (it holds run.json), embedded brokers' (their data_dirs
    are RUN_DIR/data/<name>/, each with its embedded.json), or a directory of them (runs/).
    Exit status 0 only when every run is clean; 1 when a check found something; 2 when an
    argument is not a run directory.
    """
    import json

    from rich.console import Console
    from rich.markup import escape

    from spark_audit import story
    from spark_audit.job import run_audit
    from spark_audit.layout import expand, read_run
    from spark_audit.report import TABLE_WIDTH, not_struck_lines, to_json, verdict_table, write

    if master and remote:
        raise click.UsageError("give --master or --remote, not both")
    console = Console(stderr=as_json)
    if not console.is_terminal:  # piped: the table's own width, not rich's default of 80
        console.width = TABLE_WIDTH
    try:
        paths = expand(list(run_dirs))
        runs = [read_run(path) for path in paths]
    except RaftmqError as exc:
        raise click.BadParameter(str(exc), param_hint="RUN_DIR") from None
    target = Path(out) if out else (paths[0] if len(paths) == 1 else _common_parent(paths))
    # The JVM's own output (its warnings, Spark's log lines) goes to a file, not into the status line.
    spark_log = None if remote else target / SPARK_LOG
    if spark_log is not None:
        spark_log.unlink(missing_ok=True)  # a previous audit's: named below only if this one wrote it
    try:
        with console.status(f"starting Spark ({remote or master or 'local[*]'})") as status:
            from spark_audit.spark_session import spark_session

            spark = spark_session(master=master, remote=remote, jvm_log=spark_log)
            watcher = _Progress(spark, status, len(runs))
            watcher.start()
            try:
                result = run_audit(spark, runs, sample=sample)
            finally:
                watcher.stop()
    except Exception:
        _name_log(console, spark_log)
        raise
    if remote:
        result.master = f"{remote} (its master: {result.master})"
    json_path, html_path = write(result, target)
    if as_json:
        click.echo(json.dumps(to_json(result), indent=2, default=str))
    else:
        console.print(verdict_table(result, width=min(console.width, TABLE_WIDTH)))
        for line in not_struck_lines(result):
            console.print(escape(line), highlight=False)
        for finding in result.findings[:FINDINGS_SHOWN]:
            where = "/".join(str(part) for part in (finding["group"], finding["node"]) if part)
            text = escape(f"{finding['run']} {where} {finding['item']}: {finding['detail']}")
            console.print(f"[red]{finding['check']}[/] {text}", highlight=False)
        if len(result.findings) > FINDINGS_SHOWN:
            console.print(f"... and more: the report lists up to {sample} per run and check")
        console.print(("[green]" if result.clean else "[bold red]") + escape(story.verdict(to_json(result))) + "[/]",
                      highlight=False)
        console.print(f"report: {html_path}  (counts and findings: {json_path})")
    _name_log(console, spark_log)
    raise SystemExit(0 if result.clean else 1)


def _name_log(console: Any, spark_log: Path | None) -> None:
    if spark_log is not None and spark_log.exists():
        console.print(f"Spark's own output (the JVM's warnings and log): {spark_log}", highlight=False)


def _common_parent(paths: list[Path]) -> Path:
    return Path(os.path.commonpath([str(p.parent) for p in paths]))


class _Progress:
    """Polls Spark's status tracker (local and standalone masters) and shows the stage and
    task counts in the status line; under Spark Connect there is no tracker, only the spinner."""

    def __init__(self, spark: Any, status: Any, runs: int) -> None:
        self.status = status
        self.runs = runs
        self.stopped = threading.Event()
        try:
            self.tracker = spark.sparkContext.statusTracker()
        except Exception:  # Spark Connect: no SparkContext on the client
            self.tracker = None
        self.thread = threading.Thread(target=self._poll, name="audit-progress", daemon=True)

    def start(self) -> None:
        self.status.update(f"auditing {self.runs} run(s)")
        if self.tracker is not None:
            self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)

    def _poll(self) -> None:
        while not self.stopped.wait(0.5):
            try:
                stages = [self.tracker.getStageInfo(s) for s in self.tracker.getActiveStageIds()]
            except Exception:
                return
            done = sum(s.numCompletedTasks for s in stages if s)
            total = sum(s.numTasks for s in stages if s)
            jobs = len(self.tracker.getActiveJobsIds())
            self.status.update(f"auditing {self.runs} run(s): {jobs} Spark job(s), tasks {done}/{total}")

"""One audit: every check over every run, in one Spark job. What comes back to the driver is
small by construction: counts per (run, check), a bounded sample of findings per (run, check),
and counts of what was read. Whole tables never are."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_audit import checks
from spark_audit.derive import reference, with_bodies
from spark_audit.embedded_runs import EMBEDDED_WORKLOAD
from spark_audit.faults import RunFaults
from spark_audit.layout import Run
from spark_audit.tables import Tables, load_tables

SAMPLE_PER_CHECK = 20


@dataclass
class RunVerdict:
    name: str
    path: str
    workload: str
    counts: dict[str, int | None]  # per check; None: the check does not apply to this workload
    read: dict[str, int] = field(default_factory=dict)
    faults: RunFaults | None = None  # what struck the run (None: embedded brokers', no nemesis)

    @property
    def clean(self) -> bool:
        return all(not count for count in self.counts.values())


@dataclass
class AuditResult:
    runs: list[RunVerdict]
    findings: list[dict[str, Any]]  # a sample: at most SAMPLE_PER_CHECK per run and check
    seconds: float
    master: str

    @property
    def clean(self) -> bool:
        return all(run.clean for run in self.runs)

    @property
    def records(self) -> int:
        """Journal records read: Raft journal entries and body-journal records."""
        return sum(run.read.get("entries", 0) + run.read.get("body_records", 0) for run in self.runs)


def all_findings(tables: Tables) -> tuple[DataFrame, list[Any]]:
    """The union of every check's findings, and the frames the caller should unpersist."""
    facts = tables.facts.cache()
    segments = tables.segments.cache()
    ref = with_bodies(reference(facts), segments).cache()
    history, runs = tables.history.cache(), tables.runs
    parts = [
        checks.lost(history, ref, runs),
        checks.unexpected(history, ref, runs),
        checks.stored_duplicates(ref),
        checks.consumer_duplicates(history, runs),
        checks.divergence(facts, segments),
        checks.leaders(tables.leaders, facts),
        checks.bridges(ref, runs),
        checks.order(history, ref, runs),
        checks.conservation(ref),
        checks.files(facts, segments),
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union, [facts, segments, ref, history]


def run_audit(spark: Any, runs: list[Run], sample: int = SAMPLE_PER_CHECK) -> AuditResult:
    start = time.monotonic()
    _size_shuffles(spark, runs)
    tables = load_tables(spark, runs)
    findings, cached = all_findings(tables)
    # One pass: each finding with its check's total in the run, the first `sample` of each kept.
    per_check = Window.partitionBy("run", "check")
    ranked = (findings.withColumn("n", F.count("*").over(per_check))
              .withColumn("rank", F.row_number().over(per_check.orderBy("group", "node", "item")))
              .where(F.col("rank") <= sample).collect())
    counts = {(row["run"], row["check"]): row["n"] for row in ranked}
    kept = [{k: v for k, v in row.asDict().items() if k not in ("n", "rank")} for row in ranked]
    read = _read_counts(tables)
    verdicts = []
    for run in runs:
        judged = {check: run.workload in workloads for check, workloads in checks.HISTORY_CHECKS.items()}
        if run.workload == EMBEDDED_WORKLOAD:  # no client history: the stored files alone are judged
            judged.update(dict.fromkeys(checks.CLIENT_CHECKS, False))
        verdicts.append(RunVerdict(
            run.name, run.path, run.workload,
            {check: (counts.get((run.name, check), 0) if judged.get(check, True) else None) for check in checks.CHECKS},
            {"groups": len(run.groups), **read.get(run.name, {})},
            run.faults,
        ))
    for frame in cached:
        frame.unpersist()
    master = spark.conf.get("spark.master", "remote") if hasattr(spark, "conf") else "remote"
    ordered = sorted(kept, key=lambda f: (f["run"], f["check"], str(f["group"]), str(f["node"]), str(f["item"])))
    return AuditResult(verdicts, ordered, time.monotonic() - start, master)


SHUFFLE_BYTES = 256 * 2**20  # of run files per shuffle partition


def _size_shuffles(spark: Any, runs: list[Run]) -> None:
    """Few shuffle partitions for a small audit (each costs a task per stage of many small
    stages), more for a large one."""
    total = sum(f.stat().st_size for run in runs for f in Path(run.path).rglob("*") if f.is_file())
    try:
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, min(64, total // SHUFFLE_BYTES + 1))))
    except Exception:  # a Spark Connect server may refuse to change it: its own setting stands
        pass


def _read_counts(tables: Tables) -> dict[str, dict[str, int]]:
    """Per run, what the checks read (the report says each check's verdict over these): Raft
    `entries` and `body_records` of every member, `members`, body `segments`, `torn_tails` and
    `torn_segments`; at the reference members, `stored` (every arrival in a store), `messages`
    (first arrivals), `forwarded_in` (those from another group), `forwarded_first_in` (those
    of them forwarded first: stored nowhere before), `consumed` (acknowledged);
    from the history, `operations`, `acked_sends` and `receives`; leader `terms` logged."""
    read: dict[str, dict[str, int]] = {}
    facts = tables.facts.groupBy("run").agg(
        F.sum((F.col("fact") == "entry").cast("long")).alias("entries"),
        # Only reference members are replayed (docs/audit.md), so these are each group's own counts.
        F.sum((F.col("fact") == "enter").cast("long")).alias("stored"),
        F.sum(((F.col("fact") == "enter") & F.col("first")).cast("long")).alias("messages"),
        F.sum(((F.col("fact") == "enter") & F.col("first") & F.col("kind").isin("forward", "first")).cast("long"))
        .alias("forwarded_in"),
        F.sum(((F.col("fact") == "enter") & F.col("first") & (F.col("kind") == "first")).cast("long"))
        .alias("forwarded_first_in"),
        F.sum(((F.col("fact") == "leave") & F.col("kind").isin("acked", "auto-acked")).cast("long")).alias("consumed"),
        F.countDistinct("group", "node").alias("members"),
        F.sum(((F.col("fact") == "file") & F.col("detail").startswith("torn")).cast("long")).alias("torn_tails"),
    )
    for row in facts.collect():
        read[row["run"]] = {k: int(v or 0) for k, v in row.asDict().items() if k != "run"}
    bodies = tables.segments.groupBy("run").agg(
        F.sum((F.col("status") == "ok").cast("long")).alias("body_records"),
        F.sum((F.col("status") == "torn-tail").cast("long")).alias("torn_segments"),
        F.countDistinct("group", "node", "segment").alias("segments"),
    )
    for row in bodies.collect():
        if row["run"]:
            read.setdefault(row["run"], {}).update({k: int(v or 0) for k, v in row.asDict().items() if k != "run"})
    ops = tables.history.groupBy("run").agg(
        F.count("*").alias("operations"),
        F.sum(((F.col("f") == "send") & (F.col("type") == "ok")).cast("long")).alias("acked_sends"),
        F.sum(((F.col("f") == "receive") & (F.col("type") == "ok")).cast("long")).alias("receives"),
    )
    for row in ops.collect():
        read.setdefault(row["run"], {}).update({k: int(v or 0) for k, v in row.asDict().items() if k != "run"})
    for row in tables.leaders.groupBy("run").agg(F.countDistinct("group", "term").alias("terms")).collect():
        read.setdefault(row["run"], {})["terms"] = int(row["terms"])
    return read

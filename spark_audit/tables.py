"""The audit's input tables for a set of runs, as DataFrames (lazy: nothing is read here).

| table | from | one row per |
|---|---|---|
| `facts` | `raftmq_node` (spark_audit.replay) | what each member's Raft files show (spark_audit.facts) |
| `segments` | `raftmq_segments` | body-journal record, or damaged batch |
| `history` | `history.jsonl` (none: embedded brokers') | client operation (invoke / ok / fail / info) |
| `nemesis` | `nemesis.jsonl` (none: embedded brokers') | fault injected or healed |
| `leaders` | each member's `raftmq.log.jsonl`, where it has one | `raft.leader_changed` line |
| `runs` | `run.json`, topology; or embedded brokers' `embedded.json` | run: workload, max_hops |
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from spark_audit.embedded_runs import EMBEDDED_WORKLOAD
from spark_audit.layout import HISTORY_FILE, NEMESIS_FILE, NODE_LOG_FILE, Run

HISTORY_SCHEMA = ("`index` long, `process` string, `type` string, `f` string, `value` string, `time` double, "
                  "`mono` double, `node` string, `redelivered` boolean, `error` string")
LOG_SCHEMA = "`timestamp` string, `event` string, `node` string, `role` string, `leader` string, `term` long"
LEADERS_SCHEMA = ("`run` string, `group` string, `member` string, `role` string, `leader` string, `term` long, "
                  "`timestamp` string")


@dataclass(frozen=True)
class Tables:
    facts: Any
    segments: Any
    history: Any
    nemesis: Any
    leaders: Any
    runs: Any


def load_tables(spark: Any, runs: list[Run]) -> Tables:
    from pyspark.sql import functions as F

    paths = json.dumps([run.path for run in runs])
    facts = spark.read.format("raftmq_node").option("runs", paths).load()
    segments = spark.read.format("raftmq_segments").option("runs", paths).load()

    def jsonl(name: str, schema: str) -> Any:
        # embedded brokers' runs have no client history, nor faults (spark_audit.embedded_runs); a
        # chaos run without its history is an error, not an empty history
        files = [f"{run.path}/{name}" for run in runs if run.workload != EMBEDDED_WORKLOAD]
        if not files:
            return spark.createDataFrame([], f"{schema}, `run` string")
        frame = spark.read.schema(schema).json(files)
        return frame.withColumn("run", F.element_at(F.split(F.col("_metadata.file_path"), "/"), -2))

    history = jsonl(HISTORY_FILE, HISTORY_SCHEMA)
    nemesis = jsonl(NEMESIS_FILE, HISTORY_SCHEMA)
    # an embedded broker's members log where its application sends their log, not to a file of their own
    log_files = [f"{member.directory}/{NODE_LOG_FILE}" for run in runs for member in run.members
                 if os.path.exists(f"{member.directory}/{NODE_LOG_FILE}")]
    parts = F.split(F.col("_metadata.file_path"), "/")
    leaders = (
        spark.read.schema(LOG_SCHEMA).json(log_files)
        .where(F.col("event") == "raft.leader_changed")
        .select(F.element_at(parts, -5).alias("run"), F.element_at(parts, -3).alias("group"),
                F.element_at(parts, -2).alias("member"), "role", "leader", "term", "timestamp")
    ) if log_files else spark.createDataFrame([], LEADERS_SCHEMA)
    run_rows = [(run.name, run.path, run.workload, run.max_hops, len(run.groups), len(run.members)) for run in runs]
    frame = spark.createDataFrame(
        run_rows, "run string, path string, workload string, max_hops int, groups int, members int")
    return Tables(facts, segments, history, nemesis, leaders, frame)

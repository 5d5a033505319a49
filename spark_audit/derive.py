"""Tables the checks share, derived from the input tables (spark_audit.tables): pure DataFrame
transforms, like the checks themselves.

- `reference`: per group, the facts of one member, the one with the longest log (ties: the
  lowest node name). Replicas agree on what they both hold (the divergence check proves it),
  so one member's replay speaks for its group.
- `with_bodies`: messages whose value and digest the replay did not see (restored from a
  snapshot, so only the body reference is known) get them from the member's body journal.
- `consumed`: messages that left a store for a client (acknowledged, or auto-acknowledged on
  delivery), not for another group: a store-and-forward queue's consumer is a bridge.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from raftmq.routing.route import SF_PREFIX

KEYS = ["run", "group", "node"]
HISTORY_WORKLOADS = ("queue", "cross-group", "shared-queue")  # whose sends and receives name one queue's values
# Whose every acknowledged value must reach a client (or wait, or be dead-lettered or expired):
# the queue ones, and mqtt, whose subscribers (kept sessions) all subscribe before the first PUBLISH.
VALUE_WORKLOADS = (*HISTORY_WORKLOADS, "mqtt")
PER_READER_WORKLOADS = ("topic", "mqtt")  # each subscriber gets a copy of each value of its own


def is_sf(column: str = "store") -> Any:
    return F.col(column).startswith(SF_PREFIX)


def reference(facts: DataFrame) -> DataFrame:
    """The facts of each group's reference member: the only member replayed (spark_audit.sources
    picks the one with the longest log), so the facts about messages are its facts."""
    return facts.where(F.col("fact").isin("enter", "leave", "waiting"))


def body_refs(segments: DataFrame) -> DataFrame:
    """(run, group, node, body_ref, value, digest) of every message record."""
    ok = segments.where(F.col("status") == "ok")
    return ok.select(*KEYS, F.concat_ws(":", F.col("index"), F.col("ordinal")).alias("body_ref"),
                     F.col("value").alias("seg_value"), F.col("digest").alias("seg_digest"))


def with_bodies(facts: DataFrame, segments: DataFrame) -> DataFrame:
    missing = facts.where(F.col("body_ref").isNotNull() & F.col("digest").isNull())
    known = facts.where(F.col("body_ref").isNull() | F.col("digest").isNotNull())
    # Few messages lack a body (those a snapshot restored): look up only theirs.
    wanted = missing.select(*KEYS, "body_ref").distinct()
    found = body_refs(segments).join(F.broadcast(wanted), [*KEYS, "body_ref"])
    filled = (missing.join(found, [*KEYS, "body_ref"], "left")
              .withColumn("value", F.coalesce("value", "seg_value"))
              .withColumn("digest", F.coalesce("digest", "seg_digest"))
              .drop("seg_value", "seg_digest"))
    return known.unionByName(filled)


def messages(ref: DataFrame) -> DataFrame:
    """One row per (run, group, message id): what it was when it first entered a store here."""
    return (ref.where((F.col("fact") == "enter") & F.col("first"))
            .select("run", "group", "message_id", "destination", "dedup_id", "value", "digest", "kind", "route"))


def consumed(ref: DataFrame) -> DataFrame:
    """(run, group, store, message_id, position) of every message a client took for good."""
    return ref.where((F.col("fact") == "leave") & F.col("kind").isin("acked", "auto-acked") & ~is_sf()).select(
        "run", "group", "store", "message_id", "position")


def waiting(ref: DataFrame) -> DataFrame:
    return ref.where(F.col("fact") == "waiting")


def history_runs(runs: DataFrame, workloads: tuple[str, ...] = HISTORY_WORKLOADS) -> DataFrame:
    return runs.where(F.col("workload").isin(*workloads)).select("run")


def mqtt_repeatable(history: DataFrame, runs: DataFrame) -> DataFrame:
    """(run, value) of an mqtt run's received values that MQTT lets reach a subscriber more than
    once as new: all but the QoS 2 publications that completed (PUBCOMP), which raftmq stores
    exactly once. A value's QoS is its publisher's (its `open` op: `{"qos": 2, ...}`)."""
    mqtt = history.join(history_runs(runs, ("mqtt",)), "run", "left_semi")
    qos_2 = (mqtt.where((F.col("f") == "open") & (F.col("type") == "ok")
                        & (F.get_json_object("value", "$.qos") == "2")).select("run", "process"))
    completed = (mqtt.where((F.col("f") == "send") & (F.col("type") == "ok"))
                 .join(qos_2, ["run", "process"], "left_semi").select("run", "value"))
    received = mqtt.where(F.col("f") == "receive").select("run", "value").distinct()
    return received.join(completed, ["run", "value"], "left_anti")


def finding(frame: DataFrame, check: str, item: Any, detail: Any, group: Any = None, node: Any = None) -> DataFrame:
    """The findings schema every check returns: run, check, group, node, item, detail."""
    none = F.lit(None).cast("string")
    return frame.select(
        "run",
        F.lit(check).alias("check"),
        (group if group is not None else none).alias("group"),
        (node if node is not None else none).alias("node"),
        item.cast("string").alias("item"),
        detail.cast("string").alias("detail"),
    )

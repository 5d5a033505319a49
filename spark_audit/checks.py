"""The audit's checks: each a pure DataFrame transform from input tables (spark_audit.tables,
spark_audit.derive) to findings (run, check, group, node, item, detail). A run is clean when
no check finds anything. docs/audit.md says what each one means and how it is shown to fail.

`ref` is the reference member's facts per group, with bodies filled in (derive.reference,
derive.with_bodies); `facts` are every member's.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from raftmq.routing.route import SF_PREFIX
from spark_audit.derive import (
    HISTORY_WORKLOADS,
    PER_READER_WORKLOADS,
    VALUE_WORKLOADS,
    consumed,
    finding,
    history_runs,
    is_sf,
    messages,
    mqtt_repeatable,
    waiting,
)
from spark_audit.facts import SUBSCRIPTION_STORE

CHECKS = ("lost", "unexpected", "stored_duplicates", "consumer_duplicates", "divergence", "leaders", "bridges",
          "order", "conservation", "files")
# Checks that read the client history, and the workloads each judges: lost and unexpected those
# whose every acknowledged value must reach a client (spark_audit.derive.VALUE_WORKLOADS), order
# those whose sends and receives are values of one queue (HISTORY_WORKLOADS).
HISTORY_CHECKS: dict[str, tuple[str, ...]] = {"lost": VALUE_WORKLOADS, "unexpected": VALUE_WORKLOADS,
                                              "order": HISTORY_WORKLOADS}
# Every check that reads the client history: none applies to a run without one (embedded brokers').
CLIENT_CHECKS = ("lost", "unexpected", "consumer_duplicates", "order")


def _ops(history: DataFrame, runs: DataFrame, f: str, type_: str,
         workloads: tuple[str, ...] = VALUE_WORKLOADS) -> DataFrame:
    return (history.join(history_runs(runs, workloads), "run", "left_semi")
            .where((F.col("f") == f) & (F.col("type") == type_)))


def lost(history: DataFrame, ref: DataFrame, runs: DataFrame) -> DataFrame:
    """Acknowledged SENDs (ok) never received, not waiting at the end, not dead-lettered or
    expired with a record."""
    acked = _ops(history, runs, "send", "ok").select("run", "value").distinct()
    received = _ops(history, runs, "receive", "ok").select("run", "value")
    waiting_values = waiting(ref).where(F.col("value").isNotNull()).select("run", "value")
    moved = (ref.where((F.col("fact") == "leave") & F.col("kind").isin("dead-lettered", "expired"))
             .select("run", "group", "message_id")
             .join(messages(ref), ["run", "group", "message_id"]).select("run", "value"))
    accounted = received.unionByName(waiting_values).unionByName(moved).distinct()
    missing = acked.join(accounted, ["run", "value"], "left_anti")
    return finding(missing, "lost", F.col("value"),
                   F.lit("acknowledged, never received, not waiting at the end, not dead-lettered or expired"))


def unexpected(history: DataFrame, ref: DataFrame, runs: DataFrame) -> DataFrame:
    """Values received (or stored from a client) that no one sent, or whose send certainly failed."""
    sends = history.join(history_runs(runs, VALUE_WORKLOADS), "run", "left_semi").where(F.col("f") == "send")
    invoked = sends.where(F.col("type") == "invoke").select("run", "value").distinct()
    failed = (sends.where(F.col("type") != "invoke").groupBy("run", "value")
              .agg(F.min(F.col("type") == "fail").alias("all_failed")).where("all_failed").select("run", "value"))
    received = _ops(history, runs, "receive", "ok").groupBy("run", "value").agg(F.min("process").alias("process"))
    never_sent = received.join(invoked, ["run", "value"], "left_anti")
    failed_read = received.join(failed, ["run", "value"], "left_semi")
    stored = (messages(ref).join(history_runs(runs, VALUE_WORKLOADS), "run", "left_semi")
              .where((F.col("kind") == "client") & F.col("value").isNotNull()
                     & F.col("destination").startswith("/queue/"))
              .join(invoked, ["run", "value"], "left_anti"))
    return (finding(never_sent, "unexpected", F.col("value"),
                    F.concat(F.lit("received by "), F.col("process"), F.lit(", never sent")))
            .unionByName(finding(failed_read, "unexpected", F.col("value"),
                                 F.concat(F.lit("received by "), F.col("process"), F.lit(", its send failed"))))
            .unionByName(finding(stored, "unexpected", F.col("value"),
                                 F.concat(F.lit("stored as "), F.col("message_id"), F.lit(", never sent")),
                                 F.col("group"))))


def stored_duplicates(ref: DataFrame) -> DataFrame:
    """A producer's duplicate-detection id that reached its end twice (consumed, or waiting at
    the end outside a store-and-forward queue) in one group, or once in each of two groups (a
    bridge that copied instead of moving). Queues only: a topic stores a copy per subscriber."""
    ends = (consumed(ref)
            .unionByName(waiting(ref).where(~is_sf()).select("run", "group", "store", "message_id", "position"))
            .join(messages(ref), ["run", "group", "message_id"])
            .where(F.col("dedup_id").isNotNull() & F.col("destination").startswith("/queue/")))
    within = (ends.groupBy("run", "group", "destination", "dedup_id")
              .agg(F.count("*").alias("n"), F.array_sort(F.collect_list("message_id")).alias("ids")).where("n > 1"))
    across = (ends.groupBy("run", "destination", "dedup_id")
              .agg(F.array_sort(F.collect_set("group")).alias("groups")).where(F.size("groups") > 1))
    return (finding(within, "stored_duplicates", F.col("dedup_id"),
                    F.concat(F.lit("stored twice in one group as "), F.array_join("ids", ", ")), F.col("group"))
            .unionByName(finding(across, "stored_duplicates", F.col("dedup_id"),
                                 F.concat(F.lit("stored in groups "), F.array_join("groups", ", ")))))


def consumer_duplicates(history: DataFrame, runs: DataFrame) -> DataFrame:
    """A value received twice without the `redelivered` flag (per subscriber for topics and
    MQTT): each such reception after the first is a finding, in whatever order the history holds
    the flagged ones (a closing consumer may record its last MESSAGE after another consumer
    recorded the redelivery its DISCONNECT caused; chaos.checker counts the same way). MQTT's
    redelivered flag is DUP; of an mqtt run only completed QoS 2 publications are judged
    (derive.mqtt_repeatable; chaos.mqtt_checker judges the same)."""
    received = (history.where((F.col("f") == "receive") & (F.col("type") == "ok")
                              & ~F.coalesce(F.col("redelivered"), F.lit(False)))
                .join(mqtt_repeatable(history, runs), ["run", "value"], "left_anti")
                .join(runs.select("run", "workload"), "run")
                .withColumn("reader", F.when(F.col("workload").isin(*PER_READER_WORKLOADS), F.col("process"))
                            .otherwise(F.lit(""))))
    order = Window.partitionBy("run", "reader", "value").orderBy("index")
    again = received.withColumn("nth", F.row_number().over(order)).where(F.col("nth") > 1)
    return finding(again, "consumer_duplicates", F.col("value"),
                   F.concat(F.lit("received again by "), F.col("process"), F.lit(" at history index "),
                            F.col("index").cast("string"), F.lit(" without redelivered")))


def _outliers(rows: DataFrame, key: list[str], variant: list[str]) -> DataFrame:
    """Rows whose `variant` columns differ from those of most rows sharing `key` (ties: the
    variant of the lowest node), with the majority's variant as `m_<column>`."""
    # Most keys have one variant on every member: find the others first, with one aggregation.
    disputed = (rows.groupBy(*key)
                .agg(F.count_distinct(*[F.coalesce(F.col(c).cast("string"), F.lit("")) for c in variant])
                     .alias("variants"))
                .where("variants > 1").select(*key))
    rows = rows.join(disputed, key, "left_semi")
    counts = rows.groupBy(*key, *variant).agg(F.count("*").alias("n"), F.min("node").alias("first"))
    rank = F.row_number().over(Window.partitionBy(*key).orderBy(F.col("n").desc(), F.col("first")))
    majority = (counts.withColumn("rank", rank).where("rank = 1")
                .select(*key, *[F.col(c).alias(f"m_{c}") for c in variant]))
    joined = rows.join(majority, key)
    differs = F.lit(False)
    for column in variant:
        differs = differs | ~F.col(column).eqNullSafe(F.col(f"m_{column}"))
    return joined.where(differs)


def divergence(facts: DataFrame, segments: DataFrame) -> DataFrame:
    """Members that disagree on a committed Raft entry (term or content), on a message body
    stored for the same (Raft index, ordinal), or on what their snapshots at one index hold."""
    entries = (facts.where((F.col("fact") == "entry") & F.col("committed"))
               .dropDuplicates(["run", "group", "node", "index"]))
    bad_entries = _outliers(entries, ["run", "group", "index"], ["term", "digest"])
    bodies = segments.where(F.col("status") == "ok")
    bad_bodies = _outliers(bodies, ["run", "group", "index", "ordinal"], ["term", "digest"])
    # Members' snapshots at one index hold the same messages (an empty one holds none).
    taken = (facts.where((F.col("fact") == "entry") & (F.col("detail") == "snapshot"))
             .select("run", "group", "node", "index"))
    message_text = F.concat_ws("|", "store", "message_id", "body_ref", "kind")
    held = (facts.where(F.col("fact") == "snapshot")
            .groupBy("run", "group", "node", "index")
            .agg(F.sha2(F.array_join(F.array_sort(F.collect_list(message_text)), ","), 256).alias("digest")))
    snapshots = taken.join(held, ["run", "group", "node", "index"], "left").withColumn(
        "digest", F.coalesce("digest", F.lit("empty")))
    bad_snapshots = _outliers(snapshots, ["run", "group", "index"], ["digest"])
    return (finding(bad_snapshots, "divergence", F.concat(F.lit("snapshot "), F.col("index").cast("string")),
                    F.format_string("snapshot at index %d holds other messages than most members' snapshots there",
                                    "index"), F.col("group"), F.col("node"))
            .unionByName(finding(bad_entries, "divergence", F.col("index"),
                    F.format_string("Raft entry %d: term %d digest %s here; most members: term %d digest %s",
                                    "index", "term", "digest", "m_term", "m_digest"), F.col("group"), F.col("node"))
            .unionByName(finding(bad_bodies, "divergence", F.concat_ws(":", "index", "ordinal"),
                                 F.format_string("body %d:%d: digest %s here; most members: %s",
                                                 "index", "ordinal", "digest", "m_digest"),
                                 F.col("group"), F.col("node")))))


def leaders(leader_log: DataFrame, facts: DataFrame) -> DataFrame:
    """More than one leader in a term: two members that logged becoming leader of one term, or
    a new leader's no-op entry at two different indexes of one term."""
    claims = (leader_log.where(F.col("role") == "leader").groupBy("run", "group", "term")
              .agg(F.array_sort(F.collect_set("leader")).alias("who")).where(F.size("who") > 1))
    noops = (facts.where((F.col("fact") == "entry") & (F.col("kind") == "noop")).groupBy("run", "group", "term")
             .agg(F.array_sort(F.collect_set("index")).alias("at")).where(F.size("at") > 1))
    return (finding(claims, "leaders", F.col("term"), F.concat(F.lit("logged as leader: "), F.array_join("who", ", ")),
                    F.col("group"))
            .unionByName(finding(noops, "leaders", F.col("term"),
                                 F.concat(F.lit("a new leader's no-op at indexes "),
                                          F.array_join(F.col("at").cast("array<string>"), ", ")),
                                 F.col("group"))))


def bridges(ref: DataFrame, runs: DataFrame) -> DataFrame:
    """Store and forward: nothing left in a store-and-forward queue at the end, no route longer
    than its connection's max_hops, and every queue message a bridge took (acknowledged from
    a store-and-forward queue) stored by the group it was forwarded to."""
    stranded = waiting(ref).where(is_sf())
    hops = F.size(F.split("route", ","))
    arrivals = ref.where((F.col("fact") == "enter") & F.col("kind").isin("forward", "first")
                         & F.col("route").isNotNull())
    overlong = arrivals.join(runs.select("run", "max_hops"), "run").where(hops > F.col("max_hops"))
    taken = (ref.where((F.col("fact") == "leave") & (F.col("kind") == "acked") & is_sf())
             .select("run", "group", "message_id", F.substring_index("store", SF_PREFIX, -1).alias("to"))
             .join(messages(ref), ["run", "group", "message_id"]).where(F.col("destination").startswith("/queue/")))
    # A forward first that fell back may have been stored there first: its store path's copy then was not.
    stored = messages(ref).where(F.col("kind").isin("forward", "first")).select(
        "run", F.col("group").alias("to"), "destination", "digest")
    missing = taken.join(stored, ["run", "to", "destination", "digest"], "left_anti")
    return (finding(stranded, "bridges", F.col("message_id"),
                    F.concat(F.lit("still in "), F.col("store"), F.lit(" at the end (value "),
                             F.coalesce("value", F.lit("?")), F.lit(")")),
                    F.col("group"))
            .unionByName(finding(overlong, "bridges", F.col("message_id"),
                                 F.format_string("arrived over route %s: %d hops, max_hops %d (value %s)",
                                                 "route", hops, "max_hops", F.coalesce("value", F.lit("?"))),
                                 F.col("group")))
            .unionByName(finding(missing, "bridges", F.col("message_id"),
                                 F.concat(F.lit("forwarded to "), F.col("to"), F.lit(", never stored there (value "),
                                          F.coalesce("value", F.lit("?")), F.lit(")")), F.col("group"))))


def order(history: DataFrame, ref: DataFrame, runs: DataFrame) -> DataFrame:
    """Per consumer, producer and queue: first deliveries come in the order the queue stored
    them (message ids grow with arrival in a group's queue). A value that was also redelivered
    is left out: its first delivery may have been in another group than the one that stored it
    last (a consumer that moved, and the message that returned and followed demand), and a
    redelivery promises no order."""
    receives = _ops(history, runs, "receive", "ok", HISTORY_WORKLOADS)
    redelivered = receives.where(F.coalesce(F.col("redelivered"), F.lit(False))).select("run", "value").distinct()
    first = (receives.where(~F.coalesce(F.col("redelivered"), F.lit(False)))
             .join(redelivered, ["run", "value"], "left_anti")
             .withColumn("nth", F.row_number().over(Window.partitionBy("run", "process", "value").orderBy("index")))
             .where("nth = 1").select("run", "process", "index", "value"))
    producers = (_ops(history, runs, "send", "invoke", HISTORY_WORKLOADS).groupBy("run", "value")
                 .agg(F.min("process").alias("producer")))
    # A value consumed twice (a stored duplicate, another check's finding) is placed by its first copy.
    earliest = Window.partitionBy("run", "value").orderBy("seq", "group", "store")
    where_consumed = (consumed(ref).join(messages(ref), ["run", "group", "message_id"])
                      .select("run", "group", "store", "value",
                              F.substring_index("message_id", "-", -1).cast("long").alias("seq"))
                      .withColumn("nth", F.row_number().over(earliest)).where("nth = 1").drop("nth"))
    seen = first.join(producers, ["run", "value"]).join(where_consumed, ["run", "value"])
    lane = Window.partitionBy("run", "process", "group", "store", "producer").orderBy("index")
    late = (seen.withColumn("previous", F.lag("value").over(lane)).withColumn("previous_seq", F.lag("seq").over(lane))
            .where(F.col("seq") < F.col("previous_seq")))
    return finding(late, "order", F.col("value"),
                   F.concat(F.col("process"), F.lit(" received "), F.col("value"), F.lit(" after "), F.col("previous"),
                            F.lit(", which "), F.col("store"), F.lit(" stored later")), F.col("group"))


def conservation(ref: DataFrame) -> DataFrame:
    """Per queue and group: every message that entered a queue left it (acknowledged,
    dead-lettered, expired, forwarded) or still waits there, as often as it entered."""
    queues = ref.where(F.col("store").isNotNull() & ~F.col("store").endswith(SUBSCRIPTION_STORE))
    counted = (queues.where(F.col("fact").isin("enter", "leave", "waiting"))
               .groupBy("run", "group", "store", "message_id")
               .agg(F.sum((F.col("fact") == "enter").cast("int")).alias("entered"),
                    F.sum((F.col("fact") == "leave").cast("int")).alias("left"),
                    F.sum((F.col("fact") == "waiting").cast("int")).alias("waiting"))
               .where(F.col("entered") != F.col("left") + F.col("waiting")))
    return finding(counted, "conservation", F.col("message_id"),
                   F.format_string("%s: entered %d times, left %d, waiting %d", "store", "entered", "left", "waiting"),
                   F.col("group"))


def files(facts: DataFrame, segments: DataFrame) -> DataFrame:
    """Damaged files (a torn tail, what a crash leaves, is counted, not a finding)."""
    bad = facts.where((F.col("fact") == "file") & F.col("detail").contains("corrupt"))
    bad_segments = segments.where(F.col("status") == "corrupt")
    return (finding(bad, "files", F.col("kind"), F.col("detail"), F.col("group"), F.col("node"))
            .unionByName(finding(bad_segments, "files", F.col("segment"), F.col("detail"), F.col("group"),
                                 F.col("node"))))

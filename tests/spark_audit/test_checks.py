"""Each check on small hand-made tables: quiet on a story that is right, and finding exactly the
anomaly in the same story told wrong."""

from __future__ import annotations

from typing import Any

import pytest

from spark_audit import checks
from spark_audit.facts import FACT_SCHEMA_DDL, fact_row
from spark_audit.segments import SEGMENT_SCHEMA_DDL
from spark_audit.tables import HISTORY_SCHEMA

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SF = "/queue/$.raftmq.sf."
Q = "/queue/orders"


def facts(spark: Any, *rows: tuple[Any, ...]) -> Any:
    return spark.createDataFrame(list(rows), FACT_SCHEMA_DDL)


def fact(fact_: str, group: str = "g1", node: str = "n1", **fields: Any) -> tuple[Any, ...]:
    return fact_row("r", group, node, fact_, **fields)


def history(spark: Any, *ops: tuple[str, str, str, str] | tuple[str, str, str, str, bool]) -> Any:
    """(process, type, f, value[, redelivered]) in history order."""
    rows = [(i, op[1], op[2], op[0], op[3], 0.0, 0.0, None,  # type: ignore[misc]
             op[4] if len(op) > 4 else None, None, "r")
            for i, op in enumerate(ops)]
    schema = HISTORY_SCHEMA.replace("`index` long, `process` string, `type` string, `f` string",
                                    "`index` long, `type` string, `f` string, `process` string") + ", `run` string"
    return spark.createDataFrame(rows, schema).select("index", "process", "type", "f", "value", "time", "mono", "node",
                                                      "redelivered", "error", "run")


def runs(spark: Any, workload: str = "queue", max_hops: int = 1) -> Any:
    return spark.createDataFrame([("r", "/r", workload, max_hops, 1, 3)],
                                 "run string, path string, workload string, max_hops int, groups int, members int")


def items(frame: Any) -> list[str]:
    return sorted(row["item"] for row in frame.collect())


def stored(message_id: str, value: str, group: str = "g1", store: str = Q, kind: str = "client", first: bool = True,
           **extra: Any) -> tuple[Any, ...]:
    return fact("enter", group, message_id=message_id, store=store, destination=Q, dedup_id=value, value=value,
                digest="d-" + value, kind=kind, position=int(message_id.rsplit("-", 1)[1]), first=first, **extra)


def acked(message_id: str, group: str = "g1", store: str = Q, position: int = 0) -> tuple[Any, ...]:
    return fact("leave", group, message_id=message_id, store=store, kind="acked", position=position)


def test_lost(spark: Any) -> None:
    ref = facts(spark, stored("g1-1", "a"), acked("g1-1"), stored("g1-2", "b"),
                fact("waiting", message_id="g1-2", store=Q, value="b"), stored("g1-3", "c"), acked("g1-3"))
    sent = [("p", "invoke", "send", v) for v in "abcd"] + [("p", "ok", "send", v) for v in "abcd"]
    right = history(spark, *sent, ("c", "ok", "receive", "a"), ("c", "ok", "receive", "c"), ("c", "ok", "receive", "d"))
    assert items(checks.lost(right, ref, runs(spark))) == []  # b waits at the end
    wrong = history(spark, *sent, ("c", "ok", "receive", "a"), ("c", "ok", "receive", "d"))
    assert items(checks.lost(wrong, ref, runs(spark))) == ["c"]
    assert items(checks.lost(wrong, ref, runs(spark, workload="topic"))) == []  # not judged for topics
    assert items(checks.lost(wrong, ref, runs(spark, workload="mqtt"))) == ["c"]  # everyone subscribed first


def test_unexpected(spark: Any) -> None:
    ref = facts(spark, stored("g1-1", "a"), stored("g1-2", "z"))
    ops = history(spark, ("p", "invoke", "send", "a"), ("p", "ok", "send", "a"), ("p", "invoke", "send", "f"),
                  ("p", "fail", "send", "f"), ("c", "ok", "receive", "a"), ("c", "ok", "receive", "f"),
                  ("c", "ok", "receive", "y"))
    # f's send certainly failed, y and z no one sent (z was stored, y received)
    assert items(checks.unexpected(ops, ref, runs(spark))) == ["f", "y", "z"]


def test_stored_duplicates(spark: Any) -> None:
    moved = facts(spark, stored("g1-1", "a", store=SF + "g2"), acked("g1-1", store=SF + "g2"),
                  stored("g2-7", "a", group="g2", kind="forward"), acked("g2-7", group="g2"))
    assert items(checks.stored_duplicates(moved)) == []  # moved g1 -> g2: one end
    copied = facts(spark, stored("g1-1", "a"), acked("g1-1"), stored("g2-7", "a", group="g2", kind="forward"),
                   fact("waiting", "g2", message_id="g2-7", store=Q))
    assert items(checks.stored_duplicates(copied)) == ["a"]
    twice = facts(spark, stored("g1-1", "a"), acked("g1-1"), stored("g1-2", "a"), acked("g1-2", position=1))
    assert ([row["detail"] for row in checks.stored_duplicates(twice).collect()]
            == ["stored twice in one group as g1-1, g1-2"])


def test_consumer_duplicates(spark: Any) -> None:
    ops = history(spark, ("c0", "ok", "receive", "a"), ("c1", "ok", "receive", "a", True), ("c1", "ok", "receive", "b"),
                  ("c0", "ok", "receive", "b"))
    assert items(checks.consumer_duplicates(ops, runs(spark))) == ["b"]  # a's repeat is flagged redelivered
    # The redelivery recorded before the delivery it followed (a closing consumer's last MESSAGE)
    late = history(spark, ("c3", "ok", "receive", "d", True), ("c1", "ok", "receive", "d"))
    assert items(checks.consumer_duplicates(late, runs(spark))) == []
    # a topic's subscribers each get their copy
    assert items(checks.consumer_duplicates(ops, runs(spark, workload="topic"))) == []


def test_consumer_duplicates_of_mqtt_judge_completed_qos_2_publications_per_subscriber(spark: Any) -> None:
    ops = [("q1p0", "ok", "open", '{"qos":1,"protocol":"3.1.1"}'), ("q2p1", "ok", "open", '{"qos":2,"protocol":"5"}'),
           ("q1p0", "ok", "send", "q1p0-0"), ("q2p1", "ok", "send", "q2p1-0"), ("q2p1", "info", "send", "q2p1-1"),
           *[(k, "ok", "receive", v) for k in ("k0", "k1") for v in ("q1p0-0", "q2p1-0", "q2p1-1")],
           ("k1", "ok", "receive", "q2p1-0", True),  # again with DUP
           ("k0", "ok", "receive", "q1p0-0"), ("k0", "ok", "receive", "q2p1-1")]  # QoS 1; a flow never completed
    mqtt = runs(spark, workload="mqtt")
    assert items(checks.consumer_duplicates(history(spark, *ops), mqtt)) == []
    again = history(spark, *ops, ("k1", "ok", "receive", "q2p1-0"))  # a completed QoS 2 publication, new twice
    assert items(checks.consumer_duplicates(again, mqtt)) == ["q2p1-0"]


def test_divergence(spark: Any) -> None:
    entries = [fact("entry", node=n, index=i, term=1, digest=f"e{i}", committed=True)
               for n in ("n1", "n2", "n3") for i in (1, 2)]
    empty = spark.createDataFrame([], SEGMENT_SCHEMA_DDL)
    assert items(checks.divergence(facts(spark, *entries), empty)) == []
    changed = fact("entry", node="n2", index=2, term=1, digest="other", committed=True)
    uncommitted = fact("entry", node="n3", index=3, term=2, digest="x", committed=False)  # may differ: never committed
    bodies = spark.createDataFrame(
        [("r", "g1", n, "s", 0, 0, 5, 0, 1, 1, Q, "a", "a", "x" if n == "n3" else "d", "ok", None)
         for n in ("n1", "n2", "n3")], SEGMENT_SCHEMA_DDL)
    snapshots = [fact("entry", node=n, index=9, term=1, digest="s", committed=True, detail="snapshot")
                 for n in ("n1", "n2", "n3")]
    # n3's is empty
    held = [fact("snapshot", node=n, index=9, store=Q, message_id="g1-4", kind="ready") for n in ("n1", "n2")]
    rows = facts(spark, *entries[:3], changed, *entries[4:], uncommitted, *snapshots, *held)
    found = sorted((row["node"], row["item"]) for row in checks.divergence(rows, bodies).collect())
    assert found == [("n2", "2"), ("n3", "5:0"), ("n3", "snapshot 9")]


def test_leaders(spark: Any) -> None:
    log = spark.createDataFrame([("r", "g1", "n1", "leader", "a:1", 3, "t"),
                                 ("r", "g1", "n2", "follower", "a:1", 3, "t"),
                                 ("r", "g1", "n2", "leader", "b:1", 4, "t")],
                                "run string, group string, member string, role string, leader string, term long, "
                                "timestamp string")
    noops = facts(spark, *[fact("entry", node=n, index=7, term=3, kind="noop") for n in ("n1", "n2")])
    assert items(checks.leaders(log, noops)) == []
    two = log.unionByName(spark.createDataFrame([("r", "g1", "n3", "leader", "c:1", 3, "t")], log.schema))
    second_noop = facts(spark, fact("entry", node="n3", index=9, term=3, kind="noop"))
    assert items(checks.leaders(two, noops.unionByName(second_noop))) == ["3", "3"]  # by the logs and by the journals


def test_bridges(spark: Any) -> None:
    good = facts(spark, stored("g1-1", "a", store=SF + "g2"), acked("g1-1", store=SF + "g2"),
                 stored("g2-4", "a", group="g2", kind="forward", route="g1"))
    assert items(checks.bridges(good, runs(spark, max_hops=1))) == []
    # A forward first that fell back: its first copy arrived after all, the store path's was one with it.
    fell_back = facts(spark, stored("g1-1", "a", store=SF + "g2"), acked("g1-1", store=SF + "g2"),
                      stored("g2-4", "a", group="g2", kind="first", route="g1", forward_id="raftmq:f:x.1"))
    assert items(checks.bridges(fell_back, runs(spark, max_hops=1))) == []
    bad = facts(spark, stored("g1-1", "a", store=SF + "g2"), acked("g1-1", store=SF + "g2"),  # never arrived in g2
                stored("g1-2", "b", store=SF + "g3"), fact("waiting", message_id="g1-2", store=SF + "g3"),  # stranded
                stored("g2-4", "c", group="g2", kind="forward", route="g1,g3"),  # 2 hops
                stored("g2-5", "d", group="g2", kind="first", route="g1,g3"))  # 2 hops, first
    assert items(checks.bridges(bad, runs(spark, max_hops=1))) == ["g1-1", "g1-2", "g2-4", "g2-5"]


def test_order(spark: Any) -> None:
    ref = facts(spark, *[stored(f"g1-{i}", v) for i, v in enumerate(["a-0", "a-1", "b-0", "a-2"], start=1)],
                *[acked(f"g1-{i}", position=i) for i in range(1, 5)])
    sends = [("a", "invoke", "send", "a-0"), ("a", "invoke", "send", "a-1"), ("b", "invoke", "send", "b-0"),
             ("a", "invoke", "send", "a-2")]
    fifo = history(spark, *sends, ("c", "ok", "receive", "a-0"), ("c", "ok", "receive", "b-0"),
                   ("c", "ok", "receive", "a-1"), ("c", "ok", "receive", "a-2"))
    assert items(checks.order(fifo, ref, runs(spark))) == []  # b-0 between a-0 and a-1 is another producer
    swapped = history(spark, *sends, ("c", "ok", "receive", "a-1"), ("c", "ok", "receive", "a-0"),
                      ("c", "ok", "receive", "a-2"))
    assert items(checks.order(swapped, ref, runs(spark))) == ["a-0"]
    # a-1 was delivered (somewhere) and redelivered: its first delivery promises no order
    moved = history(spark, *sends, ("c", "ok", "receive", "a-1"), ("c", "ok", "receive", "a-0"),
                    ("d", "ok", "receive", "a-1", True), ("c", "ok", "receive", "a-2"))
    assert items(checks.order(moved, ref, runs(spark))) == []


def test_conservation(spark: Any) -> None:
    whole = [stored("g1-1", "a"), acked("g1-1"), stored("g1-2", "b"), fact("waiting", message_id="g1-2", store=Q),
             stored("g1-3", "c"), fact("leave", message_id="g1-3", store=Q, kind="dead-lettered"),
             stored("g1-3", "c", store="/queue/DLQ", kind="dead-letter", first=False),
             fact("waiting", message_id="g1-3", store="/queue/DLQ")]
    assert items(checks.conservation(facts(spark, *whole))) == []
    assert items(checks.conservation(facts(spark, *whole, stored("g1-4", "d")))) == ["g1-4"]  # entered, then nothing


def test_files(spark: Any) -> None:
    rows = facts(spark, fact("file", kind="journal", detail="raft/raft.journal"),
                 fact("file", node="n2", kind="journal", detail="torn tail at offset 9 (3 bytes not read)"),
                 fact("file", node="n3", kind="snapshot", detail="corrupt: checksum"))
    segments = spark.createDataFrame([("r", "g1", "n1", "0001.seg", 0, 0, None, None, None, None, None, None, None,
                                       None, "corrupt", "bad CRC")], SEGMENT_SCHEMA_DDL)
    assert items(checks.files(rows, segments)) == ["0001.seg", "snapshot"]  # a torn tail is no finding


def test_every_chaos_workload_checked_as_a_queue_gets_the_history_checks() -> None:
    from chaos.client import QueueWorkload
    from chaos.run import WORKLOADS
    from spark_audit.derive import HISTORY_WORKLOADS

    queue_like = {name for name, workload in WORKLOADS.items()
                  if issubclass(workload, QueueWorkload) and workload.check is QueueWorkload.check}
    assert queue_like == set(HISTORY_WORKLOADS)  # e.g. shared-queue: lost and unexpected apply to it too


def test_the_test_sessions_take_the_suites_spark_defaults(spark: Any) -> None:
    """conftest's TEST_SPARK_DEFAULTS reach the JVM (through SPARK_CONF_DIR), where the tests
    count on them for their CPU."""
    from tests.spark_audit.conftest import TEST_SPARK_DEFAULTS

    assert {key: spark.conf.get(key) for key in TEST_SPARK_DEFAULTS} == TEST_SPARK_DEFAULTS

"""The Spark part of the suite: one SparkSession for the session (`local[2]`, UI off, few
shuffle partitions), and real chaos runs made once, short, for the tests that audit real files."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from spark_audit.job import run_audit
from spark_audit.layout import read_run
from spark_audit.sources import NodeFactsSource
from spark_audit.synth import SynthRun, make_run
from tests.helpers.audit_anomalies import (
    CLUSTER_ANOMALIES,
    GROUP_ANOMALIES,
    MQTT_ANOMALIES,
    copy_run,
    drop_receives,
    mqtt_receive_twice,
)
from tests.helpers.worker_groups import check_grouped
from tests.spark_audit.planted_replay import planted_source

# The JVMs these tests start (the local session's driver, a standalone master, worker and executor,
# a Spark Connect server) live a minute or two on a few thousand rows, so the JIT's optimizing
# compiler and a parallel collector cost more CPU than they save: with these, the JVMs of
# test_checks.py used 56 s of the machine's CPU instead of 97 s. Tests only: an audit of millions
# of records (`raftmq audit`) keeps the JVM's defaults.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# For the same reason Spark interprets their queries rather than compiling each to bytecode (whole
# stages and expressions alike): one audit of a synthetic run, alone here, took 53 s with code
# generation and 43 s without. The results are Spark's either way; an audit of a real journal
# keeps code generation. Spark reads these from spark-defaults.conf in SPARK_CONF_DIR.
TEST_SPARK_DEFAULTS = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


@pytest.fixture(scope="session", autouse=True)
def short_lived_jvms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every JVM started under this package (they read JAVA_TOOL_OPTIONS) uses TEST_JVM_OPTIONS,
    and every Spark they run TEST_SPARK_DEFAULTS."""
    conf = tmp_path_factory.mktemp("spark-conf")
    (conf / "spark-defaults.conf").write_text("".join(f"{key} {value}\n" for key, value in TEST_SPARK_DEFAULTS.items()))
    before = {name: os.environ.get(name) for name in ("JAVA_TOOL_OPTIONS", "SPARK_CONF_DIR")}
    os.environ["JAVA_TOOL_OPTIONS"] = TEST_JVM_OPTIONS
    os.environ["SPARK_CONF_DIR"] = str(conf)
    yield
    for name, value in before.items():
        if value is None:
            del os.environ[name]
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _session_fixtures_only_in_their_group(request: pytest.FixtureRequest) -> None:
    check_grouped(request.node.nodeid, request.fixturenames)


@pytest.fixture(scope="session")
def spark(short_lived_jvms: None) -> Iterator[Any]:
    from spark_audit.spark_session import spark_session

    session = spark_session("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def synthetic_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Synthetic runs (spark_audit.synth, in a second, no cluster): two groups of three, 60
    messages each, clean; and a copy with every receive of one value gone from its history (a
    lost message). {"clean": SynthRun, "lost": its copy's path, "value": the lost value}."""
    root = tmp_path_factory.mktemp("synthetic")
    clean: SynthRun = make_run(root, "synth-clean", groups=2, members=3, messages=60, batch=10)
    lost = copy_run(clean.path, root, "synth-lost")
    return {"clean": clean, "lost": lost, "value": drop_receives(lost)}


def _chaos_run(out: Path, **options: Any) -> Path:
    from chaos.run import RunOptions, run

    run_dir, result = run(RunOptions(out=out, **{"time_limit_s": 5.0, "rate": 40.0, **options}))
    assert result.valid, f"the fixture's chaos run is not valid: {run_dir}"
    return run_dir


@pytest.fixture(scope="session")
def group_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the default preset (one group of three) under kills, left as it ended."""
    return _chaos_run(tmp_path_factory.mktemp("group-run"), preset="default", nemeses=("kill",), seed=11)


@pytest.fixture(scope="session")
def mqtt_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the mqtt workload (paho publishers of QoS 1 and 2, kept-session subscribers)
    on the default preset under kills."""
    return _chaos_run(tmp_path_factory.mktemp("mqtt-run"), preset="default", workload="mqtt", nemeses=("kill",),
                      seed=13, time_limit_s=6.0)


@pytest.fixture(scope="session")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of symmetric-lite (three single-node groups, bridges between them), without
    faults: a killed single-node group can leave messages in a bridge's queue past the drain
    (docs/audit.md, "Found"), which would make this fixture, not the audit, the thing tested."""
    return _chaos_run(tmp_path_factory.mktemp("cluster-run"), preset="symmetric-lite", nemeses=(), seed=12)


@pytest.fixture(scope="session")
def elastic_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real runs of the elastic cluster's faults: members leaving their group and rejoining
    empty (one group of three), and groups draining while their members die (symmetric, the
    consumers waiting so the drained groups hold messages to move)."""
    out = tmp_path_factory.mktemp("elastic-runs")
    return {
        "membership": _chaos_run(out, preset="default", nemeses=("membership",), seed=1, time_limit_s=9.0),
        "drain": _chaos_run(out, preset="symmetric", nemeses=("drain",), seed=2, time_limit_s=10.0, backlog=True),
    }


# The default preset's group with producer flow control by bytes on the workload's queue (FAIL:
# a SEND past the limit is refused, so the chaos checker counts it as not stored). The Raft log
# is never compacted in so short a run, so the audit replays every decision from the first entry.
BYTE_LIMITS = """
[[core.address]]
match = "/queue/chaos"
max_size_bytes = 150
address_full_policy = "FAIL"
"""


@pytest.fixture(scope="session")
def limits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of one group of three with `[[core.address]]` byte limits that refuse SENDs,
    consumers held back until the drain (so the queue fills), members killed."""
    out = tmp_path_factory.mktemp("limits-run")
    group_file = out / "limits.toml"
    group_file.write_text(resources.files("raftmq.presets").joinpath("default.toml").read_text() + BYTE_LIMITS)
    return _chaos_run(out, topology=str(group_file), nemeses=("kill",), seed=4, backlog=True)


@pytest.fixture(scope="session")
def audited(spark: Any, group_run: Path, cluster_run: Path, elastic_runs: dict[str, Path], limits_run: Path,
            mqtt_run: Path, synthetic_runs: dict[str, Any],
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The clean runs and a copy per planted anomaly, audited together in one job, with the two
    synthetic runs (under their own names: synth-clean, synth-lost); a Spark job costs tens of
    seconds of this machine's two cores whatever its size."""
    root = tmp_path_factory.mktemp("audited")
    planted: dict[str, tuple[str, str]] = {}
    runs = [copy_run(group_run, root, "group-clean"), copy_run(cluster_run, root, "cluster-clean"),
            *(copy_run(run, root, f"{name}-clean") for name, run in elastic_runs.items()),
            copy_run(limits_run, root, "limits-clean"), copy_run(mqtt_run, root, "mqtt-clean")]
    for name, (check, plant) in GROUP_ANOMALIES.items():
        run = copy_run(group_run, root, f"group-{name}")
        planted[run.name] = (check, plant(run))
        runs.append(run)
    for name, (check, plant) in MQTT_ANOMALIES.items():
        run = copy_run(mqtt_run, root, f"mqtt-{name}")
        planted[run.name] = (check, plant(run))
        runs.append(run)
    qos_1_twice = copy_run(mqtt_run, root, "mqtt-qos1-twice")  # allowed: QoS 1 is at least once
    mqtt_receive_twice(qos_1_twice, 1)
    runs.append(qos_1_twice)
    for name, (check, plant) in CLUSTER_ANOMALIES.items():
        run = copy_run(cluster_run, root, f"cluster-{name}")
        planted[run.name] = (check, plant(run))
        runs.append(run)
    # Conservation: a replay with a planted core bug (a message accepted, never stored).
    conserve = copy_run(group_run, root, "group-conservation")
    runs.append(conserve)
    message_id = "g1-" + str(random.Random(5).randint(10, 30))
    spark.dataSource.register(planted_source(conserve.name, message_id))  # in place of the audit's own replay
    try:
        synthetic = [synthetic_runs["clean"].path, synthetic_runs["lost"]]
        result = run_audit(spark, [read_run(run) for run in [*runs, *synthetic]], sample=50)
    finally:
        spark.dataSource.register(NodeFactsSource)
    planted[conserve.name] = ("conservation", message_id)
    return {"result": result, "planted": planted, "runs": {run.name: run for run in runs}}



"""`raftmq audit` reads embedded brokers' journals like any member's: named `EmbeddedBroker`s whose
data directories are RUN/data/<name>/ leave embedded.json there, and RUN is a run without
run.json (docs/audit.md, "Embedded brokers"): each group's core configuration comes from its
embedded.json, the checks of stored files apply, those of a client history are n/a."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster.network_uris import parse_network
from raftmq import embedded
from raftmq.client.sync import Client
from raftmq.config import NodeConfig
from raftmq.core.address_settings import AddressSettings
from raftmq.core.config import CoreConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.errors import AuditError, BrokerRefused
from raftmq.routing.cluster_connection import ClusterView
from spark_audit import story
from spark_audit.checks import CHECKS, CLIENT_CHECKS
from spark_audit.embedded_runs import EMBEDDED_FILE, EMBEDDED_WORKLOAD
from spark_audit.job import AuditResult, run_audit
from spark_audit.layout import core_configs, expand, read_run
from spark_audit.report import to_json
from tests.helpers.audit_anomalies import copy_run

SENT, CONSUMED = 300, 100  # per broker, to /queue/orders
# Broker a refuses a SEND while 250 messages wait (FAIL): the replay must refuse the same 50,
# which it can only do with the limits its embedded.json recorded.
LIMITED = CoreConfig(max_delivery_count=3, addresses=(
    AddressSettings("/queue/orders", max_size_messages=250, address_full_policy="FAIL"),))
REFUSED = SENT - 250
SHOP = "multicast://239.77.7.7:9876?group=shop"


def embedded_brokers(run: Path) -> None:
    """Brokers a (LIMITED) and b (defaults), their data directories run/data/a and run/data/b:
    each takes SENT receipted SENDs (a refuses REFUSED of them), then CONSUMED are acknowledged."""
    for name, core in (("a", LIMITED), ("b", CoreConfig())):
        with EmbeddedBroker(config=NodeConfig(core=core), name=name, data_dir=run / "data" / name), \
                Client.connect(f"vm://{name}") as client:
            refused = 0
            for i in range(SENT):
                try:
                    client.send("/queue/orders", f"{name}-{i}")
                except BrokerRefused:
                    refused += 1
            assert refused == (REFUSED if name == "a" else 0)
            subscription = client.subscribe("/queue/orders", ack="client-individual")
            for _ in range(CONSUMED):
                message = subscription.receive(timeout=10)
                assert message is not None and subscription.ack(message, receipt=True)


def flip_a_bit(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    data[60] ^= 0x10  # inside the first batch's compressed records: its data CRC fails
    segment.write_bytes(bytes(data))


@pytest.mark.spark
@pytest.mark.integration  # embedded brokers: Raft members on loopback ports
@pytest.mark.timeout(900)  # the session's SparkSession may start here (test_cli.py)
def test_embedded_brokers_audit_clean_and_a_damaged_segment_is_found(spark: Any, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    clean = runs / "embedded-clean"
    embedded_brokers(clean)
    assert {p.parent.name for p in clean.glob(f"data/*/{EMBEDDED_FILE}")} == {"a", "b"}
    assert not (clean / "run.json").exists()
    # each group's configuration, as its members ran with it: the group's name for broker name
    configs = core_configs(read_run(clean))
    assert configs == {"a": CoreConfig(broker_name="a", max_delivery_count=3, addresses=LIMITED.addresses),
                       "b": CoreConfig(broker_name="b")}
    damaged = copy_run(clean, runs, "embedded-damaged")
    segment = sorted((damaged / "data" / "b" / "n1" / "bodies").glob("*.seg"))[0]
    flip_a_bit(segment)

    paths = expand([str(runs)])  # as `raftmq audit runs/` finds them: no run.json anywhere
    assert [p.name for p in paths] == ["embedded-clean", "embedded-damaged"]
    result = run_audit(spark, [read_run(path) for path in paths])

    verdicts = {run.name: run for run in result.runs}
    from_files = {check: None if check in CLIENT_CHECKS else 0 for check in CHECKS}
    assert verdicts["embedded-clean"].counts == from_files, result.findings
    read = verdicts["embedded-clean"].read
    assert read["groups"] == read["members"] == read["segments"] == 2
    # Both groups' journals were read and replayed: a stored 250 (it refused 50), b all 300.
    assert read["messages"] == 2 * SENT - REFUSED and read["consumed"] == 2 * CONSUMED
    assert read["body_records"] == 2 * SENT and read["entries"] > 2 * SENT

    assert verdicts["embedded-damaged"].counts == {**from_files, "files": 1}, result.findings
    [finding] = [f for f in result.findings if f["run"] == "embedded-damaged"]
    assert (finding["check"], finding["group"], finding["node"]) == ("files", "b", "n1")
    assert segment.name in finding["item"] + finding["detail"], finding
    said = story.verdict(to_json(AuditResult([verdicts["embedded-clean"]], [], result.seconds, result.master)))
    assert said.startswith("Clean: 1 run,"), said
    assert ("(lost, unexpected, consumer duplicates and order not judged: embedded brokers keep no client "
            "history.)") in said


def record(run: Path, group: str, network: list[str], named: str | None = None) -> Path:
    """What a named EmbeddedBroker with data_dir run/data/<group> leaves: embedded.json (of the
    group `named`, by default the directory's), and a member's Raft directory."""
    (run / "data" / group / "n1" / "raft").mkdir(parents=True)
    path = run / "data" / group / EMBEDDED_FILE
    path.write_text(json.dumps({"format": 1, "group": named or group, "members": ["n1"], "network": network,
                                "core": {"address": []}}))
    return path


def test_a_network_gives_the_group_its_view_of_the_cluster(tmp_path: Path) -> None:
    run = tmp_path / "shop"
    record(run, "svc", [SHOP])
    record(run, "solo", [])
    assert expand([str(run)]) == [run.resolve()]
    audited = read_run(run)
    assert (audited.workload, audited.groups, audited.max_hops) == (EMBEDDED_WORKLOAD, ("solo", "svc"), 1)
    configs = core_configs(audited)
    assert configs["svc"].cluster == ClusterView("svc", parse_network([SHOP]).connections)
    assert configs["svc"].broker_name == "svc"
    assert configs["solo"] == CoreConfig(broker_name="solo")


def test_brokers_without_a_network_forward_nothing(tmp_path: Path) -> None:
    record(tmp_path / "run", "a", [])
    assert read_run(tmp_path / "run").max_hops == 0


def test_what_is_not_a_run_of_embedded_brokers_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    record(run, "a", [])
    with pytest.raises(AuditError, match=r"data/a: one embedded broker's data directory; audit the directory"):
        expand([str(run / "data" / "a")])
    (run / "data" / "b" / "n1" / "raft").mkdir(parents=True)  # member data, no embedded.json
    with pytest.raises(AuditError, match=r"data/b: member data without embedded.json"):
        read_run(run)
    other = tmp_path / "other"
    record(other, "a", [], named="svc")
    with pytest.raises(AuditError, match=r"the broker of group 'svc' under data/a/"):
        read_run(other)
    bad = tmp_path / "bad"
    record(bad, "a", ["tcp://127.0.0.1:1"])
    with pytest.raises(AuditError, match=r"embedded.json: network: 'tcp://127.0.0.1:1'"):
        read_run(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AuditError, match=r"neither a run directory \(no run.json, no data/<group>/embedded.json\)"):
        expand([str(empty)])


def test_the_audit_reads_the_file_the_broker_writes() -> None:
    assert EMBEDDED_FILE == embedded.EMBEDDED_FILE

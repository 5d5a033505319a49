"""Each check can fail: real chaos runs audit clean, and copies of them with exactly one anomaly
planted in their files are flagged by exactly that check, and by nothing else. All of them are
audited in one Spark job (the session's `audited` fixture), as `raftmq audit runs/` would."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checker import check_queue
from chaos.history import read_history
from spark_audit.checks import CHECKS
from spark_audit.job import AuditResult
from tests.helpers.audit_anomalies import CLUSTER_ANOMALIES, GROUP_ANOMALIES, MQTT_ANOMALIES

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]  # see test_cli.py


def verdict(result: AuditResult, name: str) -> dict[str, int | None]:
    return next(run.counts for run in result.runs if run.name == name)


@pytest.mark.parametrize("name", ["group-clean", "cluster-clean", "membership-clean", "drain-clean", "limits-clean"])
def test_a_real_run_audits_clean(audited: dict[str, Any], name: str) -> None:
    counts = verdict(audited["result"], name)
    assert counts == {check: 0 for check in CHECKS}, [f for f in audited["result"].findings if f["run"] == name]


@pytest.mark.parametrize("name", ["mqtt-clean", "mqtt-qos1-twice"])
def test_a_real_mqtt_run_audits_clean(audited: dict[str, Any], name: str) -> None:
    # Order is judged per queue (n/a here); a QoS 1 value received twice without DUP is allowed.
    counts = verdict(audited["result"], name)
    assert counts == {check: None if check == "order" else 0 for check in CHECKS}, [
        f for f in audited["result"].findings if f["run"] == name]
    ops = read_history(audited["runs"][name] / "history.jsonl")
    assert {op.value["qos"] for op in ops if op.f == "open"} == {1, 2}
    assert any(op.f == "kill" and op.type == "ok" for op in ops)


@pytest.mark.parametrize("name", ["membership", "drain"])
def test_the_elastic_runs_did_what_they_audit(audited: dict[str, Any], name: str) -> None:
    # A member left and rejoined empty; a group drained (moving messages) while a member died.
    faults = [op for op in read_history(audited["runs"][f"{name}-clean"] / "nemesis.jsonl") if op.type == "ok"]
    if name == "membership":
        assert any(op.f == "membership" for op in faults) and any(op.value.get("of") == "membership" for op in faults)
    else:
        healed = [op for op in faults if op.value.get("of") == "drain"]
        assert healed and any(op.value.get("moved") for op in healed), [op.value for op in healed]


@pytest.mark.parametrize("name", ["group-clean", "cluster-clean", "group-lost", "group-receive-twice"])
def test_lost_and_duplicated_equal_the_chaos_checkers(audited: dict[str, Any], name: str) -> None:
    chaos = check_queue(read_history(audited["runs"][name] / "history.jsonl"))
    counts = verdict(audited["result"], name)
    assert (counts["lost"], counts["consumer_duplicates"]) == (chaos.lost, chaos.stored_duplicates)


@pytest.mark.parametrize("name", [f"group-{n}" for n in GROUP_ANOMALIES] + [f"cluster-{n}" for n in CLUSTER_ANOMALIES]
                         + [f"mqtt-{n}" for n in MQTT_ANOMALIES] + ["group-conservation"])
def test_each_planted_anomaly_is_found_by_its_check_alone(audited: dict[str, Any], name: str) -> None:
    check, item = audited["planted"][name]
    counts = verdict(audited["result"], name)
    findings = [f for f in audited["result"].findings if f["run"] == name]
    assert {c: n for c, n in counts.items() if n} == {check: 1}, findings
    # a finding names its item, or (bridges: a message id) the value in its detail
    assert len(findings) == 1 and (findings[0]["item"] == item or f"(value {item})" in findings[0]["detail"]), findings

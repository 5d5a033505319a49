"""`raftmq audit` as a user runs it: through a local standalone Spark cluster (master and worker
started from the pyspark install, stopped by pid), the same verdicts as the in-process job, the
files it writes, and its exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_audit.job import run_audit
from spark_audit.layout import read_run
from spark_audit.standalone import StandaloneCluster
from tests.spark_audit.conftest import copy_run

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]
RAFTMQ = [str(Path(sys.executable).parent / "raftmq")]  # the installed command


def test_a_standalone_master_gives_the_same_verdicts(spark: Any, group_run: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    clean = copy_run(group_run, runs, "clean")
    lost = copy_run(group_run, runs, "lost")
    ops = [json.loads(line) for line in (lost / "history.jsonl").read_text().splitlines()]
    value = next(op["value"] for op in ops if op["f"] == "receive")
    (lost / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in ops
                                                if not (op["f"] == "receive" and op["value"] == value)))
    local = run_audit(spark, [read_run(clean), read_run(lost)])
    with StandaloneCluster(tmp_path / "spark", workers=1) as cluster:
        done = subprocess.run([*RAFTMQ, "audit", "--master", cluster.master, str(runs)], capture_output=True,
                              text=True, timeout=240)
    assert done.returncode == 1, done.stderr[-2000:]  # the lost value is a finding
    report = json.loads((runs / "audit.json").read_text())
    assert report["master"] == cluster.master
    assert {run["run"]: run["counts"] for run in report["runs"]} == {run.name: run.counts for run in local.runs}
    assert [(f["check"], f["item"]) for f in report["findings"]] == [("lost", value)]
    assert "audit.html" in done.stdout and (runs / "audit.html").read_text().count("<tr>") > 2
    clean_only = subprocess.run([*RAFTMQ, "audit", str(clean), "--out", str(tmp_path / "out")], capture_output=True,
                                text=True, timeout=240)
    assert clean_only.returncode == 0, clean_only.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["clean"] is True


def test_a_directory_that_is_no_run_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run([*RAFTMQ, "audit", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{tmp_path}: neither a run directory (no run.json) nor a directory of runs" in done.stderr

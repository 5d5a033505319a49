"""`raftmq audit` as a user runs it: through a Spark Connect server running on a local
standalone Spark cluster (both started from the pyspark install, stopped by pid), with the same
verdicts as the in-process job; the files it writes, and its exit status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from spark_audit.cli import audit_command
from spark_audit.standalone import ConnectServer, StandaloneCluster
from tests.helpers.audit_anomalies import copy_run

# The timeout covers the session fixtures too (real chaos runs, the in-process audit): 160 s on a
# quiet machine, over 300 s once when two benchmarks ran beside the suite.
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(600)]
RAFTMQ = [str(Path(sys.executable).parent / "raftmq")]  # the installed command


def copies(audited: dict[str, Any], names: list[str], runs: Path) -> tuple[Path, dict[str, Any]]:
    """Copies of audited runs in `runs`, and their verdicts from the in-process audit."""
    for name in names:
        copy_run(audited["runs"][name], runs, name)
    return runs, {run.name: run.counts for run in audited["result"].runs if run.name in names}


def test_spark_connect_on_a_standalone_master_gives_the_same_verdicts(audited: dict[str, Any], tmp_path: Path) -> None:
    """One driver for both: a Spark Connect server whose master is a standalone cluster, so the
    job goes through `sc://` and runs on `spark://` executors."""
    runs, local = copies(audited, ["group-lost"], tmp_path / "runs")
    with StandaloneCluster(tmp_path / "spark", workers=1, cores=2) as cluster, \
            ConnectServer(tmp_path / "connect", master=cluster.master) as server:
        done = subprocess.run([*RAFTMQ, "audit", "--remote", server.url, str(runs)], capture_output=True,
                              text=True, timeout=420)
    assert done.returncode == 1, done.stderr[-2000:]  # the lost value is a finding
    report = json.loads((runs / "group-lost" / "audit.json").read_text())  # one run: its report goes beside it
    assert report["master"] == f"{server.url} (its master: {cluster.master})"
    assert {run["run"]: run["counts"] for run in report["runs"]} == local
    assert [(f["check"], f["item"]) for f in report["findings"]] == [("lost", audited["planted"]["group-lost"][1])]
    assert "audit.html" in done.stdout
    lost = re.escape(audited["planted"]["group-lost"][1])
    assert re.search(rf"1 acknowledged message lost \(among [\d,]+ acknowledged sends\): {lost}\b",
                     (runs / "group-lost" / "audit.html").read_text())


def test_a_clean_run_exits_zero(spark: Any, group_run: Path, tmp_path: Path) -> None:
    # In this process, so the command takes the session already running (getOrCreate).
    result = CliRunner().invoke(audit_command, [str(group_run), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "audit.json").read_text())["clean"] is True
    assert "clean" in result.output


def test_a_directory_that_is_no_run_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run([*RAFTMQ, "audit", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert f"{tmp_path}: neither a run directory (no run.json) nor a directory of runs" in done.stderr

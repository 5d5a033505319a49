"""`raftmq audit` as a user runs it: through a Spark Connect server running on a local
standalone Spark cluster (both started from the pyspark install, stopped by pid), with the same
verdicts as the in-process job; the files it writes, and its exit status."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from spark_audit.cli import SPARK_LOG
from spark_audit.standalone import ConnectServer, StandaloneCluster
from tests.helpers.audit_anomalies import copy_run

# The timeout covers the session fixtures too (real chaos runs, the in-process audit), made by
# whichever test of the group asks first: 146 s of set-up and 51 s for the test below on a quiet
# machine, and over 600 s together once under a full suite on two cores (five workers).
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]
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


def test_a_directory_that_is_no_run_is_refused_by_name(tmp_path: Path) -> None:
    done = subprocess.run([*RAFTMQ, "audit", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert (f"{tmp_path}: neither a run directory (no run.json, no data/<group>/embedded.json) nor a directory of runs"
            in done.stderr)


def on_a_terminal(command: list[str], timeout: float) -> tuple[int, str]:
    """Run `command` on a pseudo-terminal 200 columns wide, as a person would; (exit status,
    everything it put on the terminal)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer of the terminal has exited
                    break
                if not chunk:
                    break
                screen += chunk
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), screen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def test_the_jvm_output_goes_to_a_log_not_into_the_status_line(synthetic_runs: dict[str, Any], tmp_path: Path) -> None:
    """Every JVM these tests start prints `Picked up JAVA_TOOL_OPTIONS` on its stderr (conftest's
    short_lived_jvms): a line that, on the terminal, would run into the status line."""
    assert os.environ.get("JAVA_TOOL_OPTIONS")
    out = tmp_path / "out"
    status, screen = on_a_terminal([*RAFTMQ, "audit", str(synthetic_runs["clean"].path), "--out", str(out)],
                                   timeout=420)
    assert status == 0, screen[-3000:]  # a clean run exits 0...
    assert json.loads((out / "audit.json").read_text())["clean"] is True  # ...and says so in its report
    assert "starting Spark" in screen  # the status line was drawn (a terminal)
    assert "Picked up JAVA_TOOL_OPTIONS" not in screen, screen[-3000:]
    assert "Clean: 1 run," in screen  # the verdict, in a sentence
    log = out / SPARK_LOG
    # (rich may wrap the long path onto a line of its own, whatever the terminal's width: seen
    # once in a full run; what matters is that the log is named)
    assert f"Spark's own output (the JVM's warnings and log): {log}" in screen.replace("\r\n", "")
    jvm = log.read_text()
    assert "Picked up JAVA_TOOL_OPTIONS" in jvm
    # Spark's own logging is quiet: errors only (spark_audit/log4j2.properties), not its shell banner.
    assert "Setting default log level" not in jvm

"""Spark servers on this machine, from the pyspark install (no Spark download), on 127.0.0.1,
each process its own process group, stopped by pid: a standalone cluster (a master and N
workers) and a Spark Connect server. For the tests that run the audit through `spark://` and
`sc://`, and for the benchmark's two-worker figure.

    with StandaloneCluster(workers=2, directory=Path("/tmp/spark")) as cluster:
        subprocess.run(["raftmq", "audit", "--master", cluster.master, "runs/"])
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from raftmq import processes
from raftmq.errors import ProcessNotReady
from spark_audit.spark_session import QUIET_CONF

START_SECONDS = 60.0
# The audit's session settings that are the server's to make (spark_audit.spark_session): a client
# of Spark Connect runs on the server's session.
SERVER_CONF = {key: value for key, value in QUIET_CONF.items()
               if key.startswith(("spark.sql.", "spark.python.", "spark.default."))}


class StandaloneCluster:
    def __init__(self, directory: Path, workers: int = 1, cores: int = 1, memory: str = "1g") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.directory = directory
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.procs: list[subprocess.Popen[bytes]] = []
        port, ui = processes.free_ports(2)
        self.master = f"spark://127.0.0.1:{port}"
        self._port, self._ui = port, ui

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                    "SPARK_WORKER_DIR": str(self.directory / "work"), "SPARK_NO_DAEMONIZE": "1"})
        return env

    def _spawn(self, name: str, *args: str) -> None:
        argv = [str(self.home / "bin" / "spark-class"), *args]
        log = self.directory / f"{name}.log"
        self.procs.append(processes.spawn(argv, log, new_session=True, env=self._env()))

    def start(self) -> StandaloneCluster:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self._port),
                    "--webui-port", str(self._ui))
        for i in range(self.workers):
            self._spawn(f"worker{i + 1}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(processes.free_port()),
                        self.master)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.alive_workers() >= self.workers:
                return self
            if any(proc.poll() is not None for proc in self.procs):
                break
            time.sleep(0.5)
        logs = {p.name: p.read_text(errors="replace")[-800:] for p in self.directory.glob("*.log")}
        self.stop()
        raise RuntimeError(f"standalone Spark did not start with {self.workers} worker(s): {logs}")

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self._ui}/json/", timeout=2) as answer:
                state = json.load(answer)
        except (OSError, ValueError):
            return 0
        return int(state.get("aliveworkers", 0))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                # The worker's executors are its children, in its process group.
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            processes.terminate(proc, grace=10)
        self.procs = []

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class ConnectServer:
    """A Spark Connect server (`sc://127.0.0.1:PORT`) running `master` (default local[2])."""

    def __init__(self, directory: Path, master: str = "local[2]") -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.directory = directory
        self.master = master
        self.port = processes.free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConnectServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, SPARK_HOME=str(self.home), SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        argv = [str(self.home / "bin" / "spark-submit"),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", self.master, "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
                "--conf", f"spark.pyspark.python={sys.executable}"]
        for key, value in SERVER_CONF.items():
            argv += ["--conf", f"{key}={value}"]
        log = self.directory / "connect.log"
        self.proc = processes.spawn(argv, log, new_session=True, env=env)
        try:
            processes.wait_for_line(self.proc, log, "Spark Connect server started", START_SECONDS)
        except ProcessNotReady:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        processes.terminate(self.proc, grace=10)
        self.proc = None

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

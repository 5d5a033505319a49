"""The 3-node RabbitMQ cluster of /work/shared/peers, started and stopped by its own scripts.

Ports, data and pid files are the scripts' (`<tempdir>/raftmq-peers/rabbitmq-cluster/node<i>/`).
We never install anything: when `rabbitmq-server` is missing, `missing_reason()` says how to
install it and the caller decides.
"""

from __future__ import annotations

import glob
import os
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from node_group import rss_kib

PEERS_DIR = Path(os.environ.get("RAFTMQ_PEERS_DIR", "/work/shared/peers"))
CLUSTER_NODES = 3
START_TIMEOUT_SECONDS = 600.0  # first start of a fresh cluster: three Erlang boots and two joins
STOP_TIMEOUT_SECONDS = 300.0
# STOMP port of node 1 (node i = +i-1): the scripts' default unless RMQ_STOMP_PORT moves it.
STOMP_PORT = int(os.environ.get("RMQ_STOMP_PORT", "61641"))
EPMD_PORT = int(os.environ.get("PEERS_EPMD_PORT", "14369"))  # the scripts' private epmd
# What RabbitMQ wants from a STOMP client for a replicated (quorum) queue: the default vhost and
# user, and the x-queue-type header on the first SUBSCRIBE/SEND that declares the queue.
CONNECT_ARGS = ("--vhost", "/", "--login", "guest", "--passcode", "guest")
QUEUE_ARGS = ("-H", "x-queue-type:quorum")


def missing_reason() -> str | None:
    """Why the cluster cannot start here, or None when it can."""
    if not glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"):
        return "rabbitmq-server is not installed: apt-get install -y --no-install-recommends rabbitmq-server"
    for script in ("start_rabbitmq.sh", "stop_rabbitmq.sh"):
        if not (PEERS_DIR / script).is_file():
            return f"{PEERS_DIR / script} not found (set RAFTMQ_PEERS_DIR)"
    return None


def _run_dir() -> Path:
    base = os.environ.get("PEERS_RUN_DIR") or str(Path(tempfile.gettempdir()) / "raftmq-peers")
    return Path(base) / "rabbitmq-cluster"


def beam_pids() -> dict[str, int]:
    """Pids of the running cluster nodes, from the scripts' pid files."""
    pids: dict[str, int] = {}
    for i in range(1, CLUSTER_NODES + 1):
        try:
            pid = int((_run_dir() / f"node{i}" / "beam.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            continue
        if Path(f"/proc/{pid}").exists():
            pids[f"rabbit{i}"] = pid
    return pids


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class RabbitCluster:
    """`with RabbitCluster() as rmq:` starts the cluster and stops it on the way out, unless
    it was already running when we came (then it is someone else's and stays up)."""

    log: list[str] = field(default_factory=list)
    was_running: bool = False
    epmd_was_running: bool = False
    started: bool = False

    @property
    def url(self) -> str:
        return f"stomp://127.0.0.1:{STOMP_PORT}"

    def start(self) -> None:
        reason = missing_reason()
        if reason:
            raise RuntimeError(reason)
        self.was_running = len(beam_pids()) == CLUSTER_NODES
        self.epmd_was_running = _listening(EPMD_PORT)
        self.started = True  # from here on, stop() runs the stop script (it is idempotent)
        self._script("start_rabbitmq.sh", START_TIMEOUT_SECONDS)

    def stop(self) -> None:
        if self.started and not self.was_running:
            self._script("stop_rabbitmq.sh", STOP_TIMEOUT_SECONDS)
            if not self.epmd_was_running:
                # The cluster's start launched the private epmd and `stop_rabbitmq.sh cluster`
                # leaves it; `epmd -kill` refuses while any Erlang node is still registered.
                subprocess.run(["epmd", "-kill"], env={**os.environ, "ERL_EPMD_PORT": str(EPMD_PORT)},
                               capture_output=True, timeout=30, check=False)
        self.started = False

    def rss(self) -> dict[str, int | None]:
        return {name: rss_kib(pid) for name, pid in beam_pids().items()}

    def _script(self, name: str, timeout: float) -> None:
        result = subprocess.run(
            ["bash", str(PEERS_DIR / name), "cluster"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.log.append(result.stdout + result.stderr)
        if result.returncode != 0:
            raise RuntimeError(f"{name} cluster failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def __enter__(self) -> RabbitCluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

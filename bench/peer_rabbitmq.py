"""The 3-node RabbitMQ cluster of the peers folder, started and stopped by its own scripts.

The peers folder (the peer brokers' start/stop scripts and configuration) lives outside this
repository: $RAFTMQ_PEERS_DIR names it, and nothing here guesses where it is.

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

from bench.node_group import rss_kib

PEERS_DIR_VARIABLE = "RAFTMQ_PEERS_DIR"  # the folder holding start_rabbitmq.sh and stop_rabbitmq.sh
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


def peers_dir() -> Path | None:
    """The peers folder named by $RAFTMQ_PEERS_DIR, or None when the variable is not set."""
    value = os.environ.get(PEERS_DIR_VARIABLE, "")
    return Path(value) if value else None


def missing_reason() -> str | None:
    """Why the cluster cannot start here, or None when it can."""
    if not glob.glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin/rabbitmq-server"):
        return "rabbitmq-server is not installed: apt-get install -y --no-install-recommends rabbitmq-server"
    peers = peers_dir()
    if peers is None:
        return f"{PEERS_DIR_VARIABLE} is not set: set it to the folder holding start_rabbitmq.sh and stop_rabbitmq.sh"
    for script in ("start_rabbitmq.sh", "stop_rabbitmq.sh"):
        if not (peers / script).is_file():
            return f"{peers / script} not found (check {PEERS_DIR_VARIABLE})"
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
        peers = peers_dir()
        if peers is None:
            raise RuntimeError(f"{PEERS_DIR_VARIABLE} is not set")
        result = subprocess.run(
            ["bash", str(peers / name), "cluster"],
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

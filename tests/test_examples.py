"""The runnable examples docs/topologies.md points to (examples/), run as a user runs them:
each prints what it promises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from raftmq.embedded import EmbeddedBroker
from tests.helpers.edge_hub import hub_group
from tests.helpers.multicast_namespace import loopback_namespace

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def example(*argv: str, timeout: float = 90) -> list[str]:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_in_vm_in_memory_and_durable(tmp_path: Path) -> None:
    expected = ["received order 0", "received order 1", "received order 2", "received in a transaction"]
    assert example("examples/in_vm.py") == expected
    assert example("examples/in_vm.py", str(tmp_path / "svc")) == expected
    assert (tmp_path / "svc" / "n1" / "raft").is_dir()  # a Raft journal: each receipt was an fsync


def test_client_server() -> None:
    with EmbeddedBroker(nodes=3) as group:  # stands for `raftmq up`'s three servers
        lines = example("examples/client_server.py", group.url)
    assert len(lines) == 1 and lines[0].startswith("received hello from a client from 127.0.0.1:")


def test_embedded_edge(tmp_path: Path) -> None:
    with EmbeddedBroker(config=hub_group(tmp_path / "hub")) as hub, hub.client() as application:
        orders = application.subscribe("/queue/orders", ack="client-individual")
        stop = threading.Event()

        def answer() -> None:  # the hub's application replies to each order
            while not stop.is_set():
                order = orders.receive(0.2)
                if order is not None:
                    application.send("/queue/replies.shop", f"reply to {order.body.decode()}")
                    orders.ack(order)

        responder = threading.Thread(target=answer, daemon=True)
        responder.start()
        host, port = hub.addresses[0]
        try:
            lines = example("examples/embedded_edge.py", str(tmp_path / "shop"),
                            f"static:(stomp://{host}:{port})?duplex=true")
        finally:
            stop.set()
            responder.join(10)
    assert sorted(lines) == [f"received reply to order {n}" for n in range(3)]


def test_peer_to_peer(tmp_path: Path) -> None:
    with loopback_namespace("rmqex") as namespace:
        processes = {}
        try:
            for name, peers in (("a", ["b"]), ("b", ["a"])):
                processes[name] = subprocess.Popen(
                    ["ip", "netns", "exec", namespace, sys.executable, "examples/peer_to_peer.py", name,
                     str(tmp_path / name), *peers],
                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    start_new_session=True)
            time.sleep(8)  # found, greeted (what waited moves to its consumer)
        finally:
            for process in processes.values():
                os.killpg(process.pid, signal.SIGINT)
        outputs = {name: process.communicate(timeout=60) for name, process in processes.items()}
    for name, other in (("a", "b"), ("b", "a")):
        out, err = outputs[name]
        assert f"{name}: got 'hello {name}, from {other}'" in out.splitlines(), (out, err[-2000:])
        assert processes[name].returncode == 0, err[-2000:]

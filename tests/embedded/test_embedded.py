"""The embedded broker: used from a test through the pytest plugin, as a context manager, as
a three-node Raft group that survives stopping its leader, and cleaned up after."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cluster.group_file import GroupConfig, GroupMember
from raftmq.client.sync import Client
from raftmq.config import NodeConfig
from raftmq.core.config import CoreConfig
from raftmq.embedded import EmbeddedBroker
from raftmq.errors import ClientError, EmbeddedBrokerError
from raftmq.processes import free_ports

pytestmark = pytest.mark.integration

RECEIVE_TIMEOUT = 10.0


def refuses_connections(address: tuple[str, int]) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(address) != 0


def broker_threads() -> set[threading.Thread]:
    """Every thread now: the broker's loop, its executor, pysyncobj's tick threads and its
    clients' loops must all be gone after stop()."""
    return set(threading.enumerate())


def receive_bodies(client: Client, destination: str, count: int) -> list[bytes]:
    subscription = client.subscribe(destination, ack="client-individual")
    bodies = []
    for _ in range(count):
        message = subscription.receive(timeout=RECEIVE_TIMEOUT)
        assert message is not None, f"only {len(bodies)} of {count} messages arrived"
        bodies.append(message.body)
        assert subscription.ack(message)
    subscription.close()
    return bodies


def test_fixture_gives_a_running_broker_and_a_connected_client(raftmq_broker: EmbeddedBroker,
                                                               raftmq_client: Client) -> None:
    assert raftmq_broker.url.startswith("failover:(stomp://127.0.0.1:")
    assert raftmq_client.is_connected
    for i in range(3):
        raftmq_client.send("/queue/orders", f"order-{i}", headers={"kind": "test"})
    assert receive_bodies(raftmq_client, "/queue/orders", 3) == [b"order-0", b"order-1", b"order-2"]
    destinations = raftmq_broker.status()["broker"]["destinations"]
    assert destinations["/queue/orders"]["enqueued"] == 3
    assert destinations["/queue/orders"]["dequeued"] == 3
    assert raftmq_broker.leader() == "n1"


@pytest.mark.raftmq_broker(
    config=NodeConfig(core=CoreConfig(max_delivery_count=1, dead_letter_queue="/queue/custom.DLQ")))
def test_marker_passes_arguments_to_the_broker(raftmq_broker: EmbeddedBroker) -> None:
    # The settings of the NodeConfig are kept; host, port and name are the broker's.
    host, port = raftmq_broker.addresses[0]
    assert host == "127.0.0.1" and port != NodeConfig().port
    with raftmq_broker.client() as client:
        client.send("/queue/poison", "bad")
        subscription = client.subscribe("/queue/poison", ack="client-individual")
        message = subscription.receive(timeout=RECEIVE_TIMEOUT)
        assert message is not None
        subscription.nack(message, receipt=True)
        assert receive_bodies(client, "/queue/custom.DLQ", 1) == [b"bad"]


def test_context_manager_stops_threads_sockets_and_clients() -> None:
    before = broker_threads()
    with EmbeddedBroker() as broker:
        address = broker.addresses[0]
        (admin,) = broker.admin_addresses
        client = broker.client()  # left open on purpose: stop() closes it
        client.send("/queue/a", "x")
        assert not refuses_connections(address)
    assert refuses_connections(address)
    host, port = admin.rsplit(":", 1)
    assert refuses_connections((host, int(port)))
    with pytest.raises(ClientError):
        client.send("/queue/a", "after stop")
    assert broker_threads() <= before
    broker.stop()  # idempotent
    with pytest.raises(EmbeddedBrokerError):
        broker.client()


def test_three_node_group_survives_stopping_its_leader() -> None:
    with EmbeddedBroker(nodes=3) as broker:
        data_dir = broker.data_dir
        assert data_dir is not None and data_dir.is_dir()
        assert len(broker.addresses) == 3 and len(broker.admin_addresses) == 3
        client = broker.client()
        for i in range(5):
            client.send("/queue/ha", f"m{i}")
        old_leader = broker.wait_for_leader()
        broker.stop_node(old_leader)
        assert broker.running_nodes == [n for n in ("n1", "n2", "n3") if n != old_leader]
        # The client is told where the new leader is and reconnects by itself.
        client.send("/queue/ha", "m5")
        assert receive_bodies(client, "/queue/ha", 6) == [f"m{i}".encode() for i in range(6)]
        new_leader = broker.wait_for_leader()
        assert new_leader != old_leader
        # The stopped member rejoins from its files and catches up.
        broker.start_node(old_leader)
        target = broker.status(new_leader)["commit_index"]
        deadline = time.monotonic() + 10
        while broker.status(old_leader)["applied_index"] < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.status(old_leader)["applied_index"] >= target
    assert not data_dir.exists(), "the temporary data directory is removed by stop()"
    assert all(refuses_connections(address) for address in broker.addresses)


def test_five_node_group_survives_losing_two_members() -> None:
    # A group of five tolerates two failures: with two members stopped, sends still commit.
    with EmbeddedBroker(nodes=5) as broker:
        client = broker.client()
        client.send("/queue/five", "m0")
        first = broker.wait_for_leader()
        broker.stop_node(first)
        second = broker.wait_for_leader()
        assert second != first
        broker.stop_node(second)
        assert len(broker.running_nodes) == 3
        client.send("/queue/five", "m1")
        assert receive_bodies(client, "/queue/five", 2) == [b"m0", b"m1"]


def test_single_node_with_data_dir_keeps_messages_across_restarts(tmp_path: Path) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker, broker.client() as client:
        client.send("/queue/kept", "durable")
    with EmbeddedBroker(data_dir=tmp_path) as broker, broker.client() as client:
        assert receive_bodies(client, "/queue/kept", 1) == [b"durable"]
    assert (tmp_path / "n1").is_dir(), "a caller's data_dir is kept"


def test_failed_start_names_the_problem_and_leaves_nothing_running(tmp_path: Path) -> None:
    before = broker_threads()
    client_port, raft_port, admin_port = free_ports(3)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", client_port))
    blocker.listen()
    try:
        member = GroupMember("n1", f"127.0.0.1:{client_port}", f"127.0.0.1:{raft_port}", f"127.0.0.1:{admin_port}")
        group = GroupConfig("taken", str(tmp_path / "data"), (member,))
        with pytest.raises(EmbeddedBrokerError, match="did not start.*in use"):
            EmbeddedBroker(config=group).start()
    finally:
        blocker.close()
    assert broker_threads() <= before
    assert refuses_connections(("127.0.0.1", raft_port))


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        EmbeddedBroker(nodes=0)
    member = GroupMember("a", "127.0.0.1:1", "127.0.0.1:2")
    group = GroupConfig("g", "/nonexistent", (member,))
    with pytest.raises(ValueError):
        EmbeddedBroker(nodes=3, config=group)
    with pytest.raises(ValueError):
        EmbeddedBroker(config=group, data_dir="/tmp")
    broker = EmbeddedBroker()
    with pytest.raises(EmbeddedBrokerError):
        broker.url  # noqa: B018 - not started
    with broker:
        with pytest.raises(EmbeddedBrokerError, match="no node"):
            broker.stop_node("n9")
        with pytest.raises(EmbeddedBrokerError, match="cannot be restarted"):
            broker.start_node("n1")
        with pytest.raises(EmbeddedBrokerError):
            broker.start()


def test_documented_plugin_setup_works_in_a_users_project(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["raftmq.testing"]\n', encoding="utf-8")
    (tmp_path / "test_user.py").write_text(
        "import pytest\n\n"
        "def test_round_trip(raftmq_client):\n"
        "    raftmq_client.send('/queue/user', 'hi')\n"
        "    assert raftmq_client.subscribe('/queue/user').receive(timeout=10).body == b'hi'\n\n"
        "@pytest.mark.raftmq_broker(nodes=1)\n"
        "def test_marker(raftmq_broker):\n"
        "    assert raftmq_broker.leader() == 'n1'\n",
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--strict-markers", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "2 passed" in result.stdout


def test_an_embedded_broker_prints_nothing_when_the_application_configured_no_logging(tmp_path) -> None:  # noqa: ANN001
    # structlog's default prints every event to stdout, from the broker's loop thread: in a
    # test run that lands in the middle of pytest's progress line.
    script = (
        "from raftmq.embedded import EmbeddedBroker\n"
        "with EmbeddedBroker() as broker:\n"
        "    with broker.client() as client:\n"
        "        client.send('/queue/q', b'x', receipt=True)\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", done.stdout

"""The topic, transactions and cross-group workloads: each runs end to end against real node
processes and is valid; the cross-group one refuses a deployment of one group (before anything
starts); the transactions report draws whole transactions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import chaos_command
from chaos.history import read_history
from chaos.run import WORKLOADS, RunOptions, check_options, run
from chaos.workload import NeedsCluster
from raftmq.processes import free_ports


def lite_cluster(tmp_path: Path, ports: list[int] | None = None, policy: str | None = None) -> Path:
    """symmetric-lite (three single-node groups, a mesh) on free ports: a run may share the
    machine with other clusters, the preset's fixed ports may not be free. `policy`: the
    connection's message_load_balancing (default: the key left out, ON_DEMAND)."""
    ports = ports if ports is not None else free_ports(9)
    lines = ["[topology]", 'name = "lite"']
    for i in range(3):
        name = f"g{i + 1}"
        lines += ["[[group]]", f'file = "{name}.toml"']
        (tmp_path / f"{name}.toml").write_text("\n".join([
            "[group]", f'name = "{name}"', f'data_dir = "data/{name}"', "[[node]]", 'id = "n1"',
            f'client = "127.0.0.1:{ports[3 * i]}"', f'raft = "127.0.0.1:{ports[3 * i + 1]}"',
            f'admin = "127.0.0.1:{ports[3 * i + 2]}"']) + "\n")
    lines += ["[[cluster_connection]]", 'name = "lite"', 'groups = ["g1", "g2", "g3"]', 'links = "mesh"']
    if policy is not None:
        lines.append(f'message_load_balancing = "{policy}"')
    path = tmp_path / "topology.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_workloads_are_registered_and_cross_group_needs_a_cluster(tmp_path: Path) -> None:
    assert list(WORKLOADS) == ["queue", "topic", "transactions", "cross-group", "shared-queue", "stale", "mqtt"]
    with pytest.raises(NeedsCluster, match="--preset symmetric, chain or symmetric-lite"):
        check_options(RunOptions(workload="cross-group"))
    with pytest.raises(NeedsCluster):
        check_options(RunOptions(workload="cross-group", preset="five-node"))
    check_options(RunOptions(workload="cross-group", preset="symmetric-lite"))
    check_options(RunOptions(workload="cross-group", topology=str(lite_cluster(tmp_path, list(range(20000, 20009))))))
    result = CliRunner().invoke(chaos_command, ["run", "--workload", "cross-group", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "needs a cluster" in result.output and "--preset" in result.output
    assert not (tmp_path / "runs").exists()  # refused before anything started
    listed = CliRunner().invoke(chaos_command, ["list"])
    assert all(name in listed.output for name in WORKLOADS)


@pytest.mark.integration
def test_a_topic_run_under_kills_is_valid(tmp_path: Path) -> None:
    # The leader killed: every subscriber fails over, the durables' subscriptions must live on.
    run_dir, result = run(RunOptions(workload="topic", nemeses=("kill",), targets=("leader",), time_limit_s=14, rate=40,
                                     concurrency=4, seed=3, out=tmp_path / "runs"))
    figures = result.to_dict()
    assert result.valid, figures
    assert figures["durable_subscribers"] == 2 and figures["non_durable_subscribers"] == 2
    assert result.acknowledged > 200 and figures["owed"] >= result.acknowledged  # both durables were owed most
    ops = read_history(run_dir / "history.jsonl")
    assert {op.f for op in ops if op.process == "nemesis" and op.type == "ok"} >= {"kill", "heal"}
    assert any(op.f == "detach" for op in ops if op.process.startswith("d"))  # a durable lost its connection
    assert json.loads((run_dir / "results.json").read_text())["owed"] == figures["owed"]


@pytest.mark.integration
def test_an_mqtt_run_under_kills_is_valid(tmp_path: Path) -> None:
    # paho clients, 3.1.1 and 5: the leader killed, every client finds the next one; the kept
    # sessions (subscribers', QoS 2 publishers') must live on, nothing acknowledged lost, no
    # completed QoS 2 publication delivered twice as new.
    run_dir, result = run(RunOptions(workload="mqtt", nemeses=("kill",), targets=("leader",), time_limit_s=10, rate=40,
                                     concurrency=4, seed=3, out=tmp_path / "runs"))
    figures = result.to_dict()
    assert result.valid, figures
    assert figures["subscribers"] == 2 and figures["protocols"].keys() == {"3.1.1", "5"}
    assert result.acknowledged > 150 and figures["qos2_acknowledged"] > 50
    assert figures["owed"] >= 2 * result.acknowledged and figures["resumed"] > 0
    ops = read_history(run_dir / "history.jsonl")
    assert any(op.f == "kill" and op.type == "ok" for op in ops)
    assert json.loads((run_dir / "results.json").read_text())["owed"] == figures["owed"]


@pytest.mark.integration
def test_a_transactions_run_under_kills_is_valid(tmp_path: Path) -> None:
    run_dir, result = run(RunOptions(workload="transactions", nemeses=("kill",), targets=("leader",), time_limit_s=14,
                                     rate=40, concurrency=3, seed=5, out=tmp_path / "runs"))
    figures = result.to_dict()
    assert result.valid, figures
    assert figures["committed"] > 50 and figures["aborted"] > 0 and figures["ack_transactions_committed"] > 0
    assert figures["partial"] == 0 and result.lost == 0
    assert "txn ok" not in (run_dir / "report.html").read_text()  # the plot names outcomes, not ops
    assert "how long each send (or transaction) took" in (run_dir / "report.html").read_text()


@pytest.mark.integration
def test_a_cross_group_run_with_migrating_consumers_is_valid(tmp_path: Path) -> None:
    run_dir, result = run(RunOptions(workload="cross-group", topology=str(lite_cluster(tmp_path)), nemeses=(),
                                     time_limit_s=12, rate=40, concurrency=3, seed=2, out=tmp_path / "runs"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 200 and result.received == result.acknowledged
    ops = read_history(run_dir / "history.jsonl")
    assert any(op.f == "migrate" and op.type == "ok" for op in ops)
    producers = {op.node for op in ops if op.f == "send" and op.type == "ok"}
    consumers = {op.node for op in ops if op.f == "receive"}
    assert len(producers) == 1 and len(consumers) == 2 and not producers & consumers  # every value crossed a bridge


@pytest.mark.integration
def test_a_shared_queue_run_under_local_first_with_kills_is_valid(tmp_path: Path) -> None:
    # One queue, a producer and a consumer on every group; consumers migrate, crash, and a
    # group's node is killed: values stay where they arrived or cross, each exactly once.
    run_dir, result = run(RunOptions(workload="shared-queue",
                                     topology=str(lite_cluster(tmp_path, policy="LOCAL_FIRST")),
                                     nemeses=("kill",), time_limit_s=10, rate=40, concurrency=3, seed=6,
                                     out=tmp_path / "runs"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 150 and result.received == result.acknowledged
    ops = read_history(run_dir / "history.jsonl")
    assert any(op.f == "migrate" and op.type == "ok" for op in ops)
    assert any(op.f == "kill" and op.type == "ok" for op in read_history(run_dir / "nemesis.jsonl"))
    assert 'message_load_balancing = "LOCAL_FIRST"' in (run_dir / "topology" / "topology.toml").read_text()


@pytest.mark.integration
def test_a_run_with_groups_draining_while_their_members_die_is_valid(tmp_path: Path) -> None:
    run_dir, result = run(RunOptions(workload="queue", topology=str(lite_cluster(tmp_path)), nemeses=("drain",),
                                     time_limit_s=14, rate=40, concurrency=3, seed=3, out=tmp_path / "runs",
                                     backlog=True))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 150 and result.lost == 0 and result.stored_duplicates == 0
    nemesis = read_history(run_dir / "nemesis.jsonl")
    drains = [op for op in nemesis if op.f == "drain" and op.type == "ok"]
    assert drains and all(op.value["killed"] for op in drains)
    cancelled = [op for op in nemesis if op.f == "heal" and op.type == "ok" and op.value.get("of") == "drain"]
    assert len(cancelled) == len(drains)
    # With the consumers waiting (backlog), the drained groups held messages: some moved.
    assert sum(op.value["moved"] or 0 for op in cancelled) > 0, [op.value for op in cancelled]


def client_of(tmp_path: Path, group: str) -> str:
    """The client address of a lite cluster's group (its one node)."""
    line = next(line for line in (tmp_path / f"{group}.toml").read_text().splitlines() if line.startswith("client"))
    return line.split('"')[1]


def hub_and_spokes(tmp_path: Path) -> Path:
    """Three single-node groups as an ActiveMQ Classic network of brokers: each spoke (g2, g3)
    declares a duplex connector to the hub (g1), so each link is one connection the spoke opens."""
    lite = lite_cluster(tmp_path)
    text = lite.read_text().split("[[cluster_connection]]")[0]
    address = client_of(tmp_path, "g1")
    for spoke in ("g2", "g3"):
        text += "\n".join(["[[network_connector]]", f'group = "{spoke}"', f'name = "{spoke}-hub"',
                           f'uri = "static:(stomp://{address})"', "duplex = true", "networkTTL = 2"]) + "\n"
    lite.write_text(text)
    return lite


@pytest.mark.integration
def test_a_cross_group_run_over_a_duplex_network_of_brokers_under_kills_is_valid(tmp_path: Path) -> None:
    # Producers on the hub, consumers on the spokes: every value crosses a one-connection link.
    run_dir, result = run(RunOptions(workload="cross-group", topology=str(hub_and_spokes(tmp_path)), nemeses=("kill",),
                                     time_limit_s=14, rate=40, concurrency=3, seed=4, out=tmp_path / "runs"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 150 and result.received == result.acknowledged
    placed = (run_dir / "topology" / "topology.toml").read_text()
    assert "127.0.0.1" not in placed.split("[[network_connector]]", 1)[1]  # the uris moved with the nodes
    assert any(op.f == "kill" and op.type == "ok" for op in read_history(run_dir / "nemesis.jsonl"))


def discovered_cluster(tmp_path: Path) -> Path:
    """Three single-node groups that find each other through a discovery group (its members
    file, beside the topology: no multicast outside namespaces) instead of a static mesh."""
    lite = lite_cluster(tmp_path)
    text = lite.read_text().split("[[cluster_connection]]")[0]
    clients = {name: [client_of(tmp_path, name)] for name in ("g1", "g2", "g3")}
    (tmp_path / "members.json").write_text(json.dumps({"groups": clients}))
    text += "\n".join(["[[discovery_group]]", 'name = "dg"', 'file = "members.json"', "refresh_timeout_ms = 2000",
                       "[[cluster_connection]]", 'name = "found"', 'discovery_group = "dg"']) + "\n"
    lite.write_text(text)
    return lite


@pytest.mark.integration
def test_a_cross_group_run_over_discovered_links_under_kills_is_valid(tmp_path: Path) -> None:
    run_dir, result = run(RunOptions(workload="cross-group", topology=str(discovered_cluster(tmp_path)),
                                     nemeses=("kill",),
                                     time_limit_s=14, rate=40, concurrency=3, seed=4, out=tmp_path / "runs"))
    assert result.valid, result.to_dict()
    assert result.acknowledged > 150 and result.received == result.acknowledged
    placed = json.loads((run_dir / "topology" / "members.json").read_text())
    assert all(not address.startswith("127.0.0.1:") for addresses in placed["groups"].values() for address in addresses)
    assert any(op.f == "kill" and op.type == "ok" for op in read_history(run_dir / "nemesis.jsonl"))

"""The commands that act on a running cluster find it from the state directory, as `raftmq
status` does (raftmq.ops.selection): `raftmq group drain g3` on `raftmq up --preset symmetric`
needs no `--preset`; and `raftmq up`, refused because a cluster runs, names the command that
stops that one. No node is started: the state files are written here, their one "node" this
very test process (so the liveness check by pid, start time and command line passes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cluster.topology import Topology
from raftmq.cli import main
from raftmq.ops import drain, member_changes
from raftmq.ops.launcher import DeploymentState, NodeProcess, read_state, write_state
from raftmq.ops.selection import cluster_topology, state_selection, stop_command
from raftmq.processes import process_start_time
from tests.ops.conftest import group_file_text


def this_process(group: str = "g1", node_id: str = "n1") -> NodeProcess:
    pid = os.getpid()
    argv = tuple(part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part)
    return NodeProcess(group, node_id, "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", pid, process_start_time(pid) or 0,
                       argv, "node.log")


def running_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, topology: str,
                 selection: tuple[str, ...] | None) -> Path:
    """A state file in ./.raftmq/ of a cluster `raftmq up` started with `selection`."""
    state_dir = tmp_path / ".raftmq"
    state_dir.mkdir()
    write_state(DeploymentState(topology, str(state_dir), (this_process(),), selection=selection))
    monkeypatch.chdir(tmp_path)
    return state_dir


class Seen(Exception):
    """Raised by the stand-ins below with the topology a command was given."""

    def __init__(self, topology: Topology) -> None:
        super().__init__("seen")
        self.topology = topology


def see_drain(topology: Topology, name: str, *_args: Any, **_kwargs: Any) -> Any:
    drain._group(topology, name)  # what the command does first: "no group 'g3' (groups: g1)" before
    raise Seen(topology)


class SeeChanger:
    def __init__(self, topology: Topology, group: str, *_args: Any, **_kwargs: Any) -> None:
        if group not in [spec.name for spec in topology.groups]:
            raise AssertionError(f"no group {group!r} in {[spec.name for spec in topology.groups]}")
        raise Seen(topology)


MEMBER = ["--client", "127.0.0.1:61690", "--raft", "127.0.0.1:62690", "--admin", "127.0.0.1:8290"]


@pytest.mark.parametrize("argv", [
    ["group", "drain", "g3"],
    ["group", "drain", "g3", "--cancel"],
    ["group", "add-node", "g3", "n4", *MEMBER],
    ["group", "remove-node", "g3", "n3"],
    ["group", "replace-node", "g3", "n3", "n4", *MEMBER],
])
def test_group_commands_find_the_running_preset_without_being_told(argv: list[str], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    running_here(tmp_path, monkeypatch, "symmetric", ("--preset", "symmetric"))
    monkeypatch.setattr(drain, "drain_group", see_drain)
    monkeypatch.setattr(member_changes, "MembershipChanger", SeeChanger)
    with pytest.raises(Seen) as seen:
        CliRunner().invoke(main, argv, catch_exceptions=False)
    topology = seen.value.topology
    assert [group.name for group in topology.groups] == ["g1", "g2", "g3"] and topology.name == "symmetric"
    assert topology.state_dir == (tmp_path / ".raftmq").resolve()


def test_the_running_topology_from_each_kind_of_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state_dir = running_here(tmp_path, monkeypatch, "symmetric-lite", ("--preset", "symmetric-lite"))
    assert [group.name for group in cluster_topology(None, None).groups] == ["g1", "g2", "g3"]
    assert [group.name for group in cluster_topology(None, "default").groups] == ["g1"]  # an option wins
    config = tmp_path / "mine.toml"  # never started: its ports are only named
    config.write_text(group_file_text("mine", tmp_path / "mine", list(range(61690, 61699))), encoding="utf-8")
    state = read_state(state_dir)
    assert state is not None
    write_state(DeploymentState("mine", str(state_dir), state.nodes, selection=("--config", str(config))))
    assert [group.name for group in cluster_topology(None, None).groups] == ["mine"]
    write_state(DeploymentState("default", str(state_dir), state.nodes, selection=()))
    assert cluster_topology(None, None).source is None  # the built-in default


def test_a_state_file_from_before_the_selection_was_recorded(tmp_path: Path) -> None:
    node = this_process()
    assert state_selection(DeploymentState("default", str(tmp_path), (node,))) == ()
    assert state_selection(DeploymentState("chain", str(tmp_path), (node,))) == ("--preset", "chain")
    started = NodeProcess("g1", "n1", "", "", "", 1, 1, ("python", "-m", "raftmq", "node", "--config", "/x/g1.toml",
                                                           "--node", "n1", "--topology", "/x/cluster.toml"), "log")
    assert state_selection(DeploymentState("cluster", str(tmp_path), (started,))) == ("--config", "/x/cluster.toml")


@pytest.mark.parametrize(("selection", "hint"), [
    ((), "raftmq down"),
    (("--preset", "default"), "raftmq down"),
    (("--preset", "chain"), "raftmq down --preset chain"),
])
def test_up_refused_by_a_running_cluster_names_the_command_that_stops_that_one(
        selection: tuple[str, ...], hint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stop_command(selection) == hint
    state_dir = running_here(tmp_path, monkeypatch, "running", selection)
    before = read_state(state_dir)
    result = CliRunner().invoke(main, ["up", "--preset", "symmetric", "--detach"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    assert "already running here" in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith(f"stop it with `{hint}`"), result.stderr
    assert "--preset symmetric`" not in result.stderr  # not the stop command of the cluster it was asked to start
    assert read_state(state_dir) == before


def test_up_prints_the_stop_command_of_what_it_started(tmp_path: Path) -> None:
    from raftmq.ops.launcher import topology_selection
    from raftmq.ops.selection import explicit_topology

    assert stop_command(topology_selection(explicit_topology(None, "symmetric"))) == "raftmq down --preset symmetric"
    assert stop_command(topology_selection(explicit_topology(None, None))) == "raftmq down"

"""Topologies: group files, topology files, the built-in default, and the one-line errors."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster.group_file import load_group_config
from cluster.topology import default_topology, load_topology
from raftmq.errors import ConfigError
from raftmq.ops import launcher
from raftmq.ops.cli import status_command, up_command

pytestmark = pytest.mark.integration

WriteGroup = Callable[..., Path]


def test_group_file_is_a_one_group_topology(write_group: WriteGroup, tmp_path: Path) -> None:
    topology = load_topology(write_group("g7"))
    assert [group.name for group in topology.groups] == ["g7"]
    assert topology.state_dir == (tmp_path / "g7").resolve()
    assert [member.id for _group, member in topology.members()] == ["n1", "n2", "n3"]


def test_topology_file_lists_groups(write_group: WriteGroup, tmp_path: Path) -> None:
    write_group("a")
    write_group("b", size=1)
    path = tmp_path / "topo.toml"
    path.write_text('[topology]\nname = "two"\ndata_dir = "%s"\n\n[[group]]\nfile = "a.toml"\n\n'
                    '[[group]]\nfile = "b.toml"\n' % (tmp_path / "state"))
    topology = load_topology(path)
    assert topology.name == "two" and topology.state_dir == (tmp_path / "state").resolve()
    assert [(group.name, len(group.config.members)) for group in topology.groups] == [("a", 3), ("b", 1)]
    assert topology.groups[0].config_path == (tmp_path / "a.toml").resolve()


def test_default_topology_is_three_members_on_loopback(tmp_path: Path) -> None:
    topology = default_topology(tmp_path / ".raftmq")
    (group,) = topology.groups
    assert [m.client for m in group.config.members] == ["127.0.0.1:61613", "127.0.0.1:61614", "127.0.0.1:61615"]
    assert group.config_path.parent == topology.state_dir == (tmp_path / ".raftmq").resolve()
    assert group.generated_text is not None
    group.config_path.parent.mkdir(parents=True)
    group.config_path.write_text(group.generated_text)
    assert load_group_config(group.config_path) == group.config  # what the nodes will load


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[other]\nx = 1\n", "neither a topology"),
        ("[topology]\nname = \"t\"\n", "needs at least one [[group]]"),
        ("[topology]\nsize = 3\n[[group]]\nfile = \"a.toml\"\n", "unknown key topology.size"),
        ("[[group]]\nfile = \"missing.toml\"\n", "group[0]:"),
        ("[[group]]\npath = \"a.toml\"\n", "unknown key group[0].path"),
        ("[topology\n", "not valid TOML"),
    ],
)
def test_bad_topology_files_name_the_problem(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "topo.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_topology(path)
    assert expected in str(error.value) and str(path) in str(error.value)


def test_groups_may_not_share_addresses_names_or_lack_admin(write_group: WriteGroup, tmp_path: Path) -> None:
    ports = [40001 + i for i in range(3)]
    write_group("a", size=1, ports=ports)
    write_group("b", size=1, ports=[ports[0], 40100, 40101])
    path = tmp_path / "topo.toml"
    path.write_text('[[group]]\nfile = "a.toml"\n[[group]]\nfile = "b.toml"\n')
    with pytest.raises(ConfigError, match=r"b/n1 client 127.0.0.1:40001 is also a/n1 client"):
        load_topology(path)
    path.write_text('[[group]]\nfile = "a.toml"\n[[group]]\nfile = "a.toml"\n')
    with pytest.raises(ConfigError, match="group name 'a' is used twice"):
        load_topology(path)
    with pytest.raises(ConfigError, match="node n1 has no admin address"):
        load_topology(write_group("c", size=1, admin=False))


def test_up_with_a_bad_config_prints_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[group]\nname = \"g\"\ndata_dir = \"d\"\n[[node]]\nid = \"n1\"\nclient = \"127.0.0.1:1\"\n")
    result = CliRunner().invoke(up_command, ["--config", str(path), "--detach"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "node[0].raft is required" in lines[0], result.output
    missing = CliRunner().invoke(up_command, ["--config", str(tmp_path / "nope.toml")])
    assert missing.exit_code == 1 and "nope.toml: file not found" in missing.output


def test_up_refuses_a_port_in_use_before_starting_anything(write_group: WriteGroup, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = write_group("busy", size=1, ports=[port, 1, 2])  # the client address is checked first
        result = CliRunner().invoke(up_command, ["--config", str(path), "--detach"])
    assert result.exit_code == 1
    assert f"busy/n1: client address 127.0.0.1:{port} is not available" in result.output, result.output
    assert not (tmp_path / "busy" / "n1").exists()  # no node was started
    assert launcher.read_state(tmp_path / "busy") is None


def test_status_without_a_cluster_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(status_command, ["--once"])
    assert result.exit_code == 1 and (
        f"no raftmq cluster state at {tmp_path.resolve()}/.raftmq/cluster.json" in result.output)


def test_up_names_a_data_directory_it_cannot_create(write_group: WriteGroup, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = write_group("g", size=1)
    path.write_text(path.read_text().replace(str(tmp_path / "g"), str(blocker / "data")))
    result = CliRunner().invoke(up_command, ["--config", str(path), "--detach"])
    assert result.exit_code == 1
    expected = f"Error: {blocker}/data: cannot create the cluster's data directory (Not a directory)"
    assert result.output.strip().splitlines() == [expected], result.output

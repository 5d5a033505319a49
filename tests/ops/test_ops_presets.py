"""Presets (`raftmq up --preset`), the restart keys of a topology, and the one-line errors of
`raftmq up` (ports, data directories, topologies), through click's CliRunner."""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cluster import topology as topology_module
from cluster.group_file import JournalSettings, load_group_config
from cluster.topology import (
    PRESET_SOURCES,
    PRESETS,
    RestartPolicy,
    default_topology,
    load_topology,
    preset_path,
    preset_topology,
)
from raftmq.cli import main
from raftmq.config import RaftTimings, split_address
from raftmq.errors import ConfigError
from raftmq.ops.launcher import read_state

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WriteGroup = Callable[..., Path]


def up(*args: str) -> Result:
    return CliRunner().invoke(main, ["up", *args], catch_exceptions=False)


def one_line_error(result: Result) -> str:
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in result.output, result.output
    return lines[0]


# -- presets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_each_preset_is_the_documented_file_in_configs(name: str) -> None:
    packaged = preset_path(name)
    documented = REPO / "configs" / PRESET_SOURCES[name]
    assert packaged.read_bytes() == documented.read_bytes(), f"copy {documented} to {packaged} (or back)"


def test_the_presets_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "*.toml" in pyproject["tool"]["setuptools"]["package-data"]["raftmq.presets"]


def test_builtin_default_equals_configs_group_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    builtin = default_topology()
    (group,) = builtin.groups
    documented = load_group_config(REPO / "configs" / "group.toml")
    assert group.config.name == documented.name
    assert group.config.members == documented.members  # ids, client / raft / admin ports
    assert Path(group.config.data_dir) == (tmp_path / documented.data_dir).resolve()
    # Everything else configs/group.toml spells out is the default the generated file relies on.
    assert documented.raft == RaftTimings() and documented.journal == JournalSettings()
    assert group.generated_text is not None
    written = tmp_path / "generated.toml"
    written.write_text(group.generated_text)
    assert documented.server == load_group_config(written).server
    # The preset of that name is the same cluster: same state directory, same group and members.
    preset = preset_topology("default")
    assert preset.state_dir == builtin.state_dir
    assert preset.groups[0].config.members == group.config.members
    assert Path(preset.groups[0].config.data_dir).resolve() == Path(group.config.data_dir)


def test_five_node_and_test_presets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    five = preset_topology("five-node")
    assert [len(g.config.members) for g in five.groups] == [5] and five.state_dir == (tmp_path / ".raftmq").resolve()
    test = preset_topology("test")
    config = test.groups[0].config
    assert test.state_dir == five.state_dir and len(config.members) == 3
    limits, core = config.server.limits, config.server.core
    assert limits.max_body_bytes <= 32 * 1024 and limits.max_frame_bytes <= 64 * 1024
    assert config.journal.segment_bytes <= 64 * 1024 and config.raft.compact_after_bytes <= 64 * 1024
    assert core.dedup_cache_size <= 100 and core.max_delivery_count <= 3
    assert config.server.tick_interval_ms <= 100 and config.raft.commit_timeout_ms <= 2000
    default_ports = {split_address(getattr(m, kind))[1] for _g, m in preset_topology("default").members()
                     for kind in ("client", "raft", "admin")}
    test_ports = {split_address(getattr(m, kind))[1] for _g, m in test.members()
                  for kind in ("client", "raft", "admin")}
    assert not default_ports & test_ports
    low, high = (int(part) for part in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert not any(low <= port <= high for port in test_ports)  # kernel-chosen test ports never collide


def test_preset_options_are_checked() -> None:
    unknown = up("--preset", "huge")
    assert unknown.exit_code == 2 and "'huge' is not one of" in unknown.stderr
    both = up("--preset", "test", "--config", "x.toml")
    assert both.exit_code == 2 and "give --config or --preset, not both" in both.stderr
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        preset_path("huge")


# -- restart keys of a topology file -----------------------------------------------------------


def test_restart_policy_keys(write_group: WriteGroup, tmp_path: Path) -> None:
    write_group("a")
    path = tmp_path / "topo.toml"
    path.write_text('[topology]\nrestart = "on-failure"\nmax_restarts = 2\nrestart_window_s = 30\n'
                    'restart_backoff_ms = 100\n[[group]]\nfile = "a.toml"\n')
    assert load_topology(path).restart == RestartPolicy("on-failure", 2, 30.0, 100)
    path.write_text('[[group]]\nfile = "a.toml"\n')
    assert load_topology(path).restart == RestartPolicy() and RestartPolicy().mode == "never"
    assert RestartPolicy(backoff_ms=500).delay(0) == 0.5 and RestartPolicy(backoff_ms=500).delay(3) == 4.0
    assert RestartPolicy(backoff_ms=500).delay(20) == topology_module.MAX_BACKOFF_SECONDS


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('restart = "always"', "topology.restart must be one of 'never', 'on-failure', got 'always'"),
        ("max_restarts = -1", "topology.max_restarts must be at least 0, got -1"),
        ("max_restarts = 1.5", "topology.max_restarts must be an integer, got 1.5"),
        ("restart_window_s = 0", "topology.restart_window_s must be at least 1, got 0"),
        ('restart_backoff_ms = "fast"', "topology.restart_backoff_ms must be an integer, got 'fast'"),
    ],
)
def test_bad_restart_keys_are_one_line(write_group: WriteGroup, tmp_path: Path, line: str, expected: str) -> None:
    write_group("a")
    path = tmp_path / "topo.toml"
    path.write_text(f'[topology]\n{line}\n[[group]]\nfile = "a.toml"\n')
    assert one_line_error(up("--config", str(path), "--detach")) == f"Error: {path}: {expected}"


# -- ports and data directories -----------------------------------------------------------------


def test_a_taken_port_names_the_node_and_the_address(write_group: WriteGroup, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path = write_group("busy", size=2)
        text = path.read_text()
        raft_of_n2 = text.split('id = "n2"')[1].split('raft = "')[1].split('"')[0]
        path.write_text(text.replace(raft_of_n2, f"127.0.0.1:{port}"))
        error = one_line_error(up("--config", str(path), "--detach"))
    assert error == f"Error: busy/n2: raft address 127.0.0.1:{port} is not available (Address already in use)"
    assert not (tmp_path / "busy" / "n1").exists() and read_state(tmp_path / "busy") is None


def topology_with_data_dir(tmp_path: Path, write_group: WriteGroup, data_dir: Path, member: str = "n1") -> Path:
    """A topology whose state lives in tmp_path/state and whose one group keeps its data in `data_dir`."""
    group = write_group("g", size=1)
    group.write_text(group.read_text().replace(str(tmp_path / "g"), str(data_dir))
                     .replace('id = "n1"', f'id = "{member}"'))
    path = tmp_path / "topo.toml"
    path.write_text(f'[topology]\ndata_dir = "{tmp_path / "state"}"\n[[group]]\nfile = "g.toml"\n')
    return path


def unwritable_directory(tmp_path: Path) -> tuple[Path, str]:
    """An existing directory we cannot write in, and an existing subdirectory of it. Root may
    write anywhere but sysfs, so root gets /sys and /sys/kernel."""
    if os.geteuid() == 0:
        assert Path("/sys/kernel").is_dir(), "these checks need sysfs when run as root"
        return Path("/sys"), "kernel"
    locked = tmp_path / "locked"
    (locked / "sub").mkdir(parents=True)
    locked.chmod(0o555)
    (locked / "sub").chmod(0o555)
    return locked, "sub"


def test_data_directory_that_is_a_file(write_group: WriteGroup, tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    path = topology_with_data_dir(tmp_path, write_group, blocker / "deeper")
    assert one_line_error(up("--config", str(path), "--detach")) == (
        f"Error: g/n1: data directory {blocker}/deeper/n1 is unusable: {blocker} is a file, not a directory")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "n1").write_text("a file where the member's directory goes")
    path = topology_with_data_dir(tmp_path, write_group, tmp_path / "data")
    assert one_line_error(up("--config", str(path), "--detach")) == (
        f"Error: g/n1: data directory {tmp_path}/data/n1 is unusable: it is a file, not a directory")


def test_data_directory_that_cannot_be_written_or_created(write_group: WriteGroup, tmp_path: Path) -> None:
    locked, existing_child = unwritable_directory(tmp_path)
    try:
        # The member directory exists but takes no files.
        path = topology_with_data_dir(tmp_path, write_group, locked, member=existing_child)
        error = one_line_error(up("--config", str(path), "--detach"))
        assert error.startswith(
            f"Error: g/{existing_child}: data directory {locked}/{existing_child} is not writable (")
        # Its parent is missing and cannot be made.
        path = topology_with_data_dir(tmp_path, write_group, locked / "missing" / "parent")
        error = one_line_error(up("--config", str(path), "--detach"))
        assert error.startswith(f"Error: g/n1: data directory {locked}/missing/parent/n1 cannot be created: "
                                f"{locked}, its nearest existing parent, is not writable (")
        assert read_state(tmp_path / "state") is None
    finally:
        if locked.is_relative_to(tmp_path):
            locked.chmod(0o755)
            (locked / existing_child).chmod(0o755)


def test_missing_parents_are_created_like_mkdir_p(write_group: WriteGroup, tmp_path: Path) -> None:
    from raftmq.ops.launcher import check_data_dirs

    path = topology_with_data_dir(tmp_path, write_group, tmp_path / "not" / "yet" / "there")
    topology = load_topology(path)
    check_data_dirs(topology)  # usable: it can be created
    assert not (tmp_path / "not").exists()  # and checking created nothing

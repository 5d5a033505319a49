"""Which cluster a command means.

`raftmq up` records in its state file (`<state dir>/cluster.json`) the options that named its
topology (`raftmq.ops.launcher.topology_selection`). The commands that need a running cluster's
topology (`group drain`, `group add-node` / `remove-node` / `replace-node`) take `--config` /
`--preset` when given; without them they find the cluster running from the default state
directory (`./.raftmq/`, where the built-in default and every preset keep their state), as
`raftmq status` does, and use the topology it was started from: `raftmq group drain g3` works
on a `raftmq up --preset symmetric` without repeating `--preset`. With no state there, the
built-in default. (`down` and `restart` need only the state directory, which is the same.)
A refused `raftmq up` names the command that stops the running cluster (`stop_command`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from cluster.topology import DEFAULT_DATA_DIR, PRESETS, Topology, default_topology, load_topology, preset_topology
from raftmq.errors import ConfigError, DeploymentError
from raftmq.ops.launcher import DeploymentState, read_state, state_path


def explicit_topology(config_path: str | None, preset: str | None = None, restart: str | None = None) -> Topology:
    """The topology `--config` or `--preset` names (the built-in default without either);
    `restart` overrides its restart mode."""
    if config_path and preset:
        raise click.UsageError("give --config or --preset, not both")
    if preset:
        topology = preset_topology(preset)
    else:
        topology = load_topology(config_path) if config_path else default_topology(DEFAULT_DATA_DIR)
    if restart is not None:
        topology = replace(topology, restart=replace(topology.restart, mode=restart))
    return topology


def cluster_topology(config_path: str | None, preset: str | None) -> Topology:
    """The topology of the cluster a command acts on: `--config` / `--preset` when given,
    else the one running from the default state directory, else the built-in default."""
    if config_path or preset:
        return explicit_topology(config_path, preset)
    default = default_topology(DEFAULT_DATA_DIR)
    state = read_state(default.state_dir)
    if state is None:
        return default
    return selection_topology(state_selection(state), Path(state.state_dir))


def state_selection(state: DeploymentState) -> tuple[str, ...]:
    """The options that name the topology `state`'s cluster was started from; for a state
    file from before they were recorded, from its topology's name and its nodes' arguments."""
    if state.selection is not None:
        return state.selection
    if state.topology == "default":
        return ()
    if state.topology in PRESETS:
        return ("--preset", state.topology)
    for option in ("--topology", "--config"):  # a cluster of groups; else its one group's file
        for node in state.nodes:
            if option in node.argv[:-1]:
                return ("--config", node.argv[node.argv.index(option) + 1])
    return ()


def selection_topology(selection: tuple[str, ...], state_dir: Path) -> Topology:
    """The topology `selection` names, its state in `state_dir` (the running cluster's)."""
    try:
        if not selection:
            return default_topology(state_dir)
        option, value = selection
        if option == "--preset":
            return preset_topology(value, state_dir)
        return explicit_topology(value)
    except (ConfigError, ValueError) as exc:
        raise DeploymentError(f"{state_path(state_dir)}: the running cluster was started with "
                              f"`{up_command(selection)}`, which no longer loads: {exc}") from None


def up_command(selection: tuple[str, ...]) -> str:
    return " ".join(("raftmq up", *selection))


def stop_command(selection: tuple[str, ...]) -> str:
    """The command that stops the cluster started with `selection`: `raftmq down` for the
    built-in default, `raftmq down --preset NAME`, `raftmq down --config FILE`."""
    if not selection or selection == ("--preset", "default"):
        return "raftmq down"
    option, value = selection
    return f"raftmq down {option} {shown(Path(value)) if option == '--config' else value}"


def shown(path: Path) -> str:
    """A path as a newcomer types it: relative to the working directory when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)

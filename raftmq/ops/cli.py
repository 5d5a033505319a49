"""`raftmq up`, `raftmq down` and `raftmq status` (registered by raftmq.cli)."""

from __future__ import annotations

import json
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

# Every `raftmq node` process imports this module (raftmq.cli registers these commands), so
# rich, the launcher and the status view are imported only when a command runs.
if TYPE_CHECKING:
    import subprocess

    from raftmq.ops.launcher import ClusterState
    from raftmq.ops.status_view import NodeAddress
    from raftmq.ops.topology import Topology

UP_TIMEOUT_SECONDS = 30.0  # launcher.UP_TIMEOUT_SECONDS, repeated to keep imports lazy
STOP_GRACE_SECONDS = 10.0  # launcher.STOP_GRACE_SECONDS
REFRESH_SECONDS = 1.0
PIPE_WIDTH = 120

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False),
    help="Topology or group file (TOML); default: one group of three nodes under ./.raftmq/.",
)


def _topology(config_path: str | None) -> Topology:
    from raftmq.ops.topology import DEFAULT_DATA_DIR, default_topology, load_topology

    return load_topology(config_path) if config_path else default_topology(DEFAULT_DATA_DIR)


def _down_hint(config_path: str | None) -> str:
    return "raftmq down" + (f" --config {config_path}" if config_path else "")


class _Stop(KeyboardInterrupt):
    """SIGTERM / SIGHUP to an attached `up`: unwind like Ctrl-C so the cluster is stopped."""


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


@click.command("up")
@config_option
@click.option("--detach", is_flag=True, help="Return once every group has a leader; `raftmq down` stops the cluster.")
@click.option("--timeout", type=click.FloatRange(min=1), default=UP_TIMEOUT_SECONDS, show_default=True,
              help="Seconds to wait for every group to elect a leader.")
def up_command(config_path: str | None, detach: bool, timeout: float) -> None:
    """Start every node of a topology as its own process and wait for leaders."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.launcher import (
        check_ports_free, cluster_lock, launch, read_state, remove_state, running_nodes, state_path, stop_nodes, wait_until_up,
    )

    try:
        topology = _topology(config_path)
        with cluster_lock(topology.state_dir):
            previous = read_state(topology.state_dir)
            alive = running_nodes(previous) if previous is not None else []
            if alive:
                pids = ", ".join(f"{node.group}/{node.id} pid {node.pid}" for node in alive)
                raise click.ClickException(
                    f"a raftmq cluster is already running here ({pids}; state {state_path(topology.state_dir)}); "
                    f"stop it with `{_down_hint(config_path)}`"
                )
            remove_state(topology.state_dir)  # stale: every node of it has exited
            check_ports_free(topology)
            state, children = launch(topology)
            try:
                summary = wait_until_up(state, children, timeout)
            except BaseException:
                stop_nodes(state, children)
                remove_state(topology.state_dir)
                raise
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    _print_endpoints(topology, state, summary, config_path, detach)
    if detach:
        return
    _attached(topology, state, children)


def _print_endpoints(topology: Topology, state: ClusterState, summary: dict[str, Any], config_path: str | None, detach: bool) -> None:
    from raftmq.ops.launcher import state_path

    groups = [[node for node in state.nodes if node.group == group.name] for group in topology.groups]
    urls = [",".join(f"stomp://{node.client}" for node in nodes) for nodes in groups]
    failover = f"failover:({urls[0]})" if len(urls) == 1 else "failover:(" + ",".join(f"({url})" for url in urls) + ")"
    click.echo(f"raftmq cluster {topology.name!r} is up: {len(groups)} group(s), {len(state.nodes)} node(s)")
    for group in summary["groups"]:
        click.echo(f"  group {group['name']}: master {group['leader']} (term {group['term']})")
    click.echo(f"clients: {failover}")
    click.echo(f"hosts:   {','.join(node.client for node in state.nodes)}")
    click.echo(f"state:   {state_path(topology.state_dir)} (node logs: <data dir>/<node>/node.log)")
    click.echo(f"stop:    {_down_hint(config_path)}" if detach else "stop:    Ctrl-C")


def _attached(topology: Topology, state: ClusterState, children: dict[int, subprocess.Popen[bytes]]) -> None:
    """The live view until Ctrl-C (or SIGTERM), then a graceful stop of every node. Ends by
    itself when every node is gone (e.g. `raftmq down` from another terminal)."""
    from rich.console import Console
    from rich.live import Live

    from raftmq.ops.launcher import remove_state, stop_nodes
    from raftmq.ops.status_view import collect_status, render_status

    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    addresses = [node.address() for node in state.nodes]
    console = Console()
    try:
        with Live(render_status(collect_status(addresses)), console=console, auto_refresh=False) as live:
            while any(child.poll() is None for child in children.values()):
                time.sleep(REFRESH_SECONDS)
                live.update(render_status(collect_status(addresses)), refresh=True)
        click.echo("every node has exited")
    except KeyboardInterrupt:
        click.echo("stopping the cluster (leaders hand over, then each node exits)...")
    finally:
        killed = stop_nodes(state, children)
        remove_state(topology.state_dir)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo(f"stopped {len(state.nodes)} node(s)" + (f"; {len(killed)} needed SIGKILL" if killed else ""))


@click.command("down")
@config_option
@click.option("--timeout", type=click.FloatRange(min=0), default=STOP_GRACE_SECONDS, show_default=True,
              help="Seconds each node gets to stop after SIGTERM before SIGKILL.")
def down_command(config_path: str | None, timeout: float) -> None:
    """Stop a cluster started by `raftmq up` (found through its state file)."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.launcher import cluster_lock, read_state, remove_state, running_nodes, state_path, stop_nodes

    try:
        topology = _topology(config_path)
        with cluster_lock(topology.state_dir):
            state = read_state(topology.state_dir)
            if state is None:
                click.echo(f"no raftmq cluster state at {state_path(topology.state_dir)}: nothing to stop")
                return
            alive = running_nodes(state)
            killed = stop_nodes(state, grace=timeout)
            remove_state(topology.state_dir)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"stopped {len(alive)} node(s)" + (f"; {len(killed)} needed SIGKILL" if killed else ""))


def _status_nodes(config_path: str | None) -> list[NodeAddress]:
    """From the state file when `up` started the cluster (it knows the pids), else from the
    topology file (nodes started by hand with `raftmq node`)."""
    from raftmq.ops.launcher import read_state, state_path
    from raftmq.ops.status_view import NodeAddress

    topology = _topology(config_path)
    state = read_state(topology.state_dir)
    if state is not None:
        return [node.address() for node in state.nodes]
    if config_path is None:
        raise click.ClickException(
            f"no raftmq cluster state at {state_path(topology.state_dir)}; start one with `raftmq up`, or pass --config"
        )
    return [NodeAddress(group.name, member.id, member.client, member.admin or "") for group, member in topology.members()]


@click.command("status")
@config_option
@click.option("--once", is_flag=True, help="Print one view and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable status (JSON) and exit.")
def status_command(config_path: str | None, once: bool, as_json: bool) -> None:
    """Groups, nodes (master/slave, term, commit/applied index, lag) and destinations."""
    from rich.console import Console
    from rich.live import Live

    from raftmq.errors import RaftmqError
    from raftmq.ops.status_view import collect_status, render_status

    try:
        nodes = _status_nodes(config_path)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps(collect_status(nodes), indent=2))
        return
    console = Console()
    if once or not console.is_terminal:
        if not console.is_terminal:
            console = Console(width=PIPE_WIDTH)  # a pipe has no width; rich would assume 80
        console.print(render_status(collect_status(nodes)))
        return
    try:
        with Live(render_status(collect_status(nodes)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(REFRESH_SECONDS)
                live.update(render_status(collect_status(nodes)), refresh=True)
    except KeyboardInterrupt:
        pass

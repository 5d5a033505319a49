"""`raftmq up`, `raftmq down`, `raftmq restart` and `raftmq status` (listed by raftmq.cli)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cluster.topology import PRESETS, RESTART_MODES
from raftmq.ops.launcher import STOP_GRACE_SECONDS, UP_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from cluster.topology import Topology
    from raftmq.ops.launcher import DeploymentState
    from raftmq.ops.status_view import NodeAddress

REFRESH_SECONDS = 1.0

config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False),
    help="Topology or group file (TOML); default: one group of three nodes under ./.raftmq/.",
)
# The commands that act on a running cluster find it without options (raftmq.ops.selection).
running_config_option = click.option(
    "--config", "config_path", type=click.Path(dir_okay=False),
    help="Topology or group file of the cluster; default: the one `raftmq up` runs from ./.raftmq/ "
         "(whichever preset or file started it).",
)
preset_option = click.option(
    "--preset", type=click.Choice(tuple(PRESETS)),
    help="A topology shipped with raftmq (configs/ documents each): default (the same as no option), "
         "five-node, or test (tiny limits, ports 61713-61715). State under ./.raftmq/, like the default's.",
)


def _topology(config_path: str | None, preset: str | None = None, restart: str | None = None) -> Topology:
    from raftmq.ops.selection import explicit_topology

    return explicit_topology(config_path, preset, restart)


def _running(config_path: str | None, preset: str | None) -> Topology:
    """The cluster a command acts on: `--config` / `--preset`, else the one running from
    ./.raftmq/ (whatever preset or file started it), as `raftmq status` finds it."""
    from raftmq.ops.selection import cluster_topology

    return cluster_topology(config_path, preset)


def _selection(config_path: str | None, preset: str | None) -> list[str]:
    """The options that name this topology, to repeat them to the supervisor."""
    import os

    if preset:
        return ["--preset", preset]
    return ["--config", os.path.abspath(config_path)] if config_path else []


@click.command("up")
@config_option
@preset_option
@click.option("--detach", is_flag=True,
              help="Return once every group has a leader, leaving a supervisor process behind (log: <state dir>/"
                   "supervisor.log); `raftmq down` stops the cluster.")
@click.option("--timeout", type=click.FloatRange(min=1), default=UP_TIMEOUT_SECONDS, show_default=True,
              help="Seconds to wait for every group to elect a leader.")
@click.option("--restart", type=click.Choice(RESTART_MODES),
              help="Restart a node that exits with an error (on-failure) or not (never); overrides the topology's "
                   "[topology] restart (default: never).")
@click.option("--supervise", is_flag=True, hidden=True)  # the supervisor process `--detach` leaves behind
def up_command(config_path: str | None, preset: str | None, detach: bool, timeout: float, restart: str | None,
               supervise: bool) -> None:
    """Start every node of a topology as its own process and wait for leaders.

    A node that exits is reported (status or signal, and the last line of its log) and, with
    restart = on-failure, restarted after a back-off, at most max_restarts times per
    restart_window_s. `raftmq status` shows each node's restarts and last exit."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.launcher import (
        check_data_dirs,
        check_ports_free,
        cluster_lock,
        launch,
        remove_state,
        stop_nodes,
        topology_selection,
        wait_until_up,
    )
    from raftmq.ops.selection import stop_command
    from raftmq.ops.supervisor import launcher_signals
    from raftmq.ops.up import run_attached, start_detached, supervise_detached

    try:
        topology = _topology(config_path, preset, restart)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    if supervise:
        raise SystemExit(supervise_detached(topology, timeout))
    hint = stop_command(topology_selection(topology))
    with launcher_signals():  # from here on, Ctrl-C / SIGTERM stop what was started
        try:
            with cluster_lock(topology.state_dir):
                _refuse_running(topology)
                remove_state(topology.state_dir)  # stale: every node of it has exited
                check_ports_free(topology)
                check_data_dirs(topology)
                if detach:
                    forwarded = _selection(config_path, preset) + (["--restart", restart] if restart else [])
                    state, summary = start_detached(topology, forwarded, timeout)
                else:
                    state, children = launch(topology)
                    try:
                        summary = wait_until_up(state, children, timeout)
                    except BaseException:
                        stop_nodes(state, children)
                        remove_state(topology.state_dir)
                        raise
        except RaftmqError as exc:
            raise click.ClickException(str(exc)) from None
        _print_endpoints(topology, state, summary, hint, detach)
        if not detach:
            run_attached(topology, state, children)


def _refuse_running(topology: Topology) -> None:
    """A cluster already runs from this state directory: name the command that stops it
    (the running one's, whichever topology it was started from)."""
    from raftmq.ops.launcher import launcher_alive, read_state, running_nodes, state_path
    from raftmq.ops.selection import shown, state_selection, stop_command, up_command

    previous = read_state(topology.state_dir)
    if previous is None:
        return
    alive = running_nodes(previous)
    if alive:
        pids = ", ".join(f"{node.group}/{node.id} pid {node.pid}" for node in alive)
    elif launcher_alive(previous):
        pids = f"its supervisor, pid {previous.launcher_pid}, is restarting its nodes"
    else:
        return
    selection = state_selection(previous)
    raise click.ClickException(
        f"a raftmq cluster is already running here (`{up_command(selection)}`: {pids}; state "
        f"{shown(state_path(topology.state_dir))}); stop it with `{stop_command(selection)}`"
    )


def _print_endpoints(topology: Topology, state: DeploymentState, summary: dict[str, Any], hint: str,
                     detach: bool) -> None:
    from cluster.topology import failover_urls
    from raftmq.config import console_url
    from raftmq.ops.launcher import state_path

    groups = [[node for node in state.nodes if node.group == group.name] for group in topology.groups]
    per_group, whole = failover_urls(topology)
    click.echo(f"raftmq cluster {topology.name!r} is up: {len(groups)} group(s), {len(state.nodes)} node(s)")
    for group in summary["groups"]:
        line = f"  group {group['name']}: master {group['leader']} (term {group['term']})"
        click.echo(line + (f"  {per_group[group['name']]}" if len(groups) > 1 else ""))
    if topology.cluster_connections:
        links = sorted({f"{a}-{b}" for connection in topology.cluster_connections for a, b in connection.links})
        click.echo(f"links:   {', '.join(links)}")
    click.echo(f"clients: {per_group[topology.groups[0].name] if len(groups) == 1 else whole}")
    click.echo(f"hosts:   {','.join(node.client for node in state.nodes)}")
    if any(node.mqtt for node in state.nodes):  # MQTT clients name the member they connect to
        click.echo(f"mqtt:    {','.join(node.mqtt or '-' for node in state.nodes)}")
    consoles = [console_url(node.admin) for node in state.nodes]
    if any(consoles):  # every member serves the web console; a follower's passes changes to its leader
        click.echo(f"console: {','.join(url or '-' for url in consoles)}")
    click.echo(f"state:   {_shown(state_path(topology.state_dir))}")
    click.echo(f"logs:    {', '.join(_log_paths(nodes) for nodes in groups)}")
    click.echo(f"restart: {topology.restart.mode}" + (f" (supervisor pid {state.launcher_pid})" if detach else ""))
    click.echo(f"stop:    {hint}" if detach else "stop:    Ctrl-C")


def _shown(path: Path) -> str:
    from raftmq.ops.selection import shown

    return shown(path)


def _log_paths(nodes: list[Any]) -> str:
    """One group's node logs, e.g. `.raftmq/g1/{n1,n2,n3}/node.log` (each path when they differ)."""
    paths = [Path(_shown(Path(node.log))) for node in nodes]
    if len(paths) > 1 and len({(p.parent.parent, p.name) for p in paths}) == 1:
        return f"{paths[0].parent.parent}/{{{','.join(p.parent.name for p in paths)}}}/{paths[0].name}"
    return ", ".join(str(p) for p in paths)


@click.command("down")
@running_config_option
@preset_option
@click.option("--timeout", type=click.FloatRange(min=0), default=STOP_GRACE_SECONDS, show_default=True,
              help="Seconds each node gets to stop after SIGTERM before SIGKILL.")
def down_command(config_path: str | None, preset: str | None, timeout: float) -> None:
    """Stop a cluster started by `raftmq up` (found through its state file): its supervisor
    stops every node it launched, waits for each and exits; `down` waits for it, then stops by
    pid whatever is still running (nodes of a supervisor that was killed)."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.launcher import (
        cluster_lock,
        read_state,
        remove_state,
        running_nodes,
        state_path,
        stop_launcher,
        stop_running_nodes,
        stopped_line,
    )

    try:
        topology = _topology(config_path, preset)  # its state directory is all it needs
        with cluster_lock(topology.state_dir):
            state = read_state(topology.state_dir)
            if state is None:
                click.echo(f"no raftmq cluster state at {state_path(topology.state_dir)}: nothing to stop")
                return
            alive = running_nodes(state)
            # The supervisor stops its nodes together within their grace, plus a margin to exit.
            stop_launcher(state, timeout=STOP_GRACE_SECONDS + 5.0)
            state = read_state(topology.state_dir) or state  # it may have restarted a node just before
            stopped, killed = stop_running_nodes(state, grace=timeout)
            stopped = alive + [node for node in stopped if node not in alive]
            remove_state(topology.state_dir)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(stopped_line(len(stopped), len(killed)))


@click.command("restart")
@running_config_option
@preset_option
@click.option("--rolling", is_flag=True, help="One node at a time, followers first, while the cluster serves.")
@click.option("--node-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds a node gets to stop, start and catch up before the restart stops there.")
def restart_command(config_path: str | None, preset: str | None, rolling: bool, node_timeout: float) -> None:
    """Restart every node of a cluster started by `raftmq up`. With --rolling (the only kind
    so far) its supervisor restarts one node at a time: group by group, the followers first
    and the leader last (it hands leadership over as it stops), each waited for until it
    serves again and has caught up with its leader; clients see no more than the failover of
    their group's leader. Exit status 1 when a node does not come back in time (the rest are
    left as they are)."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.rolling import RollingRestart

    if not rolling:
        raise click.UsageError("only --rolling is supported; for a full stop and start use `raftmq down` "
                               "then `raftmq up`")
    try:
        topology = _topology(config_path, preset)  # its state directory is all it needs
        result = RollingRestart(topology.state_dir, lambda line: click.echo(line, err=False),
                                node_timeout=node_timeout).run()
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    slowest = max(result.steps, key=lambda step: step.seconds)
    click.echo(f"restarted {len(result.steps)} node(s) in {result.seconds:.1f} s "
               f"(slowest: {slowest.group}/{slowest.node}, {slowest.seconds:.1f} s)")


@click.group("group")
def group_command() -> None:
    """Operate on one group of a cluster: scale-down (`drain`) and membership changes
    (`add-node`, `remove-node`, `replace-node`)."""


@group_command.command("drain")
@click.argument("group")
@running_config_option
@preset_option
@click.option("--to", "to", default="",
              help="Comma-separated groups to move everything to (default: every group it reaches).")
@click.option("--cancel", is_flag=True, help="Stop draining (the group serves clients again).")
@click.option("--no-wait", is_flag=True, help="Start the drain and return.")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True,
              help="Seconds to wait for the group to be empty.")
def drain_command(group: str, config_path: str | None, preset: str | None, to: str, cancel: bool, no_wait: bool,
                  timeout: float) -> None:
    """Move every message of GROUP to the other groups and keep it empty, while clients keep
    working: the group stops being advertised, turns clients away (failover clients go to
    another group), and moves its queues, dead letters and durable subscriptions as committed
    moves with duplicate-detection ids; its bridges forward what they hold. Returns once the
    group's leader holds nothing: then stop the group. Exit status 1 if it does not empty in
    --timeout seconds (it keeps draining)."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.drain import drain_group

    targets = tuple(name.strip() for name in to.split(",") if name.strip())
    try:
        topology = _running(config_path, preset)
        result = drain_group(topology, group, targets, cancel=cancel, wait=not no_wait, timeout=timeout,
                             report=click.echo)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    if not cancel and not no_wait:
        click.echo(f"{group} is empty: {result.moved} message(s) moved in {result.seconds:.1f} s; it can be stopped")


def _member_options(fn: Any) -> Any:
    for option in reversed((
        click.option("--client", required=True, metavar="HOST:PORT", help="The new member's STOMP address."),
        click.option("--raft", required=True, metavar="HOST:PORT",
                     help="The new member's Raft address (its identity in the group)."),
        click.option("--admin", required=True, metavar="HOST:PORT", help="The new member's admin HTTP address."),
    )):
        fn = option(fn)
    return fn


_timeout_option = click.option("--timeout", type=click.FloatRange(min=1), default=300.0, show_default=True,
                               help="Seconds each step may take (a new member's catch-up included).")


def _change(config_path: str | None, preset: str | None, group: str, timeout: float, step: Any) -> Any:
    """Run `step(MembershipChanger)`; a RaftmqError becomes one line and exit status 1."""
    from raftmq.errors import RaftmqError
    from raftmq.ops.member_changes import MembershipChanger

    try:
        return step(MembershipChanger(_running(config_path, preset), group, click.echo, timeout=timeout))
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None


def _new_member(node_id: str, client: str, raft: str, admin: str) -> Any:
    from cluster.group_file import NODE_ID_PATTERN, GroupMember
    from raftmq.config import split_address

    if not NODE_ID_PATTERN.match(node_id):
        raise click.BadParameter(f"{node_id!r}: use letters, digits, '_', '.', '-' (it names a directory)",
                                 param_hint="NODE")
    for name, value in (("--client", client), ("--raft", raft), ("--admin", admin)):
        try:
            split_address(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=name) from None
    return GroupMember(node_id, client, raft, admin)


@group_command.command("add-node")
@click.argument("group")
@click.argument("node")
@_member_options
@running_config_option
@preset_option
@_timeout_option
def add_node_command(group: str, node: str, client: str, raft: str, admin: str, config_path: str | None,
                     preset: str | None, timeout: float) -> None:
    """Add member NODE to running GROUP: its addresses go into the group's members file, the
    supervisor of `raftmq up` starts it (else start it as told), the group commits the change,
    and the command returns once NODE has caught up with the leader."""
    member = _new_member(node, client, raft, admin)
    result = _change(config_path, preset, group, timeout, lambda changer: changer.add(member))
    click.echo(f"{group}: {node} added and caught up in {result.seconds:.1f} s; members: {', '.join(result.members)}")


@group_command.command("remove-node")
@click.argument("group")
@click.argument("node")
@running_config_option
@preset_option
@_timeout_option
def remove_node_command(group: str, node: str, config_path: str | None, preset: str | None, timeout: float) -> None:
    """Remove member NODE from running GROUP (a leader hands leadership over first), stop it
    and set its data directory aside."""
    result = _change(config_path, preset, group, timeout, lambda changer: changer.remove(node))
    click.echo(f"{group}: {node} removed in {result.seconds:.1f} s; members: {', '.join(result.members)}")


@group_command.command("replace-node")
@click.argument("group")
@click.argument("old")
@click.argument("new")
@_member_options
@running_config_option
@preset_option
@_timeout_option
def replace_node_command(group: str, old: str, new: str, client: str, raft: str, admin: str, config_path: str | None,
                         preset: str | None, timeout: float) -> None:
    """Replace member OLD of running GROUP by NEW: NEW is added and caught up, then OLD removed."""
    member = _new_member(new, client, raft, admin)
    result = _change(config_path, preset, group, timeout, lambda changer: changer.replace_member(old, member))
    click.echo(f"{group}: {old} replaced by {new} in {result.seconds:.1f} s; members: {', '.join(result.members)}")


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
    return [NodeAddress(group.name, member.id, member.client, group.config.admin_endpoint(member) or "",
                        mqtt=member.mqtt) for group, member in topology.members()]


@click.command("status")
@config_option
@click.option("--once", is_flag=True, help="Print one view and exit (see the exit status below).")
@click.option("--json", "as_json", is_flag=True,
              help="Print machine-readable status (JSON) and exit (same exit status).")
def status_command(config_path: str | None, once: bool, as_json: bool) -> None:
    """Groups, nodes (master/slave, health, term, commit/applied index, lag, connections)
    and destinations (depth, consumers, in-flight, enqueue/dequeue msg/s, totals, dead
    letters), read from every node's admin /status. Live until Ctrl-C on a terminal.

    A group that `raftmq group drain` empties reads DRAINING (then DRAINED) in its title and
    health column (--json: the group's `state` and `drain`): it turns every client away.
    Links to a group found by discovery show its presence (down: it disappeared).

    \b
    Exit status with --once or --json (or when the output is not a terminal):
      0  every node answered and every group has exactly one leader (master)
      1  a node did not answer, or a group has no leader (or, during a hand-over, two)
    """
    from rich.console import Console
    from rich.live import Live

    from raftmq.errors import RaftmqError
    from raftmq.ops.status_view import collect_status, render_status
    from raftmq.ops.tables import print_tables

    try:
        nodes = _status_nodes(config_path)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        summary = collect_status(nodes)
        click.echo(json.dumps(summary, indent=2))
        raise SystemExit(0 if summary["ok"] else 1)
    console = Console()
    if once or not console.is_terminal:
        summary = collect_status(nodes)
        print_tables(render_status(summary), console=console)  # a pipe: as wide as the widest table
        raise SystemExit(0 if summary["ok"] else 1)
    try:
        with Live(render_status(collect_status(nodes)), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(REFRESH_SECONDS)
                live.update(render_status(collect_status(nodes)), refresh=True)
    except KeyboardInterrupt:
        pass

"""The `raftmq` command: a table of its subcommands, each imported on first use.

Every node process starts as `python -m raftmq node`, so this module imports no command: a node
loads `raftmq.node_cli` and what it needs, never the operator tools, the chaos harness, the
audit or their libraries (plotly, PySpark). `raftmq --help` lists the commands from the table
below without importing any of them (tests/test_cli_imports.py keeps the table's help lines
equal to the commands' own).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from raftmq import __version__, compiled


@dataclass(frozen=True)
class LazyCommand:
    target: str  # "module:attribute", the click command
    help: str  # its one line in `raftmq --help`: the first sentence of its docstring
    extra: str | None = None  # the pyproject extra it needs (EXTRAS), if any


# What each extra installs that its commands import; missing, the command says which extra to install.
EXTRAS = {
    "chaos": ("plotly", "stomp", "paho"),
    "spark": ("pyspark", "pyarrow", "pandas", "plotly"),
}

COMMANDS = {
    "audit": LazyCommand(
        "spark_audit.cli:audit_command",
        "Prove from what every node stored that nothing acknowledged was lost, nothing was stored twice, "
        "no replicas diverged and no two leaders shared a term.",
        extra="spark",
    ),
    "bench": LazyCommand(
        "raftmq.bench.cli:bench_command",
        "Benchmark a STOMP broker (raftmq, ActiveMQ, RabbitMQ, ...).",
    ),
    "chaos": LazyCommand(
        "chaos.cli:chaos_command",
        "Jepsen-style fault-injection runs against a real cluster (docs/chaos.md).",
        extra="chaos",
    ),
    "deploy": LazyCommand(
        "raftmq.ops.deploy_cli:deploy_command",
        "Files for running a cluster's nodes on hosts of their own (docs/deployment.md).",
    ),
    "down": LazyCommand(
        "raftmq.ops.cli:down_command",
        "Stop a cluster started by `raftmq up` (found through its state file): its supervisor stops every node it "
        "launched, waits for each and exits; `down` waits for it, then stops by pid whatever is still running "
        "(nodes of a supervisor that was killed).",
    ),
    "group": LazyCommand(
        "raftmq.ops.cli:group_command",
        "Operate on one group of a cluster: scale-down (`drain`) and membership changes "
        "(`add-node`, `remove-node`, `replace-node`).",
    ),
    "hand-over": LazyCommand(
        "raftmq.node_cli:hand_over_command",
        "Ask this host's member to hand its Raft leadership to another member (before a stop).",
    ),
    "manage": LazyCommand(
        "raftmq.ops.manage_cli:manage_command",
        "Destinations, connections, consumers and dead letters, through the admin API.",
    ),
    "node": LazyCommand(
        "raftmq.node_cli:node_command",
        "Run one broker node (or one member of a group) in the foreground (Ctrl-C stops it).",
    ),
    "passwd": LazyCommand(
        "raftmq.security_cli:passwd_command",
        "Hash a password for the config's [[user]] password_hash (scrypt, random salt).",
    ),
    "queue": LazyCommand("raftmq.ops.messaging_cli:queue_command", "Inspect and manage queues (stat, browse, purge)."),
    "receive": LazyCommand(
        "raftmq.ops.messaging_cli:receive_command",
        "Receive messages from DESTINATION and print their bodies, one per line.",
    ),
    "restart": LazyCommand("raftmq.ops.cli:restart_command", "Restart every node of a cluster started by `raftmq up`."),
    "send": LazyCommand(
        "raftmq.ops.messaging_cli:send_command", "Send a message to DESTINATION (/queue/NAME or /topic/NAME)."
    ),
    "status": LazyCommand(
        "raftmq.ops.cli:status_command",
        "Groups, nodes (master/slave, health, term, commit/applied index, lag, connections) and destinations "
        "(depth, consumers, in-flight, enqueue/dequeue msg/s, totals, dead letters), read from every node's "
        "admin /status.",
    ),
    "up": LazyCommand(
        "raftmq.ops.cli:up_command",
        "Start every node of a topology as its own process and wait for leaders.",
    ),
}


def load_command(name: str, entry: LazyCommand) -> click.Command:
    """Import the command `entry` names; a missing extra is a one-line error naming it, not a traceback."""
    module_name, _, attribute = entry.target.partition(":")
    needed = EXTRAS[entry.extra] if entry.extra is not None else ()
    try:
        for library in needed:  # first: some commands import their libraries only once they run
            importlib.import_module(library)
        command = getattr(importlib.import_module(module_name), attribute)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in needed:
            raise
        raise click.ClickException(
            f"raftmq {name} needs the {entry.extra} extra: pip install -e '.[{entry.extra}]'"
        ) from None
    assert isinstance(command, click.Command), entry.target
    return command


class LazyGroup(click.Group):
    """A click group whose commands are imported when one is run (or its help shown), by name."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        command = load_command(cmd_name, self.lazy[cmd_name])
        self.add_command(command, cmd_name)
        return command

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand:  # suggest from every name, not only the loaded ones
            raise click.exceptions.NoSuchCommand(args[0], possibilities=self.list_commands(ctx), ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Group.format_commands, with each unloaded command's line taken from the table."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = self.commands.get(name) or click.Command(name, help=self.lazy[name].help)
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="raftmq", message=f"%(prog)s %(version)s (hot modules: {compiled.mode()})")
def main() -> None:
    """raftmq: a STOMP 1.2 message broker in which every logical broker is a Raft group."""

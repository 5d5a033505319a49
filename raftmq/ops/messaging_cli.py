"""`raftmq send`, `raftmq receive` and `raftmq queue stat|browse|purge` (listed by raftmq.cli).

They connect to `--url`, else to the running local cluster, else to stomp://127.0.0.1:61613
(see raftmq.ops.endpoints). Every failure is one line on stderr and exit status 1; `receive`
that got fewer messages than `--count` before its timeout exits with status 1 too.

Consumers take messages with STOMP `client-individual` acks and a small prefetch, so they are
never handed more than they were asked for: `--ack` only chooses when the ACK goes out (on
arrival, or once the message is written to stdout). The ACK of the last message still lets
the broker hand this subscription one more message, which goes back to its queue marked
redelivered when the command disconnects: STOMP gives a consumer no way to stop short of that.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from raftmq.core.commands import DEFAULT_BROWSE_LIMIT, MAX_BROWSE_LIMIT

if TYPE_CHECKING:
    from raftmq.ops.endpoints import Endpoints

T = TypeVar("T")

CONNECT_TIMEOUT_SECONDS = 10.0
SEND_TIMEOUT_SECONDS = 60.0
RECEIVE_TIMEOUT_SECONDS = 5.0
PURGE_TIMEOUT_SECONDS = 60.0
PURGE_IDLE_SECONDS = 1.0
STAT_TIMEOUT_SECONDS = 2.0


def _set_connection_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    from raftmq.ops.messaging import CONNECTION_OPTIONS

    CONNECTION_OPTIONS.set({**CONNECTION_OPTIONS.get({}), str(param.name): value})


def _connection_options(function: Callable[..., T]) -> Callable[..., T]:
    """--login, --passcode and --tls-ca; not passed to the command: connect() applies them."""
    for name, flag, envvar, help_text in (
        ("ca_file", "--tls-ca", "RAFTMQ_TLS_CA",
         "Connect with TLS, checking the broker's certificate against this CA (PEM) file."),
        ("passcode", "--passcode", "RAFTMQ_PASSCODE",
         "Passcode for --login (prefer the environment variable: a command line is visible to other users)."),
        ("login", "--login", "RAFTMQ_LOGIN", "User name for a broker with [[user]] entries."),
    ):
        function = click.option(
            flag, name, envvar=envvar, show_envvar=True, expose_value=False, callback=_set_connection_option,
            type=click.Path(exists=True, dir_okay=False) if name == "ca_file" else str, help=help_text,
        )(function)
    return function


def _common_options(function: Callable[..., T]) -> Callable[..., T]:
    function = _connection_options(function)
    function = click.option(
        "--connect-timeout", type=click.FloatRange(min=0.1), default=CONNECT_TIMEOUT_SECONDS, show_default=True,
        help="Seconds to find a leader and connect.",
    )(function)
    function = click.option(
        "--config", "config_path", type=click.Path(dir_okay=False),
        help="Topology or group file whose cluster to use (default: the one `raftmq up` runs under ./.raftmq/).",
    )(function)
    function = click.option(
        "--url", metavar="URL",
        help="stomp://HOST:PORT, a host list or a failover:(...) URL; default: the running local cluster, "
             "else stomp://127.0.0.1:61613.",
    )(function)
    return function


def _endpoints(url: str | None, config_path: str | None, admin: tuple[str, ...] = ()) -> Endpoints:
    from raftmq.errors import RaftmqError
    from raftmq.ops.endpoints import resolve

    try:
        return resolve(url, config_path, admin)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None


def _run(endpoints: Endpoints, operation: Callable[[], Any]) -> Any:
    """Run `operation` (an `asyncio.run` of the command's coroutine); our errors become one line."""
    from raftmq.errors import BrokerRefused, ClientError, FailoverExhausted, RaftmqError

    try:
        return operation()
    except FailoverExhausted as exc:
        # Not told where (no --url): most likely the local cluster is not running.
        hint = "; is a cluster running? (`raftmq up`)" if endpoints.source != "--url" else ""
        raise click.ClickException(f"cannot connect to {endpoints.url} ({endpoints.source}): {exc}{hint}") from None
    except BrokerRefused as exc:
        detail = exc.body.decode("utf-8", "replace").strip().splitlines()
        extra = f" ({detail[0]})" if detail and detail[0] != str(exc) else ""  # a bare ERROR repeats its message
        raise click.ClickException(f"the broker refused: {exc}{extra}") from None
    except ClientError as exc:
        raise click.ClickException(f"{endpoints.url}: {exc}") from None
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    except TimeoutError as exc:
        raise click.ClickException(str(exc) or "timed out") from None


# -- send ------------------------------------------------------------------------------------


def _parse_headers(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[str, str]]:
    headers = []
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise click.BadParameter(f"expected NAME:VALUE, got {value!r}", param_hint="-H/--header")
        headers.append((name.strip(), content))
    return headers


def _read_body(body: str | None, file: str | None) -> bytes:
    if body is not None and file is not None:
        raise click.UsageError("give the body as an argument or with --file, not both")
    if body is not None:
        return body.encode("utf-8")
    stdin = sys.stdin.buffer
    if file is not None and file != "-":
        try:
            with open(file, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise click.ClickException(f"{file}: cannot read the body ({exc.strerror or exc})") from None
    if file is None and stdin.isatty():
        raise click.UsageError("no body: give BODY, --file FILE, or pipe it on stdin")
    return stdin.read()


@click.command("send")
@click.argument("destination")
@click.argument("body", required=False)
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read the body from FILE ('-': stdin).")
@click.option("--header", "-H", "headers", multiple=True, metavar="NAME:VALUE", callback=_parse_headers,
              help="A header to send (repeatable), e.g. -H persistent:true -H priority:9.")
@click.option("--count", "-n", type=click.IntRange(min=1), default=1, show_default=True,
              help="Send the message this many times.")
@click.option("--receipt/--no-receipt", default=True, show_default=True,
              help="Wait for the broker's RECEIPT of every message (it is then stored).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=SEND_TIMEOUT_SECONDS, show_default=True,
              help="Seconds for every message to be sent (and confirmed).")
@_common_options
def send_command(destination: str, body: str | None, file: str | None, headers: list[tuple[str, str]], count: int,
                 receipt: bool, timeout: float, url: str | None, config_path: str | None,
                 connect_timeout: float) -> None:
    """Send a message to DESTINATION (/queue/NAME or /topic/NAME).

    The body is BODY, or the contents of --file, or what is piped on stdin."""
    import asyncio

    from raftmq.ops.messaging import send_messages

    payload = _read_body(body, file)
    endpoints = _endpoints(url, config_path)
    sent = _run(endpoints, lambda: asyncio.run(
        send_messages(endpoints.url, destination, payload, headers, count, receipt, timeout, connect_timeout)
    ))
    how = "each confirmed by a RECEIPT" if receipt else "written without waiting for receipts"
    click.echo(f"sent {sent} message(s) to {destination} ({how})")


# -- receive -----------------------------------------------------------------------------------


@click.command("receive")
@click.argument("destination")
@click.option("--count", "-n", type=click.IntRange(min=0), default=1, show_default=True,
              help="Messages to receive; 0: every message until none comes within --timeout.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=RECEIVE_TIMEOUT_SECONDS,
              show_default=True, help="Seconds to wait for each message.")
@click.option("--ack", type=click.Choice(["auto", "client-individual"]), default="client-individual", show_default=True,
              help="client-individual: acknowledge a message once it is written out (a failure leaves it queued); "
                   "auto: acknowledge it on arrival.")
@click.option("--headers", "show_headers", is_flag=True, help="Print each message's headers before its body.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per message (headers, body).")
@_common_options
def receive_command(destination: str, count: int, timeout: float, ack: str, show_headers: bool, as_json: bool,
                    url: str | None, config_path: str | None, connect_timeout: float) -> None:
    """Receive messages from DESTINATION and print their bodies, one per line."""
    import asyncio

    from raftmq.ops.messaging import format_message, receive_messages

    endpoints = _endpoints(url, config_path)
    stdout = sys.stdout.buffer

    def write(message: Any) -> None:
        stdout.write(format_message(message, show_headers, as_json))
        stdout.flush()

    try:
        received = _run(endpoints, lambda: asyncio.run(
            receive_messages(endpoints.url, destination, count, timeout, ack, write, connect_timeout)
        ))
    except BrokenPipeError:
        # The reader went away (`| head`); what was not written stays queued (client-individual).
        # Point stdout at /dev/null so that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None
    if count and received < count:
        if received == 0:
            click.echo(f"waited {timeout:g} s and got nothing from {destination} (--timeout waits longer)", err=True)
        else:
            click.echo(f"received {received} of {count} message(s) from {destination}; "
                       f"none came within {timeout:g} s", err=True)
        raise SystemExit(1)
    if not count and received == 0:
        click.echo(f"waited {timeout:g} s and got nothing from {destination}", err=True)


# -- queue -----------------------------------------------------------------------------------


@click.group("queue")
def queue_command() -> None:
    """Inspect and manage queues (stat, browse, purge)."""


@queue_command.command("stat")
@click.option("--admin", multiple=True, metavar="HOST:PORT",
              help="A node's admin address (repeatable: every member of the group); default: the local cluster's.")
@click.option("--json", "as_json", is_flag=True, help="Print the destinations as JSON.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Topology or group file whose cluster to use (default: the one `raftmq up` runs under ./.raftmq/).")
def stat_command(admin: tuple[str, ...], as_json: bool, config_path: str | None) -> None:
    """Depth, consumers, in-flight, enqueued and dequeued counts of every destination,
    from the leader's admin /status."""
    import json

    from raftmq.ops.messaging import destination_rows, stat_table
    from raftmq.ops.status_view import collect_status
    from raftmq.ops.tables import print_tables

    endpoints = _endpoints(None, config_path, admin)
    if not endpoints.admin:
        raise click.ClickException(
            f"no admin address to read /status from ({endpoints.source}): pass --admin HOST:PORT, or start a "
            "cluster with `raftmq up` (a node started with `raftmq node --listen` has no admin port)"
        )
    summary = collect_status(list(endpoints.admin), STAT_TIMEOUT_SECONDS)
    leaderless = [group["name"] for group in summary["groups"] if group["leader"] is None]
    if leaderless:
        asked = ", ".join(node.admin for node in endpoints.admin)
        raise click.ClickException(f"no leader answered /status in group(s) {', '.join(leaderless)} (asked {asked})")
    rows = destination_rows(summary)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("no destinations yet")
    else:
        print_tables(stat_table(rows, show_group=len(summary["groups"]) > 1))


@queue_command.command("purge")
@click.argument("destination")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=PURGE_TIMEOUT_SECONDS, show_default=True,
              help="Give up after this many seconds in all.")
@click.option("--idle", type=click.FloatRange(min=0.05), default=PURGE_IDLE_SECONDS, show_default=True,
              help="The queue counts as empty once no message came for this many seconds.")
@_common_options
def purge_command(destination: str, timeout: float, idle: float, url: str | None, config_path: str | None,
                  connect_timeout: float) -> None:
    """Consume and acknowledge every message of the queue DESTINATION; print how many."""
    import asyncio

    from raftmq.ops.messaging import purge_queue

    if not destination.startswith("/queue/"):
        raise click.UsageError(f"purge works on queues (/queue/NAME), not {destination!r}")
    endpoints = _endpoints(url, config_path)
    purged, complete = _run(endpoints, lambda: asyncio.run(
        purge_queue(endpoints.url, destination, timeout, idle, connect_timeout)))
    click.echo(f"purged {purged} message(s) from {destination}")
    if not complete:
        click.echo(f"stopped at the --timeout of {timeout:g} s before the queue stayed empty for {idle:g} s; "
                   "it may hold more: run it again", err=True)
        raise SystemExit(1)


BROWSE_TIMEOUT_SECONDS = 10.0


@queue_command.command("browse")
@click.argument("destination")
@click.option("--count", "-n", type=click.IntRange(1, MAX_BROWSE_LIMIT), default=DEFAULT_BROWSE_LIMIT,
              show_default=True, help="Show at most this many messages (the first ones, in queue order).")
@click.option("--selector", metavar="SQL92", help="Only messages this JMS selector matches, e.g. \"color = 'red'\".")
@click.option("--show-headers", "show_headers", is_flag=True, help="Print each message's headers before its body.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per message (headers, body).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=BROWSE_TIMEOUT_SECONDS, show_default=True,
              help="Seconds for the broker to send the copies.")
@_common_options
def browse_command(destination: str, count: int, selector: str | None, show_headers: bool, as_json: bool,
                   timeout: float, url: str | None, config_path: str | None, connect_timeout: float) -> None:
    """Show the messages waiting in the queue DESTINATION without consuming them (a STOMP
    queue browser: no ACK, no delivery count, nothing leaves the queue). Messages handed to a
    consumer and not yet acknowledged are not waiting, so they are not shown."""
    import asyncio

    from raftmq.ops.messaging import browse_queue, format_message

    if not destination.startswith("/queue/"):
        raise click.UsageError(f"browse works on queues (/queue/NAME), not {destination!r}")
    endpoints = _endpoints(url, config_path)
    result = _run(endpoints, lambda: asyncio.run(
        browse_queue(endpoints.url, destination, count, selector, timeout, connect_timeout)
    ))
    stdout = sys.stdout.buffer
    try:
        for message in result.messages:
            stdout.write(format_message(message, show_headers, as_json))
        stdout.flush()
    except BrokenPipeError:  # `| head`: nothing was consumed, so nothing is lost
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    more = f"; more are waiting (at most --count {count} shown)" if result.truncated else ""
    click.echo(f"browsed {len(result.messages)} message(s) in {destination}{more}", err=True)

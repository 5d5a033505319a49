"""`raftmq manage ...`: the admin port's management API (docs/management.md) as commands.

Reads ask one member of each group (any member answers from its replica); changes go to the
group's leader (a follower's 409 names it). Addresses come from `--admin`, else the running
local cluster or `--config`, as for `raftmq queue stat`. With logins configured, pass
`--login` and the passcode in `RAFTMQ_PASSCODE` (or `--passcode`). A group with `[tls]` is asked
over HTTPS (`--admin https://HOST:PORT`), its certificate checked against `RAFTMQ_TLS_CA`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from raftmq.client.admin import HTTPS, AdminAccess, with_scheme
from raftmq.errors import ClientError
from raftmq.ops.status_view import NodeAddress

if TYPE_CHECKING:
    from rich.table import Table

T = TypeVar("T")
TIMEOUT_SECONDS = 20.0
EXPLICIT = "cluster"


class ManageClient:
    """HTTP calls to the members of one group, following the leader on 409."""

    def __init__(self, members: list[str], login: str | None, passcode: str | None) -> None:
        self.members = members
        environment = AdminAccess.from_environment()
        self._access = AdminAccess(environment.ca_file, login, passcode)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        errors = []
        tried: list[str] = []
        queue = list(self.members)
        while queue and len(tried) < 2 * len(self.members) + 1:
            admin = queue.pop(0)
            tried.append(admin)
            try:
                status, answer = self._request(admin, method, path, body)
            except OSError as exc:
                errors.append(f"{admin}: {exc}")
                continue
            if status == 409 and answer.get("leader_admin"):
                queue.insert(0, with_scheme(answer["leader_admin"], admin.startswith(HTTPS)))
                continue
            if status >= 400:
                raise click.ClickException(f"{admin}{path}: HTTP {status}: {answer.get('error', answer)}")
            return answer
        raise click.ClickException(f"no member answered {path}: {'; '.join(errors) or 'no leader'}")

    def _request(self, admin: str, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        try:
            code, answer = self._access.request(admin, path, TIMEOUT_SECONDS, method, data,
                                                "application/json" if data is not None else None)
        except ClientError as exc:  # no usable CA file
            raise click.ClickException(str(exc)) from None
        try:
            parsed = json.loads(answer or b"{}")
        except ValueError:
            return code, {"error": answer.decode("utf-8", "replace").strip() or f"HTTP {code}"}
        return code, parsed if isinstance(parsed, dict) else {"error": str(parsed)}


def _groups(admin: tuple[str, ...], config_path: str | None) -> dict[str, list[str]]:
    from raftmq.errors import RaftmqError
    from raftmq.ops.endpoints import resolve

    try:
        endpoints = resolve(None, config_path, admin)
    except RaftmqError as exc:
        raise click.ClickException(str(exc)) from None
    groups: dict[str, list[str]] = {}
    node: NodeAddress
    for node in endpoints.admin:
        groups.setdefault(node.group, []).append(node.admin)
    if not groups:
        raise click.ClickException(f"no admin address ({endpoints.source}): pass --admin HOST:PORT, "
                                   "or start a cluster with `raftmq up`")
    return groups


def _options(function: Callable[..., T]) -> Callable[..., T]:
    for option in (
        click.option("--admin", multiple=True, metavar="HOST:PORT",
                     help="A member's admin address (repeatable: one group's members)."),
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="Topology or group file of the cluster."),
        click.option("--group", "group_name", metavar="NAME",
                     help="The group to change (needed when the cluster has several)."),
        click.option("--login", envvar="RAFTMQ_LOGIN",
                     help="A STOMP login with the permissions needed (env RAFTMQ_LOGIN)."),
        click.option("--passcode", envvar="RAFTMQ_PASSCODE", help="Its passcode (env RAFTMQ_PASSCODE, preferred)."),
        click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON."),
    ):
        function = option(function)
    return function


def _clients(admin: tuple[str, ...], config_path: str | None, login: str | None,
             passcode: str | None) -> dict[str, ManageClient]:
    return {name: ManageClient(members, login, passcode) for name, members in _groups(admin, config_path).items()}


def _one(clients: dict[str, ManageClient], group_name: str | None) -> ManageClient:
    if group_name is not None:
        if group_name not in clients:
            raise click.ClickException(f"no group {group_name!r} (the cluster has {', '.join(sorted(clients))})")
        return clients[group_name]
    if len(clients) > 1:
        raise click.ClickException(f"the cluster has several groups ({', '.join(sorted(clients))}): pass --group NAME")
    return next(iter(clients.values()))


_LISTS = {
    "destinations": ("destinations", ("destination", "depth", "in_flight", "consumers", "enqueued", "dequeued",
                                      "dead_lettered", "scheduled")),
    "connections": ("connections", ("session", "peer", "login", "client_id", "version", "subscriptions")),
    "consumers": ("consumers", ("destination", "sub_id", "session", "selector", "ack", "prefetch", "in_flight",
                                "durable_name", "active")),
}
_NUMERIC = ("depth", "in_flight", "consumers", "enqueued", "dequeued", "dead_lettered", "scheduled", "subscriptions",
            "prefetch")


def list_table(name: str, rows: list[dict[str, Any]]) -> Table:
    """A `manage` list as a table in the style of every raftmq table (raftmq.ops.tables): a
    column per key of `--json`, the group first."""
    from raftmq.ops.tables import add_columns, new_table

    shown = ("group", *_LISTS[name][1])
    table = new_table(f"{name} (every group)")
    add_columns(table, shown, numeric=_NUMERIC)
    for row in rows:
        table.add_row(*("-" if row.get(column) is None else str(row.get(column)) for column in shown))
    return table


@click.group("manage")
def manage_command() -> None:
    """Destinations, connections, consumers and dead letters, through the admin API."""


def _list_command(name: str) -> None:
    key = _LISTS[name][0]

    @manage_command.command(name, help=f"List the {name} of every group.")
    @_options
    def command(admin: tuple[str, ...], config_path: str | None, group_name: str | None, login: str | None,
                passcode: str | None, as_json: bool) -> None:
        clients = _clients(admin, config_path, login, passcode)
        rows = []
        for group, client in clients.items():
            if group_name is None or group == group_name:
                rows += [{"group": group, **row} for row in client.call("GET", f"/api/{key}")[key]]
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        from raftmq.ops.tables import print_tables

        print_tables(list_table(name, rows))


for _name in _LISTS:
    _list_command(_name)


@manage_command.command("messages")
@click.argument("destination")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@_options
def messages_command(destination: str, limit: int, admin: tuple[str, ...], config_path: str | None,
                     group_name: str | None, login: str | None, passcode: str | None, as_json: bool) -> None:
    """The ready messages of a queue (the dead-letter queue: /queue/DLQ), without consuming them."""
    from urllib.parse import urlencode

    client = _one(_clients(admin, config_path, login, passcode), group_name)
    answer = client.call("GET", "/api/messages?" + urlencode({"destination": destination, "limit": limit}))
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    for message in answer["messages"]:
        origin = f" (from {message['original_destination']})" if message["original_destination"] else ""
        dead = message.get("dead_letter_deliveries")
        deliveries = dead if dead is not None else message["delivery_count"]
        why = (f" [{message['dead_letter_reason']}: {message['dead_letter_cause']}]"
               if message.get("dead_letter_reason") else "")
        click.echo(f"{message['message_id']}{origin} deliveries={deliveries}{why} {message['body'][:60]!r}")
    if answer["truncated"]:
        click.echo(f"... more than {limit}")


def _change(op: str, body: dict[str, Any], admin: tuple[str, ...], config_path: str | None, group_name: str | None,
            login: str | None, passcode: str | None, as_json: bool) -> None:
    client = _one(_clients(admin, config_path, login, passcode), group_name)
    answer = client.call("POST", f"/api/{op}", body)
    click.echo(json.dumps(answer) if as_json
               else ", ".join(f"{k} {v}" for k, v in answer.items() if k != "ok") or "done")


for _op, _path in (("create", "destinations/create"), ("purge", "destinations/purge"),
                   ("delete", "destinations/delete")):
    def _make(op: str, path: str) -> None:
        @manage_command.command(op, help=f"{op.capitalize()} a destination (a committed change; needs admin on it).")
        @click.argument("destination")
        @_options
        def command(destination: str, **options: Any) -> None:
            _change(path, {"destination": destination}, **options)

    _make(_op, _path)


def _choice(ids: tuple[str, ...], selector: str | None, every: bool) -> dict[str, Any]:
    if sum((bool(ids), selector is not None, every)) != 1:
        raise click.UsageError("choose the messages with --id (repeatable), --selector or --all")
    return {"ids": list(ids)} if ids else {"selector": selector} if selector is not None else {"all": True}


@manage_command.command("retry")
@click.option("--from", "source", default="/queue/DLQ", show_default=True, help="The queue to take them from.")
@click.option("--id", "ids", multiple=True, help="A message id (repeatable).")
@click.option("--selector", help="Every message this JMS selector matches.")
@click.option("--all", "every", is_flag=True, help="Every ready message.")
@_options
def retry_command(source: str, ids: tuple[str, ...], selector: str | None, every: bool, **options: Any) -> None:
    """Send dead letters back to the destination each came from."""
    _change("messages/retry", {"from": source, **_choice(ids, selector, every)}, **options)


@manage_command.command("move")
@click.option("--from", "source", default="/queue/DLQ", show_default=True, help="The queue to take them from.")
@click.option("--to", "target", required=True, help="Where to send them.")
@click.option("--id", "ids", multiple=True, help="A message id (repeatable).")
@click.option("--selector", help="Every message this JMS selector matches.")
@click.option("--all", "every", is_flag=True, help="Every ready message.")
@_options
def move_command(source: str, target: str, ids: tuple[str, ...], selector: str | None, every: bool,
                 **options: Any) -> None:
    """Move messages from one queue to another destination."""
    _change("messages/move", {"from": source, "to": target, **_choice(ids, selector, every)}, **options)


@manage_command.command("close")
@click.argument("session")
@_options
def close_command(session: str, **options: Any) -> None:
    """Close a client connection (its session id, from `raftmq manage connections`)."""
    _change("connections/close", {"session": session}, **options)

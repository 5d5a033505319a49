"""What `raftmq send / receive / queue` do, without click: asyncio operations on a
`FailoverClient` (every wait bounded) and the formatting of their output.

Consumers subscribe with `client-individual` acks so that the prefetch bounds what the broker
hands them (it does not hold `auto` deliveries back): `receive` with a count uses a prefetch
of 1, so it is handed one message more than it takes at most (the ACK of the last one frees
room before the DISCONNECT arrives; that message returns to its queue marked redelivered).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextvars
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from raftmq.client.browse import BrowseResult
from raftmq.client.failover import FailoverClient
from raftmq.client.failover_subscription import Delivery
from raftmq.client.failover_url import parse_failover_url
from raftmq.client.subscription import DEFAULT_QUEUE_SIZE
from raftmq.errors import ClientError
from raftmq.routing.route import SF_PREFIX

if TYPE_CHECKING:
    from rich.table import Table

# A URL that does not say how often to retry gets this many connect attempts (ActiveMQ's
# back-off from 10 ms: ~0.3 s in all), enough to ride out a leader election.
STARTUP_CONNECT_ATTEMPTS = 6
SEND_WINDOW = 256  # SENDs awaiting their RECEIPT at once
PURGE_PREFETCH = 1000
# Room in the client's queue beyond the prefetch of 1: a full queue holds the socket's reads,
# and the message the last ACK lets in would then hide the DISCONNECT's RECEIPT.
RECEIVE_QUEUE_SIZE = 8
CLOSE_TIMEOUT = 5.0

Write = Callable[[Delivery], None]
# Login and TLS settings (`login`, `passcode`, `ca_file`: FailoverClient keywords) the CLI's
# options set once per command; every operation's connect() applies them, so they need not
# travel through each operation's signature. asyncio.run copies the context into its loop.
CONNECTION_OPTIONS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("raftmq_connection_options")


async def connect(url: str, timeout: float) -> FailoverClient:
    """A started client; raises `ClientError` (`FailoverExhausted` when nothing answers)."""
    options = parse_failover_url(url).options
    overrides: dict[str, Any] = {}
    if options.startup_max_reconnect_attempts == -1 and options.max_reconnect_attempts == -1:
        overrides["startup_max_reconnect_attempts"] = STARTUP_CONNECT_ATTEMPTS
    client = FailoverClient.from_url(url, **overrides, **CONNECTION_OPTIONS.get({}))
    try:
        async with asyncio.timeout(timeout):
            await client.start()
    except TimeoutError:
        await client.close(CLOSE_TIMEOUT)
        raise ClientError(f"no connection within {timeout:g} s") from None
    return client


async def send_messages(
    url: str,
    destination: str,
    body: bytes,
    headers: Sequence[tuple[str, str]],
    count: int,
    receipt: bool,
    timeout: float,
    connect_timeout: float,
) -> int:
    """Send `count` copies; returns how many were confirmed (or written, without receipts)."""
    client = await connect(url, connect_timeout)
    sent = 0
    try:
        async with asyncio.timeout(timeout):
            if receipt:
                window: collections.deque[asyncio.Future[Any]] = collections.deque()
                for _ in range(count):
                    window.append(client.send_nowait(destination, body, headers, True))
                    if len(window) >= SEND_WINDOW:
                        await window.popleft()
                        sent += 1
                while window:
                    await window.popleft()
                    sent += 1
            else:
                for _ in range(count):
                    await client.send(destination, body, headers, receipt=False)  # waits while the socket is full
                    sent += 1
    except TimeoutError:
        state = "confirmed" if receipt else "written"
        raise ClientError(f"only {sent} of {count} message(s) {state} within {timeout:g} s") from None
    finally:
        await client.close(CLOSE_TIMEOUT)
    return sent


async def receive_messages(
    url: str,
    destination: str,
    count: int,
    timeout: float,
    ack: str,
    write: Write,
    connect_timeout: float,
) -> int:
    """Hand up to `count` messages (0: until none comes within `timeout`) to `write`; ACK each
    before `write` (`ack="auto"`) or after it (`"client-individual"`). Returns how many."""
    client = await connect(url, connect_timeout)
    received = 0
    try:
        subscription = client.subscribe(
            destination, ack="client-individual", prefetch=1 if count else None,
            queue_size=RECEIVE_QUEUE_SIZE if count else DEFAULT_QUEUE_SIZE,
        )
        while count == 0 or received < count:
            try:
                async with asyncio.timeout(timeout):
                    message = await subscription.get()
            except TimeoutError:
                break
            if ack == "auto":
                client.ack_nowait(message)
            write(message)  # a failure here leaves a client-individual message unacknowledged
            if ack != "auto":
                client.ack_nowait(message)
            received += 1
    finally:
        await client.close(CLOSE_TIMEOUT)  # the DISCONNECT's RECEIPT: every ACK was processed
    return received


async def purge_queue(url: str, destination: str, timeout: float, idle: float,
                      connect_timeout: float) -> tuple[int, bool]:
    """Consume and ACK every message of `destination` until none comes for `idle` seconds.
    Returns (messages acknowledged, whether the queue ran dry before `timeout`)."""
    client = await connect(url, connect_timeout)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    purged = 0
    try:
        subscription = client.subscribe(destination, ack="client-individual", prefetch=PURGE_PREFETCH)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return purged, False
            try:
                async with asyncio.timeout(min(idle, remaining)):
                    message = await subscription.get()
            except TimeoutError:
                return purged, idle <= remaining
            if client.ack_nowait(message):  # False: its connection broke, the broker redelivers it
                purged += 1
    finally:
        await client.close(CLOSE_TIMEOUT)


async def browse_queue(
    url: str, destination: str, count: int, selector: str | None, timeout: float, connect_timeout: float
) -> BrowseResult:
    """Copies of up to `count` messages waiting in `destination`, in queue order; nothing is
    consumed (a STOMP queue browser, see raftmq.client.browse)."""
    client = await connect(url, connect_timeout)
    try:
        return await client.browse(destination, limit=count, selector=selector, timeout=timeout)
    finally:
        await client.close(CLOSE_TIMEOUT)


# -- output ---------------------------------------------------------------------------------------


def format_message(message: Delivery, show_headers: bool, as_json: bool) -> bytes:
    """One message as `receive` prints it: the body and a newline; with `show_headers` the
    header lines, a blank line, the body and a blank line; with `as_json` one JSON line."""
    if as_json:
        record: dict[str, Any] = {"destination": message.get("destination"), "message-id": message.get("message-id"),
                                  "headers": message.header_dict()}
        try:
            record["body"] = message.body.decode("utf-8")
        except UnicodeDecodeError:
            record["body_base64"] = base64.b64encode(message.body).decode("ascii")
        return json.dumps(record).encode("utf-8") + b"\n"
    if not show_headers:
        return message.body + b"\n"
    head = "".join(f"{name}:{value}\n" for name, value in message.headers)
    return head.encode("utf-8") + b"\n" + message.body + b"\n\n"


STAT_COLUMNS = (
    "depth", "consumers", "in_flight", "enqueue_rate", "dequeue_rate", "enqueued", "dequeued", "expired",
    "dead_lettered",
)
RATE_COLUMNS = ("enqueue_rate", "dequeue_rate")  # msg/s over the node's last seconds; None while unknown


def destination_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The destinations of every group's leader (`collect_status` output) as flat rows, by
    destination then group, so one destination reads across a cluster's groups. A group's
    store-and-forward queues (messages waiting for a bridge to another group) are of type
    `forward`."""
    rows = []
    for group in summary.get("groups", []):
        for name, counters in sorted(group.get("destinations", {}).items()):
            kind = "topic" if name.startswith("/topic/") else "forward" if name.startswith(SF_PREFIX) else "queue"
            row: dict[str, Any] = {"group": group["name"], "destination": name, "type": kind}
            row.update({column: counters.get(column, None if column in RATE_COLUMNS else 0) for column in STAT_COLUMNS})
            rows.append(row)
    return sorted(rows, key=lambda row: (row["destination"], row["group"]))


def stat_table(rows: list[dict[str, Any]], show_group: bool = False) -> Table:
    """The destinations as a table in the style of every raftmq table (raftmq.ops.tables):
    one row each, a column per key of `--json` (rates in msg/s)."""
    from raftmq.ops.tables import add_columns, new_table

    keys = (("group",) if show_group else ()) + ("destination", "type") + STAT_COLUMNS
    table = new_table("destinations (from each group's master)")
    add_columns(table, keys, numeric=STAT_COLUMNS)
    for row in rows:
        table.add_row(*(_stat_cell(key, row[key]) for key in keys))
    return table


def _stat_cell(key: str, value: Any) -> str:
    if key in RATE_COLUMNS:
        return "-" if value is None else f"{value:.1f}"
    return str(value)

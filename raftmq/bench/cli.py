"""`raftmq bench`: load any STOMP 1.2 broker and report throughput, latency, loss, duplicates."""

from __future__ import annotations

import json
import sys
import time
import uuid

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from raftmq.bench.board import Totals
from raftmq.bench.options import ACK_MODES, BenchOptions, is_failover_url, parse_failover, parse_url
from raftmq.bench.report import print_report, write_json
from raftmq.bench.runner import run_bench

EXIT_LOST = 1
EXIT_ERRORS = 2


def _parse_header(value: str) -> tuple[str, str]:
    name, sep, header_value = value.partition(":")
    if not sep or not name:
        raise click.BadParameter(f"expected NAME:VALUE, got {value!r}", param_hint="-H/--header")
    return name, header_value


class _LiveProgress:
    """Published / consumed counters with rates, drawn on stderr."""

    def __init__(self, console: Console, expected: int | None) -> None:
        self._progress = Progress(
            TextColumn("{task.description:>9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:>12}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            auto_refresh=False,
        )
        self._published = self._progress.add_task("published", total=expected, rate="")
        self._consumed = self._progress.add_task("consumed", total=expected, rate="")
        self._last: tuple[float, int, int] | None = None

    def __enter__(self) -> _LiveProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, totals: Totals) -> None:
        now = time.monotonic()
        published = totals.receipted or totals.sent
        pub_rate = con_rate = ""
        if self._last is not None and now > self._last[0]:
            elapsed = now - self._last[0]
            pub_rate = f"{(published - self._last[1]) / elapsed:,.0f} msg/s"
            con_rate = f"{(totals.received - self._last[2]) / elapsed:,.0f} msg/s"
        if self._last is None or now - self._last[0] >= 0.5:
            self._last = (now, published, totals.received)
            self._progress.update(self._published, completed=published, rate=pub_rate)
            self._progress.update(self._consumed, completed=totals.received, rate=con_rate)
        self._progress.refresh()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", "urls", multiple=True, metavar="URL",
              help="Broker, stomp://HOST:PORT; or a group's failover:(stomp://H1:P1,stomp://H2:P2,...) "
                   "to connect to its leader, like raftmq send  [default: stomp://127.0.0.1:61613]. "
                   "Repeat it for several groups of a cluster: producer i (and consumer i) connects "
                   "to the i-th, round robin.")
@click.option("--consumer-url", "consumer_urls", multiple=True, metavar="URL",
              help="Consumers connect here instead of --url (e.g. another group of a cluster: "
                   "failover:(stomp://H1:P1,...)); producers stay on --url. Repeatable, as --url.")
@click.option("--slow-consumers", default=0, show_default=True, type=click.IntRange(0, None),
              help="How many consumers (the first ones) are slow: see --consumer-work-ms.")
@click.option("--consumer-work-ms", default=1.0, show_default=True, type=click.FloatRange(0, None),
              help="A slow consumer spends this long on each message, one at a time, before its ACK.")
@click.option("--login", default=None, help="CONNECT login.")
@click.option("--passcode", default=None, help="CONNECT passcode.")
@click.option("--vhost", default=None, help="CONNECT host header (RabbitMQ wants /).")
@click.option("-H", "--header", "headers", multiple=True, metavar="NAME:VALUE",
              help="Extra header on every SEND and SUBSCRIBE (repeatable), e.g. x-queue-type:quorum.")
@click.option("--destination", default=None, help="Destination; default /queue/bench-<random>.")
@click.option("-p", "--producers", default=1, show_default=True, type=click.IntRange(0, 10_000))
@click.option("-c", "--consumers", default=1, show_default=True, type=click.IntRange(0, 10_000))
@click.option("-s", "--size", default=1024, show_default=True, type=click.IntRange(0, 16 * 1024 * 1024),
              help="Body size in bytes.")
@click.option("-n", "--messages", default=None, type=click.IntRange(0, None),
              help="Messages to send in total over all producers [default: 10000 unless --duration].")
@click.option("--duration", default=None, type=click.FloatRange(0, None, min_open=True),
              help="Send for this many seconds instead of a message count.")
@click.option("--persistent/--non-persistent", default=True, show_default=True)
@click.option("--receipt-window", default=1, show_default=True, type=click.IntRange(0, None),
              help="Receipts in flight per producer; 1 = wait for each, 0 = no receipts.")
@click.option("--prefetch", default=None, type=click.IntRange(1, None),
              help="Prefetch per consumer (activemq.prefetchSize and prefetch-count headers).")
@click.option("--ack", default="client-individual", show_default=True, type=click.Choice(ACK_MODES))
@click.option("--processes", default=1, show_default=True, type=click.IntRange(1, 256),
              help="Spread producers and consumers over this many OS processes.")
@click.option("--warmup", default=0, show_default=True, type=click.IntRange(0, None),
              help="Messages sent (and checked for loss) before measuring.")
@click.option("--drain-timeout", default=10.0, show_default=True, type=click.FloatRange(0, None),
              help="Seconds consumers wait for missing messages after the producers finished.")
@click.option("--timeout", "connect_timeout", default=10.0, show_default=True,
              type=click.FloatRange(0, None, min_open=True),
              help="Connect / receipt wait in seconds.")
@click.option("--heartbeat", "heartbeat_ms", default=0, show_default=True, type=click.IntRange(0, None),
              help="Heart-beat interval in ms offered both ways (0 = none).")
@click.option("--json", "json_path", default=None, metavar="FILE", help="Also write the result as JSON (- for stdout).")
@click.option("-q", "--quiet", is_flag=True, help="No live progress.")
def bench_command(
    urls: tuple[str, ...],
    consumer_urls: tuple[str, ...],
    slow_consumers: int,
    consumer_work_ms: float,
    login: str | None,
    passcode: str | None,
    vhost: str | None,
    headers: tuple[str, ...],
    destination: str | None,
    producers: int,
    consumers: int,
    size: int,
    messages: int | None,
    duration: float | None,
    persistent: bool,
    receipt_window: int,
    prefetch: int | None,
    ack: str,
    processes: int,
    warmup: int,
    drain_timeout: float,
    connect_timeout: float,
    heartbeat_ms: int,
    json_path: str | None,
    quiet: bool,
) -> None:
    """Benchmark a STOMP broker (raftmq, ActiveMQ, RabbitMQ, ...).

    Producers stamp every message with producer id, sequence and send time; consumers measure
    end-to-end latency and count lost (receipted, never received), duplicated (received again
    without redelivered:true) and redelivered messages. Exits 1 when messages were lost,
    2 when there were errors (connection failures, ERROR frames) but no loss.
    """
    failover_url: str | None = None
    consumers_at = [_as_failover(u, "--consumer-url") for u in consumer_urls]
    url = urls[0] if urls else "stomp://127.0.0.1:61613"
    more_urls = tuple(_as_failover(u, "--url") for u in urls[1:])
    try:
        if is_failover_url(url) or more_urls:
            failover_url = url if is_failover_url(url) else f"failover:({url})"
            first = parse_failover(failover_url).groups[0][0]
            host, port = first.host, first.port
        else:
            host, port = parse_url(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from exc
    if messages is not None and duration is not None:
        raise click.UsageError("give either -n/--messages or --duration, not both")
    if messages is None and duration is None:
        messages = 10_000
    if producers == 0 and consumers == 0:
        raise click.UsageError("nothing to do: no producers and no consumers")
    run_id = uuid.uuid4().hex[:12]
    opts = BenchOptions(
        host=host,
        port=port,
        failover_url=failover_url,
        consumer_url=consumers_at[0] if consumers_at else None,
        more_urls=more_urls,
        more_consumer_urls=tuple(consumers_at[1:]),
        slow_consumers=slow_consumers,
        consumer_work_ms=consumer_work_ms,
        login=login,
        passcode=passcode,
        vhost=vhost,
        extra_headers=tuple(_parse_header(h) for h in headers),
        destination=destination or f"/queue/bench-{run_id}",
        producers=producers,
        consumers=consumers,
        size=size,
        messages=messages,
        duration=duration,
        persistent=persistent,
        receipt_window=receipt_window,
        prefetch=prefetch,
        ack=ack,
        processes=min(processes, max(producers, consumers, 1)),
        warmup=warmup,
        drain_timeout=drain_timeout,
        connect_timeout=connect_timeout,
        run_id=run_id,
        heartbeat_ms=heartbeat_ms,
    )
    stderr = Console(stderr=True)
    if quiet:
        result = run_bench(opts)
    else:
        expected = None if messages is None else messages + warmup
        with _LiveProgress(stderr, expected) as progress:
            result = run_bench(opts, progress.update)
    console = Console(stderr=json_path == "-")
    print_report(result, console)
    if json_path == "-":
        sys.stdout.write(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    elif json_path:
        write_json(result, json_path)
    if result.lost:
        stderr.print(f"[bold red]{result.lost} receipted message(s) were lost[/]")
        sys.exit(EXIT_LOST)
    if result.errors:
        sys.exit(EXIT_ERRORS)


def _as_failover(url: str, option: str) -> str:
    """`url` as a failover URL (one address becomes a group of one); BadParameter if invalid."""
    text = url if is_failover_url(url) else f"failover:({url})"
    try:
        parse_failover(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from exc
    return text

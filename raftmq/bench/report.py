"""Merge worker results into one `BenchResult`; render it as a rich table or JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from raftmq.bench.accounting import DeliveryOutcome, ReceiveLedger, SendLedger, reconcile
from raftmq.bench.options import BenchOptions
from raftmq.bench.stats import LatencyHistogram, Summary, rate

NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class BenchResult:
    options: BenchOptions
    outcome: DeliveryOutcome
    published: int  # measured messages sent (warm-up excluded)
    publish_seconds: float
    publish_rate: float
    consumed: int  # measured messages received (first receptions)
    consume_seconds: float
    consume_rate: float
    receipt_latency: Summary
    e2e_latency: Summary
    errors: int
    error_messages: dict[str, int]
    foreign: int
    wall_seconds: float
    received_by_url: dict[str, int] | None = None  # several consumer URLs: first receptions at each

    @property
    def lost(self) -> int:
        return self.outcome.lost

    def to_json(self) -> dict[str, Any]:
        opts = self.options
        return {
            "url": opts.url,
            "destination": opts.destination,
            "producers": opts.producers,
            "consumers": opts.consumers,
            "processes": opts.processes,
            "size": opts.size,
            "persistent": opts.persistent,
            "receipt_window": opts.receipt_window,
            "ack": opts.ack,
            "prefetch": opts.prefetch,
            "warmup": opts.warmup,
            "published": self.published,
            "publish_seconds": round(self.publish_seconds, 6),
            "publish_rate": round(self.publish_rate, 1),
            "consumed": self.consumed,
            "consume_seconds": round(self.consume_seconds, 6),
            "consume_rate": round(self.consume_rate, 1),
            "receipt_latency_ms": _latency_json(self.receipt_latency),
            "e2e_latency_ms": _latency_json(self.e2e_latency),
            "sent": self.outcome.sent,
            "receipted": self.outcome.receipted,
            "received": self.outcome.received,
            "lost": self.outcome.lost,
            "missing_unconfirmed": self.outcome.missing_unconfirmed,
            "duplicated": self.outcome.duplicated,
            "redelivered": self.outcome.redelivered,
            "errors": self.errors,
            "error_messages": self.error_messages,
            "foreign": self.foreign,
            "wall_seconds": round(self.wall_seconds, 3),
            **({"received_by_url": self.received_by_url} if self.received_by_url is not None else {}),
        }


def _latency_json(summary: Summary) -> dict[str, Any]:
    out: dict[str, Any] = {"count": summary.count}
    for key, value in asdict(summary).items():
        if key != "count":
            out[key] = round(value / NS_PER_MS, 4)
    return out


def merge_results(opts: BenchOptions, outputs: list[dict[str, Any]], wall_seconds: float) -> BenchResult:
    sent = SendLedger()
    received = ReceiveLedger()
    receipt_latency = LatencyHistogram()
    e2e_latency = LatencyHistogram()
    windows: list[tuple[int, int, int]] = []
    foreign = errors = 0
    first_receive = last_receive = 0
    error_messages: dict[str, int] = {}
    by_url: dict[str, int] = {}
    for output in outputs:
        for url, count in output.get("received_by_url", {}).items():
            by_url[url] = by_url.get(url, 0) + count
        sent.merge(SendLedger.from_dict(output["sent"]))
        received.merge(ReceiveLedger.from_dict(output["received"]))
        receipt_latency.merge(LatencyHistogram.from_dict(output["receipt_latency"]))
        e2e_latency.merge(LatencyHistogram.from_dict(output["e2e_latency"]))
        windows.extend(tuple(w) for w in output["publish_windows"])
        foreign += output["foreign"]
        errors += output["error_count"]
        for text, count in output["errors"].items():
            error_messages[text] = error_messages.get(text, 0) + count
        if output["first_receive_ns"]:
            first = output["first_receive_ns"]
            first_receive = first if not first_receive else min(first_receive, first)
        last_receive = max(last_receive, output["last_receive_ns"])
    published = sum(w[2] for w in windows)
    consumed = _measured_received(opts, received)
    publish_start = min((w[0] for w in windows), default=0)
    publish_end = max((w[1] for w in windows), default=0)
    publish_seconds = (publish_end - publish_start) / 1e9 if windows else 0.0
    # End to end: from the first measured send to the last measured reception.
    consume_start = publish_start or first_receive
    consume_seconds = (last_receive - consume_start) / 1e9 if last_receive and consume_start else 0.0
    return BenchResult(
        options=opts,
        outcome=reconcile(sent, received),
        published=published,
        publish_seconds=publish_seconds,
        publish_rate=rate(published, publish_seconds),
        consumed=consumed,
        consume_seconds=max(consume_seconds, 0.0),
        consume_rate=rate(consumed, consume_seconds),
        receipt_latency=receipt_latency.summary(),
        e2e_latency=e2e_latency.summary(),
        errors=errors,
        error_messages=error_messages,
        foreign=foreign,
        wall_seconds=wall_seconds,
        received_by_url=({url: by_url.get(url, 0) for url in dict.fromkeys(opts.consumer_urls)}
                         if opts.more_urls or opts.more_consumer_urls else None),
    )


def _measured_received(opts: BenchOptions, received: ReceiveLedger) -> int:
    """Distinct messages received over all processes, warm-up messages (the first sequences
    of each producer) left out."""
    total = 0
    for producer, bitmap in received.received.items():
        warmup_mask = (1 << opts.warmup_of(producer)) - 1 if producer < opts.producers else 0
        total += (bitmap.as_int() & ~warmup_mask).bit_count()
    return total


def _ms(value_ns: float) -> str:
    ms = value_ns / NS_PER_MS
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.3f} ms"


def render_table(result: BenchResult) -> Table:
    opts = result.options
    title = (
        f"raftmq bench: {opts.url} {opts.destination}  "
        f"{opts.producers}P×{opts.consumers}C  {opts.size} B  "
        f"{'persistent' if opts.persistent else 'non-persistent'}  "
        f"receipt window {opts.receipt_window}  ack {opts.ack}  processes {opts.processes}"
    )
    table = Table(title=title, title_justify="left", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("p50", justify="right")
    table.add_column("p99", justify="right")
    table.add_column("max", justify="right")
    table.add_row("publish", f"{result.publish_rate:,.0f} msg/s", "", "", "")
    table.add_row("consume (end to end)", f"{result.consume_rate:,.0f} msg/s", "", "", "")
    for label, summary in (("receipt latency", result.receipt_latency), ("end-to-end latency", result.e2e_latency)):
        if summary.count:
            table.add_row(label, f"{summary.count:,} samples", _ms(summary.p50), _ms(summary.p99), _ms(summary.max))
        else:
            table.add_row(label, "no samples", "", "", "")
    outcome = result.outcome
    table.add_row("sent", f"{outcome.sent:,}")
    table.add_row("receipted", f"{outcome.receipted:,}")
    table.add_row("received", f"{outcome.received:,}")
    table.add_row("lost", _flag(outcome.lost))
    if outcome.missing_unconfirmed:
        table.add_row("missing (never receipted)", f"[yellow]{outcome.missing_unconfirmed:,}[/]")
    table.add_row("duplicated", _flag(outcome.duplicated))
    table.add_row("redelivered", f"{outcome.redelivered:,}")
    table.add_row("errors", _flag(result.errors))
    if result.foreign:
        table.add_row("foreign messages", f"{result.foreign:,}")
    for url, count in (result.received_by_url or {}).items():
        table.add_row(f"received at {url}", f"{count:,}")
    return table


def _flag(count: int) -> str:
    return f"[bold red]{count:,}[/]" if count else "0"


def print_report(result: BenchResult, console: Console) -> None:
    console.print(render_table(result))
    for text, count in sorted(result.error_messages.items(), key=lambda item: -item[1]):
        console.print(f"[red]error ×{count}:[/] {text}")


def write_json(result: BenchResult, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result.to_json(), handle, indent=2, sort_keys=True)
        handle.write("\n")

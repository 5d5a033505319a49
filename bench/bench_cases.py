"""The side-by-side cases, one `raftmq bench` subprocess per run, and the figures we keep.

Both brokers get exactly the same bench arguments; only how to reach the broker differs
(RabbitMQ: vhost, guest login and the quorum-queue header on SEND and SUBSCRIBE).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raftmq.bench.options import parse_url
from raftmq.client import connect

BASE_TIMEOUT_SECONDS = 120.0
SLOWEST_EXPECTED_RATE = 50.0  # msg/s: below this a run is broken, not slow; bounds the wait


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    producers: int
    consumers: int
    receipt_window: int


CASES = (
    Case("4Px4C_window100", "4P×4C, 100 receipts in flight", 4, 4, 100),
    Case("1Px1C_window1", "1P×1C, wait for each receipt", 1, 1, 1),
)

# (label, key in our summary, unit, better when higher)
METRICS = (
    ("publish", "publish_rate", "msg/s", True),
    ("e2e", "consume_rate", "msg/s", True),
    ("receipt p50", "receipt_p50_ms", "ms", False),
    ("receipt p99", "receipt_p99_ms", "ms", False),
    ("e2e p50", "e2e_p50_ms", "ms", False),
    ("e2e p99", "e2e_p99_ms", "ms", False),
)
COUNTS = ("lost", "duplicated", "errors")


def new_destination(case: Case) -> str:
    return f"/queue/sbs-{case.key}-{uuid.uuid4().hex[:8]}"


def bench_command(url: str, case: Case, destination: str, messages: int, warmup: int, processes: int,
                  broker_args: tuple[str, ...], json_path: Path, duration: float | None = None) -> list[str]:
    """`duration`: send for that many seconds (a sustained run) instead of `messages`."""
    amount = ["--duration", str(duration)] if duration else ["-n", str(messages)]
    return [
        sys.executable, "-m", "raftmq", "bench",
        "--url", url,
        *broker_args,
        "--destination", destination,
        "-p", str(case.producers), "-c", str(case.consumers),
        "-s", "1024", "--persistent", "--ack", "client-individual",
        "--receipt-window", str(case.receipt_window),
        *amount, "--warmup", str(warmup),
        "--processes", str(processes),
        "-q", "--json", str(json_path),
    ]  # fmt: skip


def declare_queue(url: str, destination: str, broker_args: tuple[str, ...], timeout: float = 30.0) -> None:
    """SUBSCRIBE once (with a receipt) and UNSUBSCRIBE, so the queue exists before the run.

    RabbitMQ answers `ERROR Processing error` to one of several connections that declare the
    same new quorum queue at once; declaring it first keeps that race out of the figures."""
    asyncio.run(_declare_queue(url, destination, broker_args, timeout))


async def _declare_queue(url: str, destination: str, broker_args: tuple[str, ...], timeout: float) -> None:
    options = _broker_options(broker_args)
    host, port = parse_url(url)
    client = await connect(host, port, login=options.get("--login"), passcode=options.get("--passcode"),
                           vhost=options.get("--vhost"), timeout=timeout)
    try:
        subscription = client.subscribe(destination, ack="client-individual", headers=options["headers"], receipt=True)
        await asyncio.wait_for(subscription.receipt, timeout)  # type: ignore[arg-type]
        await asyncio.wait_for(subscription.unsubscribe(receipt=True), timeout)
    finally:
        await client.disconnect(timeout=timeout)


def _broker_options(broker_args: tuple[str, ...]) -> dict[str, Any]:
    """The `--login X`, `--vhost /`, `-H name:value` pairs of `broker_args`."""
    options: dict[str, Any] = {"headers": []}
    for flag, value in zip(broker_args[::2], broker_args[1::2], strict=True):
        if flag in ("-H", "--header"):
            name, _, header_value = value.partition(":")
            options["headers"].append((name, header_value))
        else:
            options[flag] = value
    return options


def run_bench(command: list[str], messages: int, duration: float | None = None) -> dict[str, Any]:
    """Run one bench; its JSON plus `exit_code` (1: loss, 2: errors) and the command line."""
    timeout = BASE_TIMEOUT_SECONDS + (4 * duration if duration else messages / SLOWEST_EXPECTED_RATE)
    json_index = command.index("--json") + 1
    with tempfile.TemporaryDirectory(prefix="raftmq-sbs-") as tmp:
        command = [*command[:json_index], str(Path(tmp) / "result.json"), *command[json_index + 1:]]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        result_path = Path(tmp) / "result.json"
        if not result_path.exists():
            raise RuntimeError(
                f"bench wrote no result (exit {completed.returncode}): {shlex.join(command)}\n"
                f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}"
            )
        result = json.loads(result_path.read_text())
    result["exit_code"] = completed.returncode
    return result


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    receipt = result.get("receipt_latency_ms", {})
    e2e = result.get("e2e_latency_ms", {})
    return {
        "publish_rate": result["publish_rate"],
        "consume_rate": result["consume_rate"],
        "receipt_p50_ms": receipt.get("p50"),
        "receipt_p99_ms": receipt.get("p99"),
        "e2e_p50_ms": e2e.get("p50"),
        "e2e_p99_ms": e2e.get("p99"),
        "lost": result["lost"],
        "duplicated": result["duplicated"],
        "errors": result["errors"],
    }


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the figures over repeated runs; loss, duplicates and errors summed."""
    summaries = [summarize(run) for run in runs]
    combined: dict[str, Any] = {"runs": len(runs)}
    for _label, key, _unit, _higher in METRICS:
        values = [s[key] for s in summaries if s[key] is not None]
        combined[key] = statistics.median(values) if values else None
    for key in COUNTS:
        combined[key] = sum(s[key] for s in summaries)
    return combined


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float | None]:
    """raftmq ÷ RabbitMQ per figure (rates: higher is better; latencies: lower is better)."""
    out: dict[str, float | None] = {}
    for _label, key, _unit, _higher in METRICS:
        a, b = ours.get(key), theirs.get(key)
        out[key] = round(a / b, 3) if a is not None and b else None
    return out


def targets(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The high-availability aims (docs/benchmarks.md), checked against what this run measured (None: not measured)."""
    many = results.get("4Px4C_window100", {})
    one = results.get("1Px1C_window1", {})
    ours_many, ours_one = many.get("raftmq", {}), one.get("raftmq", {})
    theirs_many, theirs_one = many.get("rabbitmq"), one.get("rabbitmq")

    def check(name: str, value: float | None, limit: float | None, higher: bool) -> dict[str, Any]:
        met = None if value is None or limit is None else (value >= limit if higher else value <= limit)
        return {"goal": name, "value": value, "limit": limit, "met": met}

    ratio = None
    if theirs_many and ours_many.get("consume_rate") and theirs_many.get("consume_rate"):
        ratio = round(ours_many["consume_rate"] / theirs_many["consume_rate"], 2)
    return [
        check("4P×4C e2e msg/s ≥ 10× RabbitMQ (ratio)", ratio, 10.0, True),
        check("4P×4C e2e p99 ≤ 100 ms", ours_many.get("e2e_p99_ms"), 100.0, False),
        check("1P×1C receipt p50 ≤ RabbitMQ's (ms)", ours_one.get("receipt_p50_ms"),
              theirs_one.get("receipt_p50_ms") if theirs_one else None, False),
        check("1P×1C receipt p99 ≤ 10 ms", ours_one.get("receipt_p99_ms"), 10.0, False),
    ]

"""What clients see of `raftmq restart --rolling`: the symmetric preset (three groups of three)
under `raftmq up --detach` in a directory of its own, one producer and one consumer per group
on that group's failover URL, sending with receipts at a steady rate before, during and after
the restart. For each client the longest stretch without a completed operation (a receipt for a
producer, a message for a consumer) is its unavailability; the table gives p50 and max per
client, the restart's own time, what was lost, and duplicates: redeliveries flagged
`redelivered` (an ACK cut off by a failover: at-least-once) apart from unflagged ones (a
message stored twice); lost and unflagged duplicates must be 0. `resumed` counts the times a
client's session carried on at the new leader when its node went (raftmq.client.resume: the
application saw nothing), `broken` the times a client's connection broke and it reconnected
(its subscription made anew).

    .venv/bin/python -m bench.rolling_restart --preset symmetric --dir /tmp/rolling --rate 200

The preset's fixed ports must be free. Every process is stopped at the end (raftmq down).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import read_state
from raftmq.protocol.frame import REDIRECT_HEADER, Frame

RAFTMQ = str(Path(sys.executable).parent / "raftmq")


def raftmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAFTMQ, *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=900)


class Client:
    """One producer and one consumer of a group, each recording when its operations completed."""

    def __init__(self, group: str, url: str, rate: float, relayed: bool = False, *,
                 connect: dict[str, Any] | None = None, queue_headers: list[tuple[str, str]] | None = None) -> None:
        self.group, self.url, self.rate = group, url, rate
        # Relayed: no leader redirects asked for; the first member that answers serves (relays) the client.
        self.connect_headers = [(REDIRECT_HEADER, "false")] if relayed else None
        self.connect = connect or {}  # another broker's login and virtual host (bench.peer_rolling_restart)
        self.queue_headers = queue_headers  # on every SEND and SUBSCRIBE (RabbitMQ: x-queue-type)
        self.receipted: dict[bytes, float] = {}
        self.received: list[tuple[bytes, float]] = []
        self.redelivered: set[bytes] = set()  # came flagged `redelivered` (an ACK lost in a failover)
        self.errors: list[str] = []
        self.events: collections.Counter[str] = collections.Counter()  # failover events of both clients, by kind
        self.stop = asyncio.Event()
        self.finished = asyncio.Event()

    async def run(self) -> None:
        consumer = await connect_failover(self.url, connect_headers=self.connect_headers, **self.connect)
        producer = await connect_failover(self.url, connect_headers=self.connect_headers, **self.connect)
        for client in (consumer, producer):
            client.events.append(lambda event: self.events.update([event.kind]))
        destination = f"/queue/rolling.{self.group}"

        def on_message(frame: Frame) -> None:
            self.received.append((frame.body, time.monotonic()))
            if frame.get("redelivered") == "true":
                self.redelivered.add(frame.body)
            consumer.ack_nowait(frame)

        consumer.subscribe(destination, ack="client-individual", prefetch=100, callback=on_message,
                           headers=self.queue_headers)
        index = 0
        next_at = time.monotonic()
        try:
            while not self.stop.is_set():
                body = f"{self.group}-{index:07d}".encode()
                index += 1
                try:
                    await producer.send(destination, body, self.queue_headers, receipt=True)
                    self.receipted[body] = time.monotonic()
                except Exception as exc:
                    self.errors.append(repr(exc))
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await self.finished.wait()
        finally:
            await producer.close()
            await consumer.close()


def stop_clients(clients: list[Client], futures: list[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Stop sending, wait (at most 30 s) until every receipted message arrived, then close."""
    for client in clients:
        loop.call_soon_threadsafe(client.stop.set)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(set(c.receipted) - {b for b, _ in c.received} for c in clients):
        time.sleep(0.2)
    for client in clients:
        loop.call_soon_threadsafe(client.finished.set)
    for future in futures:
        future.result(timeout=30)
    loop.call_soon_threadsafe(loop.stop)


def longest_gap(times: list[float], start: float, end: float) -> float:
    points = sorted([start, *[t for t in times if start <= t <= end], end])
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="symmetric")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rolling-bench")
    parser.add_argument("--rate", type=float, default=200.0, help="SENDs per second per producer")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of traffic before and after the restart")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    options.dir.mkdir(parents=True, exist_ok=True)
    up = raftmq("up", "--detach", "--preset", options.preset, cwd=options.dir)
    if up.returncode != 0:
        raise SystemExit(f"raftmq up failed: {up.stdout}{up.stderr}")
    try:
        state = read_state(options.dir / ".raftmq")
        assert state is not None
        groups: dict[str, list[str]] = {}
        for node in state.nodes:
            groups.setdefault(node.group, []).append(f"stomp://{node.client}")
        clients = [Client(g, "failover:(" + ",".join(a) + ")?randomize=false", options.rate) for g, a in groups.items()]
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        futures = [asyncio.run_coroutine_threadsafe(client.run(), loop) for client in clients]
        time.sleep(options.settle)
        began = time.monotonic()
        restart = raftmq("restart", "--rolling", "--preset", options.preset, cwd=options.dir)
        ended = time.monotonic()
        time.sleep(options.settle)
        stop_clients(clients, futures, loop)
    finally:
        raftmq("down", "--preset", options.preset, cwd=options.dir)
    if restart.returncode != 0:
        raise SystemExit(f"raftmq restart --rolling failed: {restart.stdout}{restart.stderr}")
    summary = summarize(clients, began, ended, {"preset": options.preset, "rate_per_producer": options.rate,
                                                "restart_output": restart.stdout.splitlines()[-1]})
    if options.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"rolling restart of --preset {options.preset}: {summary['restart_s']} s ({summary['restart_output']})")
    print_rows(summary)


def summarize(clients: list[Client], began: float, ended: float, about: dict[str, Any]) -> dict[str, Any]:
    """Per client: its longest gaps during the restart, what it lost, what came twice, and how
    often its connections broke or its session was resumed."""
    rows: list[dict[str, Any]] = []
    for client in clients:
        received = [b for b, _ in client.received]
        lost = set(client.receipted) - set(received)
        seen: set[bytes] = set()
        unflagged = 0
        for body, _ in client.received:
            if body in seen and body not in client.redelivered:
                unflagged += 1
            seen.add(body)
        rows.append({
            "group": client.group,
            "producer_gap_s": round(longest_gap(list(client.receipted.values()), began, ended), 3),
            "consumer_gap_s": round(longest_gap([t for _, t in client.received], began, ended), 3),
            "sent": len(client.receipted), "lost": len(lost), "redelivered": len(received) - len(set(received)),
            "unflagged_duplicates": unflagged,
            "errors": len(client.errors),
            "resumed": client.events["resumed"], "broken": client.events["disconnected"],
        })
    gaps = [row[key] for row in rows for key in ("producer_gap_s", "consumer_gap_s")]
    return {**about, "restart_s": round(ended - began, 1), "unavailability_p50_s": round(statistics.median(gaps), 3),
            "unavailability_max_s": round(max(gaps), 3), "clients": rows}


def print_rows(summary: dict[str, Any]) -> None:
    print(f"{'group':6} {'producer gap s':>15} {'consumer gap s':>15} {'sent':>7} {'lost':>5} {'redelivered':>11} "
          f"{'unflagged dup':>13} {'errors':>6} {'resumed':>7} {'broken':>6}")
    for row in summary["clients"]:
        print(f"{row['group']:6} {row['producer_gap_s']:>15} {row['consumer_gap_s']:>15} {row['sent']:>7} "
              f"{row['lost']:>5} {row['redelivered']:>11} {row['unflagged_duplicates']:>13} {row['errors']:>6} "
              f"{row['resumed']:>7} {row['broken']:>6}")
    print(f"unavailability per client: p50 {summary['unavailability_p50_s']} s, "
          f"max {summary['unavailability_max_s']} s")


if __name__ == "__main__":
    main()

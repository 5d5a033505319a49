"""A sustained load with an independent STOMP client (stomp.py, not raftmq's): P producer
connections, each keeping `--window` receipted SENDs in flight, and C consumer connections
acknowledging every message (client-individual), for `--duration` seconds. Each message carries
its send time; the consumers record end-to-end latency. Then the consumers drain what is left
(up to `--drain` seconds) and the run reports publish and consume rates, e2e p50 / p99, and the
messages never consumed.

    .venv/bin/python -m bench.stomp_load --url stomp://127.0.0.1:61613 --duration 60 --json out.json
    .venv/bin/python -m bench.stomp_load --url stomp://127.0.0.1:61641 --vhost / --login guest \\
        --passcode guest -H x-queue-type:quorum --duration 60            # a RabbitMQ quorum queue

Why another load tool: raftmq's own bench is written with raftmq's client; this one is not, and
`--consumer-work-ms` makes its consumers slower than its producers, as real consumers often
are: it shows whether a standing queue forms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlparse

import stomp


class Producer(stomp.ConnectionListener):
    def __init__(self, connect: Any, destination: str, window: int, size: int, headers: dict[str, str],
                 name: str) -> None:
        self.name = name  # with the send count, each message's `load-id`: duplicates are counted by it
        self.connection = connect(self)
        self.destination, self.window, self.headers = destination, window, headers
        self.body = "x" * size
        self.outstanding = threading.Semaphore(window)
        self.sent = self.receipted = 0
        self.receipted_ids: list[str] = []  # the `load-id`s of the receipted SENDs
        self.errors: list[str] = []

    def on_receipt(self, frame: stomp.utils.Frame) -> None:
        self.receipted += 1
        self.receipted_ids.append(f"{self.name}-{frame.headers['receipt-id'][1:]}")
        self.outstanding.release()

    def on_error(self, frame: stomp.utils.Frame) -> None:
        self.errors.append(frame.headers.get("message", "?"))

    def run(self, until: float) -> None:
        while time.monotonic() < until:
            if not self.outstanding.acquire(timeout=0.5):
                continue
            self.sent += 1
            self.connection.send(self.destination, self.body, receipt=f"r{self.sent}",
                                 headers={**self.headers, "persistent": "true", "sent-ns": str(time.time_ns()),
                                          "load-id": f"{self.name}-{self.sent}"})
        deadline = time.monotonic() + 30
        while self.receipted < self.sent and time.monotonic() < deadline:
            time.sleep(0.05)


class Consumer(stomp.ConnectionListener):
    def __init__(self, connect: Any, destination: str, headers: dict[str, str], index: int, work: float,
                 seen: set[str], seen_lock: threading.Lock) -> None:
        self.work = work  # seconds of "processing" per message
        self.seen, self.seen_lock = seen, seen_lock  # `load-id`s received by any consumer
        self.duplicated = 0
        self.latencies: list[float] = []
        self.received = 0
        self.measuring = True
        self.last = time.monotonic()
        self.connection = connect(self)
        self.connection.subscribe(destination, id=f"c{index}", ack="client-individual", headers=headers)

    def on_message(self, frame: stomp.utils.Frame) -> None:
        self.received += 1
        self.last = time.monotonic()
        load_id = frame.headers.get("load-id")
        with self.seen_lock:
            if load_id in self.seen:
                self.duplicated += 1
            elif load_id is not None:
                self.seen.add(load_id)
        sent = frame.headers.get("sent-ns")
        if sent is not None and self.measuring:
            self.latencies.append((time.time_ns() - int(sent)) / 1e6)
        if self.work:
            time.sleep(self.work)
        self.connection.ack(frame.headers["ack"])


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="stomp://127.0.0.1:61613")
    parser.add_argument("--login")
    parser.add_argument("--passcode")
    parser.add_argument("--vhost")
    parser.add_argument("-H", "--header", action="append", default=[], help="NAME:VALUE on SEND and SUBSCRIBE")
    parser.add_argument("-p", "--producers", type=int, default=4)
    parser.add_argument("-c", "--consumers", type=int, default=4)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("-s", "--size", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--consumer-work-ms", type=float, default=0.0,
                        help="each consumer sleeps this long per message before its ACK (slower consumers)")
    parser.add_argument("--drain", type=float, default=120.0, help="seconds the consumers may take for what is left")
    parser.add_argument("--destination", default=None)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()
    url = urlparse(options.url)
    headers = dict(item.split(":", 1) for item in options.header)
    destination = options.destination or f"/queue/stomp-load-{uuid.uuid4().hex[:8]}"

    def connect(listener: stomp.ConnectionListener) -> stomp.Connection12:
        connection = stomp.Connection12([(url.hostname, url.port)], heartbeats=(0, 0), vhost=options.vhost,
                                        auto_content_length=True)
        connection.set_listener("l", listener)
        connection.connect(options.login, options.passcode, wait=True)
        return connection

    seen: set[str] = set()
    seen_lock = threading.Lock()
    consumers = [Consumer(connect, destination, headers, i, options.consumer_work_ms / 1000, seen, seen_lock)
                 for i in range(options.consumers)]
    producers = [Producer(connect, destination, options.window, options.size, headers, f"p{i}")
                 for i in range(options.producers)]
    began = time.monotonic()
    until = began + options.duration
    threads = [threading.Thread(target=p.run, args=(until,)) for p in producers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent_seconds = time.monotonic() - began
    consumed_in_run = sum(c.received for c in consumers)
    for consumer in consumers:
        consumer.measuring = False  # the drain's latencies are not the run's
    sent = sum(p.receipted for p in producers)
    deadline = time.monotonic() + options.drain
    while sum(c.received for c in consumers) < sent and time.monotonic() < deadline:
        time.sleep(0.2)
    latencies = [value for c in consumers for value in c.latencies]
    result = {
        "url": options.url, "destination": destination, "producers": options.producers, "consumers": options.consumers,
        "window": options.window, "size": options.size, "consumer_work_ms": options.consumer_work_ms,
        "duration_s": round(sent_seconds, 1),
        "publish_rate": round(sent / sent_seconds), "consume_rate": round(consumed_in_run / sent_seconds),
        "e2e_p50_ms": percentile(latencies, 0.50), "e2e_p99_ms": percentile(latencies, 0.99),
        "e2e_mean_ms": round(statistics.fmean(latencies), 2) if latencies else None,
        "waiting_at_end": sent - consumed_in_run, "never_consumed": sent - sum(c.received for c in consumers),
        # distinct messages received, the drain's included (first receptions, as `raftmq bench`
        # counts); `duplicated`: receptions of one already received; `lost`: receipted, never received
        "received": len(seen), "duplicated": sum(c.duplicated for c in consumers),
        "lost": sum(1 for p in producers for load_id in p.receipted_ids if load_id not in seen),
        "errors": [e for p in producers for e in p.errors],
    }
    for endpoint in (*producers, *consumers):
        try:
            endpoint.connection.disconnect()
        except Exception:  # noqa: BLE001 - a broker that closed first is fine here
            pass
    print(json.dumps(result))
    if options.json:
        with open(options.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()

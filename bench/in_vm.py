"""In-VM (`vm://NAME`) against loopback TCP to the same in-process broker, in one sitting
(docs/benchmarks.md, "In-VM").

    .venv/bin/python -m bench.in_vm [--duration 20] [--rounds 2] [--durable] [--floor] [--json FILE]

One `EmbeddedBroker(name="bench")` in this process (in memory, or with `--durable` a group of one
in a temp directory: a receipt is then an fsync), and raftmq's sync clients connected to it by
`vm://bench` or by `stomp://127.0.0.1:PORT`, alternating, `--rounds` times each:

- **round trip**, 1 producer × 1 consumer: the producer sends 100-byte messages to a queue, each
  waiting for its RECEIPT; the consumer takes them (auto ack). Mean, p50 and p99 of the
  SEND → RECEIPT time.
- **throughput**, 4 producers × 4 consumers (a thread each): 1 KiB messages to one queue, each
  producer waiting for each RECEIPT; msg/s delivered.

For each run: the whole process's CPU (every thread, idle included: `os.times`) per delivered
message. Prints in-VM ÷ TCP. A message lost or received twice makes it exit 1.

With `--floor`, first the parts a sync round trip is made of, on the same broker:

- **hop**: a thread hands the broker's loop a call and waits for its answer, nothing done there
  (`call_soon_threadsafe` there, a `queue.SimpleQueue` back): the least a sync call costs;
- **in-loop**: a receipted SEND from the asyncio client running on the broker's own loop (no
  thread), by `vm://` and by TCP, back to back ("busy": the loop never sleeps) and with a 1 ms
  pause after each ("after sleep": the loop sleeps between SENDs, as it does in a round trip);
  the loop thread's CPU per SEND, the pause's own CPU taken off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from raftmq import vm
from raftmq.client.failover import FailoverClient
from raftmq.client.sync import Client
from raftmq.embedded import EmbeddedBroker

NAME = "bench"


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _consume(url: str, destination: str, seen: dict[bytes, int], stop: threading.Event, lock: threading.Lock) -> None:
    with Client.connect(url) as client:
        subscription = client.subscribe(destination, queue_size=10_000)
        while not stop.is_set():
            message = subscription.receive(0.2)
            if message is not None:
                with lock:
                    seen[message.body[:16]] = seen.get(message.body[:16], 0) + 1


def run(url: str, label: str, producers: int, consumers: int, size: int, duration: float) -> dict[str, Any]:
    destination = f"/queue/in-vm-{label}-{producers}x{consumers}-{time.monotonic_ns()}"
    seen: dict[bytes, int] = {}
    lock = threading.Lock()
    stop_consumers, stop_producers = threading.Event(), threading.Event()
    sent: list[int] = [0] * producers
    round_trips: list[list[float]] = [[] for _ in range(producers)]

    def produce(index: int) -> None:
        with Client.connect(url) as client:
            padding = b"x" * max(0, size - 16)
            number = 0
            while not stop_producers.is_set():
                body = b"%02d%014d" % (index, number) + padding
                began = time.perf_counter()
                client.send(destination, body)
                round_trips[index].append(time.perf_counter() - began)
                number += 1
            sent[index] = number

    readers = [threading.Thread(target=_consume, args=(url, destination, seen, stop_consumers, lock))
               for _ in range(consumers)]
    for reader in readers:
        reader.start()
    time.sleep(0.5)  # subscribed
    writers = [threading.Thread(target=produce, args=(index,)) for index in range(producers)]
    cpu, began = _cpu(), time.perf_counter()
    for writer in writers:
        writer.start()
    time.sleep(duration)
    stop_producers.set()
    for writer in writers:
        writer.join()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with lock:
            if sum(seen.values()) >= sum(sent):
                break
        time.sleep(0.05)
    elapsed, cpu = time.perf_counter() - began, _cpu() - cpu
    stop_consumers.set()
    for reader in readers:
        reader.join()
    total = sum(sent)
    delivered = sum(seen.values())
    times = sorted(t for trips in round_trips for t in trips)
    result = {
        "transport": label, "producers": producers, "consumers": consumers, "size": size,
        "sent": total, "delivered": delivered, "lost": total - len(seen),
        "duplicated": sum(count - 1 for count in seen.values() if count > 1),
        "msg_per_s": round(delivered / elapsed, 1),
        "rtt_mean_us": round(statistics.fmean(times) * 1e6, 1) if times else None,
        "rtt_p50_us": round(times[len(times) // 2] * 1e6, 1) if times else None,
        "rtt_p99_us": round(times[int(len(times) * 0.99)] * 1e6, 1) if times else None,
        "process_cpu_us_per_msg": round(cpu * 1e6 / max(1, delivered), 1),
    }
    print(f"{label:<4} {producers}P×{consumers}C {size:>5} B  {result['msg_per_s']:8.0f} msg/s  RTT mean "
          f"{result['rtt_mean_us']:7.1f} µs p50 {result['rtt_p50_us']:7.1f} p99 {result['rtt_p99_us']:7.1f}  "
          f"CPU {result['process_cpu_us_per_msg']:6.1f} µs/msg  lost {result['lost']} dup {result['duplicated']}",
          flush=True)
    return result


def _hop_us(loop: Any, count: int) -> tuple[float, float]:
    """Wall and process CPU µs of one bare hop pair to `loop` and back."""
    def hop() -> None:
        box: queue.SimpleQueue[int] = queue.SimpleQueue()
        loop.call_soon_threadsafe(box.put, 1)
        box.get()

    for _ in range(count // 10):
        hop()
    cpu, began = _cpu(), time.perf_counter()
    for _ in range(count):
        hop()
    return (time.perf_counter() - began) * 1e6 / count, (_cpu() - cpu) * 1e6 / count


async def _in_loop_us(url: str, count: int, pause: float | None) -> float:
    """(On the broker's loop.) The loop thread's CPU µs per receipted SEND of an asyncio client on
    that loop, with `pause` seconds of sleep after each (that sleep's own CPU taken off)."""
    client = FailoverClient.from_url(url)
    await client.start()
    try:
        destination = f"/queue/in-vm-floor-{time.monotonic_ns()}"

        async def timed(send: bool) -> float:
            began = time.thread_time()
            for _ in range(count):
                if send:
                    await client.send(destination, b"x" * 100, None, True)
                if pause is not None:
                    await asyncio.sleep(pause)
            return time.thread_time() - began

        await timed(True)  # warm up
        spent = await timed(True) - (await timed(False) if pause is not None else 0.0)
        return spent * 1e6 / count
    finally:
        await client.close(5)


def floor(loop: Any, urls: dict[str, str]) -> dict[str, Any]:
    wall, cpu = _hop_us(loop, 20_000)
    result: dict[str, Any] = {"hop_us": round(wall, 1), "hop_cpu_us": round(cpu, 1)}
    print(f"hop to the broker's loop and back, nothing done: {wall:.1f} µs (process CPU {cpu:.1f} µs)", flush=True)
    for label in ("vm", "tcp"):
        for name, pause, count in (("busy", None, 20_000), ("after_sleep", 0.001, 3_000)):
            spent = asyncio.run_coroutine_threadsafe(_in_loop_us(urls[label], count, pause), loop).result()
            result[f"in_loop_{label}_{name}_cpu_us"] = round(spent, 1)
            print(f"in-loop receipted SEND, {label}, {name.replace('_', ' ')}: {spent:.1f} µs of loop CPU", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--durable", action="store_true", help="a group of one in a temp dir (receipts fsynced)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--floor", action="store_true", help="first measure the parts of a round trip")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    parts: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="raftmq-in-vm-") as work:
        with EmbeddedBroker(name=NAME, data_dir=Path(work) / "data" if args.durable else None) as broker:
            host, port = broker.addresses[0]
            urls = {"vm": f"vm://{NAME}", "tcp": f"stomp://{host}:{port}"}
            print(f"broker: {'durable (group of one, fsync)' if args.durable else 'in memory'}, pid {os.getpid()}, "
                  f"{os.cpu_count()} CPUs", flush=True)
            if args.floor:
                parts = floor(vm.served(NAME).loop, urls)
            for case in ((1, 1, 100), (4, 4, 1024)):
                for _ in range(args.rounds):
                    for label in ("vm", "tcp"):
                        results.append(run(urls[label], label, *case, args.duration))
    summary = {}
    for producers, consumers, size in ((1, 1, 100), (4, 4, 1024)):
        def mean(label: str, key: str, p: int = producers, c: int = consumers) -> float:
            return statistics.fmean(r[key] for r in results if r["transport"] == label and r["producers"] == p
                                    and r["consumers"] == c)
        key = f"{producers}x{consumers}"
        summary[key] = {
            "rtt_mean_us": {"vm": round(mean("vm", "rtt_mean_us"), 1), "tcp": round(mean("tcp", "rtt_mean_us"), 1)},
            "rtt_vm_over_tcp": round(mean("vm", "rtt_mean_us") / mean("tcp", "rtt_mean_us"), 3),
            "msg_per_s": {"vm": round(mean("vm", "msg_per_s")), "tcp": round(mean("tcp", "msg_per_s"))},
            "throughput_vm_over_tcp": round(mean("vm", "msg_per_s") / mean("tcp", "msg_per_s"), 3),
            "cpu_us_per_msg": {"vm": round(mean("vm", "process_cpu_us_per_msg"), 1),
                               "tcp": round(mean("tcp", "process_cpu_us_per_msg"), 1)},
        }
        print(f"{key}: RTT in-VM ÷ TCP {summary[key]['rtt_vm_over_tcp']:.2f}, throughput in-VM ÷ TCP "
              f"{summary[key]['throughput_vm_over_tcp']:.2f}, CPU/msg {summary[key]['cpu_us_per_msg']}", flush=True)
    if args.json is not None:
        record = {"durable": args.durable, "floor": parts, "runs": results, "summary": summary}
        args.json.write_text(json.dumps(record, indent=2))
    bad = [r for r in results if r["lost"] or r["duplicated"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Cluster connections measured in one sitting (docs/benchmarks.md, "cluster connections").

    .venv/bin/python -m bench.cluster_bench [--duration 60] [--out DIR] [--no-peer]

Starts `raftmq up --preset symmetric` (three groups of three: 9 node processes) in a temp dir,
then runs `raftmq bench` (1 KiB persistent messages, client-individual acks, each case for
--duration seconds):

- 4P×4C, 100 receipts in flight: producers and consumers on g1 (one group), then producers on
  g1 and consumers on g3 (every message forwarded g1 -> g3 by a bridge);
- 1P×1C, each receipt awaited: the same two placements (the latency one hop adds);

recording the CPU time of every node process per case (from /proc), so the CPU a forwarded
message costs reads as the difference; then a redistribution: 10,000 messages wait on g1 with
no consumer anywhere, a consumer subscribes on g2, and the time until it has them all is the
time to move the backlog. Finally (unless --no-peer) the 4P×4C case against a RabbitMQ
quorum queue of three nodes ($RAFTMQ_PEERS_DIR/start_rabbitmq.sh), for scale. Lost and duplicated must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RAFTMQ = [sys.executable, "-m", "raftmq"]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
BACKLOG = 10_000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def nodes(work: Path) -> list[dict[str, Any]]:
    state = json.loads((work / ".raftmq" / "cluster.json").read_text())
    return list(state["nodes"])


def roles(work: Path) -> dict[str, str]:
    status = json.loads(subprocess.run([*RAFTMQ, "status", "--json"], cwd=work, capture_output=True, text=True).stdout)
    return {f"{g['name']}/{n['id']}": n["role"] for g in status["groups"] for n in g["nodes"]}


def url(work: Path, group: str) -> str:
    return "failover:(" + ",".join(f"stomp://{n['client']}" for n in nodes(work) if n["group"] == group) + ")"


def bench(work: Path, out: Path, name: str, args: list[str], duration: float) -> dict[str, Any]:
    pids = {f"{n['group']}/{n['id']}": n["pid"] for n in nodes(work)}
    before = {key: cpu_seconds(pid) for key, pid in pids.items()}
    path = out / f"{name}.json"
    subprocess.run([*RAFTMQ, "bench", "-s", "1024", "--persistent", "--ack", "client-individual", "--duration",
                    str(duration), "-q", "--json", str(path), *args], cwd=work, check=False, stdout=subprocess.DEVNULL)
    after = {key: cpu_seconds(pid) for key, pid in pids.items()}
    result: dict[str, Any] = json.loads(path.read_text())
    result["cpu_s"] = {key: round(after[key] - before[key], 2) for key in pids}
    result["roles"] = roles(work)
    return result


def line(name: str, r: dict[str, Any]) -> str:
    rl, el = r.get("receipt_latency_ms", {}), r.get("e2e_latency_ms", {})
    received = max(1, int(r.get("received", 0)))
    cpu = sum(r.get("cpu_s", {}).values())
    return (f"{name:<24} publish {r['publish_rate']:8.0f} msg/s  e2e {r['consume_rate']:8.0f} msg/s  "
            f"receipt p50 {rl.get('p50', float('nan')):7.2f} p99 {rl.get('p99', float('nan')):8.2f} ms  "
            f"e2e p50 {el.get('p50', float('nan')):8.2f} p99 {el.get('p99', float('nan')):8.2f} ms  "
            f"lost {r.get('lost')} dup {r.get('duplicated')} errors {r.get('errors')}  "
            f"cluster CPU {cpu * 1e6 / received:6.0f} µs/msg")


async def redistribution(work: Path) -> dict[str, Any]:
    from raftmq.client.failover import connect_failover

    destination = f"/queue/redistribution-{int(time.time())}"
    producer = await connect_failover(url(work, "g1"))
    futures = [producer.send_nowait(destination, b"x" * 1024, receipt=True) for _ in range(BACKLOG)]
    for future in futures:
        await future
    await producer.close()
    consumer = await connect_failover(url(work, "g2"))
    got = 0
    done = asyncio.Event()

    def on_message(frame: Any) -> None:
        nonlocal got
        got += 1
        consumer.ack_nowait(frame)
        if got == BACKLOG:
            done.set()

    started = time.monotonic()
    consumer.subscribe(destination, ack="client-individual", prefetch=1000, callback=on_message)
    await asyncio.wait_for(done.wait(), 300)
    elapsed = time.monotonic() - started
    await consumer.close()
    return {"messages": BACKLOG, "seconds": round(elapsed, 2), "msg_per_s": round(BACKLOG / elapsed)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this (e.g. 4x4)")
    parser.add_argument("--no-redistribution", action="store_true")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="raftmq-cluster-bench."))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="raftmq-cluster-run."))
    subprocess.run([*RAFTMQ, "up", "--preset", "symmetric", "--detach"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    results: dict[str, Any] = {}
    try:
        g1, g3 = url(work, "g1"), url(work, "g3")
        cases = [
            ("4x4 one group", ["-p", "4", "-c", "4", "--receipt-window", "100", "--url", g1]),
            ("4x4 g1 -> g3", ["-p", "4", "-c", "4", "--receipt-window", "100", "--url", g1, "--consumer-url", g3]),
            ("1x1 one group", ["-p", "1", "-c", "1", "--receipt-window", "1", "--url", g1]),
            ("1x1 g1 -> g3", ["-p", "1", "-c", "1", "--receipt-window", "1", "--url", g1, "--consumer-url", g3]),
        ]
        for name, case_args in cases:
            if args.only is not None and args.only not in name:
                continue
            results[name] = bench(work, out, name.replace(" ", "_").replace(">", ""), case_args, args.duration)
            print(line(name, results[name]), flush=True)
        if not args.no_redistribution:
            results["redistribution"] = asyncio.run(redistribution(work))
            print(f"redistribution: {BACKLOG} waiting messages moved to a consumer on another group in "
              f"{results['redistribution']['seconds']} s ({results['redistribution']['msg_per_s']} msg/s)", flush=True)
    finally:
        subprocess.run([*RAFTMQ, "down", "--preset", "symmetric"], cwd=work, check=False, stdout=subprocess.DEVNULL)
    peers = Path(os.environ["RAFTMQ_PEERS_DIR"]) if os.environ.get("RAFTMQ_PEERS_DIR") else None
    if not args.no_peer and peers is None:
        print("RabbitMQ run skipped: RAFTMQ_PEERS_DIR is not set (the folder holding start_rabbitmq.sh)", flush=True)
    elif not args.no_peer and not (peers / "start_rabbitmq.sh").exists():
        print(f"RabbitMQ run skipped: {peers / 'start_rabbitmq.sh'} not found (check RAFTMQ_PEERS_DIR)", flush=True)
        peers = None
    if not args.no_peer and peers is not None:
        subprocess.run([str(peers / "start_rabbitmq.sh"), "cluster"], check=True, stdout=subprocess.DEVNULL)
        try:
            path = out / "rabbitmq-4x4.json"
            subprocess.run([*RAFTMQ, "bench", "--url", "stomp://127.0.0.1:61641", "--vhost", "/", "--login", "guest",
                            "--passcode", "guest", "-H", "x-queue-type:quorum", "-s", "1024", "--persistent", "--ack",
                            "client-individual", "--duration", str(args.duration), "-q", "--json", str(path),
                            "-p", "4", "-c", "4", "--receipt-window", "100"], check=False, stdout=subprocess.DEVNULL)
            results["rabbitmq quorum 4x4"] = json.loads(path.read_text())
            print(line("rabbitmq quorum 4x4", results["rabbitmq quorum 4x4"]), flush=True)
        finally:
            subprocess.run([str(peers / "stop_rabbitmq.sh"), "cluster"], check=False, stdout=subprocess.DEVNULL)
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

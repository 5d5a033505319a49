"""STOMP over WebSocket against plain STOMP on the same group, in one sitting
(docs/benchmarks.md, "STOMP over WebSocket").

    .venv/bin/python -m bench.websocket_bench [--duration 30] [--rounds 2] [--out DIR]

Starts `raftmq up` (one group of three, in a temp dir) and drives it with `raftmq bench`
(1 KiB persistent, client-individual ACK of each, 100 receipts in flight per producer,
4 producers and 4 consumers in 2 processes), alternating a `failover:(stomp://...)` URL and a
`failover:(ws://.../ws)` URL of the same three members, `--rounds` times each. For each run:
e2e msg/s and the three nodes' CPU per delivered message (user + system from /proc, every
thread). Prints WebSocket ÷ TCP for both. Lost or duplicated messages make it exit 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.cluster_bench import RAFTMQ, cpu_seconds, nodes

LOAD = ["-s", "1024", "--persistent", "--ack", "client-individual", "--receipt-window", "100", "-p", "4", "-c", "4",
        "--processes", "2"]


def run(work: Path, out: Path, name: str, url: str, duration: float) -> dict[str, Any]:
    pids = {n["id"]: n["pid"] for n in nodes(work)}
    before = {key: cpu_seconds(pid) for key, pid in pids.items()}
    path = out / f"{name}.json"
    subprocess.run([*RAFTMQ, "bench", *LOAD, "--url", url, "--duration", str(duration), "-q", "--json", str(path),
                    "--destination", f"/queue/ws-bench-{name}"], cwd=work, check=False, stdout=subprocess.DEVNULL)
    after = {key: cpu_seconds(pid) for key, pid in pids.items()}
    result: dict[str, Any] = json.loads(path.read_text())
    delivered = max(1, int(result.get("received", 0)))
    result["name"] = name
    result["node_cpu_us_per_msg"] = round(sum(after[k] - before[k] for k in pids) * 1e6 / delivered, 1)
    print(f"{name:<8} e2e {result['consume_rate']:8.0f} msg/s  delivered {delivered:>8}  node CPU "
          f"{result['node_cpu_us_per_msg']:6.1f} µs/msg  lost {result.get('lost')} dup {result.get('duplicated')} "
          f"errors {result.get('errors')}", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="raftmq-ws-bench."))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="raftmq-ws-group."))
    subprocess.run([*RAFTMQ, "up", "--detach"], cwd=work, check=True, stdout=subprocess.DEVNULL)
    results: list[dict[str, Any]] = []
    try:
        members = [n["client"] for n in nodes(work)]
        urls = {"tcp": "failover:(" + ",".join(f"stomp://{m}" for m in members) + ")",
                "ws": "failover:(" + ",".join(f"ws://{m}/ws" for m in members) + ")"}
        for round_ in range(1, args.rounds + 1):
            for kind in ("tcp", "ws"):
                results.append(run(work, out, f"{kind}-{round_}", urls[kind], args.duration))
    finally:
        subprocess.run([*RAFTMQ, "down"], cwd=work, check=False, stdout=subprocess.DEVNULL)
    by_kind = {kind: [r for r in results if r["name"].startswith(kind)] for kind in ("tcp", "ws")}
    rate = {k: sum(r["consume_rate"] for r in v) / len(v) for k, v in by_kind.items()}
    cpu = {k: sum(r["node_cpu_us_per_msg"] for r in v) / len(v) for k, v in by_kind.items()}
    print(f"WebSocket ÷ TCP: e2e ×{rate['ws'] / rate['tcp']:.2f} (aim ≥ ×0.8), "
          f"node CPU per message ×{cpu['ws'] / cpu['tcp']:.2f}")
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")
    return 1 if any(r.get("lost") or r.get("duplicated") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""What one group's message costs at several loads (docs/benchmarks.md, "a group's load curve").

    .venv/bin/python -m bench.load_curve [--duration 20] [--windows 100,4,2] [--json F]

Starts `raftmq up` (one group of three) in a temp dir and drives one queue with `raftmq bench`
(2 producers and 2 consumers, 1 KiB persistent, client-individual ACK of each) once per receipt
window: the fewer receipts a producer keeps in flight, the lower the load. For each it reads the
three node processes' CPU time from /proc (user + system, every thread) before and after, and
prints the messages a second and the CPU per delivered message. A Raft entry's fixed cost is shared
by the messages it carries, so a group at a third of its load pays more per message: what the
symmetric preset's groups pay on a machine whose two cores they share.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster_bench import RAFTMQ, cpu_seconds, nodes

SETTLE_SECONDS = 5.0


def run(work: Path, window: int, duration: float) -> dict[str, Any]:
    members = nodes(work)
    url = "failover:(" + ",".join(f"stomp://{n['client']}" for n in members) + ")"
    before = {n["pid"]: cpu_seconds(n["pid"]) for n in members}
    done = subprocess.run([*RAFTMQ, "bench", "--url", url, "-p", "2", "-c", "2", "--duration", str(duration),
                           "--receipt-window", str(window), "-q", "--json", "-"],
                          cwd=work, capture_output=True, text=True, check=False)
    after = {n["pid"]: cpu_seconds(n["pid"]) for n in members}
    result = json.loads(done.stdout[done.stdout.index("{"):])
    received = int(result["received"])
    cpu = sum(after[pid] - before[pid] for pid in after)
    return {"receipt_window": window, "consume_rate": result["consume_rate"], "received": received,
            "lost": result["lost"], "duplicated": result["duplicated"], "node_cpu_s": round(cpu, 3),
            "node_cpu_us_per_msg": round(1e6 * cpu / received, 1) if received else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--windows", default="100,4,2", help="receipt windows, comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="load-curve-") as name:
        work = Path(name)
        subprocess.run([*RAFTMQ, "up", "--detach"], cwd=work, check=True, stdout=subprocess.DEVNULL)
        try:
            time.sleep(SETTLE_SECONDS)
            for window in (int(w) for w in args.windows.split(",")):
                r = run(work, window, args.duration)
                results.append(r)
                print(f"receipt window {window:>4}: {r['consume_rate']:>9,.0f} msg/s, "
                      f"{r['node_cpu_us_per_msg']} µs/msg of the three nodes' CPU, "
                      f"lost {r['lost']} dup {r['duplicated']}", flush=True)
        finally:
            subprocess.run([*RAFTMQ, "down"], cwd=work, check=False, stdout=subprocess.DEVNULL)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 1 if any(r["lost"] or r["duplicated"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""What idle members cost, and what an idle group's commit takes (docs/benchmarks.md, "idle
members").

    .venv/bin/python -m bench.idle_members [--preset symmetric] [--duration 20] [--sends 200] [--json F]

Starts `raftmq up --detach --preset PRESET` in a temp dir, lets it settle for 5 s, then reads
every node process's CPU time from /proc over DURATION s with no client anywhere (user + system,
every thread; the main thread, which runs the asyncio loop, counted apart from the others, which
are pysyncobj's tick thread and helpers). Then it sends SENDS receipted messages to g1's leader
one at a time (each receipt awaited, a pause of 50 ms between them so the group is idle when each
arrives) and prints the receipt round trip's p50 and p99. `raftmq down` at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster_bench import CLOCK_TICKS, RAFTMQ, cpu_seconds, nodes, roles

SETTLE_SECONDS = 5.0


def thread_cpu(pid: int) -> tuple[float, float]:
    """(main thread's CPU seconds, the other threads' together) of process `pid`."""
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended meanwhile
        used = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if int(task.name) == pid:
            main += used
        else:
            other += used
    return main, other


def receipt_round_trips(address: str, sends: int) -> list[float]:
    from raftmq.client.sync import Client

    times = []
    with Client.connect(f"failover:(stomp://{address})") as client:
        client.send("/queue/idle-probe", "warm-up")
        for i in range(sends):
            time.sleep(0.05)
            started = time.perf_counter()
            client.send("/queue/idle-probe", f"probe {i}")  # returns on the RECEIPT
            times.append(time.perf_counter() - started)
    return times


def measure(work: Path, preset: str, duration: float, sends: int) -> dict[str, Any]:
    subprocess.run([*RAFTMQ, "up", "--detach", "--preset", preset], cwd=work, check=True, stdout=subprocess.DEVNULL)
    try:
        time.sleep(SETTLE_SECONDS)
        members = {f"{n['group']}/{n['id']}": n for n in nodes(work)}
        before = {key: (cpu_seconds(n["pid"]), *thread_cpu(n["pid"])) for key, n in members.items()}
        started = time.monotonic()
        time.sleep(duration)
        wall = time.monotonic() - started
        after = {key: (cpu_seconds(n["pid"]), *thread_cpu(n["pid"])) for key, n in members.items()}
        used = {key: [round(a - b, 3) for a, b in zip(after[key], before[key], strict=True)] for key in members}
        role = roles(work)
        leader = next(key for key in sorted(members) if key.startswith("g1/") and role.get(key) == "leader")
        trips = sorted(receipt_round_trips(members[leader]["client"], sends))
    finally:
        subprocess.run([*RAFTMQ, "down", "--preset", preset], cwd=work, check=False, stdout=subprocess.DEVNULL)
    total = sum(u[0] for u in used.values())
    return {
        "preset": preset, "members": len(members), "wall_s": round(wall, 2),
        "cores_used": round(total / wall, 4),
        "loop_threads_cores": round(sum(u[1] for u in used.values()) / wall, 4),
        "other_threads_cores": round(sum(u[2] for u in used.values()) / wall, 4),
        "per_member_cpu_s": {key: {"total": u[0], "main": u[1], "others": u[2], "role": role.get(key)}
                             for key, u in used.items()},
        "receipt_ms": {"sends": len(trips), "p50": round(1e3 * statistics.median(trips), 2),
                       "p99": round(1e3 * trips[int(0.99 * (len(trips) - 1))], 2)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="symmetric")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="idle-members-") as work:
        result = measure(Path(work), args.preset, args.duration, args.sends)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"{result['members']} idle members ({result['preset']}) over {result['wall_s']} s: "
          f"{result['cores_used']:.3f} of a core (loop threads {result['loop_threads_cores']:.3f}, "
          f"others {result['other_threads_cores']:.3f}); receipted SEND on idle g1: "
          f"p50 {result['receipt_ms']['p50']} ms, p99 {result['receipt_ms']['p99']} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

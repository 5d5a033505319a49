"""One hot queue over the groups of a cluster, against one group, in one sitting
(docs/benchmarks.md, "one hot queue").

    .venv/bin/python -m bench.hot_queue [--duration 30] [--out DIR] [--only NAME] [--policy ON_DEMAND]

Starts `raftmq up` (one group of three) and then `raftmq up --preset symmetric` (three groups of
three, LOCAL_FIRST), each in a temp dir, and drives one queue with `raftmq bench` (1 KiB
persistent, client-individual ACK of each, 100 receipts in flight per producer), a load
generator (an OS process: 2 producers and 2 consumers) per group leader:

- `one group`: three generators, all on the one group;
- `one group, a third`: one generator on the one group: what each group of `symmetric` carries
  (`--only "a third"` runs it alone; `--only "one group"` both);
- `symmetric`: one generator on each group's leader, the same queue everywhere;
- `g1 -> all`: 4 producers on g1, 2 consumers on each of g1, g2 and g3;
- `g1 -> g1`: 4 producers and 4 consumers on g1, the other groups idle: every message local,
  in the same nine processes as the next case;
- `g1 -> g3`: 4 producers on g1, 4 consumers on g3: every message forwarded (one hop);
- `slow alone` / `slow + idle`: 2 producers on g1 sending `--slow-messages` messages; one
  consumer on g1 that works 1 ms on each message, alone, then with one idle consumer on each of
  g2 and g3: how much faster the queue drains.

For each case it reads every node's CPU time from /proc before and after (user + system, all
threads) and divides by the messages delivered, and it reads how many messages each group's
bridges forwarded (`raftmq status --json`). Lost and duplicated must be 0: the script exits 1
otherwise. The JSON of each run and a summary.json go to --out.

`--policy NAME` runs the three groups with another `message_load_balancing` (the preset's
files copied into the run directory with that one key changed): `ON_DEMAND` gives the figures
from before LOCAL_FIRST existed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.cluster_bench import RAFTMQ, REPO, cpu_seconds, nodes, url

GENERATOR = ["-s", "1024", "--persistent", "--ack", "client-individual", "--receipt-window", "100"]


def forwarded(work: Path) -> dict[str, tuple[int, int]]:
    """(messages, batch frames of the store path) each group's bridges have forwarded so far (its
    leader's links), whether first or from the store-and-forward queue."""
    done = subprocess.run([*RAFTMQ, "status", "--json"], cwd=work, capture_output=True, text=True, check=False)
    try:
        groups = json.loads(done.stdout)["groups"]
    except (ValueError, KeyError):
        return {}
    return {g["name"]: (sum(int(link.get("forwarded") or 0) + int(link.get("forwarded_first") or 0)
                            for link in g.get("links", [])),
                        sum(int(link.get("batches") or 0) for link in g.get("links", []))) for g in groups}


def run_case(work: Path, out: Path, name: str, args: list[str]) -> dict[str, Any]:
    pids = {f"{n['group']}/{n['id']}": n["pid"] for n in nodes(work)}
    before, moved_before = {key: cpu_seconds(pid) for key, pid in pids.items()}, forwarded(work)
    path = out / f"{name.replace(' ', '_').replace('>', '').replace('+', 'and')}.json"
    started = time.monotonic()
    subprocess.run([*RAFTMQ, "bench", *GENERATOR, "-q", "--json", str(path), *args], cwd=work, check=False,
                   stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after, moved_after = {key: cpu_seconds(pid) for key, pid in pids.items()}, forwarded(work)
    result: dict[str, Any] = json.loads(path.read_text())
    result["case"] = name
    result["bench_wall_s"] = round(wall, 2)
    result["cpu_s"] = {key: round(after[key] - before[key], 3) for key in pids}
    delivered = max(1, int(result.get("received", 0)))
    result["node_cpu_us_per_msg"] = round(sum(result["cpu_s"].values()) * 1e6 / delivered, 1)
    result["forwarded"] = {g: moved_after[g][0] - moved_before.get(g, (0, 0))[0] for g in moved_after}
    result["batches"] = {g: moved_after[g][1] - moved_before.get(g, (0, 0))[1] for g in moved_after}
    return result


def line(r: dict[str, Any]) -> str:
    moved = sum(r["forwarded"].values())
    batches = sum(r.get("batches", {}).values())
    received = max(1, int(r.get("received", 0)))
    return (f"{r['case']:<14} e2e {r['consume_rate']:8.0f} msg/s  delivered {r.get('received', 0):>8}  "
            f"node CPU {r['node_cpu_us_per_msg']:7.1f} µs/msg  "
            f"forwarded {moved:>7} ({100 * moved / received:4.1f} %, {batches} batches)  "
            f"lost {r.get('lost')} dup {r.get('duplicated')} errors {r.get('errors')}")


def up(work: Path, preset: str | None) -> None:
    subprocess.run([*RAFTMQ, "up", "--detach", *_selection(work, preset)], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)


def down(work: Path, preset: str | None) -> None:
    subprocess.run([*RAFTMQ, "down", *_selection(work, preset)], cwd=work, check=False, stdout=subprocess.DEVNULL)


def _selection(work: Path, preset: str | None) -> list[str]:
    if preset is None:
        return []
    copied = work / f"{preset}.toml"  # written by `with_policy`
    return ["--config", str(copied)] if copied.exists() else ["--preset", preset]


def with_policy(work: Path, policy: str) -> None:
    """The symmetric preset's files in `work`, with `message_load_balancing = policy`."""
    for source in sorted((REPO / "configs").glob("symmetric*.toml")):
        if source.name.startswith("symmetric-lite"):
            continue
        text = source.read_text()
        if source.name == "symmetric.toml":
            text, count = re.subn(r'^message_load_balancing = ".*"$', f'message_load_balancing = "{policy}"', text,
                                  flags=re.MULTILINE)
            if count != 1:
                raise SystemExit(f"{source}: no message_load_balancing line to change")
        (work / source.name).write_text(text)



def run_symmetric(args: argparse.Namespace, out: Path, wanted: Any, duration: list[str],
                  results: dict[str, Any]) -> None:
    """The cases on the symmetric preset's nine nodes."""
    work = Path(tempfile.mkdtemp(prefix="raftmq-hot-symmetric."))
    if args.policy is not None:
        with_policy(work, args.policy)
    up(work, "symmetric")
    try:
        g1, g2, g3 = url(work, "g1"), url(work, "g2"), url(work, "g3")
        slow = ["-n", str(args.slow_messages), "-p", "2", "--slow-consumers", "1", "--consumer-work-ms", "1",
                "--drain-timeout", "120"]
        cases = [
            ("symmetric", ["--url", g1, "--url", g2, "--url", g3, "-p", "6", "-c", "6", "--processes", "3", *duration]),
            ("g1 -> all", ["--url", g1, "--consumer-url", g1, "--consumer-url", g2, "--consumer-url", g3,
                           "-p", "4", "-c", "6", "--processes", "3", *duration]),
            ("g1 -> g1", ["--url", g1, "--consumer-url", g1, "-p", "4", "-c", "4", "--processes", "2", *duration]),
            ("g1 -> g3", ["--url", g1, "--consumer-url", g3, "-p", "4", "-c", "4", "--processes", "2", *duration]),
            ("slow alone", ["--url", g1, "-c", "1", *slow]),
            ("slow + idle", ["--url", g1, "--consumer-url", g1, "--consumer-url", g2, "--consumer-url", g3,
                             "-c", "3", *slow]),
        ]
        for name, case_args in cases:
            if wanted(name):
                destination = f"/queue/hot-{name.split()[0]}-{int(time.time())}"
                results[name] = run_case(work, out, name, [*case_args, "--destination", destination])
                print(line(results[name]), flush=True)
    finally:
        down(work, "symmetric")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of sending per throughput case")
    parser.add_argument("--slow-messages", type=int, default=20_000, help="messages of the slow-consumer cases")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this")
    parser.add_argument("--policy", default=None,
                        help="the three groups' message_load_balancing (default: the preset's)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="raftmq-hot-queue."))
    out.mkdir(parents=True, exist_ok=True)
    duration = ["--duration", str(args.duration)]
    queue = ["--destination", f"/queue/hot-{int(time.time())}"]
    results: dict[str, Any] = {}

    def wanted(name: str) -> bool:
        return args.only is None or args.only in name

    if wanted("one group") or wanted("one group, a third"):
        work = Path(tempfile.mkdtemp(prefix="raftmq-hot-one."))
        up(work, None)
        try:
            g = url(work, "g1")
            one = [("one group", ["--url", g, "--url", g, "--url", g, "-p", "6", "-c", "6", "--processes", "3"]),
                   ("one group, a third", ["--url", g, "-p", "2", "-c", "2", "--processes", "1"])]
            for name, case_args in one:
                if wanted(name):
                    results[name] = run_case(work, out, name, [*case_args, *duration, *queue])
                    print(line(results[name]), flush=True)
        finally:
            down(work, None)
    symmetric_cases = ("symmetric", "g1 -> all", "g1 -> g1", "g1 -> g3", "slow alone", "slow + idle")
    if any(wanted(name) for name in symmetric_cases):
        run_symmetric(args, out, wanted, duration, results)
    if "one group" in results and "symmetric" in results:
        ratio = results["symmetric"]["node_cpu_us_per_msg"] / results["one group"]["node_cpu_us_per_msg"]
        print(f"nine nodes ÷ three, CPU per delivered message: ×{ratio:.2f} (aim ≤ ×1.25)")
    if "g1 -> g1" in results and "g1 -> g3" in results:
        ratio = results["g1 -> g3"]["node_cpu_us_per_msg"] / results["g1 -> g1"]["node_cpu_us_per_msg"]
        print(f"a forwarded message ÷ a local one, same nine nodes, CPU: ×{ratio:.2f} (aim ≤ ×1.3)")
    if "one group" in results and "g1 -> g3" in results:
        ratio = results["g1 -> g3"]["node_cpu_us_per_msg"] / results["one group"]["node_cpu_us_per_msg"]
        print(f"a forwarded message in nine nodes ÷ a local one in three, CPU: ×{ratio:.2f}")
    if "slow alone" in results and "slow + idle" in results:
        ratio = results["slow + idle"]["consume_rate"] / max(1.0, results["slow alone"]["consume_rate"])
        print(f"slow consumer plus idle ones elsewhere ÷ slow consumer alone, drain rate: ×{ratio:.2f} (aim ≥ ×2)")
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")
    bad = [name for name, r in results.items() if r.get("lost") or r.get("duplicated")]
    if bad:
        print(f"lost or duplicated messages in: {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

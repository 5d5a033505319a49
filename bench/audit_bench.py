"""How fast `raftmq audit` reads and judges, on local[2] and on a two-worker standalone cluster
of this machine, and whether it finds every planted anomaly and nothing else.

    .venv/bin/python -m bench.audit_bench synthetic --messages 1090000 --dir /tmp/audit-bench
    .venv/bin/python -m bench.audit_bench runs runs/          # e.g. a chaos matrix's directory

`synthetic` writes (once; reused when it is there) a run of 3 groups of 3 members with
`--messages` queue messages per group (about 10 million journal records over the 9 members at
the default) and one anomaly of each kind planted at known places (planted.json). `runs`
audits existing run directories. Each master audits the same input in a process of its own
(`raftmq audit --json`); the table gives wall time, the audit's own time, journal records per
second, and, for a synthetic run, planted anomalies found and findings nobody planted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from spark_audit.standalone import StandaloneCluster
from spark_audit.synth import make_run

RAFTMQ = str(Path(sys.executable).parent / "raftmq")


def audit(target: Path, out: Path, master: list[str]) -> tuple[float, dict[str, object]]:
    started = time.monotonic()
    done = subprocess.run([RAFTMQ, "audit", str(target), "--out", str(out), "--json", "--sample", "10000", *master],
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"raftmq audit failed ({done.returncode}): {done.stderr[-3000:]}")
    return wall, json.loads(done.stdout)


def judge(report: dict[str, object], planted: list[dict[str, object]]) -> str:
    """'found F of P planted; N unplanted' by (check, item) with multiplicity."""
    expected = Counter((p["check"], str(item)) for p in planted for item in p["items"])  # type: ignore[union-attr]
    got = Counter((f["check"], str(f["item"])) for f in report["findings"])  # type: ignore[index, union-attr]
    found = sum(min(n, got[key]) for key, n in expected.items())
    extra = sum(max(0, n - expected[key]) for key, n in got.items())
    return f"found {found} of {sum(expected.values())} planted; {extra} unplanted"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["synthetic", "runs"])
    parser.add_argument("path", nargs="?", type=Path, help="runs: the run directories' directory")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "audit-bench")
    parser.add_argument("--messages", type=int, default=1_090_000, help="per group (synthetic)")
    parser.add_argument("--workers", type=int, default=2, help="of the standalone cluster (0: local only)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    planted: list[dict[str, object]] | None = None
    if args.what == "synthetic":
        target = args.dir / f"synthetic-{args.messages}"
        if not (target / "planted.json").exists():
            started = time.monotonic()
            made = make_run(args.dir, target.name, messages=args.messages, plant=True)
            print(f"wrote {target}: {made.records:,} journal records in {time.monotonic() - started:.0f} s", flush=True)
        planted = json.loads((target / "planted.json").read_text())
    else:
        if args.path is None:
            parser.error("runs needs the directory of run directories")
        target = args.path
    masters: list[tuple[str, list[str]]] = [("local[2]", ["--master", "local[2]"])]
    rows = []
    for name, option in masters:
        wall, report = audit(target, args.dir / "out-local", option)
        rows.append((name, wall, report))
    if args.workers:
        with StandaloneCluster(args.dir / "spark", workers=args.workers, cores=1, memory="3g") as cluster:
            wall, report = audit(target, args.dir / "out-standalone", ["--master", cluster.master])
            rows.append((f"standalone, {args.workers} workers x 1 core", wall, report))
    for name, wall, report in rows:
        records = int(report["records"])  # type: ignore[call-overload]
        seconds = float(report["seconds"])  # type: ignore[arg-type]
        runs = report["runs"]
        clean = sum(1 for run in runs if run["clean"])  # type: ignore[union-attr, index]
        verdict = judge(report, planted) if planted is not None else f"{clean} of {len(runs)} runs clean"  # type: ignore[arg-type]
        print(f"{name:32} {len(runs):4} run(s) {records:>12,} records  audit {seconds:7.1f} s  wall {wall:7.1f} s  "  # type: ignore[arg-type]
              f"{records / seconds:>9,.0f} records/s  {verdict}")


if __name__ == "__main__":
    main()

"""Where a group's CPU goes by library: an on-CPU profile (Linux perf) of the three node
processes under the 4P×4C load of bench/cpu_budget.py, summed per process by shared object.

    .venv/bin/python -m bench.cpu_by_library [--duration 30] [--settle 12] [--sample 10] [--out DIR]

Runs `bench.cpu_budget --duration D --threads` and, after `--settle` seconds, records every
thread of the three `raftmq node` processes with `perf record -F 999` for `--sample` seconds
(needs root or perf_event_paranoid <= 1; Debian package linux-perf). perf samples only threads
that are on a CPU, so a thread waiting for the GIL, a socket or fsync counts nothing: the shares
are of CPU actually spent. Each process's samples are split between the interpreter
(libpython: object allocation, dict and attribute lookups, calls, the eval loop of the modules
that are not compiled), the compiled hot modules (raftmq/compiled.py), the kernel, libc
(malloc, memcpy), msgpack, lz4, uvloop and the rest. cpu_budget's own table (µs per message by
process and thread) is printed first; perf's overhead makes its figures a little higher than a
run without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

LIBRARIES = (  # (label, substring of the shared object's name), first match wins
    ("interpreter (libpython)", "libpython"),
    ("compiled hot modules", "__mypyc"),
    ("kernel", "[kernel"),
    ("libc (malloc, memcpy)", "libc.so"),
    ("msgpack", "msgpack"),
    ("lz4", "_frame."),
    ("lz4", "_block."),
    ("uvloop", "loop.cpython"),
)
ROW = re.compile(r"\s*([\d.]+)%\s+(\d+):\S*\s+(.*\S)")


def library(shared_object: str) -> str:
    return next((label for label, part in LIBRARIES if part in shared_object), "other")


def node_threads() -> dict[int, tuple[int, str]]:
    """Thread id -> (process id, `--node` name) of every live `raftmq node` of a bench group."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            tasks = [int(task.name) for task in (entry / "task").iterdir()]
        except OSError:
            continue
        if b"node" in argv and b"--node" in argv and any(b"raftmq-bench-" in arg for arg in argv):
            name = argv[argv.index(b"--node") + 1].decode()
            found.update({tid: (int(entry.name), name) for tid in tasks})
    return found


def shares(report: str, threads: dict[int, tuple[int, str]]) -> dict[str, dict[str, float]]:
    """`perf report --sort pid,dso` text -> per node name, percent of all samples by library."""
    by_node: dict[str, dict[str, float]] = {}
    for line in report.splitlines():
        match = ROW.match(line)
        if match is None or int(match[2]) not in threads:
            continue
        counts = by_node.setdefault(threads[int(match[2])][1], {})
        label = library(match[3])
        counts[label] = counts.get(label, 0.0) + float(match[1])
    return by_node


@click.command()
@click.option("--duration", default=30.0, show_default=True, help="seconds of sending (cpu_budget --duration)")
@click.option("--settle", default=12.0, show_default=True, help="seconds before perf starts")
@click.option("--sample", default=10.0, show_default=True, help="seconds perf records")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="where perf.data and the report stay")
def main(duration: float, settle: float, sample: float, out: Path | None) -> None:
    if shutil.which("perf") is None:
        raise click.ClickException("perf is not installed (Debian: apt-get install linux-perf)")
    if settle + sample >= duration:
        raise click.ClickException("--settle + --sample must end before --duration does")
    out = out or Path(tempfile.mkdtemp(prefix="raftmq-perf-"))
    out.mkdir(parents=True, exist_ok=True)
    bench = subprocess.Popen([sys.executable, "-m", "bench.cpu_budget", "--duration", str(duration), "--threads"])
    try:
        time.sleep(settle)
        threads = node_threads()
        if len({pid for pid, _ in threads.values()}) != 3:
            raise click.ClickException(f"expected the bench's 3 node processes, found {sorted({n for _, n in threads.values()})}")
        pids = ",".join(str(pid) for pid in sorted({pid for pid, _ in threads.values()}))
        recorded = subprocess.run(["perf", "record", "-F", "999", "-p", pids, "-o", str(out / "perf.data"), "--",
                                   "sleep", str(sample)], capture_output=True, text=True, check=False)
        if recorded.returncode != 0:
            raise click.ClickException(f"perf record failed: {recorded.stderr.strip()[-400:]}")
        threads.update(node_threads())  # threads started meanwhile
    finally:
        bench.wait(timeout=duration + 120)
    report = subprocess.run(["perf", "report", "-i", str(out / "perf.data"), "--no-children", "--sort", "pid,dso",
                             "--stdio", "-g", "none"], capture_output=True, text=True, check=True).stdout
    (out / "report.txt").write_text(report, encoding="utf-8")
    by_node = shares(report, threads)
    labels = sorted({label for counts in by_node.values() for label in counts},
                    key=lambda label: -sum(counts.get(label, 0.0) for counts in by_node.values()))
    print(f"\nshare of each node's on-CPU samples by library ({sample:g} s of perf at 999 Hz; {out})")
    print(f"{'':26}" + "".join(f"{name:>10}" for name in sorted(by_node)))
    for label in labels:
        print(f"{label:26}" + "".join(f"{100 * by_node[name].get(label, 0.0) / sum(by_node[name].values()):>9.1f}%"
                                      for name in sorted(by_node)))


if __name__ == "__main__":
    main()

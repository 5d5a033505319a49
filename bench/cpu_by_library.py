"""Where a group's CPU goes by library: an on-CPU profile (Linux perf) of the three node
processes under the 4P×4C load of bench/cpu_budget.py, summed per process by shared object.

    .venv/bin/python -m bench.cpu_by_library [--duration 30] [--settle 12] [--sample 10] [--out DIR]

Starts a fresh 3-node group, runs the 4P×4C / 100-in-flight load for `--duration` seconds (as
bench/profile_stages.py does) and, after `--settle` seconds, records every thread of the three
nodes with `perf record -F 999` for `--sample` seconds
(needs root or perf_event_paranoid <= 1; Debian package linux-perf). perf samples only threads
that are on a CPU, so a thread waiting for the GIL, a socket or fsync counts nothing: the shares
are of CPU actually spent. Each process's samples are split between the interpreter
(libpython: object allocation, dict and attribute lookups, calls, the eval loop of the modules
that are not compiled), the compiled hot modules (raftmq/compiled.py), the kernel, libc
(malloc, memcpy), msgpack, lz4, uvloop and the rest; bench/cpu_budget.py gives the µs per
message they are shares of.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import click

from bench.node_group import NodeGroup, install_signal_handlers
from bench.profile_stages import start_load

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


def threads_of(pid: int) -> list[int]:
    """The thread ids of a live process (perf reports each thread under its own id)."""
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


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
@click.option("--duration", default=30.0, show_default=True, help="seconds of 4P×4C sending")
@click.option("--settle", default=12.0, show_default=True, help="seconds before perf starts")
@click.option("--sample", default=10.0, show_default=True, help="seconds perf records")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="where perf.data and the report stay")
def main(duration: float, settle: float, sample: float, out: Path | None) -> None:
    install_signal_handlers()
    if shutil.which("perf") is None:
        raise click.ClickException("perf is not installed (Debian: apt-get install linux-perf)")
    if settle + sample >= duration:
        raise click.ClickException("--settle + --sample must end before --duration does")
    out = out or Path(tempfile.mkdtemp(prefix="raftmq-perf-"))
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / "bench.json"
    with NodeGroup.create(size=3) as group:
        leader, bench = start_load(group, result_path, duration)
        roles = {node_id: ("leader" if node_id == leader else "follower") for node_id in sorted(group.members)}
        pids = {node_id: pid for node_id in roles if (pid := group.members[node_id].pid)}
        try:
            time.sleep(settle)
            recorded = subprocess.run(["perf", "record", "-F", "999", "-p", ",".join(map(str, pids.values())),
                                       "-o", str(out / "perf.data"), "--", "sleep", str(sample)],
                                      capture_output=True, text=True, check=False)
            if recorded.returncode != 0:
                raise click.ClickException(f"perf record failed: {recorded.stderr.strip()[-400:]}")
            threads = {tid: (pid, f"{node_id} ({roles[node_id]})") for node_id, pid in pids.items()
                       for tid in threads_of(pid)}
            bench.communicate(timeout=duration * 4 + 120)
        finally:
            if bench.poll() is None:
                bench.kill()
    result = json.loads(result_path.read_text())
    report = subprocess.run(["perf", "report", "-i", str(out / "perf.data"), "--no-children", "--sort", "pid,dso",
                             "--stdio", "-g", "none"], capture_output=True, text=True, check=True).stdout
    (out / "report.txt").write_text(report, encoding="utf-8")
    by_node = shares(report, threads)
    names = sorted(by_node)
    labels = sorted({label for counts in by_node.values() for label in counts},
                    key=lambda label: -sum(counts.get(label, 0.0) for counts in by_node.values()))
    print(f"bench: {result['consume_rate']:,.0f} msg/s delivered, lost {result['lost']}, "
          f"duplicated {result['duplicated']}")
    print(f"share of each node's on-CPU samples by library ({sample:g} s of perf at 999 Hz; {out})")
    print(f"{'':26}" + "".join(f"{name:>16}" for name in names))
    for label in labels:
        print(f"{label:26}" + "".join(f"{100 * by_node[name].get(label, 0.0) / sum(by_node[name].values()):>15.1f}%"
                                      for name in names))


if __name__ == "__main__":
    main()

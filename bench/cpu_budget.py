"""Where the CPU goes: CPU seconds per message of each process in a 3-node group run.

    .venv/bin/python -m bench.cpu_budget [--messages 20000 | --duration 30] [--processes 1] [--threads] [--load stomp]

Starts a 3-node group (as bench/side_by_side.py does), runs the 4P×4C / 100-receipts-in-flight
case once with `raftmq bench` (or, `--load stomp`, with the independent stomp.py load of
bench/stomp_load.py), and reads user+system CPU time from /proc for every node and for
the bench (the bench's own children included, via RUSAGE_CHILDREN) before and after.

Two ways of counting, side by side:
- "per message sent": CPU ÷ the messages asked for (`--messages`), as this script always did;
- "whole process": CPU ÷ the messages delivered (first receptions at the consumers). Either
  way the CPU is every thread of the process from the bench's start to its end, idle ticks and
  the drain included. `--duration` makes the run sustained (that many seconds of sending, as
  the CPU issue's figures are counted: 20 s or more), and then only the whole-process way has a
  meaning.

Why: on a machine with C cores, e2e msg/s can never exceed C / (sum of CPU seconds per message
over all processes). This prints that ceiling next to the measured rate, so a throughput aim
can be checked against what the hardware allows before tuning further.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from bench.bench_cases import CASES, Case, bench_command, declare_queue, new_destination, run_bench
from bench.node_group import NodeGroup, install_signal_handlers

console = Console(width=None if sys.stdout.isatty() else 120)
TICKS = os.sysconf("SC_CLK_TCK")


def _commit_index(group: NodeGroup, node_id: str) -> int:
    """The member's Raft commit index (its admin /status), or 0 when it does not answer."""
    status = group.status(node_id)
    return int(status["raft"]["commit_index"]) if status is not None else 0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of one live process, from /proc/<pid>/stat (fields 14 and 15 of proc(5))."""
    return _cpu_seconds_of(Path(f"/proc/{pid}/stat"))


def _thread_cpu(pid: int) -> dict[str, float]:
    """utime + stime of each live thread of `pid`, by thread id ("main" for the process's own)."""
    found: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found["main" if task.name == str(pid) else task.name] = _cpu_seconds_of(task / "stat")
        except OSError:
            continue  # the thread ended
    return found


def _cpu_seconds_of(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@click.command()
@click.option("--messages", "-n", default=20000, show_default=True)
@click.option("--duration", type=float, default=None, help="send for this many seconds instead of --messages")
@click.option("--processes", default=1, show_default=True, help="`raftmq bench --processes`")
@click.option("--threads", is_flag=True, help="also each node's threads: the event loop (main) and "
              "pysyncobj's tick thread (the only other one that works under load)")
@click.option("--load", "load_tool", type=click.Choice(["raftmq", "stomp"]), default="raftmq", show_default=True,
              help="the load: `raftmq bench`, or the independent stomp.py tool bench/stomp_load.py "
              "(needs --duration; the same 4P×4C, 100 receipts in flight, 1 KiB persistent, ack each)")
def main(messages: int, duration: float | None, processes: int, threads: bool, load_tool: str) -> None:
    if load_tool == "stomp" and not duration:
        raise click.UsageError("--load stomp needs --duration")
    install_signal_handlers()
    case = CASES[0]
    with NodeGroup.create(size=3) as group:
        leader = group.start_all(timeout=60)
        group.wait_live(timeout=60)
        url = group.members[leader].client_url
        destination = new_destination(case)
        declare_queue(url, destination, ())
        if load_tool == "stomp":
            assert duration is not None
            command = _stomp_load_command(url, case, destination, duration)
        else:
            command = bench_command(url, case, destination, messages, 0, processes, (), Path("result.json"), duration)
        pids = {node_id: member.pid for node_id, member in group.members.items()}
        before = {node_id: _cpu_seconds(pid) for node_id, pid in pids.items() if pid}
        threads_before = {node_id: _thread_cpu(pid) for node_id, pid in pids.items() if pid}
        bench_before = _children_cpu()
        index_before = _commit_index(group, leader)
        started = time.monotonic()
        result = run_bench(command, messages, duration)
        wall = time.monotonic() - started
        entries = _commit_index(group, leader) - index_before
        after = {node_id: _cpu_seconds(pid) for node_id, pid in pids.items() if pid}
        threads_after = {node_id: _thread_cpu(pid) for node_id, pid in pids.items() if pid}
        bench_cpu = _children_cpu() - bench_before
    rows = [(f"node {node_id}" + (" (leader)" if node_id == leader else ""), after[node_id] - before[node_id])
            for node_id in before]
    rows.append(("raftmq bench (client)" if load_tool == "raftmq" else "bench.stomp_load (stomp.py client)", bench_cpu))
    total = sum(cpu for _, cpu in rows)
    cores = os.cpu_count() or 1
    delivered = int(result["received"])
    load = f"{duration:g} s of sending" if duration else f"{messages:,} msgs"
    tool = "" if load_tool == "raftmq" else ", stomp.py load"
    table = Table(title=f"CPU per message, {load}{tool}, 4P×4C window 100, {cores} cores; {delivered:,} delivered")
    table.add_column("process")
    table.add_column("CPU s", justify="right")
    if not duration:
        table.add_column("µs / msg sent", justify="right")
    table.add_column("µs / msg, whole process", justify="right")
    for name, cpu in [*rows, ("total", total)]:
        per_sent = [] if duration else [f"{cpu / messages * 1e6:.1f}"]
        table.add_row(name, f"{cpu:.2f}", *per_sent, f"{cpu / max(delivered, 1) * 1e6:.1f}")
    console.print(table)
    if threads:
        for node_id, now in threads_after.items():
            busy = {tid: cpu - threads_before[node_id].get(tid, 0.0) for tid, cpu in now.items()}
            shown = ", ".join(f"{tid} {cpu / max(delivered, 1) * 1e6:.1f} µs" for tid, cpu in
                              sorted(busy.items(), key=lambda item: -item[1]) if cpu / max(delivered, 1) * 1e6 >= 0.1)
            console.print(f"node {node_id} threads: {shown}")
    console.print(f"wall {wall:.1f} s (process start-up included); measured e2e {result['consume_rate']:,.0f} msg/s; "
                  f"lost {result['lost']}, duplicated {result['duplicated']}")
    if entries > 0:  # what the costs per Raft entry (journal write, fdatasync, wire) are shared by
        console.print(f"Raft entries committed: {entries:,}, {delivered / entries:.1f} delivered messages per entry")
    console.print(f"CPU ceiling on {cores} cores: {cores / (total / max(delivered, 1)):,.0f} msg/s "
                  f"(nodes alone: {cores / ((total - bench_cpu) / max(delivered, 1)):,.0f} msg/s)")


def _stomp_load_command(url: str, case: Case, destination: str, duration: float) -> list[str]:
    return [sys.executable, "-m", "bench.stomp_load", "--url", url, "--destination", destination,
            "-p", str(case.producers), "-c", str(case.consumers), "--window", str(case.receipt_window), "-s", "1024",
            "--duration", str(duration), "--json", "result.json"]


if __name__ == "__main__":
    main()

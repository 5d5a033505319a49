"""Where a group member's CPU goes, by stage of a message's path: py-spy on the leader and on a
follower under the 4P×4C / 100-receipts-in-flight load, as µs of CPU per delivered message.

    .venv/bin/python -m bench.profile_stages [--duration 40] [--sample 20] [--out DIR]

Starts a 3-node group (as bench/cpu_budget.py does), runs `raftmq bench` for `--duration`
seconds of sending, and after `--settle` seconds records the leader and one follower with
`py-spy record` (raw stacks, every thread, `--nonblocking`: the nodes are never paused) for
`--sample` seconds, while reading each one's CPU time (user + system, every thread) from /proc.

A sample is one thread found running Python (py-spy leaves out threads idle in a system call).
Each sample goes to the stage of the innermost frame of its stack that some stage of `STAGES`
claims (the first that does, in their order), so the stages are exclusive: the body journal
inside `Broker.apply` counts as the body journal, a frame of the standard library or of a
helper module counts for the raftmq frame that called it. A stage's µs per message is its share
of the process's samples times the process's CPU over the window, divided by the messages
delivered in the window (the bench's consume rate times the window). py-spy needs to be on the
PATH or in the interpreter's bin folder (`pip install py-spy`); the raw stacks are kept in
`--out` for a flame graph (`flamegraph.pl`, speedscope).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from bench.bench_cases import CASES, bench_command, declare_queue, new_destination
from bench.cpu_budget import _cpu_seconds, _thread_cpu
from bench.node_group import NodeGroup, install_signal_handlers

console = Console(width=None if sys.stdout.isatty() else 140)


@dataclass(frozen=True)
class Frame:
    function: str
    path: str  # the file, as py-spy names it


@dataclass(frozen=True)
class Stage:
    name: str
    matches: Callable[[Frame], bool]


def _in(*parts: str) -> Callable[[Frame], bool]:
    return lambda frame: any(part in frame.path for part in parts)


def _call(path_part: str, *functions: str) -> Callable[[Frame], bool]:
    return lambda frame: path_part in frame.path and frame.function in functions


# For each frame, innermost first, the first stage that claims it; the names are the stages of a
# message's path (socket read, parse, session, translate, propose, Raft, apply, core, bodies,
# effects, formatting, socket write) and the rest.
STAGES: tuple[Stage, ...] = (
    Stage("Raft journal fsync", _call("pysyncobj/raft_journal", "fdatasync", "sync", "flush")),
    Stage("Raft journal append", _in("pysyncobj/raft_journal", "raft_journal_format")),
    Stage("Raft encode / decode (entries, commands)", _in("replication/command_codec", "replication/entry_codec")),
    Stage("Raft wire (peer messages)", _in("replication/wire", "pysyncobj/tcp_", "pysyncobj/transport", "pysyncobj/poller")),
    Stage("body journal", _in("server/replica/bodies", "storage/")),
    Stage("frame parse", _in("protocol/codec")),
    Stage("frame formatting", _in("server/stomp/frames", "protocol/frame")),
    Stage("session", _in("server/stomp/session", "protocol/negotiation")),
    Stage("translate", _in("server/stomp/translate")),
    Stage("core", _in("raftmq/core/")),
    Stage("effects (to sessions)", _call("server/stomp/connection", "deliver", "receipt", "write", "_queue")),
    Stage("socket write", _call("server/stomp/connection", "_flush", "flush")),
    Stage("apply (replica, rest)", _in("server/replica/state_machine")),
    Stage("propose / commit hand-off", _in("replication/raft_log", "replication/in_flight", "replication/handoff",
                                           "replication/leadership")),
    Stage("Raft (pysyncobj, rest)", _in("pysyncobj")),
    Stage("socket read / connection (rest)", _in("server/stomp/connection", "selector_events")),
    Stage("node wiring, timers, admin (rest)", _in("raftmq/")),
)
REST = "event loop and threads (rest)"

_RAW_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")


def parse_raw(text: str) -> Counter[tuple[Frame, ...]]:
    """py-spy's raw (collapsed) stacks: `item;item;... COUNT` per line, root first; the items
    before the first frame (process, thread) are left out."""
    stacks: Counter[tuple[Frame, ...]] = Counter()
    for line in text.splitlines():
        found = _RAW_LINE.match(line.strip())
        if found is None:
            continue
        frames = []
        for item in found["stack"].split(";"):
            frame = _FRAME.match(item)
            if frame is not None:
                frames.append(Frame(frame["function"], frame["path"]))
        stacks[tuple(frames)] += int(found["count"])
    return stacks


def stage_of(stack: tuple[Frame, ...]) -> str:
    for frame in reversed(stack):
        for stage in STAGES:
            if stage.matches(frame):
                return stage.name
    return REST


def by_stage(stacks: Counter[tuple[Frame, ...]]) -> Counter[str]:
    shares: Counter[str] = Counter()
    for stack, count in stacks.items():
        shares[stage_of(stack)] += count
    return shares


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise click.ClickException("py-spy is not installed: pip install py-spy")
    return found


@click.command()
@click.option("--duration", default=40.0, show_default=True, help="seconds of sending")
@click.option("--settle", default=8.0, show_default=True, help="seconds of load before recording")
@click.option("--sample", default=20.0, show_default=True, help="seconds recorded")
@click.option("--rate", default=250, show_default=True, help="py-spy samples per second")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="keep the raw stacks here")
def main(duration: float, settle: float, sample: float, rate: int, out: Path | None) -> None:
    install_signal_handlers()
    if settle + sample > duration:
        raise click.BadParameter("--settle + --sample must fit in --duration")
    py_spy = _py_spy()
    out = out or Path(tempfile.mkdtemp(prefix="raftmq-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    case = CASES[0]
    with NodeGroup.create(size=3) as group:
        leader = group.start_all(timeout=60)
        group.wait_live(timeout=60)
        follower = next(node_id for node_id in group.members if node_id != leader)
        roles = {leader: "leader", follower: "follower"}
        pids = {node_id: group.members[node_id].pid for node_id in roles}
        url = group.members[leader].client_url
        destination = new_destination(case)
        declare_queue(url, destination, ())
        result_path = out / "bench.json"
        command = bench_command(url, case, destination, 0, 0, 1, (), result_path, duration)
        bench = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(settle)
            before = {node_id: _cpu_seconds(pid) for node_id, pid in pids.items() if pid}
            threads_before = {node_id: _thread_cpu(pid) for node_id, pid in pids.items() if pid}
            recorders = [
                subprocess.Popen([py_spy, "record", "--pid", str(pid), "--duration", str(int(sample)), "--rate", str(rate),
                                  "--format", "raw", "--nonblocking", "--threads", "--output", str(out / f"{role}.txt")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for node_id, role in roles.items() if (pid := pids[node_id])
            ]
            started = time.monotonic()
            for recorder in recorders:
                recorder.wait(timeout=sample + 30)
            window = time.monotonic() - started
            after = {node_id: _cpu_seconds(pid) for node_id, pid in pids.items() if pid}
            threads_after = {node_id: _thread_cpu(pid) for node_id, pid in pids.items() if pid}
            _, errors = bench.communicate(timeout=duration * 4 + 120)
        finally:
            if bench.poll() is None:
                bench.kill()
    import json

    result = json.loads(result_path.read_text())
    delivered = result["consume_rate"] * window
    console.print(f"bench: {result['consume_rate']:,.0f} msg/s delivered, lost {result['lost']}, duplicated "
                  f"{result['duplicated']}; recorded {window:.1f} s ≈ {delivered:,.0f} messages; stacks in {out}")
    for node_id, role in roles.items():
        cpu = after[node_id] - before[node_id]
        per_message = cpu / delivered * 1e6
        shares = by_stage(parse_raw((out / f"{role}.txt").read_text()))
        samples = sum(shares.values())
        table = Table(title=f"{role} ({node_id}): {per_message:.1f} µs of CPU per message, whole process, "
                            f"{samples:,} samples")
        table.add_column("stage")
        table.add_column("share", justify="right")
        table.add_column("µs / msg", justify="right")
        for name in [*(stage.name for stage in STAGES), REST]:
            if shares[name]:
                share = shares[name] / samples
                table.add_row(name, f"{share:.1%}", f"{share * per_message:.1f}")
        console.print(table)
        busy = {tid: cpu - threads_before[node_id].get(tid, 0.0) for tid, cpu in threads_after[node_id].items()}
        console.print(f"{role} threads (µs / msg): " + ", ".join(
            f"{tid} {spent / delivered * 1e6:.1f}" for tid, spent in sorted(busy.items(), key=lambda item: -item[1])
            if spent / delivered * 1e6 >= 0.1))


if __name__ == "__main__":
    main()

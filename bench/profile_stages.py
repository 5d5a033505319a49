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
helper module counts for the raftmq frame that called it. Samples of a thread waiting in the
event loop's or pysyncobj's poll are idle and count for nothing. A stage's CPU is, for each
thread, the thread's CPU time over the window (/proc) times the stage's share of that thread's
busy samples; its µs per message divides that by the messages delivered in the window (the
bench's consume rate times the window). Compiled hot modules have no Python frames: without
`--native` their time counts for the raftmq frame that called them. py-spy needs to be on the
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


def _compiled(*modules: str) -> Callable[[Frame], bool]:
    """A compiled hot module's function, as `--native` shows it: mypyc names its C function
    `CPyDef_<module's last name>___<function>` (and `___<Class>___<method>`)."""
    prefixes = tuple(f"CPyDef_{module}___" for module in modules)
    return lambda frame: frame.function.startswith(prefixes)


def _either(*claims: Callable[[Frame], bool]) -> Callable[[Frame], bool]:
    return lambda frame: any(claim(frame) for claim in claims)


def _call(path_part: str, *functions: str) -> Callable[[Frame], bool]:
    """A function of that file by name (py-spy names a method `Class.method`)."""
    return lambda frame: path_part in frame.path and frame.function.rsplit(".", 1)[-1] in functions


# For each frame, innermost first, the first stage that claims it; the names are the stages of a
# message's path (socket read, parse, session, translate, propose, Raft, apply, core, bodies,
# effects, formatting, socket write) and the rest.
STAGES: tuple[Stage, ...] = (
    Stage("Raft journal fsync", _call("pysyncobj/raft_journal", "fdatasync", "sync", "flush")),
    Stage("Raft journal append", _in("pysyncobj/raft_journal", "raft_journal_format")),
    Stage("Raft encode / decode (entries, commands)",
          _either(_in("replication/command_codec", "replication/entry_codec"),
                  _compiled("command_codec", "entry_codec"))),
    Stage("Raft wire (peer messages)",
          _in("replication/wire", "pysyncobj/tcp_", "pysyncobj/transport", "pysyncobj/poller")),
    Stage("body journal", _in("server/replica/bodies", "storage/")),
    Stage("frame parse", _either(_in("protocol/codec"), _compiled("codec"))),
    Stage("frame formatting", _in("server/stomp/frames", "protocol/frame")),
    Stage("session", _in("server/stomp/session", "protocol/negotiation")),
    Stage("translate", _in("server/stomp/translate")),
    Stage("core", _either(_in("raftmq/core/"), _compiled("broker", "dispatch", "model", "state"))),
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

# A thread waiting for work: the innermost Python frame is the event loop's or pysyncobj's poll.
# py-spy cannot always tell such a thread is idle; its samples are left out.
IDLE = "idle (waiting in poll)"
_IDLE_FRAMES = {("select", "selectors.py"), ("poll", "poller.py"), ("_poll", "poller.py")}

_RAW_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")
_THREAD = re.compile(r"^thread \((?P<tid>\d+|0x[0-9a-f]+)\)")

Stacks = Counter[tuple[str, tuple[Frame, ...]]]  # (thread id, frames root first) -> samples


def parse_raw(text: str) -> Stacks:
    """py-spy's raw (collapsed) stacks: `item;item;... COUNT` per line, root first, the first
    item naming the thread (`thread (TID): NAME` with --threads); other items that are not
    frames (the process) are left out."""
    stacks: Stacks = Counter()
    for line in text.splitlines():
        found = _RAW_LINE.match(line.strip())
        if found is None:
            continue
        items = found["stack"].split(";")
        threads = [thread for item in items if (thread := _THREAD.match(item)) is not None]
        tid = str(int(threads[0]["tid"], 0)) if threads else "?"
        frames = []
        for item in items:
            frame = _FRAME.match(item)
            if frame is not None:
                frames.append(Frame(frame["function"], frame["path"]))
        stacks[(tid, tuple(frames))] += int(found["count"])
    return stacks


def _idle(stack: tuple[Frame, ...]) -> bool:
    for frame in reversed(stack):
        if ".py" in frame.path:  # the innermost Python frame
            return (frame.function.rsplit(".", 1)[-1], frame.path.rsplit("/", 1)[-1]) in _IDLE_FRAMES
    return False


def stage_of(stack: tuple[Frame, ...]) -> str:
    if _idle(stack):
        return IDLE
    for frame in reversed(stack):
        for stage in STAGES:
            if stage.matches(frame):
                return stage.name
    return REST


def cpu_by_stage(stacks: Stacks, thread_cpu: dict[str, float]) -> tuple[Counter[str], Counter[str]]:
    """(CPU seconds, samples) per stage: each thread's measured CPU (`thread_cpu`, by thread
    id) shared among the stages of its busy samples; idle samples count for nothing."""
    by_thread: dict[str, Counter[str]] = {}
    for (tid, stack), count in stacks.items():
        by_thread.setdefault(tid, Counter())[stage_of(stack)] += count
    cpu: Counter[str] = Counter()
    samples: Counter[str] = Counter()
    for tid, stages in by_thread.items():
        busy = sum(count for stage, count in stages.items() if stage != IDLE)
        for stage, count in stages.items():
            samples[stage] += count
            if stage != IDLE and busy:
                cpu[stage] += thread_cpu.get(tid, 0.0) * count / busy
    return cpu, samples


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise click.ClickException("py-spy is not installed: pip install py-spy")
    return found


def start_load(group: NodeGroup, result_path: Path, duration: float) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the group, then the 4P×4C / 100-in-flight `raftmq bench` against its leader for
    `duration` seconds (its JSON result to `result_path`); returns the leader and the bench."""
    case = CASES[0]
    leader = group.start_all(timeout=60)
    group.wait_live(timeout=60)
    url = group.members[leader].client_url
    destination = new_destination(case)
    declare_queue(url, destination, ())
    command = bench_command(url, case, destination, 0, 0, 1, (), result_path, duration)
    return leader, subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@click.command()
@click.option("--duration", default=40.0, show_default=True, help="seconds of sending")
@click.option("--settle", default=8.0, show_default=True, help="seconds of load before recording")
@click.option("--sample", default=20.0, show_default=True, help="seconds recorded")
@click.option("--rate", default=250, show_default=True, help="py-spy samples per second")
@click.option("--out", type=click.Path(path_type=Path), default=None, help="keep the raw stacks here")
@click.option("--native", is_flag=True, help="also native frames (py-spy --native, which pauses the process per "
              "sample): a compiled hot module's functions appear by their C names")
def main(duration: float, settle: float, sample: float, rate: int, out: Path | None, native: bool) -> None:
    install_signal_handlers()
    if settle + sample > duration:
        raise click.BadParameter("--settle + --sample must fit in --duration")
    py_spy = _py_spy()
    how = ["--native"] if native else ["--nonblocking"]
    out = out or Path(tempfile.mkdtemp(prefix="raftmq-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    result_path = out / "bench.json"
    with NodeGroup.create(size=3) as group:
        leader, bench = start_load(group, result_path, duration)
        follower = next(node_id for node_id in group.members if node_id != leader)
        roles = {leader: "leader", follower: "follower"}
        pids = {node_id: group.members[node_id].pid for node_id in roles}
        try:
            time.sleep(settle)
            before = {node_id: _cpu_seconds(pid) for node_id, pid in pids.items() if pid}
            threads_before = {node_id: _thread_cpu(pid) for node_id, pid in pids.items() if pid}
            recorders = [
                subprocess.Popen([py_spy, "record", "--pid", str(pid), "--duration", str(int(sample)),
                                  "--rate", str(rate), "--format", "raw", "--threads", *how,
                                  "--output", str(out / f"{role}.txt")],
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
        busy = {tid: cpu - threads_before[node_id].get(tid, 0.0) for tid, cpu in threads_after[node_id].items()}
        by_tid = {(str(pids[node_id]) if tid == "main" else tid): spent for tid, spent in busy.items()}
        stage_cpu, samples = cpu_by_stage(parse_raw((out / f"{role}.txt").read_text()), by_tid)
        unsampled = cpu - sum(stage_cpu.values())  # threads py-spy never found busy
        table = Table(title=f"{role} ({node_id}): {per_message:.1f} µs of CPU per message, whole process, "
                            f"{sum(samples.values()):,} samples")
        table.add_column("stage")
        table.add_column("samples", justify="right")
        table.add_column("µs / msg", justify="right")
        for name in [*(stage.name for stage in STAGES), REST, IDLE]:
            if samples[name]:
                table.add_row(name, f"{samples[name]:,}", f"{stage_cpu[name] / delivered * 1e6:.1f}")
        table.add_row("threads never sampled busy", "", f"{unsampled / delivered * 1e6:.1f}")
        console.print(table)
        console.print(f"{role} threads (µs / msg): " + ", ".join(
            f"{tid} {spent / delivered * 1e6:.1f}" for tid, spent in sorted(busy.items(), key=lambda item: -item[1])
            if spent / delivered * 1e6 >= 0.1))


if __name__ == "__main__":
    main()

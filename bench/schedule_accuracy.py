"""How late scheduled messages arrive: a 3-member group (`raftmq up --detach` on a group file
made from the shipped `configs/group.toml`, free loopback ports, a fresh directory), one
consumer in a process of its own, and a producer that sends `--messages` persistent messages
with receipts (`--window` in flight), each scheduled `--min-delay`..`--max-delay` seconds
ahead (uniform). Half of them (`--mode mixed`, the default) say so with ActiveMQ's
`AMQ_SCHEDULED_DELAY` (ms after the SEND), the other half with Artemis's `_AMQ_SCHED_DELIVERY`
(an absolute due time, ms since the epoch); `--mode delay` / `--mode at` use one only.

Each body carries its intended due time: for `_AMQ_SCHED_DELIVERY` the header's value; for
`AMQ_SCHEDULED_DELAY` the producer's wall clock read just before the SEND plus the delay (the
broker counts the delay from the SEND's committed `now`, which is later, so this lateness
includes the SEND's own way to the leader: it is an upper bound). The consumer stamps each
MESSAGE with its wall clock as the frame is handed to it; lateness = arrival - due. Everything
runs on one machine, so producer, broker and consumer read the same clock.

    .venv/bin/python -m bench.schedule_accuracy                      # 10,000 messages, 1-20 s
    .venv/bin/python -m bench.schedule_accuracy --messages 2000 --max-delay 5 --json out.json

Prints a JSON summary (lateness percentiles overall, per header, and for messages that came
due while the producer was still sending vs after; early arrivals, beyond 1 ms of clock
granularity and at all; lost = receipted but never delivered; duplicated = delivered twice
without `redelivered`; scheduled jobs the leader still holds at the end; the leader and term
at start and end; the five seconds of due times with the latest message, to tell one stall from
a spread tail) and a one-line summary. Exit status 1 when any message was lost, duplicated or early beyond 1 ms.

Every process it started is stopped by pid at the end (the consumer, the supervisor of
`raftmq up`, then any node left); the work directory is deleted unless `--keep` (or the run
failed: then it is kept for its logs).

`--url stomp://HOST:PORT` (any URL `connect_failover` takes; `--login`, `--passcode`, `--vhost`
for its CONNECT) starts no group and runs the same producer and consumer against that broker,
e.g. ActiveMQ Classic with `schedulerSupport="true"`. It honours `AMQ_SCHEDULED_DELAY` only
(`_AMQ_SCHED_DELIVERY` is Artemis's), so give such a broker `--mode delay`, and the same to raftmq
when comparing. The figures from the leader's status (its term, scheduled jobs left) are then
null. The queue is `--queue`; with `--url` its default gets a suffix unique to the run, so
nothing an earlier run left on the broker is counted.

    .venv/bin/python -m bench.schedule_accuracy --mode delay                                # raftmq
    .venv/bin/python -m bench.schedule_accuracy --mode delay --url stomp://127.0.0.1:61623  # ActiveMQ
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.node_group import toml_dumps
from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import read_state, running_nodes, stop_launcher, stop_nodes
from raftmq.processes import free_ports
from raftmq.protocol.frame import Frame

GROUP = "g1"
QUEUE = "/queue/scheduled.accuracy"
REPOSITORY = Path(__file__).resolve().parent.parent
TEMPLATE = REPOSITORY / "configs" / "group.toml"
PROBE = b"probe"
GRANULARITY_MS = 1.0  # due times are whole ms; the broker's clock reads whole ms
DUPLICATE_GRACE_S = 2.0  # after the last expected message, how long the consumer keeps listening
MAX_RUN_S = 600.0  # no phase of a run waits longer than this


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the group ---------------------------------------------------------------------------------


def group_file_text(data_dir: Path, ports: list[int]) -> str:
    """configs/group.toml (the settings `raftmq up` runs) with the data directory and every
    address replaced."""
    document = tomllib.loads(TEMPLATE.read_text(encoding="utf-8"))
    document["group"] = {**document.get("group", {}), "name": GROUP, "data_dir": str(data_dir)}
    document["node"] = [
        {"id": f"n{i + 1}", "client": f"127.0.0.1:{ports[3 * i]}", "raft": f"127.0.0.1:{ports[3 * i + 1]}",
         "admin": f"127.0.0.1:{ports[3 * i + 2]}"}
        for i in range(3)
    ]
    return toml_dumps(document)


def raftmq(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=timeout)


def status(admin: str, timeout: float = 5.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://{admin}/status", timeout=timeout) as answer:
            return dict(json.loads(answer.read()))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def leader_status(admins: dict[str, str]) -> dict[str, Any] | None:
    for admin in admins.values():
        found = status(admin)
        if found is not None and found.get("role") == "leader":
            return found
    return None


# -- the consumer (a process of its own) -------------------------------------------------------


def connect_kwargs(options: argparse.Namespace) -> dict[str, Any]:
    """CONNECT's login, passcode and virtual host, as given (None: the header is not sent)."""
    return {"login": options.login, "passcode": options.passcode, "vhost": options.vhost}


async def consume(url: str, out: Path, prefetch: int, queue: str, connect: dict[str, Any]) -> None:
    """Subscribe, prove the subscription live with a probe, say `ready`; then record every
    MESSAGE (seq, due, mode, arrival ns, redelivered) until stdin says `done COUNT LAST_DUE`
    and COUNT distinct messages came (or LAST_DUE + 60 s passed), and DUPLICATE_GRACE_S more."""
    client = await connect_failover(url, **connect)
    records: list[tuple[int, int, str, int, bool]] = []
    seen: set[int] = set()
    probe_seen = asyncio.Event()
    last_arrival = [time.monotonic()]

    def on_message(frame: Frame) -> None:
        arrival = time.time_ns()
        client.ack_nowait(frame)
        if frame.body == PROBE:
            probe_seen.set()
            return
        seq, due, mode = frame.body.split(b" ", 3)[:3]
        records.append((int(seq), int(due), mode.decode(), arrival, frame.get("redelivered") == "true"))
        seen.add(int(seq))
        last_arrival[0] = time.monotonic()

    client.subscribe(queue, ack="client-individual", prefetch=prefetch, callback=on_message)
    await client.send(queue, PROBE, {"persistent": "true"}, receipt=True)
    await asyncio.wait_for(probe_seen.wait(), 60)
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    words = line.split()
    expected, last_due = (int(words[1]), int(words[2])) if len(words) == 3 and words[0] == "done" else (0, now_ms())
    deadline = last_due / 1000 + 60
    while len(seen) < expected and time.time() < deadline:
        await asyncio.sleep(0.05)
    grace_end = time.monotonic() + DUPLICATE_GRACE_S
    while time.monotonic() < grace_end:
        await asyncio.sleep(0.05)
    await client.close()
    with out.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    print(f"recorded {len(records)}", flush=True)


# -- the producer ------------------------------------------------------------------------------


async def produce(url: str, options: argparse.Namespace) -> dict[str, Any]:
    """Send every message with a receipt, `options.window` in flight; returns what was
    receipted (seq -> due, mode), the receipt latencies and the sending span."""
    rng = random.Random(options.seed)
    client = await connect_failover(url, **connect_kwargs(options))
    receipted: dict[int, tuple[int, str]] = {}
    failed: list[str] = []
    receipt_ms: list[float] = []
    in_flight: set[asyncio.Future[Any]] = set()
    began = now_ms()

    def on_receipt(future: asyncio.Future[Any], seq: int, due: int, mode: str, sent: float) -> None:
        if future.cancelled() or future.exception() is not None:
            failed.append(f"{seq}: {future.exception() if not future.cancelled() else 'cancelled'}")
            return
        receipt_ms.append((time.perf_counter() - sent) * 1000)
        receipted[seq] = (due, mode)

    try:
        for seq in range(options.messages):
            while len(in_flight) >= options.window:
                _done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            delay = rng.randint(int(options.min_delay * 1000), int(options.max_delay * 1000))
            mode = options.mode if options.mode != "mixed" else ("delay" if seq % 2 == 0 else "at")
            stamp = now_ms()
            due = stamp + delay
            headers = {"persistent": "true"}
            if mode == "delay":
                headers["AMQ_SCHEDULED_DELAY"] = str(delay)
            else:
                headers["_AMQ_SCHED_DELIVERY"] = str(due)
            body = f"{seq} {due} {mode} ".encode().ljust(options.size, b".")
            sent = time.perf_counter()
            future = client.send_nowait(options.queue, body, headers, receipt=True)
            future.add_done_callback(functools.partial(on_receipt, seq=seq, due=due, mode=mode, sent=sent))
            in_flight.add(future)
        if in_flight:
            await asyncio.wait(in_flight, timeout=MAX_RUN_S)
    finally:
        await client.close()
    return {"receipted": receipted, "failed": failed, "receipt_ms": receipt_ms, "began": began, "ended": now_ms()}


# -- figures -----------------------------------------------------------------------------------


def percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:  # nearest rank
        return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]

    return {"count": len(ordered), "min": round(ordered[0], 2), "p50": round(rank(0.50), 2),
            "p90": round(rank(0.90), 2),
            "p99": round(rank(0.99), 2), "p99.9": round(rank(0.999), 2), "max": round(ordered[-1], 2),
            "mean": round(sum(ordered) / len(ordered), 2)}


def figures(sent: dict[str, Any], records: list[list[Any]], leader_end: dict[str, Any] | None,
            options: argparse.Namespace) -> dict[str, Any]:
    receipted: dict[int, tuple[int, str]] = sent["receipted"]
    first: dict[int, tuple[int, str, int]] = {}
    duplicated = redelivered = 0
    for seq, due, mode, arrival_ns, was_redelivered in records:
        if seq in first:
            if was_redelivered:
                redelivered += 1
            else:
                duplicated += 1
            continue
        first[seq] = (due, mode, arrival_ns)
    lateness = {seq: arrival_ns / 1e6 - due for seq, (due, _mode, arrival_ns) in first.items()}
    by_mode = {mode: [lateness[s] for s, (_d, m, _a) in first.items() if m == mode] for mode in ("delay", "at")}
    during = [lateness[s] for s, (due, _m, _a) in first.items() if due <= sent["ended"]]
    after = [lateness[s] for s, (due, _m, _a) in first.items() if due > sent["ended"]]
    early = [value for value in lateness.values() if value < 0]
    # The tail, by the second the messages came due in: one stall (a pause, an election) or spread?
    seconds: dict[int, list[float]] = {}
    start = min((due for due, _m, _a in first.values()), default=0)
    for seq, (due, _m, _a) in first.items():
        seconds.setdefault((due - start) // 1000, []).append(lateness[seq])
    worst = sorted(seconds.items(), key=lambda item: -max(item[1]))[:5]
    scheduled_left = None
    if leader_end is not None:
        scheduled_left = (leader_end.get("broker") or {}).get("scheduled", {}).get(options.queue, 0)
    return {
        "broker": options.url or "raftmq group (started by this script)", "queue": options.queue,
        "messages": options.messages, "mode": options.mode,
        "delay_s": [options.min_delay, options.max_delay], "window": options.window, "size": options.size,
        "seed": options.seed,
        "sending_s": round((sent["ended"] - sent["began"]) / 1000, 2),
        "receipted": len(receipted), "send_failures": len(sent["failed"]), "send_failure_sample": sent["failed"][:5],
        "receipt_latency_ms": percentiles(sent["receipt_ms"]),
        "delivered": len(first), "lost": len(set(receipted) - set(first)),
        "unexpected": len(set(first) - set(receipted) - {int(f.split(':')[0]) for f in sent["failed"]}),
        "duplicated": duplicated, "redelivered": redelivered,
        "early": len(early), "early_beyond_granularity": sum(1 for v in early if v < -GRANULARITY_MS),
        "earliest_ms": round(min(lateness.values()), 3) if lateness else None,
        "lateness_ms": percentiles(list(lateness.values())),
        "lateness_ms_by_header": {"AMQ_SCHEDULED_DELAY": percentiles(by_mode["delay"]),
                                  "_AMQ_SCHED_DELIVERY": percentiles(by_mode["at"])},
        "lateness_ms_due_while_sending": percentiles(during),
        "lateness_ms_due_after_sending": percentiles(after),
        "worst_seconds": [{"second": second, "due": len(values), "over_100ms": sum(1 for v in values if v > 100),
                           "max_ms": round(max(values), 1)} for second, values in worst],
        "leader_scheduled_left": scheduled_left,
    }


# -- a run -------------------------------------------------------------------------------------


def _leader_of(found: dict[str, Any] | None) -> dict[str, Any] | None:
    """Which member led, in which term (a change during the run explains a stall)."""
    if found is None:
        return None
    raft = found.get("raft") or {}
    return {"node": found.get("node"), "term": raft.get("term")}


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The process's next line of stdout, or "" when none comes within `timeout` seconds."""
    stdout = process.stdout
    assert stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0].strip() if lines else ""


def run(options: argparse.Namespace, work: Path) -> dict[str, Any]:
    """With `options.url`: that broker, no group of ours (`admins` is empty, so no leader)."""
    admins: dict[str, str] = {}
    config = work / f"{GROUP}.toml"
    if options.url:
        url = options.url
    else:
        ports = free_ports(9)
        config.write_text(group_file_text(work / GROUP, ports), encoding="utf-8")
        admins = {f"n{i + 1}": f"127.0.0.1:{ports[3 * i + 2]}" for i in range(3)}
        url = "failover:(" + ",".join(f"stomp://127.0.0.1:{ports[3 * i]}" for i in range(3)) + ")?randomize=false"
    consumer: subprocess.Popen[str] | None = None
    load = os.getloadavg()
    try:
        if not options.url:
            up = raftmq("up", "--detach", "--config", str(config), "--timeout", "60", cwd=work)
            if up.returncode != 0:
                raise RuntimeError(f"raftmq up failed: {up.stdout}{up.stderr}")
        leader_start = _leader_of(leader_status(admins))
        records_path = work / "arrivals.jsonl"
        credentials = [arg for name in ("login", "passcode", "vhost") if getattr(options, name) is not None
                       for arg in (f"--{name}", getattr(options, name))]
        consumer = subprocess.Popen(
            [sys.executable, "-m", "bench.schedule_accuracy", "--consume", url, "--out", str(records_path),
             "--prefetch", str(options.prefetch), "--queue", options.queue, *credentials],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=work,
            env={**os.environ,
                 "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))})
        assert consumer.stdout is not None and consumer.stdin is not None
        ready = read_line(consumer, 120)
        if ready != "ready":
            raise RuntimeError(f"consumer did not start (said {ready!r}, exit {consumer.poll()})")
        print(f"{'broker' if options.url else 'group up'} ({url}), consumer ready; "
              f"sending {options.messages} scheduled messages", file=sys.stderr, flush=True)
        sent = asyncio.run(produce(url, options))
        last_due = max((due for due, _ in sent["receipted"].values()), default=now_ms())
        print(f"sent in {(sent['ended'] - sent['began']) / 1000:.1f} s; waiting until the last due time "
              f"(+{max(0, last_due - now_ms()) / 1000:.1f} s)", file=sys.stderr, flush=True)
        consumer.stdin.write(f"done {len(sent['receipted'])} {last_due}\n")
        consumer.stdin.flush()
        said = read_line(consumer, max(0, last_due - now_ms()) / 1000 + 60 + DUPLICATE_GRACE_S + 30)
        consumer.wait(timeout=30)
        if not said.startswith("recorded"):
            raise RuntimeError(f"consumer failed (said {said!r}, exit {consumer.returncode})")
        records = [json.loads(line) for line in records_path.read_text(encoding="utf-8").splitlines()]
        leader_end = leader_status(admins)  # None with --url
        result = figures(sent, records, leader_end, options)
        result["leader"] = {"at_start": leader_start, "at_end": _leader_of(leader_end)}
        result["load_average_at_start"] = [round(x, 2) for x in load]
        result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return result
    finally:
        if consumer is not None and consumer.poll() is None:
            consumer.kill()
            consumer.wait(timeout=10)
        state = None if options.url else read_state(work / GROUP)
        if state is not None:
            stop_launcher(state, timeout=60)
            state = read_state(work / GROUP) or state
            stop_nodes(state)
            left = running_nodes(read_state(work / GROUP) or state)
            if left:
                print(f"still running: {[(n.id, n.pid) for n in left]}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--min-delay", type=float, default=1.0, help="seconds")
    parser.add_argument("--max-delay", type=float, default=20.0, help="seconds")
    parser.add_argument("--mode", choices=("mixed", "delay", "at"), default="mixed",
                        help="AMQ_SCHEDULED_DELAY (delay), _AMQ_SCHED_DELIVERY (at), or alternately (mixed)")
    parser.add_argument("--window", type=int, default=16, help="receipted SENDs in flight")
    parser.add_argument("--size", type=int, default=256, help="body bytes")
    parser.add_argument("--prefetch", type=int, default=1000, help="the consumer's prefetch")
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--url", default=None,
                        help="measure this STOMP broker (stomp://HOST:PORT) instead of starting a raftmq group; "
                             "ActiveMQ Classic needs schedulerSupport and --mode delay")
    parser.add_argument("--login", default=None, help="CONNECT login (with --url)")
    parser.add_argument("--passcode", default=None, help="CONNECT passcode (with --url)")
    parser.add_argument("--vhost", default=None, help="CONNECT host header, e.g. / for RabbitMQ (with --url)")
    parser.add_argument("--queue", default=None,
                        help=f"destination (default {QUEUE}; with --url plus a suffix unique to the run)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a fresh temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument("--consume", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.consume:
        asyncio.run(consume(options.consume, options.out, options.prefetch, options.queue, connect_kwargs(options)))
        return
    if options.queue is None:
        options.queue = QUEUE if not options.url else f"{QUEUE}.{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if not 0 < options.min_delay <= options.max_delay:
        parser.error("need 0 < --min-delay <= --max-delay")
    if options.dir is None:
        work = Path(tempfile.mkdtemp(prefix="schedule-accuracy-"))
    else:
        work = options.dir
        if work.exists() and any(work.iterdir()):
            raise SystemExit(f"{work} is not empty: give a fresh directory")
        work.mkdir(parents=True, exist_ok=True)
    try:
        result = run(options, work)
    except BaseException:
        print(f"work directory kept: {work}", file=sys.stderr)
        raise
    ok = result["lost"] == 0 and result["duplicated"] == 0 and result["early_beyond_granularity"] == 0 \
        and result["send_failures"] == 0 and result["unexpected"] == 0
    result["ok"] = ok
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    late = result["lateness_ms"]
    print(f"{result['delivered']:,}/{result['receipted']:,} scheduled messages "
          f"({options.min_delay:g}-{options.max_delay:g} s) "
          f"arrived late by p50 {late.get('p50')} ms, p99 {late.get('p99')} ms, max {late.get('max')} ms; "
          f"early {result['early']} (beyond {GRANULARITY_MS:g} ms: {result['early_beyond_granularity']}), "
          f"lost {result['lost']}, duplicated {result['duplicated']}; "
          f"load {result['load_average_at_start'][0]} -> {result['load_average_at_end'][0]}")
    if options.keep or not ok:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

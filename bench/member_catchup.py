"""How long a new member takes to catch up with a full group: `raftmq group add-node` on a
3-member group (`raftmq up --detach`, the group file's defaults: the Raft journal compacts at
64 MiB) that holds `--gib` GiB of persistent message bodies waiting in one queue with no
consumer. The new member n4 gets the leader's snapshot, fetches every body it references from
its peers (admin `POST /bodies`), then the journal after the snapshot.

    .venv/bin/python -m bench.member_catchup --gib 1.0 --dir /tmp/member-catchup

Figures: the fill (GiB, messages, seconds, rate), the catch-up as `add-node` reports it (from the
commit of the membership change to n4 having applied the leader's commit index), the command's
wall time, n4's data directory on disk, each node's RSS. Checks, from each node's admin
`/status`: n4 applied the leader's commit index, n4's queue depth equals the leader's (and
the number of receipted messages), and `/status?verify=1` on n4 finds 0 unreadable bodies.
Exit status 1 when `add-node` or a check fails.

`--consumed`: a consumer takes (and acks) every message as it comes, so the journal is written
but nothing waits. `--under-load RATE`: a producer keeps sending RATE receipted msg/s to another
queue while n4 is added.

Every process it started is stopped by pid at the end (the supervisor of `raftmq up`, then any
node left); the work directory is deleted unless `--keep` (or a check failed: then it is kept
for its logs, `<dir>/g1/<node>/node.log`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import read_state, running_nodes, stop_launcher, stop_nodes
from raftmq.processes import free_ports
from raftmq.protocol.frame import Frame

GROUP = "g1"
NEW = "n4"
QUEUE = "/queue/catchup"
LOAD_QUEUE = "/queue/catchup.load"
GIB = 2**30
EVIDENCE = re.compile(r"fetch|bodies_missing|body_unavailable|snapshot|restore|error|exception|Traceback", re.I)


def raftmq(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftmq", *args], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=timeout)


def group_file_text(data_dir: Path, ports: list[int], size: int = 3) -> str:
    """The group file's defaults; only the name, data directory and addresses are set."""
    lines = ["[group]", f"name = {json.dumps(GROUP)}", f"data_dir = {json.dumps(str(data_dir))}"]
    for i in range(size):
        client, raft, admin = ports[3 * i: 3 * i + 3]
        lines += ["", "[[node]]", f'id = "n{i + 1}"', f'client = "127.0.0.1:{client}"', f'raft = "127.0.0.1:{raft}"',
                  f'admin = "127.0.0.1:{admin}"']
    return "\n".join(lines) + "\n"


def endpoints(ports: list[int]) -> tuple[dict[str, str], str]:
    """The members' admin addresses and a failover URL over their client ports."""
    admins = {f"n{i + 1}": f"127.0.0.1:{ports[3 * i + 2]}" for i in range(len(ports) // 3)}
    url = ("failover:(" + ",".join(f"stomp://127.0.0.1:{ports[3 * i]}" for i in range(len(ports) // 3))
           + ")?randomize=false")
    return admins, url


def up_detached(config: Path, work: Path, timeout: float) -> float:
    """`raftmq up --detach` the group; the seconds it took (its nodes serve once it returns)."""
    began = time.monotonic()
    up = raftmq("up", "--detach", "--config", str(config), "--timeout", str(int(timeout)), cwd=work,
                timeout=timeout + 300)
    if up.returncode != 0:
        raise SystemExit(f"raftmq up failed: {up.stdout}{up.stderr}")
    return time.monotonic() - began


def stop_group(state_dir: Path, timeout: float) -> None:
    """Stop `raftmq up`'s supervisor, then any node left, by pid."""
    state = read_state(state_dir)
    if state is None:
        return
    stop_launcher(state, timeout=timeout)
    state = read_state(state_dir) or state
    stop_nodes(state)
    left = running_nodes(read_state(state_dir) or state)
    if left:
        print(f"still running: {[(n.id, n.pid) for n in left]}", file=sys.stderr)


def status(admin: str, verify: bool = False, timeout: float = 5.0) -> dict[str, Any] | None:
    url = f"http://{admin}/status" + ("?verify=1" if verify else "")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return dict(json.loads(answer.read()))
    except (OSError, urllib.error.URLError, ValueError):
        return None


def leader(admins: dict[str, str]) -> tuple[str, dict[str, Any]] | None:
    for node, admin in admins.items():
        found = status(admin)
        if found is not None and found.get("role") == "leader":
            return node, found
    return None


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (du)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def depth(found: dict[str, Any] | None, destination: str = QUEUE) -> int | None:
    if found is None:
        return None
    entry = found.get("broker", {}).get("destinations", {}).get(destination)
    return None if entry is None else int(entry.get("depth", 0))


def mib(count: float) -> str:
    return f"{count / 2**20:,.1f} MiB"


# -- traffic --------------------------------------------------------------------------------


class FillStalled(Exception):
    pass


class Fill:
    """`producers` failover connections, each `window` receipted SENDs in flight, until
    `count` messages of `size` random (incompressible) bytes were receipted."""

    def __init__(self, url: str, count: int, size: int, producers: int, window: int, stall: float,
                 queue: str = QUEUE) -> None:
        self.url, self.count, self.size, self.producers, self.window = url, count, size, producers, window
        self.queue = queue
        self.stall = stall
        self.receipted = 0
        self.errors: list[str] = []
        self.next = 0
        self.progress: list[tuple[float, int]] = []  # (seconds, receipted) every 15 s

    async def run(self) -> float:
        """Seconds the fill took; raises FillStalled when fewer than 1 % of the messages were
        receipted in the last `stall` seconds."""
        started = time.monotonic()
        producers = asyncio.ensure_future(asyncio.gather(*(self._produce(p) for p in range(self.producers))))
        try:
            while not producers.done():
                await asyncio.wait([producers], timeout=15)
                seconds = time.monotonic() - started
                self.progress.append((round(seconds), self.receipted))
                print(f"  fill: {self.receipted:,} of {self.count:,} receipted in {seconds:.0f} s "
                      f"({self.receipted / seconds:,.0f} msg/s, {mib(self.receipted * self.size / seconds)}/s)",
                      file=sys.stderr, flush=True)
                back = [n for t, n in self.progress if t <= seconds - self.stall]
                if not producers.done() and back and self.receipted - back[-1] < self.count / 100:
                    raise FillStalled(f"the fill stalled: {self.receipted - back[-1]:,} messages receipted in the last "
                                      f"{self.stall:g} s ({self.receipted:,} of {self.count:,} in {seconds:.0f} s)")
            producers.result()
        finally:
            if not producers.done():
                producers.cancel()
                await asyncio.wait([producers], timeout=15)
            if producers.done() and not producers.cancelled():
                producers.exception()  # retrieved: reported by result() above, or moot after a stall
        return time.monotonic() - started

    async def _produce(self, producer: int) -> None:
        client = await connect_failover(self.url)
        in_flight: set[asyncio.Future[Any]] = set()
        try:
            while self.next < self.count or in_flight:
                while self.next < self.count and len(in_flight) < self.window:
                    index = self.next
                    self.next += 1
                    body = f"m{index:09d}:".encode() + os.urandom(max(0, self.size - 11))
                    in_flight.add(client.send_nowait(self.queue, body, {"persistent": "true"}, receipt=True))
                done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    error = future.exception()
                    if error is None:
                        self.receipted += 1
                    else:
                        self.errors.append(f"producer {producer}: {error!r}")
        finally:
            await client.close()


class Drain:
    """--consumed: takes every message of QUEUE (client-individual, each acked)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.received = 0
        self.client: Any = None

    async def start(self) -> None:
        self.client = await connect_failover(self.url)

        def on_message(frame: Frame) -> None:
            self.received += 1
            self.client.ack_nowait(frame)

        self.client.subscribe(QUEUE, ack="client-individual", prefetch=1000, callback=on_message)

    async def finish(self, expected: int, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.received < expected and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        await self.client.close()


class Load:
    """--under-load: `rate` receipted SENDs per second to LOAD_QUEUE until stopped."""

    def __init__(self, url: str, rate: float, size: int) -> None:
        self.url, self.rate, self.size = url, rate, size
        self.receipted = 0
        self.errors: list[str] = []
        self.stop = asyncio.Event()
        self.latencies: list[float] = []

    async def run(self) -> None:
        client = await connect_failover(self.url)
        pending: set[asyncio.Future[Any]] = set()
        next_at = time.monotonic()
        index = 0
        try:
            while not self.stop.is_set():
                sent = time.monotonic()
                future = client.send_nowait(LOAD_QUEUE, f"l{index:08d}:".encode().ljust(self.size, b"."),
                                            {"persistent": "true"}, receipt=True)
                index += 1
                future.add_done_callback(functools.partial(self._done, sent=sent))
                pending.add(future)
                pending = {f for f in pending if not f.done()}
                next_at += 1 / self.rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if pending:
                await asyncio.wait(pending, timeout=30)
        finally:
            await client.close()

    def _done(self, future: asyncio.Future[Any], *, sent: float) -> None:
        if future.cancelled() or future.exception() is not None:
            self.errors.append(repr(None if future.cancelled() else future.exception()))
        else:
            self.receipted += 1
            self.latencies.append(time.monotonic() - sent)


# -- the run --------------------------------------------------------------------------------


def wait_applied(admins: dict[str, str], timeout: float) -> tuple[str, int]:
    """Until every member applied the leader's commit index: (leader, that index)."""
    deadline = time.monotonic() + timeout
    while True:
        found = leader(admins)
        if found is not None:
            commit = int(found[1]["commit_index"])
            applied = {node: (status(admin) or {}).get("applied_index", -1) for node, admin in admins.items()}
            if all(index >= commit for index in applied.values()):
                return found[0], commit
        if time.monotonic() > deadline:
            raise SystemExit(f"the members did not apply the leader's commit index within {timeout:g} s")
        time.sleep(0.5)


def add_node(argv: tuple[str, ...], cwd: Path, timeout: float) -> tuple[int, list[tuple[float, str]]]:
    """Run `raftmq group add-node`, each output line stamped with when it came (monotonic)."""
    process = subprocess.Popen([sys.executable, "-m", "raftmq", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=cwd)
    lines: list[tuple[float, str]] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
            print(f"  | {line.rstrip()}", file=sys.stderr, flush=True)
        return process.wait(timeout=timeout), lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


class Watch:
    """Samples n4's /status once a second while it joins (the timeline of its catch-up)."""

    def __init__(self, admin: str, admins: dict[str, str]) -> None:
        self.admin, self.admins = admin, admins
        self.began = time.monotonic()
        self.timeline: list[dict[str, Any]] = []
        self.stop = False

    @staticmethod
    def sample(found: dict[str, Any] | None) -> dict[str, Any]:
        if found is None:
            return {"applied_index": -1, "raft_last_applied": -1, "depth": None, "missing_indexes": None,
                    "body_bytes": None}
        return {"applied_index": int(found.get("applied_index", -1)),
                "raft_last_applied": int(found.get("raft", {}).get("last_applied", -1)),
                "depth": depth(found), "missing_indexes": found.get("bodies", {}).get("missing_indexes"),
                "body_bytes": found.get("bodies", {}).get("bytes")}

    def run(self) -> None:
        while not self.stop:
            self.timeline.append({"t": round(time.monotonic() - self.began, 1), **self.sample(status(self.admin))})
            time.sleep(1.0)

    def wait_caught_up(self, timeout: float) -> float | None:
        """When n4 applied the leader's commit index with its queue depth and no body missing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = leader(self.admins)
            own = status(self.admin)
            if found is not None and own is not None:
                mine = self.sample(own)
                if (mine["applied_index"] >= int(found[1]["commit_index"]) and mine["depth"] == depth(found[1])
                        and mine["missing_indexes"] == 0):
                    return time.monotonic()
            time.sleep(0.2)
        return None


def reaches(admin: str, index: int, within: float) -> bool:
    """Whether the member applies `index` within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = status(admin)
        if found is not None and int(found.get("applied_index", -1)) >= index:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def group_evidence(data_dir: Path, admins: dict[str, str]) -> dict[str, Any]:
    """Per node: its /status (or that it did not answer), RSS, and what its log says of
    elections, snapshots and GC pauses."""
    nodes: dict[str, Any] = {}
    state = read_state(data_dir)
    pids = {n.id: n.pid for n in state.nodes} if state is not None else {}
    for node, admin in admins.items():
        found = status(admin, timeout=10)
        events: dict[str, int] = {}
        slow_gc: list[float] = []
        first: dict[str, str] = {}
        samples: list[str] = []
        path = data_dir / node / "raftmq.log.jsonl"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            event = str(entry.get("event"))
            events[event] = events.get(event, 0) + 1
            first.setdefault(event, str(entry.get("timestamp")))
            if event == "node.gc_pause" and float(entry.get("ms", 0)) >= 500:
                slow_gc.append(float(entry["ms"]))
            if event in ("raft.snapshot_failed", "raft.leader_lost") and events[event] == 1:
                samples.append(json.dumps(entry)[:700])
        pid = found.get("pid") if found else pids.get(node)
        nodes[node] = {
            "status": None if found is None else (
                {k: found.get(k) for k in ("role", "term", "applied_index", "commit_index")}
                | {"depth": depth(found)}),
            "rss": rss_bytes(int(pid)) if pid else None,
            "leader_changes": events.get("raft.leader_changed", 0), "leader_lost": events.get("raft.leader_lost", 0),
            "snapshot_failed": events.get("raft.snapshot_failed", 0),
            "first_snapshot_failed": first.get("raft.snapshot_failed"),
            "gc_pauses_500ms_plus": len(slow_gc), "gc_pause_max_ms": max(slow_gc, default=0.0),
            "log_samples": samples,
        }
    return nodes


def node_log_evidence(member_dir: Path, limit: int = 40) -> list[str]:
    lines: list[str] = []
    for name in ("node.log", "raftmq.log.jsonl"):
        path = member_dir / name
        if path.exists():
            lines += [f"{name}: {line[:400]}" for line in path.read_text(errors="replace").splitlines()
                      if EVIDENCE.search(line)]
    return lines[-limit:]


async def scenario(options: argparse.Namespace, config: Path, work: Path, url: str, admins: dict[str, str],
                   new_ports: list[int]) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    count = int(options.gib * GIB // options.size)
    drain = None
    if options.consumed:
        drain = Drain(url)
        await drain.start()
    fill = Fill(url, count, options.size, options.producers, options.window, options.stall)
    print(f"filling {GROUP} with {count:,} messages of {options.size} B ({options.gib:g} GiB) ...",
          file=sys.stderr, flush=True)
    try:
        fill_s = await fill.run()
    except FillStalled as exc:
        return {"ok": False, "stalled": str(exc), "fill_progress": fill.progress, "fill_errors": len(fill.errors),
                "nodes": await loop.run_in_executor(None, group_evidence, work / GROUP, admins)}
    if drain is not None:
        await drain.finish(fill.receipted)
    print(f"  filled in {fill_s:.1f} s; waiting for every member to apply it", file=sys.stderr, flush=True)
    settle_began = time.monotonic()
    await loop.run_in_executor(None, wait_applied, admins, 600.0)
    settle_s = time.monotonic() - settle_began
    before = {node: status(admin) for node, admin in admins.items()}
    data_dir = work / GROUP
    disk_before = {node: disk_bytes(data_dir / node) for node in admins}

    load = None
    load_task = None
    if options.under_load:
        load = Load(url, options.under_load, 256)
        load_task = asyncio.ensure_future(load.run())
        await asyncio.sleep(2.0)
    client, raft, admin = new_ports
    new_admin = f"127.0.0.1:{admin}"
    admins_all = {**admins, NEW: new_admin}
    argv = ("group", "add-node", GROUP, NEW, "--client", f"127.0.0.1:{client}", "--raft", f"127.0.0.1:{raft}",
            "--admin", new_admin, "--config", str(config), "--timeout", str(options.timeout))
    print(f"raftmq {' '.join(argv)}", file=sys.stderr, flush=True)
    watch = Watch(new_admin, admins)
    watch_task = asyncio.ensure_future(loop.run_in_executor(None, watch.run))
    began = time.monotonic()
    exit_code, lines = await loop.run_in_executor(None, lambda: add_node(argv, work, options.timeout * 3 + 60))
    returned = time.monotonic()
    wall_s = returned - began
    output = [text for _t, text in lines]
    committed_at = next((t for t, text in lines if f"{NEW} is a member" in text), None)
    caught = next((re.search(r"caught up in ([0-9.]+) s", text) for _t, text in lines
                   if f"{GROUP}/{NEW}: caught up" in text), None)
    total = next((re.search(r"added and caught up in ([0-9.]+) s", text) for _t, text in lines
                  if "added and caught up" in text), None)

    checks: dict[str, Any] = {}
    at_return: dict[str, Any] = {}
    really_s: float | None = None
    if exit_code == 0:
        # What add-node promised, at the moment it returned.
        found = leader(admins)
        own = status(new_admin)
        commit = int(found[1]["commit_index"]) if found else -1
        at_return = {"leader_commit": commit, **Watch.sample(own)}
        # Under load the leader commits on: n4 may trail by the entries of the last moment.
        reached = await loop.run_in_executor(None, reaches, new_admin, commit, 1.0)
        checks["at_return_n4_applied_ge_leader_commit"] = {
            "ok": reached, "n4_applied_index": at_return["applied_index"],
            "n4_raft_last_applied": at_return["raft_last_applied"], "leader_commit": commit,
            "note": "n4 reached that commit index within 1 s" if reached else "n4 did not reach it within 1 s"}
        # Then: until n4 really has everything (applied the leader's commit index, the same
        # queue depth, no body missing), or the timeout.
        print(f"  add-node returned; n4 at that moment: {at_return}; waiting until it really caught up",
              file=sys.stderr, flush=True)
        really_at = await loop.run_in_executor(None, watch.wait_caught_up, options.timeout)
        if really_at is not None and committed_at is not None:
            really_s = really_at - committed_at
    watch.stop = True
    await watch_task
    if load is not None and load_task is not None:
        load.stop.set()
        await load_task
    if exit_code == 0:
        found = leader(admins)
        own = status(new_admin)
        commit = int(found[1]["commit_index"]) if found else -1
        applied = int(own["applied_index"]) if own else -1
        reached = await loop.run_in_executor(None, reaches, new_admin, commit, 10.0)
        checks["n4_applied_ge_leader_commit"] = {"ok": reached, "n4_applied": applied, "leader_commit": commit}
        n4_depth, leader_depth = depth(own), depth(found[1] if found else None)
        expected = 0 if options.consumed else fill.receipted
        checks["n4_depth_eq_leader"] = {"ok": n4_depth == leader_depth and n4_depth == expected,
                                        "n4": n4_depth, "leader": leader_depth, "receipted": expected}
        began_verify = time.monotonic()
        verified = await loop.run_in_executor(None, lambda: status(new_admin, verify=True, timeout=3600))
        verify = (verified or {}).get("verify")
        checks["n4_verify_unreadable_0"] = {"ok": verify is not None and verify.get("unreadable") == 0,
                                            "verify": verify,
                                            "seconds": round(time.monotonic() - began_verify, 1)}
        own = status(new_admin)
        checks["n4_body_failures_0"] = {"ok": own is not None and own.get("body_failures") == 0,
                                        "body_failures": None if own is None else own.get("body_failures"),
                                        "missing_indexes": (None if own is None
                                                            else own.get("bodies", {}).get("missing_indexes"))}
    after = {node: status(a) for node, a in admins_all.items()}
    rss = {node: rss_bytes(int(s["pid"])) if s else None for node, s in after.items()}
    new_dir = data_dir / NEW
    fill_bytes = fill.receipted * options.size
    result: dict[str, Any] = {
        "mode": "consumed" if options.consumed else "waiting",
        "messages": fill.receipted, "size": options.size, "gib": round(fill_bytes / GIB, 3),
        "fill_s": round(fill_s, 1), "fill_msg_s": round(fill.receipted / fill_s),
        "fill_mib_s": round(fill_bytes / 2**20 / fill_s, 1),
        "fill_errors": len(fill.errors), "fill_error_sample": fill.errors[:3], "settle_s": round(settle_s, 1),
        "leader_before": next((n for n, s in before.items() if s and s.get("role") == "leader"), None),
        "commit_index_before": max((int(s["commit_index"]) for s in before.values() if s), default=None),
        "disk_before": disk_before,
        "add_node_exit": exit_code, "add_node_wall_s": round(wall_s, 1),
        "catch_up_s": float(caught.group(1)) if caught else None,
        "add_node_reported_s": float(total.group(1)) if total else None,
        "really_caught_up_s": None if really_s is None else round(really_s, 1),
        "add_node_output": output, "n4_at_return": at_return, "n4_timeline": watch.timeline,
        "n4_disk": disk_bytes(new_dir),
        "n4_disk_parts": ({part.name: disk_bytes(part) for part in sorted(new_dir.iterdir()) if part.is_dir()}
                          if new_dir.exists() else {}),
        "rss": rss, "checks": checks,
        "ok": exit_code == 0 and bool(checks) and all(c["ok"] for c in checks.values()),
    }
    if load is not None:
        lat = sorted(load.latencies)
        result["under_load"] = {"rate": options.under_load, "receipted": load.receipted, "errors": len(load.errors),
                                "receipt_p50_ms": round(lat[len(lat) // 2] * 1000, 1) if lat else None,
                                "receipt_max_ms": round(lat[-1] * 1000, 1) if lat else None}
    if not result["ok"]:
        result["n4_log_evidence"] = node_log_evidence(new_dir)
    return result


def print_summary(result: dict[str, Any]) -> None:
    print(f"fill ({result['mode']}): {result['gib']} GiB, {result['messages']:,} messages of {result['size']} B in "
          f"{result['fill_s']} s = {result['fill_msg_s']:,} msg/s, {result['fill_mib_s']} MiB/s "
          f"(errors {result['fill_errors']}); all members applied {result['settle_s']} s later "
          f"(commit index {result['commit_index_before']:,}, leader {result['leader_before']})")
    print("before add-node, on disk: " + ", ".join(f"{n} {mib(b)}" for n, b in result["disk_before"].items()))
    print(f"add-node: exit {result['add_node_exit']}, wall {result['add_node_wall_s']} s, "
          f"caught up in {result['catch_up_s']} s from the commit "
          f"(command's own figure {result['add_node_reported_s']} s)")
    for line in result["add_node_output"]:
        print(f"  | {line}")
    if result["n4_at_return"]:
        print(f"n4 when add-node returned: {result['n4_at_return']}")
    print(f"n4 really caught up (applied the leader's commit index, same depth, no body missing) "
          f"{result['really_caught_up_s']} s after the commit")
    timeline = result["n4_timeline"]
    step = max(1, len(timeline) // 12)
    for row in timeline[::step] + ([timeline[-1]] if timeline and (len(timeline) - 1) % step else []):
        print(f"  n4 t={row['t']:>6} s: applied {row['applied_index']}, raft last_applied {row['raft_last_applied']}, "
              f"depth {row['depth']}, missing body indexes {row['missing_indexes']}, body journal {row['body_bytes']}")
    parts = ", ".join(f"{k} {mib(v)}" for k, v in result["n4_disk_parts"].items())
    print(f"n4 on disk: {mib(result['n4_disk'])} ({parts})")
    print("RSS: " + ", ".join(f"{n} {mib(b) if b else '?'}" for n, b in result["rss"].items()))
    if "under_load" in result:
        load = result["under_load"]
        print(f"under load: {load['rate']} msg/s, {load['receipted']} receipted, errors {load['errors']}, "
              f"receipt p50 {load['receipt_p50_ms']} ms, max {load['receipt_max_ms']} ms")
    for name, check in result["checks"].items():
        detail = {k: v for k, v in check.items() if k != "ok"}
        print(f"check {name}: {'OK' if check['ok'] else 'FAILED'} {detail}")
    for line in result.get("n4_log_evidence", []):
        print(f"  n4 log | {line}")
    print("RESULT: " + ("OK" if result["ok"] else "FAILED"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="GiB of message bodies to fill the group with")
    parser.add_argument("--size", type=int, default=1024, help="body bytes per message")
    parser.add_argument("--producers", type=int, default=4, help="producer connections filling in parallel")
    parser.add_argument("--window", type=int, default=100, help="receipted SENDs in flight per producer")
    parser.add_argument("--consumed", action="store_true", help="a consumer takes every message: nothing waits")
    parser.add_argument("--under-load", type=float, default=0.0, metavar="RATE",
                        help="receipted msg/s a producer keeps sending while n4 is added")
    parser.add_argument("--timeout", type=float, default=1800.0, help="add-node --timeout (seconds per step)")
    parser.add_argument("--stall", type=float, default=120.0,
                        help="give up when the fill receipts under 1 %% of its messages in this many seconds")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a fresh temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", type=Path, default=None, help="also write the result as JSON")
    options = parser.parse_args()
    if options.dir is None:
        work = Path(tempfile.mkdtemp(prefix="member-catchup-"))
    else:
        work = options.dir
        if work.exists() and any(work.iterdir()):
            raise SystemExit(f"{work} is not empty: give a fresh directory")
        work.mkdir(parents=True, exist_ok=True)
    ports = free_ports(12)
    config = work / f"{GROUP}.toml"
    config.write_text(group_file_text(work / GROUP, ports[:9]), encoding="utf-8")
    admins, url = endpoints(ports[:9])
    state_dir = work / GROUP
    result: dict[str, Any] = {}
    try:
        up_detached(config, work, 60)
        result = asyncio.run(scenario(options, config, work, url, admins, ports[9:]))
    finally:
        stop_group(state_dir, 60)
        if not result:
            print(f"work directory kept: {work}", file=sys.stderr)
    if not result:
        raise SystemExit(1)
    result["work_dir"] = str(work)
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if "stalled" in result:
        print(f"FAILED: {result['stalled']}")
        print("fill progress (s, receipted): " + ", ".join(f"{t}:{n:,}" for t, n in result["fill_progress"]))
        for node, facts in result["nodes"].items():
            print(f"{node}: {json.dumps({k: v for k, v in facts.items() if k != 'log_samples'})}")
            for sample in facts["log_samples"]:
                print(f"  log | {sample}")
    else:
        print_summary(result)
    if options.keep or not result["ok"]:
        print(f"work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    if not result["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

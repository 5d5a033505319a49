"""Commit latency and group-commit throughput of `RaftLog` on a 3-member loopback group.

Each member is a real process (`raft_bench.py member ...`) running a RaftLog whose state machine
records the ids of the committed `Send` commands (with snapshot/restore), driven by JSON lines
on stdin, answering on stdout. The load runs inside the leader's process, so the figures are
the log's own, not this harness's IPC. `Group` is also the harness of
tests/replication/test_raft_log.py (kill -9, SIGSTOP, restart).

Run: `python -m bench.raft_bench run [--seconds 5]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import msgpack

from raftmq.config import RaftTimings
from raftmq.core.commands import Send
from raftmq.errors import RaftmqError
from raftmq.logs import configure_logging
from raftmq.processes import free_port
from raftmq.protocol.header_block import block_of, header_dict
from raftmq.replication.raft_log import RaftLog
from raftmq.replication.raft_settings import RaftSettings

# ---------------------------------------------------------------------------------------------
# member process


class RaftMember:
    def __init__(self, settings: RaftSettings) -> None:
        self.ids: list[str] = []
        self.log = RaftLog(settings)
        self.out_lock = asyncio.Lock()

    def apply(self, commands: Any) -> None:
        for command in commands:
            self.ids.append(header_dict(command.headers)["id"])

    def snapshot(self) -> bytes:
        return msgpack.packb(self.ids)

    def restore(self, state: bytes) -> None:
        self.ids = list(msgpack.unpackb(state)) if state else []

    def emit(self, message: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    async def append_one(self, ident: str, body: bytes, count: int = 1) -> str | None:
        """Append `count` Sends in one call; None when committed, else the error's class name."""
        try:
            if count == 1:
                await self.log.propose([Send("bench", "/queue/bench", block_of((("id", ident),)), body, 0)])
            else:
                await self.log.propose([Send("bench", "/queue/bench", block_of((("id", f"{ident}.{k}"),)), body, 0)
                                        for k in range(count)])
            return None
        except RaftmqError as exc:
            return type(exc).__name__

    async def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        body = b"\xa5" * int(request.get("body", 1024))
        if op == "status":
            status = self.log.raft_status()
            return {"status": {k: getattr(status, k) for k in status.__slots__}, "applied": len(self.ids)}
        if op == "ids":
            return {"ids": self.ids}
        if op == "append":
            errors = await asyncio.gather(*(self.append_one(i, body) for i in request["ids"]))
            return {"acked": [i for i, e in zip(request["ids"], errors) if e is None],
                    "errors": [e for e in errors if e is not None]}
        if op == "stream":  # acks are emitted as they happen, so a killed leader's acks are known
            return await self.stream(request["prefix"], int(request["count"]), int(request["concurrency"]), body)
        if op == "latency":
            return await self.latency(int(request["n"]), body)
        if op == "throughput":
            return await self.throughput(float(request["seconds"]), int(request["concurrency"]), body,
                                         int(request.get("per_append", 1)))
        if op == "transfer":
            return {"ok": await self.log.transfer_leadership(timeout=1.0)}
        if op == "compact":
            assert self.log._syncobj is not None
            self.log._syncobj.forceLogCompaction()
            return {"ok": True}
        raise ValueError(f"unknown op {op}")

    async def stream(self, prefix: str, count: int, concurrency: int, body: bytes) -> dict[str, Any]:
        next_id = 0
        acked = failed = 0

        async def worker() -> None:
            nonlocal next_id, acked, failed
            while next_id < count:
                ident = f"{prefix}{next_id}"
                next_id += 1
                error = await self.append_one(ident, body)
                if error is None:
                    acked += 1
                    self.emit({"acked": ident})
                else:
                    failed += 1
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return {"acked": acked, "failed": failed}

    async def latency(self, n: int, body: bytes) -> dict[str, Any]:
        samples = []
        for k in range(n):
            started = time.perf_counter()
            error = await self.append_one(f"lat{k}", body)
            if error is not None:
                return {"error": error}
            samples.append(time.perf_counter() - started)
        samples.sort()
        return {"n": n, "p50_ms": samples[n // 2] * 1e3, "p99_ms": samples[min(n - 1, int(n * 0.99))] * 1e3,
                "max_ms": samples[-1] * 1e3}

    async def throughput(self, seconds: float, concurrency: int, body: bytes, per_append: int = 1) -> dict[str, Any]:
        done = failed = 0
        start = time.perf_counter()
        deadline = start + seconds
        entries_before = self.log.status().commit_index

        async def worker(w: int) -> None:
            nonlocal done, failed
            k = 0
            while time.perf_counter() < deadline:
                if await self.append_one(f"t{w}.{k}", body, per_append) is None:
                    done += per_append
                else:
                    failed += 1
                k += 1

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - start
        status = self.log.status()
        return {"msgs_per_s": done / elapsed, "failed": failed, "entries": status.commit_index - entries_before,
                "mb_per_s": done * len(body) / elapsed / 1e6}

    async def run(self) -> None:
        await self.log.start(self)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self.emit({"ready": True})
        tasks: set[asyncio.Task[None]] = set()
        while line := await reader.readline():
            request = json.loads(line)
            task = asyncio.create_task(self.answer(request))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await self.log.stop()

    async def answer(self, request: dict[str, Any]) -> None:
        try:
            reply = await self.handle(request)
        except Exception as exc:
            logging.exception("request failed")
            reply = {"error": repr(exc)}
        reply["rid"] = request["rid"]
        self.emit(reply)


def member_main(args: argparse.Namespace) -> None:
    # stdout carries this member's JSON replies: every log line (stdlib and structlog) goes to stderr.
    configure_logging(console=False, level="info")
    timings = RaftTimings(max_in_flight_entries=args.max_in_flight, compact_after_bytes=args.compact_after_bytes)
    settings = RaftSettings(args.self_address, tuple(args.peers.split(",")), args.data, timings=timings)
    asyncio.run(RaftMember(settings).run())


# ---------------------------------------------------------------------------------------------
# harness


class MemberProcess:
    """One member process and its JSON-lines channel."""

    def __init__(self, address: str, peers: list[str], data_dir: str, log_path: str, extra: list[str]) -> None:
        self.address, self.peers, self.data_dir, self.log_path, self.extra = address, peers, data_dir, log_path, extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.acked: list[str] = []
        self._replies: dict[int, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._rid = 0

    def start(self) -> None:
        cmd = [sys.executable, os.path.abspath(__file__), "member", "--self-address", self.address,
               "--peers", ",".join(self.peers), "--data", self.data_dir, *self.extra]
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
        self._replies = {}
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        self._wait(lambda: self._replies.get(-1), 20.0, "member did not start")

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            message = json.loads(line)
            with self._cond:
                if "acked" in message and "rid" not in message:
                    self.acked.append(message["acked"])
                elif "ready" in message:
                    self._replies[-1] = message
                else:
                    self._replies[message["rid"]] = message
                self._cond.notify_all()

    def _wait(self, ready: Any, timeout: float, what: str) -> Any:
        with self._cond:
            result = self._cond.wait_for(ready, timeout)
            if not result:
                raise TimeoutError(f"{self.address}: {what}")
            return result

    def send(self, op: str, **fields: Any) -> int:
        assert self.proc is not None and self.proc.stdin is not None
        self._rid += 1
        self.proc.stdin.write((json.dumps({"op": op, "rid": self._rid, **fields}) + "\n").encode())
        self.proc.stdin.flush()
        return self._rid

    def reply(self, rid: int, timeout: float = 10.0) -> dict[str, Any]:
        return self._wait(lambda: self._replies.pop(rid, None), timeout, f"no reply to request {rid}")

    def request(self, op: str, timeout: float = 10.0, **fields: Any) -> dict[str, Any]:
        return self.reply(self.send(op, **fields), timeout)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGKILL:
            self.proc.wait(5)

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)  # by pid, never by name
            self.proc.wait(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


class Group:
    """N member processes on 127.0.0.1 with ports from the OS; `close()` kills them by pid."""

    def __init__(self, size: int = 3, root: str | None = None, extra: list[str] | None = None) -> None:
        self.root = root or tempfile.mkdtemp(prefix="raftmq-raft-")
        self._own_root = root is None
        addresses = [f"127.0.0.1:{free_port()}" for _ in range(size)]
        self.members = [
            MemberProcess(a, addresses, os.path.join(self.root, f"m{i}"), os.path.join(self.root, f"m{i}.log"),
                          extra or [])
            for i, a in enumerate(addresses)
        ]

    def start(self) -> Group:
        try:
            for member in self.members:
                member.start()
        except BaseException:
            self.close()
            raise
        return self

    def leader(self, timeout: float = 10.0, exclude: MemberProcess | None = None) -> MemberProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in self.members:
                if member.alive and member is not exclude and member.request("status")["status"]["is_leader"]:
                    return member
            time.sleep(0.02)
        raise TimeoutError("no leader elected")

    def close(self) -> None:
        for member in self.members:
            member.close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Group:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# bench


def run_bench(args: argparse.Namespace) -> None:
    extra = ["--max-in-flight", str(args.max_in_flight)]
    with Group(3, extra=extra) as group:
        leader = group.leader()
        leader.request("latency", n=50, body=1024)  # warm up
        lat = leader.request("latency", timeout=120, n=args.latency_ops, body=1024)
        print(f"commit latency, 1 op in flight, 1 KiB: p50 {lat['p50_ms']:.2f} ms  p99 {lat['p99_ms']:.2f} ms  "
              f"max {lat['max_ms']:.2f} ms  (n={lat['n']})")
        for body, concurrency, per_append in ((1024, 1000, 1), (100, 4000, 1), (1024, 10, 100), (100, 4, 1000)):
            t = leader.request("throughput", timeout=args.seconds + 60, seconds=args.seconds, concurrency=concurrency,
                               body=body, per_append=per_append)
            print(f"group commit, {concurrency} appends in flight x {per_append} commands of {body} B: "
                  f"{t['msgs_per_s']:,.0f} msgs/s ({t['mb_per_s']:.1f} MB/s, {t['entries']} Raft entries, "
                  f"{t['failed']} failed)")
        statuses = [m.request("status")["status"] for m in group.members]
        print("fsyncs per member:", [s["fsyncs"] for s in statuses], " applied:", [s["last_applied"] for s in statuses])
        leader.signal(signal.SIGKILL)
        killed = time.monotonic()
        while time.monotonic() - killed < 10:
            survivors = [m for m in group.members if m.alive]
            if any(m.request("append", ids=[f"k{time.monotonic()}"], body=16).get("acked") for m in survivors):
                break
            time.sleep(0.005)
        print(f"kill -9 of the leader -> first new commit: {time.monotonic() - killed:.2f} s")


def _default(name: str) -> Any:
    return RaftTimings.__dataclass_fields__[name].default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    member = sub.add_parser("member")
    member.add_argument("--self-address", required=True)
    member.add_argument("--peers", required=True)
    member.add_argument("--data", required=True)
    member.add_argument("--max-in-flight", type=int, default=_default("max_in_flight_entries"))
    member.add_argument("--compact-after-bytes", type=int, default=_default("compact_after_bytes"))
    run = sub.add_parser("run")
    run.add_argument("--seconds", type=float, default=5.0)
    run.add_argument("--latency-ops", type=int, default=1000)
    run.add_argument("--max-in-flight", type=int, default=_default("max_in_flight_entries"))
    args = parser.parse_args()
    if args.command == "member":
        member_main(args)
    else:
        run_bench(args)


if __name__ == "__main__":
    main()

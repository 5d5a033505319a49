"""How long `raftmq group drain` takes, and what producers see meanwhile: the symmetric preset
(three groups of three) under `raftmq up --detach` in a directory of its own; g3 is loaded with
`--messages` queued messages (no consumer), then drained while one producer per group keeps
sending with receipts on the whole cluster's failover URL; afterwards everything is consumed
from g1 and g2 and counted: lost and stored twice must both be 0.

    .venv/bin/python -m bench.drain_bench --messages 100000 --dir /tmp/drain-bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from raftmq.client.failover import connect_failover
from raftmq.ops.launcher import read_state
from raftmq.protocol.frame import Frame

RAFTMQ = str(Path(sys.executable).parent / "raftmq")
QUEUE = "/queue/drained"


def raftmq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAFTMQ, *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=3600)


def url(addresses: list[str]) -> str:
    return "failover:(" + ",".join(f"stomp://{a}" for a in addresses) + ")?randomize=false"


async def load(target: str, count: int, size: int) -> set[str]:
    client = await connect_failover(target)
    sent: set[str] = set()
    try:
        for start in range(0, count, 500):
            bodies = [f"b{i:08d}" for i in range(start, min(start + 500, count))]
            futures = [client.send_nowait(QUEUE, body.encode().ljust(size, b"."), receipt=True) for body in bodies]
            for body, future in zip(bodies, futures, strict=True):
                await future
                sent.add(body)
    finally:
        await client.close()
    return sent


async def produce(target: str, prefix: str, stop: asyncio.Event, sent: set[str], errors: list[str]) -> None:
    client = await connect_failover(target)
    index = 0
    try:
        while not stop.is_set():
            body = f"{prefix}{index:07d}"
            index += 1
            try:
                await client.send(QUEUE, body.encode(), receipt=True)
                sent.add(body)
            except Exception as exc:
                errors.append(repr(exc))
            await asyncio.sleep(0.01)
    finally:
        await client.close()


async def consume_all(targets: list[str], idle: float = 3.0) -> tuple[Counter[str], set[str]]:
    got: Counter[str] = Counter()
    redelivered: set[str] = set()
    last = [time.monotonic()]
    clients = []
    for target in targets:
        client = await connect_failover(target)
        clients.append(client)

        def on_message(frame: Frame, client: Any = client) -> None:
            name = frame.body.split(b".")[0].decode()
            got[name] += 1
            if frame.get("redelivered") == "true":
                redelivered.add(name)
            last[0] = time.monotonic()
            client.ack_nowait(frame)

        client.subscribe(QUEUE, ack="client-individual", prefetch=1000, callback=on_message)
    while time.monotonic() - last[0] < idle:
        await asyncio.sleep(0.2)
    for client in clients:
        await client.close()
    return got, redelivered


async def scenario(options: argparse.Namespace, groups: dict[str, list[str]]) -> dict[str, Any]:
    started = time.monotonic()
    backlog = await load(url(groups["g3"]), options.messages, options.size)
    loaded = time.monotonic() - started
    stop = asyncio.Event()
    sent: dict[str, set[str]] = {g: set() for g in groups}
    errors: list[str] = []
    everything = [a for g in ("g3", "g1", "g2") for a in groups[g]]
    producers = [asyncio.ensure_future(produce(url(everything), f"p{g}-", stop, sent[g], errors)) for g in groups]
    await asyncio.sleep(2.0)
    began = time.monotonic()
    drained = await asyncio.get_running_loop().run_in_executor(
        None, lambda: raftmq("group", "drain", "g3", "--preset", options.preset, "--timeout", "3000", cwd=options.dir))
    seconds = time.monotonic() - began
    await asyncio.sleep(2.0)
    stop.set()
    await asyncio.gather(*producers)
    got, redelivered = await consume_all([url(groups["g1"]), url(groups["g2"])])
    expected = backlog | set().union(*sent.values())
    twice = sorted(name for name, count in got.items() if count > 1)
    return {
        "messages": options.messages, "size": options.size, "load_s": round(loaded, 1), "drain_s": round(seconds, 1),
        "drain_exit": drained.returncode,
        "drain_last_line": (drained.stdout or drained.stderr).strip().splitlines()[-1:],
        "produced_during": sum(len(s) for s in sent.values()), "producer_errors": len(errors),
        "lost": len(expected - set(got)), "stored_twice": len([n for n in twice if n not in redelivered]),
        "redelivered_twice": len([n for n in twice if n in redelivered]), "twice_sample": twice[:10],
        "unexpected": len(set(got) - expected),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="symmetric")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "drain-bench")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=256, help="body bytes of the loaded messages")
    options = parser.parse_args()
    options.dir.mkdir(parents=True, exist_ok=True)
    up = raftmq("up", "--detach", "--preset", options.preset, cwd=options.dir)
    if up.returncode != 0:
        raise SystemExit(f"raftmq up failed: {up.stdout}{up.stderr}")
    try:
        state = read_state(options.dir / ".raftmq")
        assert state is not None
        groups: dict[str, list[str]] = {}
        for node in state.nodes:
            groups.setdefault(node.group, []).append(node.client)
        result = asyncio.run(scenario(options, groups))
    finally:
        raftmq("down", "--preset", options.preset, cwd=options.dir)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

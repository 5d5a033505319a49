"""Memory against backlog, and a restart with the backlog: a 3-member group (`raftmq up --detach`,
the group file's defaults but for what is given with --core) is filled with persistent messages
of `--size` bytes in one queue with no consumer, and each member's RSS is read at 0 waiting
messages and at every `--at` count. Then the whole group is stopped and started again, and the
time until a consumer gets the first message is measured, with every member's RSS after it.
Last, `--drain-seconds` of consuming (ack mode client, prefetch 1000) from the deep queue, then from a queue filled
with `--shallow` messages, gives the dispatch rates side by side.

    .venv/bin/python -m bench.deep_queue --at 1000000,5000000 --dir /tmp/deep --json deep.json --html deep.html

The fill uses bench/member_catchup.py's producers (receipted SENDs, `--window` in flight on
each of `--producers` failover connections). Every process started is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.member_catchup import (
    GROUP,
    QUEUE,
    Fill,
    endpoints,
    group_file_text,
    leader,
    rss_bytes,
    status,
    stop_group,
    up_detached,
    wait_applied,
)
from raftmq.client.failover import connect_failover
from raftmq.processes import free_ports
from raftmq.protocol.frame import Frame

SHALLOW = "/queue/deep.shallow"


def sample(admins: dict[str, str]) -> dict[str, Any]:
    """Per member: RSS (MiB) and the queue's depth, from its admin /status."""
    found: dict[str, Any] = {}
    for node, admin in admins.items():
        answer = status(admin, timeout=30)
        if answer is None:
            found[node] = None
            continue
        rss = rss_bytes(int(answer["pid"]))
        queue = answer["broker"]["destinations"].get(QUEUE, {})
        found[node] = {"rss_mib": None if rss is None else round(rss / 2**20, 1), "depth": queue.get("depth", 0),
                       "pid": answer["pid"]}
    return found


async def first_message(url: str, timeout: float) -> float:
    """Seconds until a new consumer of QUEUE gets a message (connecting included)."""
    began = time.monotonic()
    client = await connect_failover(url)
    got: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_message(_frame: Frame) -> None:
        if not got.done():
            got.set_result(None)

    try:
        client.subscribe(QUEUE, ack="client-individual", prefetch=1, callback=on_message)
        await asyncio.wait_for(got, timeout)
        return time.monotonic() - began
    finally:
        await client.close()  # unacknowledged: the message stays


async def consume_rate(url: str, destination: str, seconds: float, limit: int) -> float | None:
    """Messages per second a consumer takes from `destination` over `seconds`, or until it took
    `limit` (after the first 2 s): ack mode client, prefetch 1000, a cumulative ACK every 100
    messages. (Not auto: the core does not hold auto-ack deliveries back, so one SUBSCRIBE would
    be handed the whole backlog at once.) None when `limit` was reached within those first 2 s:
    the queue was too shallow to give a steady rate."""
    client = await connect_failover(url)
    count = 0

    def on_message(frame: Frame) -> None:
        nonlocal count
        count += 1
        if count % 100 == 0:
            client.ack_nowait(frame)

    try:
        client.subscribe(destination, ack="client", prefetch=1000, callback=on_message)
        await asyncio.sleep(2.0)  # the first prefetch burst is not the steady rate
        start_count, began = count, time.monotonic()
        if count >= limit:
            print(f"  {destination}: {count:,} taken during the 2 s warm-up; no steady rate (fill more)",
                  file=sys.stderr, flush=True)
            return None
        while time.monotonic() - began < seconds and count < limit:
            await asyncio.sleep(0.05)
        return (count - start_count) / (time.monotonic() - began)
    finally:
        await client.close()


async def fill_to(url: str, count: int, options: argparse.Namespace, destination: str = QUEUE) -> float:
    return await Fill(url, count, options.size, options.producers, options.window, options.stall, destination).run()


def write_html(result: dict[str, Any], path: Path) -> None:
    import plotly.graph_objects as go

    figure = go.Figure()
    points = result["points"]
    for node in sorted(points[0]["nodes"]):
        figure.add_trace(go.Scatter(x=[p["waiting"] for p in points], y=[p["nodes"][node]["rss_mib"] for p in points],
                                    mode="lines+markers", name=node))
    figure.add_hline(y=256, line_dash="dash", annotation_text="256 MiB")
    figure.update_layout(title=f"raftmq: RSS per member against waiting {result['size']} B messages (3-member group)",
                         xaxis_title="waiting messages", yaxis_title="RSS (MiB)", width=900, height=500)
    path.write_text(figure.to_html(include_plotlyjs=True, full_html=True, config={"displayModeBar": False}),
                    encoding="utf-8")


async def scenario(options: argparse.Namespace, url: str, admins: dict[str, str], config: Path,
                   work: Path) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    result: dict[str, Any] = {"size": options.size, "core": options.core, "points": [], "fills": []}
    await asyncio.sleep(2.0)
    result["points"].append({"waiting": 0, "nodes": sample(admins)})
    filled = 0
    for target in options.at:
        print(f"filling to {target:,} waiting messages ...", file=sys.stderr, flush=True)
        seconds = await fill_to(url, target - filled, options)
        result["fills"].append({"messages": target - filled, "seconds": round(seconds, 1),
                                "msg_per_s": round((target - filled) / seconds)})
        filled = target
        await loop.run_in_executor(None, wait_applied, admins, 900.0)
        await asyncio.sleep(5.0)  # let a snapshot in progress finish
        point = {"waiting": target, "nodes": sample(admins)}
        result["points"].append(point)
        print(f"  {target:,}: " + ", ".join(f"{n} {v['rss_mib']} MiB" for n, v in point["nodes"].items() if v),
              file=sys.stderr, flush=True)
    return result


async def after_restart(options: argparse.Namespace, url: str, admins: dict[str, str]) -> dict[str, Any]:
    began = time.monotonic()
    first = await first_message(url, 600.0)
    found = leader(admins)
    return {"first_message_s": round(first, 2), "leader_found_s": round(time.monotonic() - began, 2),
            "leader": found[0] if found else None, "nodes": sample(admins)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--at", type=lambda text: [int(n) for n in text.split(",")], default=[1_000_000],
                        help="waiting-message counts to measure at, ascending, comma-separated")
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--stall", type=float, default=120.0)
    parser.add_argument("--core", action="append", default=[], metavar="KEY=VALUE",
                        help="a [core] setting for the group file (e.g. page_size=0 to measure without paging)")
    parser.add_argument("--drain-seconds", type=float, default=30.0,
                        help="consume from the deep queue this long, then from a shallow one")
    parser.add_argument("--shallow", type=int, default=100_000, help="messages in the shallow queue")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--html", type=Path, default=None, help="write the RSS plot (plotly, one page)")
    parser.add_argument("--png", type=Path, default=None, help="and a PNG of it (headless chromium)")
    options = parser.parse_args()
    work = options.dir or Path(tempfile.mkdtemp(prefix="deep-queue-"))
    work.mkdir(parents=True, exist_ok=True)
    if any(work.iterdir()):
        raise SystemExit(f"{work} is not empty: give a fresh directory")
    ports = free_ports(9)
    config = work / f"{GROUP}.toml"
    text = group_file_text(work / GROUP, ports)
    if options.core:
        text = text.replace("[[node]]", "[core]\n" + "\n".join(options.core) + "\n\n[[node]]", 1)
    config.write_text(text, encoding="utf-8")
    admins, url = endpoints(ports)
    state_dir = work / GROUP
    result: dict[str, Any] = {}
    try:
        up_detached(config, work, 60)
        result = asyncio.run(scenario(options, url, admins, config, work))
        print("stopping the group, then starting it again ...", file=sys.stderr, flush=True)
        stop_group(state_dir, 120)
        up_s = up_detached(config, work, 600)
        restart = asyncio.run(after_restart(options, url, admins))
        restart["up_s"] = round(up_s, 2)
        restart["ready_s"] = round(up_s + restart["first_message_s"], 2)
        result["restart"] = restart
        print(f"  restart: up {up_s:.1f} s, first message {restart['first_message_s']} s later",
              file=sys.stderr, flush=True)
        if options.drain_seconds:
            deep = asyncio.run(consume_rate(url, QUEUE, options.drain_seconds, options.at[-1] - options.shallow))
            asyncio.run(fill_to(url, options.shallow, options, SHALLOW))
            shallow = asyncio.run(consume_rate(url, SHALLOW, options.drain_seconds, options.shallow - 1000))
            result["dispatch"] = {"deep_waiting": options.at[-1],
                                  "deep_msg_per_s": None if deep is None else round(deep),
                                  "shallow_waiting": options.shallow,
                                  "shallow_msg_per_s": None if shallow is None else round(shallow)}
    finally:
        stop_group(state_dir, 120)
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if options.html is not None:
        write_html(result, options.html)
        if options.png is not None:
            subprocess.run(["chromium", "--headless", "--no-sandbox", "--hide-scrollbars",
                            f"--screenshot={options.png}", "--window-size=920,520", options.html.resolve().as_uri()],
                           check=False, capture_output=True, timeout=120)
    print(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

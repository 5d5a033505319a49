"""MQTT measured in one sitting: a raftmq group against the peers (docs/benchmarks.md, "MQTT").

    .venv/bin/python -m bench.mqtt_bench [--duration 30] [--qos 1] [--keep] [--peers mosquitto,rabbitmq] [--out DIR]

Starts a raftmq group of three `raftmq node` processes (bench.node_group, the shipped
configs/group.toml, each member with an MQTT listener) and drives its leader with
`bench.mqtt_load` (4 publishers x 4 subscribers, 1 KiB, QoS 1, 100 PUBLISHes in flight per
publisher, clean sessions, MQTT 3.1.1), reading the three processes' CPU from /proc (user +
system, every thread) per delivered message. Then each peer named in `--peers`, started by the
scripts in $RAFTMQ_PEERS_DIR (default ../shared/peers) and driven the same way: `mosquitto`
(one node, C, PUBACK before anything is on disk: a speed reference) and `rabbitmq` (its MQTT
plugin on a three-node cluster, ports 1901-1903; the load goes to its first node). A peer whose
script fails is reported as such. Lost must be 0.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import mqtt_load
from bench.cluster_bench import cpu_seconds
from bench.node_group import NodeGroup

PEERS = Path(os.environ.get("RAFTMQ_PEERS_DIR", Path(__file__).resolve().parents[2] / "shared" / "peers"))
PEER_PORTS = {"mosquitto": 1873, "rabbitmq": 1901}
PEER_SCRIPTS = {"mosquitto": (["start_mosquitto.sh"], ["stop_mosquitto.sh"]),
                "rabbitmq": (["start_rabbitmq.sh", "cluster"], ["stop_rabbitmq.sh", "cluster"])}


def load(url: str, args: argparse.Namespace, out: Path, name: str) -> dict[str, Any]:
    load_args = mqtt_load.parser().parse_args([
        "--url", url, "-p", str(args.publishers), "-c", str(args.subscribers), "--qos", str(args.qos),
        "--duration", str(args.duration), "--processes", str(args.processes), *(["--keep"] if args.keep else [])])
    result = mqtt_load.run(load_args)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    return result


def raftmq_case(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    with NodeGroup.create(size=3, mqtt=True) as group:
        leader = group.start_all()
        member = group.members[leader]
        assert member.mqtt is not None
        pids = [m.pid for m in group.members.values() if m.pid is not None]
        before = {pid: cpu_seconds(pid) for pid in pids}
        result = load(f"{member.mqtt[0]}:{member.mqtt[1]}", args, out, "raftmq")
        used = {pid: cpu_seconds(pid) - before[pid] for pid in pids}
    result["node_cpu_s"] = round(sum(used.values()), 2)
    result["node_cpu_us_per_msg"] = round(1e6 * sum(used.values()) / max(1, result["delivered"]), 1)
    return result


def peer_case(name: str, args: argparse.Namespace, out: Path) -> dict[str, Any] | str:
    start, stop = PEER_SCRIPTS[name]
    started = subprocess.run(["bash", str(PEERS / start[0]), *start[1:]], capture_output=True, text=True, check=False)
    if started.returncode != 0:
        return f"not measured: {start[0]} failed: {(started.stderr or started.stdout).strip()[-300:]}"
    try:
        time.sleep(2)
        return load(f"127.0.0.1:{PEER_PORTS[name]}", args, out, name)
    finally:
        subprocess.run(["bash", str(PEERS / stop[0]), *stop[1:]], capture_output=True, check=False)


def line(name: str, result: dict[str, Any] | str) -> str:
    if isinstance(result, str):
        return f"{name:<10} {result}"
    cpu = f", nodes {result['node_cpu_us_per_msg']} µs/msg" if "node_cpu_us_per_msg" in result else ""
    return (f"{name:<10} {result['publish_rate']:>9,.0f} msg/s acknowledged, {result['delivered_rate']:>9,.0f} "
            f"delivered, e2e p50 {result['e2e_ms']['p50']} ms p99 {result['e2e_ms']['p99']} ms{cpu}, "
            f"lost {result['lost']} dup {result['duplicated']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--qos", type=int, choices=(0, 1), default=1)
    parser.add_argument("-p", "--publishers", type=int, default=4)
    parser.add_argument("-c", "--subscribers", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="subscribers in kept sessions (mqtt_load --keep)")
    parser.add_argument("--peers", default="mosquitto,rabbitmq", help="comma-separated; empty for none")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="raftmq-mqtt-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"raftmq": raftmq_case(args, out)}
    print(line("raftmq", results["raftmq"]), flush=True)
    for name in filter(None, args.peers.split(",")):
        results[name] = peer_case(name, args, out)
        print(line(name, results[name]), flush=True)
    for name, result in results.items():
        if name != "raftmq" and not isinstance(result, str) and result["publish_rate"]:
            print(f"raftmq ÷ {name}: ×{results['raftmq']['publish_rate'] / result['publish_rate']:.2f} "
                  "the acknowledged msg/s")
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    print(f"JSON: {out}")
    return 1 if any(not isinstance(r, str) and r["lost"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

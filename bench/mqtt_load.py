"""An MQTT load generator: publishers and subscribers over asyncio, counting what a broker
acknowledged and what came back (docs/benchmarks.md, "MQTT").

    .venv/bin/python -m bench.mqtt_load --url 127.0.0.1:1883 [-p 4] [-c 4] [--qos 1] [--size 1024]
        [--duration 30] [--in-flight 100] [--mqtt-version 4] [--processes 2] [--json F]

Publisher i publishes to topic `<prefix>/i` and subscriber i subscribes to it (clean sessions, or
with `--keep` subscribers whose sessions the broker keeps),
so each message is delivered once: the MQTT counterpart of `raftmq bench`'s queue case. A QoS 1
publisher keeps `--in-flight` PUBLISHes waiting for their PUBACK. Each payload starts with the
publisher's number, its sequence number and the send time: a subscriber counts lost (PUBACKed,
never received once the run drained), duplicated and the end-to-end latency. Publishers and
subscribers are spread over `--processes` OS processes (the machine's cores are shared with the
broker); `--url` may repeat (publisher and subscriber i connect to the i-th, round robin). The
wire is raftmq's own MQTT codec (raftmq.protocol.mqtt), the same for every broker measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any

from raftmq.protocol.mqtt import packets as p
from raftmq.protocol.mqtt.codec import MqttParser, encode

STAMP = struct.Struct(">IQd")  # publisher, sequence, send time (time.time())
DRAIN_SECONDS = 10.0


class Peer:
    """One MQTT connection: packets in through a parser, bytes out."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, version: int) -> None:
        self.reader, self.writer, self.version = reader, writer, version
        self.parser = MqttParser(version)

    @classmethod
    async def open(cls, url: str, client_id: str, version: int, keep: bool = False) -> Peer:
        """Connected; `keep`: a session the broker keeps (3.1.1 clean session 0; MQTT 5 clean
        start 0 with a session expiry), started afresh."""
        host, port = url.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        peer = cls(reader, writer, version)
        if keep:  # a clean start first: nothing of an earlier run's session comes back
            peer.send(p.Connect(client_id, version, keep_alive=60))
            await peer.read()
            peer.send(p.Disconnect())
            writer.close()
            reader, writer = await asyncio.open_connection(host, int(port))
            peer = cls(reader, writer, version)
            expiry = {"session_expiry_interval": 3600} if version == 5 else {}
            peer.send(p.Connect(client_id, version, clean_start=False, keep_alive=60, properties=expiry))
        else:
            peer.send(p.Connect(client_id, version, keep_alive=60))
        [connack] = await peer.read()
        if not isinstance(connack, p.Connack) or connack.reason_code:
            raise RuntimeError(f"{url}: CONNECT refused: {connack}")
        return peer

    def send(self, packet: p.Packet) -> None:
        self.writer.write(encode(packet, self.version))

    async def read(self) -> list[p.Packet]:
        while True:
            data = await self.reader.read(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the connection")
            packets = self.parser.feed(data)
            if packets:
                return packets


async def publisher(index: int, url: str, args: argparse.Namespace, stop_at: float, out: dict[str, Any]) -> None:
    peer = await Peer.open(url, f"pub-{os.getpid()}-{index}", args.mqtt_version)
    topic = f"{args.prefix}/{index}"
    padding = b"x" * max(0, args.size - STAMP.size)
    window = asyncio.Semaphore(args.in_flight if args.qos else 1 << 30)
    acked: list[int] = []  # the sequence numbers the broker acknowledged
    waiting: dict[int, int] = {}  # packet id -> sequence

    async def acks() -> None:
        while True:
            for packet in await peer.read():
                if isinstance(packet, p.PubAck) and packet.packet_id in waiting:
                    acked.append(waiting.pop(packet.packet_id))
                    window.release()

    reading = asyncio.create_task(acks()) if args.qos else None
    sequence = 0
    packet_id = 0
    while time.monotonic() < stop_at:
        await window.acquire()
        sequence += 1
        payload = STAMP.pack(index, sequence, time.time()) + padding
        if args.qos:
            packet_id = packet_id % 0xFFFF + 1
            waiting[packet_id] = sequence
            peer.send(p.Publish(topic, payload, 1, packet_id=packet_id))
        else:
            peer.send(p.Publish(topic, payload))
        if sequence % 64 == 0:
            await peer.writer.drain()
    deadline = time.monotonic() + DRAIN_SECONDS
    while waiting and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if reading is not None:
        reading.cancel()
    peer.writer.close()
    out["published"] = out.get("published", 0) + sequence
    out.setdefault("acked_by_publisher", {})[index] = acked if args.qos else list(range(1, sequence + 1))


async def subscriber(index: int, url: str, args: argparse.Namespace, ready: asyncio.Event, done: asyncio.Event,
                     out: dict[str, Any]) -> None:
    peer = await Peer.open(url, f"sub-{os.getpid()}-{index}", args.mqtt_version, keep=args.keep)
    peer.send(p.Subscribe(1, [p.Subscription(f"{args.prefix}/{index}", args.qos)]))
    seen: set[int] = out.setdefault("received_by_subscriber", {}).setdefault(index, set())
    latencies: list[float] = []
    duplicated = 0
    subscribed = False
    reading = asyncio.ensure_future(peer.read())
    finished = asyncio.ensure_future(done.wait())
    while True:
        await asyncio.wait({reading, finished}, return_when=asyncio.FIRST_COMPLETED)
        if not reading.done():
            break
        for packet in reading.result():
            if isinstance(packet, p.SubAck) and not subscribed:
                subscribed = True
                ready.set()
            elif isinstance(packet, p.Publish):
                _, sequence, sent = STAMP.unpack_from(packet.payload)
                if sequence in seen:
                    duplicated += 1
                else:
                    seen.add(sequence)
                    latencies.append(time.time() - sent)
                if packet.qos:
                    assert packet.packet_id is not None
                    peer.send(p.PubAck(packet.packet_id))
        reading = asyncio.ensure_future(peer.read())
    reading.cancel()
    peer.writer.close()
    out["duplicated"] = out.get("duplicated", 0) + duplicated
    out.setdefault("latencies", []).extend(latencies)


async def run_slice(indexes: list[int], args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    done = asyncio.Event()
    readies = [asyncio.Event() for _ in indexes]
    subscribers = [asyncio.create_task(subscriber(i, args.url[i % len(args.url)], args, ready, done, out))
                   for i, ready in zip(indexes, readies, strict=True)]
    await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in readies)), 10)
    stop_at = time.monotonic() + args.duration
    started = time.monotonic()
    await asyncio.gather(*(publisher(i, args.url[i % len(args.url)], args, stop_at, out) for i in indexes))
    out["publish_seconds"] = time.monotonic() - started
    # The deliveries still on their way: until each subscriber has what its publisher had
    # acknowledged, or DRAIN_SECONDS pass with nothing new arriving.
    received = out.setdefault("received_by_subscriber", {})
    last, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < DRAIN_SECONDS:
        missing = sum(len(set(out["acked_by_publisher"][i]) - received.get(i, set())) for i in indexes)
        if not missing:
            break
        count = sum(len(seen) for seen in received.values())
        if count != last:
            last, quiet_since = count, time.monotonic()
        await asyncio.sleep(0.05)
    done.set()
    await asyncio.gather(*subscribers)
    return out


def _slice_main(indexes: list[int], args: argparse.Namespace, results: Any) -> None:
    results.put(asyncio.run(run_slice(indexes, args)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    pairs = max(args.publishers, args.subscribers)
    slices = [list(range(pairs))[k::args.processes] for k in range(args.processes)]
    results: Any = multiprocessing.get_context("spawn").Queue()
    workers = [multiprocessing.get_context("spawn").Process(target=_slice_main, args=(s, args, results))
               for s in slices if s]
    for worker in workers:
        worker.start()
    parts = [results.get(timeout=args.duration + 60) for _ in workers]
    for worker in workers:
        worker.join(10)
    received = {i: set(seqs) for part in parts for i, seqs in part.get("received_by_subscriber", {}).items()}
    acked = {i: set(seqs) for part in parts for i, seqs in part.get("acked_by_publisher", {}).items()}
    # QoS 1: every acknowledged message must arrive; QoS 0 promises nothing, so nothing counts as lost.
    lost = sum(len(seqs - received.get(i, set())) for i, seqs in acked.items()) if args.qos else 0
    acked_total = sum(len(seqs) for seqs in acked.values())
    latencies = sorted(x for part in parts for x in part.get("latencies", []))
    seconds = max(part["publish_seconds"] for part in parts)
    delivered = sum(len(s) for s in received.values())
    return {
        "publishers": pairs, "subscribers": pairs, "qos": args.qos, "size": args.size,
        "mqtt_version": args.mqtt_version,
        "duration_s": round(seconds, 2), "published": sum(part.get("published", 0) for part in parts),
        "acked": acked_total, "delivered": delivered,
        "publish_rate": round(acked_total / seconds, 1),
        "delivered_rate": round(delivered / seconds, 1),
        "lost": lost, "duplicated": sum(part.get("duplicated", 0) for part in parts),
        "e2e_ms": {"p50": round(1e3 * statistics.median(latencies), 2) if latencies else None,
                   "p99": round(1e3 * latencies[int(0.99 * (len(latencies) - 1))], 2) if latencies else None},
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", action="append", required=True, help="host:port of the broker's MQTT listener")
    parser.add_argument("-p", "--publishers", type=int, default=4)
    parser.add_argument("-c", "--subscribers", type=int, default=4)
    parser.add_argument("--qos", type=int, choices=(0, 1), default=1)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--mqtt-version", type=int, choices=(4, 5), default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--keep", action="store_true",
                        help="subscribers in sessions the broker keeps (clean session 0): their QoS 1 messages wait "
                             "in the broker for each PUBACK")
    parser.add_argument("--prefix", default=f"bench/{os.getpid()}")
    parser.add_argument("--json", type=Path)
    return parser


def main() -> int:
    args = parser().parse_args()
    result = run(args)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    print(f"{result['publishers']}P x {result['subscribers']}C QoS {result['qos']}: "
          f"{result['publish_rate']:,.0f} msg/s acknowledged, {result['delivered_rate']:,.0f} msg/s delivered, "
          f"e2e p50 {result['e2e_ms']['p50']} ms p99 {result['e2e_ms']['p99']} ms, "
          f"lost {result['lost']} dup {result['duplicated']}")
    return 1 if result["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())

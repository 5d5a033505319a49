"""The broker core alone, no network and no Raft: `Broker.apply` of SEND (1 KiB body, the headers
`raftmq bench` sends, a receipt) -> Deliver -> ACK, one producer and one client-individual
consumer, COUNT messages per round. Prints the CPU time (process time) per SEND+ACK pair in µs,
best of ROUNDS, and every round's figure. Every member of a group applies every command, so this
is the per-message core cost each member pays.

Run it with PYTHONPATH=CHECKOUT to measure that checkout's core (the first field printed is the
raftmq package it imported), from a cwd outside any checkout, alternating the checkouts:

    PYTHONPATH=/tmp/ab-before python bench/core_loop.py 100000 3
    PYTHONPATH=/tmp/ab-after python bench/core_loop.py 100000 3
"""

from __future__ import annotations

import argparse
import gc
import time

import raftmq
from raftmq.core.broker import Broker
from raftmq.core.commands import Ack, Connect, Send, Subscribe
from raftmq.core.config import CoreConfig
from raftmq.core.effects import Deliver
from raftmq.protocol.header_block import block_of


def one_round(count: int) -> float:
    """CPU µs per SEND+ACK over `count` messages through a fresh broker."""
    broker = Broker(CoreConfig())
    now = 1_700_000_000_000
    broker.apply(Connect("p", now))
    broker.apply(Connect("c", now))
    broker.apply(Subscribe("c", "s", "/queue/bench", now, ack="client-individual", prefetch=1000))
    body = b"x" * 1024
    base = (("bench-run", "r1"), ("bench-producer", "0"), ("persistent", "true"))
    started = time.process_time()
    for seq in range(count):
        headers = base + (("bench-seq", str(seq)), ("bench-ts", str(now)))
        effects = broker.apply(Send("p", "/queue/bench", block_of(headers), body, now, receipt=f"r{seq}"))
        for effect in effects:
            if isinstance(effect, Deliver):
                broker.apply(Ack("c", now, ack_id=effect.ack_id))
        now += 1
    return (time.process_time() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("count", type=int, nargs="?", default=100_000, help="messages per round (default 100000)")
    parser.add_argument("rounds", type=int, nargs="?", default=3, help="rounds; the best is reported (default 3)")
    args = parser.parse_args()
    gc.collect()
    times = [one_round(args.count) for _ in range(args.rounds)]
    print(f"{raftmq.__file__}: best {min(times):.2f} µs per SEND+ACK, all {' '.join(f'{t:.2f}' for t in times)}")


if __name__ == "__main__":
    main()

"""Delay, jitter, reordering and loss without netem: an NFQUEUE consumer that holds each packet
of its delay queue and issues its verdict (accept) later, so packets leave late and, with jitter
or reorder, out of order; and drops every packet of its drop queue (iptables sends it a random
share with `-m statistic`: dropped after the queue took it, a packet is lost without the sender
being told, as on a wire, where a DROP rule in OUTPUT would fail the sender's send with EPERM).
chaos.netns starts one inside a host's namespace, behind iptables
`-j NFQUEUE --queue-num N --queue-bypass` rules (a dead consumer lets packets through instead of
blackholing them), and stops it by pid::

    ip netns exec NS python -m chaos.packet_queue --queue 7 --delay-ms 100 --jitter-ms 20 --reorder-pct 25 \
        --drop-queue 8

Semantics follow netem's: each packet waits `delay ± jitter` ms (uniform); with `--reorder-pct`
that share of the packets goes at once instead, overtaking the delayed ones (so reordering needs
a delay). Bounded: at most `--max-len` packets are held (the kernel's queue length: past it the
kernel drops new packets, as netem drops past its limit); verdicts are only ever accept, and on
SIGTERM or SIGINT every held packet is accepted at once before the queues are unbound. Idle, the
process sleeps in select(); it also exits when its parent dies (it checks once a second), so a
harness that crashed does not leave it holding a namespace. Prints `ready queue N M` once bound,
and one line of counts when it stops. Needs root (CAP_NET_ADMIN) and the `netfilterqueue`
binding (libnetfilter-queue).
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import select
import signal
import socket
import sys
import time
import warnings
from collections.abc import Sequence
from types import FrameType

from netfilterqueue import COPY_META, NetfilterQueue, Packet

READY = "ready queue"
PARENT_CHECK_S = 1.0


class Holder:
    """The held packets, in a heap by the time their verdicts are due."""

    def __init__(self, delay_ms: float, jitter_ms: float, reorder_pct: float, rng: random.Random) -> None:
        self.delay_s, self.jitter_s, self.reorder = delay_ms / 1000, jitter_ms / 1000, reorder_pct / 100
        self.rng = rng
        self.heap: list[tuple[float, int, Packet]] = []
        self.counts = {"packets": 0, "delayed": 0, "reordered": 0, "dropped": 0}

    def drop(self, packet: Packet) -> None:
        self.counts["dropped"] += 1
        packet.drop()

    def __call__(self, packet: Packet) -> None:
        self.counts["packets"] += 1
        if self.reorder and self.rng.random() < self.reorder:
            self.counts["reordered"] += 1
            packet.accept()  # at once: ahead of the packets still held
            return
        wait = self.delay_s + (self.rng.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0)
        if wait <= 0:
            packet.accept()
            return
        self.counts["delayed"] += 1
        heapq.heappush(self.heap, (time.monotonic() + wait, self.counts["packets"], packet))

    def release(self, now: float) -> float | None:
        """Accept the packets due by `now`; seconds until the next one is due (None: none held)."""
        while self.heap and self.heap[0][0] <= now:
            heapq.heappop(self.heap)[2].accept()
        return self.heap[0][0] - now if self.heap else None

    def release_all(self) -> None:
        while self.heap:
            heapq.heappop(self.heap)[2].accept()


def serve(queue: int | None, drop_queue: int | None, holder: Holder, max_len: int) -> None:
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    parent = os.getppid()
    queues: dict[int, NetfilterQueue] = {}  # fd -> queue
    try:
        for number, callback in ((queue, holder), (drop_queue, holder.drop)):
            if number is None:
                continue
            nfqueue = NetfilterQueue()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a smaller socket buffer than asked for is fine
                # Metadata only: the packet id is all a verdict needs, and nothing is copied.
                nfqueue.bind(number, callback, max_len=max_len, mode=COPY_META)
            queues[nfqueue.get_fd()] = nfqueue
        print(READY, *(n for n in (queue, drop_queue) if n is not None), flush=True)
        while not stopping:
            due = holder.release(time.monotonic())
            timeout = PARENT_CHECK_S if due is None else min(due, PARENT_CHECK_S)
            readable, _, _ = select.select([*queues, wake_r.fileno()], [], [], timeout)
            for fd in readable:
                if fd in queues:
                    queues[fd].run(block=False)  # every message waiting, then back here
            if wake_r.fileno() in readable:
                try:
                    wake_r.recv(64)
                except BlockingIOError:
                    pass
            if os.getppid() != parent:
                break
    finally:
        holder.release_all()
        for nfqueue in queues.values():
            nfqueue.unbind()
        signal.set_wakeup_fd(-1)
        for s, handler in previous.items():
            signal.signal(s, handler)
        wake_r.close()
        wake_w.close()
    print(" ".join(f"{k}={v}" for k, v in holder.counts.items()), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.packet_queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, help="NFQUEUE number (0..65535) of the packets to delay")
    parser.add_argument("--drop-queue", type=int, help="NFQUEUE number of the packets to drop")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--reorder-pct", type=float, default=0.0, help="share of packets sent at once")
    parser.add_argument("--max-len", type=int, default=1000, help="packets held at most (netem's limit)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    numbers = [n for n in (args.queue, args.drop_queue) if n is not None]
    if not numbers or len(set(numbers)) < len(numbers) or not all(0 <= n <= 65535 for n in numbers) \
            or min(args.delay_ms, args.jitter_ms) < 0 or not 0 <= args.reorder_pct <= 100 or args.max_len < 1:
        parser.error("one or two distinct queues in 0..65535, delays >= 0, reorder in 0..100, max-len >= 1")
    holder = Holder(args.delay_ms, args.jitter_ms, args.reorder_pct, random.Random(args.seed))
    serve(args.queue, args.drop_queue, holder, args.max_len)
    return 0


if __name__ == "__main__":
    sys.exit(main())

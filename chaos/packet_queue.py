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
and one line of counts when it stops. Needs root (CAP_NET_ADMIN) and the runtime library
libnetfilter_queue.so.1 (Debian's libnetfilter-queue1), which it calls through ctypes: no headers,
no compiler, no Python binding to build. `unavailable()` says why it cannot run here.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import functools
import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType

from raftmq.errors import FaultUnavailable

READY = "ready queue"
PARENT_CHECK_S = 1.0

# -- the binding: libnetfilter_queue.so.1 through ctypes ---------------------------------------

LIBRARY = "netfilter_queue"  # libnetfilter_queue.so.1, Debian's libnetfilter-queue1
INSTALL = "install Debian's libnetfilter-queue1 (apt-get install -y libnetfilter-queue1)"
NF_DROP, NF_ACCEPT = 0, 1  # verdicts (linux/netfilter.h)
NFQNL_COPY_META = 1  # the kernel sends metadata only: the packet id is all a verdict needs
# struct nfqnl_msg_packet_hdr, packed: __be32 packet_id, __be16 hw_protocol, __u8 hook
PACKET_HEADER = struct.Struct("!IHB")
RECV_BUFFER = 65536  # one netlink message at least; metadata-only messages are a few hundred bytes
RCVBUF_PER_PACKET = 2048  # socket receive buffer asked for, per packet the kernel may queue

# int callback(struct nfq_q_handle *qh, struct nfgenmsg *nfmsg, struct nfq_data *nfad, void *data)
CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class LibraryMissing(FaultUnavailable):
    """libnetfilter_queue.so.1 cannot be loaded here; the message says what to install."""


def packet_id(header: bytes) -> int:
    """The packet id (host order) of a struct nfqnl_msg_packet_hdr's bytes (7, packed, the id
    in network byte order): what a verdict names the packet by."""
    if len(header) < PACKET_HEADER.size:
        raise ValueError(f"a packet header is {PACKET_HEADER.size} bytes, not {len(header)}")
    ident, _hw_protocol, _hook = PACKET_HEADER.unpack_from(header)
    return int(ident)


def load_library(name: str = LIBRARY) -> ctypes.CDLL:
    """lib`name` (found as ld.so would, else by its soname), with the signatures of the calls used."""
    soname = f"lib{name}.so.1"
    try:
        lib = ctypes.CDLL(ctypes.util.find_library(name) or soname, use_errno=True)
    except OSError as e:
        raise LibraryMissing(f"no {soname} ({e}): {INSTALL}") from None
    handle, ptr = ctypes.c_void_p, ctypes.c_void_p
    signatures: dict[str, tuple[type[object] | None, list[type[object]]]] = {
        "nfq_open": (handle, []),
        "nfq_close": (ctypes.c_int, [handle]),
        "nfq_bind_pf": (ctypes.c_int, [handle, ctypes.c_uint16]),
        "nfq_unbind_pf": (ctypes.c_int, [handle, ctypes.c_uint16]),
        "nfq_create_queue": (handle, [handle, ctypes.c_uint16, CALLBACK, ptr]),
        "nfq_destroy_queue": (ctypes.c_int, [handle]),
        "nfq_set_mode": (ctypes.c_int, [handle, ctypes.c_uint8, ctypes.c_uint32]),
        "nfq_set_queue_maxlen": (ctypes.c_int, [handle, ctypes.c_uint32]),
        "nfq_fd": (ctypes.c_int, [handle]),
        "nfq_handle_packet": (ctypes.c_int, [handle, ctypes.POINTER(ctypes.c_char), ctypes.c_int]),
        "nfq_get_msg_packet_hdr": (ptr, [ptr]),
        "nfq_set_verdict": (ctypes.c_int, [handle, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ptr]),
    }
    for function, (restype, argtypes) in signatures.items():
        try:
            call = getattr(lib, function)
        except AttributeError:
            raise LibraryMissing(f"{soname} has no {function}: {INSTALL}") from None
        call.restype, call.argtypes = restype, argtypes
    return lib


@functools.cache
def _library() -> ctypes.CDLL:
    return load_library()


def unavailable() -> str | None:
    """None when the queue library loads here, else why not (what to install)."""
    try:
        _library()
    except LibraryMissing as e:
        return str(e)
    return None


class Packet:
    """A queued packet, by id: its verdict may come any time later, and out of order."""

    __slots__ = ("queue", "id")

    def __init__(self, queue: Queue, ident: int) -> None:
        self.queue, self.id = queue, ident

    def accept(self) -> None:
        self.queue.verdict(self.id, NF_ACCEPT)

    def drop(self) -> None:
        self.queue.verdict(self.id, NF_DROP)


class Queue:
    """One NFQUEUE, bound on a netlink handle of its own; `callback` gets each packet queued,
    called from `read` (through nfq_handle_packet)."""

    def __init__(self, number: int, callback: Callable[[Packet], None], max_len: int) -> None:
        self.lib = _library()
        self.number, self.callback = number, callback
        self.handle: int | None = self.lib.nfq_open()
        self.qh: int | None = None
        self.sock: socket.socket | None = None
        self.buffer = bytearray(RECV_BUFFER)
        self.c_buffer = (ctypes.c_char * RECV_BUFFER).from_buffer(self.buffer)
        # ctypes calls C through this object: it must live as long as the queue does.
        self._c_callback = CALLBACK(self._on_packet)
        try:
            if not self.handle:
                self._fail("nfq_open")
            # Bind the queue handler to IPv4. Old kernels need it; new ones ignore both calls
            # (and may fail them), so their results do not matter.
            self.lib.nfq_unbind_pf(self.handle, socket.AF_INET)
            self.lib.nfq_bind_pf(self.handle, socket.AF_INET)
            self.qh = self.lib.nfq_create_queue(self.handle, number, self._c_callback, None)
            if not self.qh:
                self._fail(f"nfq_create_queue({number}) (is another process bound to it?)")
            if self.lib.nfq_set_mode(self.qh, NFQNL_COPY_META, 0) < 0:
                self._fail("nfq_set_mode")
            if self.lib.nfq_set_queue_maxlen(self.qh, max_len) < 0:
                self._fail("nfq_set_queue_maxlen")
            # A socket object on a duplicate of the library's netlink fd, for recv and setsockopt.
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, fileno=os.dup(self.lib.nfq_fd(self.handle)))
            self.sock.setblocking(False)
            self._grow_buffer(max_len * RCVBUF_PER_PACKET)
        except BaseException:
            self.close()
            raise

    def _fail(self, what: str) -> None:
        code = ctypes.get_errno()
        raise OSError(code, f"{what} failed: {os.strerror(code) if code else 'no errno'}")

    def _grow_buffer(self, size: int) -> None:
        """A receive buffer for what the kernel may queue (as root, past net.core.rmem_max; a
        smaller one than asked for is fine: a full one costs messages, ENOBUFS, not packets)."""
        assert self.sock is not None
        force = getattr(socket, "SO_RCVBUFFORCE", 33)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, force, size)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def _on_packet(self, qh: int | None, nfmsg: int | None, nfad: int | None, data: int | None) -> int:
        try:
            header = self.lib.nfq_get_msg_packet_hdr(nfad)
            if not header:
                return 0  # no packet header: nothing to give a verdict to
            self.callback(Packet(self, packet_id(ctypes.string_at(header, PACKET_HEADER.size))))
        except BaseException as e:  # an exception must not unwind through C
            print(f"packet_queue: queue {self.number}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 0

    def read(self) -> None:
        """Handle every message waiting on the socket (none: return at once)."""
        assert self.sock is not None and self.handle is not None
        while True:
            try:
                size = self.sock.recv_into(self.buffer)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # the socket's buffer overflowed: some messages are lost
                    print(f"packet_queue: queue {self.number}: ENOBUFS (queue messages lost), going on",
                          file=sys.stderr, flush=True)
                    continue
                raise
            self.lib.nfq_handle_packet(self.handle, self.c_buffer, size)

    def verdict(self, ident: int, verdict: int) -> None:
        if self.qh is not None:
            self.lib.nfq_set_verdict(self.qh, ident, verdict, 0, None)

    def close(self) -> None:
        """Unbind the queue and close the handle; idempotent. Give the packets held their
        verdicts first: a verdict needs the queue bound."""
        if self.qh is not None:
            self.lib.nfq_destroy_queue(self.qh)
            self.qh = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.handle:
            self.lib.nfq_close(self.handle)
        self.handle = None


# -- the process ---------------------------------------------------------------------------


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
    queues: dict[int, Queue] = {}  # fd -> queue
    try:
        for number, callback in ((queue, holder), (drop_queue, holder.drop)):
            if number is None:
                continue
            nfqueue = Queue(number, callback, max_len)
            queues[nfqueue.fileno()] = nfqueue
        print(READY, *(n for n in (queue, drop_queue) if n is not None), flush=True)
        while not stopping:
            due = holder.release(time.monotonic())
            timeout = PARENT_CHECK_S if due is None else min(due, PARENT_CHECK_S)
            readable, _, _ = select.select([*queues, wake_r.fileno()], [], [], timeout)
            for fd in readable:
                if fd in queues:
                    queues[fd].read()  # every message waiting, then back here
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
            nfqueue.close()
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
    reason = unavailable()
    if reason is not None:
        print(f"packet_queue: {reason}", file=sys.stderr, flush=True)
        return 1
    holder = Holder(args.delay_ms, args.jitter_ms, args.reorder_pct, random.Random(args.seed))
    serve(args.queue, args.drop_queue, holder, args.max_len)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Objects created and CPU spent per message, stage by stage, on a group's leader and on a follower.

    .venv/bin/python -m bench.message_stages [--messages N] [--cpu-messages N] [--json PATH]
        [--markdown PATH] [--rounds 3] [--light-load 2000] [--builds both|installed|pure] [--no-cpu | --no-count]

Defaults: 3,000 messages counted, 20,000 timed; about 6 minutes on the 2-core dev machine,
plus any wait for a test run to end. Root and perf are needed for the counts (`--no-count`
times only).

What runs: the real code, in this process, with no socket, no event loop and no Raft. One SEND
as `raftmq bench` sends it (1 KiB body, a receipt; headers destination, bench-run,
bench-producer, persistent, bench-seq, bench-ts, receipt, content-length: 8 header lines, 5 user
headers), encoded by the client's own `encode_frame`, then its MESSAGE and RECEIPT, then the
consumer's STOMP 1.2 ACK (`id` only) of that MESSAGE. The producer and the consumer (one
client-individual subscription) are both on the leader. Stages, each the named function:

- leader, SEND: `FrameParser.feed` (the session's parser) → the rest of `StompSession.receive`
  (decide, `FrameTranslator._send`) → `command_codec.encode_rows` → `entry_codec.encode_entry`
  → [Raft: not measured] → `Replica.apply` of the proposal's commands, as the leader applies
  its own entry (`BodyStore.begin`, `Broker.begin_entry` and `.apply`, the effects handed
  to the sessions with `BodyStore.body`, `BodyStore.end` writing the journal batch) →
  `message_frame` and `receipt_for` + `receipt_frame`, as `Connection.deliver` / `.receipt` call them;
- leader, ACK: the same up to `Replica.apply` (nothing to format);
- follower: `entry_codec.decode_entry` (with `command_codec.decode_batch`) → `Replica.apply`
  serving no session (SEND, then ACK).

Every stage's input is what the stages before it produced from the same messages (a set-up pass
runs the whole path first on its own instances), and each stage runs on fresh instances in the
state the real path leaves them in: a session that is OPEN, a replica whose core holds the two
sessions and the subscription, a body journal (a real `Journal` in a temp dir, written, never
fsynced) whose caches are small enough to be in their steady state (every batch in evicts one)
after a few dozen entries, yet keep an entry's bodies for its deliveries as a node's do
(`cache_bytes`: 64 KiB per 4 messages of an entry), and, for an ACK, a replica that applied the SENDs first. One message
per Raft entry (light load: every per-entry cost is a per-message cost), or `--entry-size N`
messages per entry, as a loaded group batches them (the entry-level stages, from encoding the
entry to the body journal, then run once per N messages and report their figure per message;
`bench.cpu_budget` prints the entry size a load makes). The leader's replica
rows split `Replica.apply` into `BodyStore.begin` (measured alone), `BodyStore.end` (begin + end
measured, minus begin), `Broker.apply` (measured alone on the referenced commands) and the rest
(the effects' hand-out, `receipt_first`, the body lookup: the whole minus the three). The leader's
"decide + translate" is `StompSession.receive` minus `FrameParser.feed`; the follower's "entry
envelope" is `decode_entry` minus `decode_batch`. The SENDs are applied first, then the ACKs (so
the consumer's prefetch is set above the message count and it holds up to N unacked messages
when its ACKs apply; object counts do not depend on that, CPU barely).

Objects, counted exactly: in CPython 3.11 every object created, freelists and C temporaries
included (and every instance a mypyc-compiled module makes), goes through the exported function
`_Py_NewReference`. A perf uprobe on it (`probe_libpython3:_Py_NewReference`, created with
`perf probe -x LIBPYTHON -a _Py_NewReference` if `perf probe -l` does not list it; root needed)
counts them. The count child opens that event for its own thread only (perf_event_open, as
`perf stat -e` does) around each region and closes it after, so the set-up runs without the
uprobe's ~15 µs per object. A region is the stage's loop over N pre-built inputs; the same
region with the loop skipped is the baseline; objects/message = (count - baseline) / N. A
calibration loop that makes one list and one tuple per iteration must read 2.00 (±0.01) in
every count child, and the same loop counted the whole-process way (`perf stat` of a child run
with and without the loop) must agree, or nothing is reported. Before each child that opens the
uprobe the script waits (up to 20 min, polling every 30 s) until no pytest runs on the machine.

CPU: the same stages in a child without perf, `time.process_time()` around each loop over
`--cpu-messages` messages, best of `--rounds` rounds, with the garbage collector as a node runs
it (`raftmq.server.gc_tuning.tune_gc`: freeze after imports, gen-0 threshold 20,000), on fresh
instances each round. Derived rows subtract the best figures. Objects add up exactly; CPU does
not quite: stages interleaved cost more than each alone (caches, the allocator), and a derived
row takes that difference. The clearest case, the source build's replica: `BodyStore.begin`,
`Broker.apply` and `BodyStore.end` in one loop cost ~4 µs more per SEND than the three loops
apart, so its "effects out" CPU is mostly that, not the effects' hand-out.

Light load (`--light-load N`, default 2,000; 0 skips it): one whole-process figure, the leader
process's object creations per delivered message (SEND with receipt, MESSAGE, RECEIPT, ACK)
through a real 3-node group (bench/node_group.py), `perf stat -p LEADER` over the run minus
the idle rate measured just before. It includes everything the in-process stages leave out
(pysyncobj's threads, the asyncio shell), at one message in flight.

Both builds: as installed (the hot modules mypyc-compiled, `raftmq.compiled`), and the source
(`RAFTMQ_PURE_PYTHON=1`).

Not covered (rows marked "not measured", with the review's reading from
the project's third house review, §6): the socket read (`Connection.data_received`), proposing
(`Connection._propose_now`, `RaftLog.propose`'s Future), the entry's bookkeeping
(`RaftLog._pump/_submit`, `InFlightEntries`), pysyncobj (submit, its journal, the wire), the
hand-offs to the loop (`OrderedHandoff`, `LogPosition`), the output buffer and its flush
(`Output.write/_flush`), settling (`RaftLog._settle`, `Future.set_result`); and whatever a busier
load batches per entry.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import gc
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROBE_EVENT = "probe_libpython3:_Py_NewReference"
TRACEFS_ID = Path("/sys/kernel/tracing/events/probe_libpython3/_Py_NewReference/id")
CALIBRATION_PER_ITEM = 2  # one list and one tuple per iteration
CALIBRATION_TOLERANCE = 0.01
QUIET_POLL_SECONDS = 30
QUIET_MAX_SECONDS = 20 * 60
RESULT_PREFIX = "MESSAGE_STAGES_RESULT "
REPO_ROOT = Path(__file__).resolve().parent.parent

DESTINATION = "/queue/bench"
BODY_BYTES = 1024
NOW_MS = int(time.time() * 1000)
CACHE_BYTES = 64 * 1024  # body LRU and journal batch cache, one message per entry: in steady state after ~60 messages


def cache_bytes(entry_size: int) -> int:
    """The caches for entries of `entry_size` messages: in steady state after ~15 entries, and an
    entry's bodies within the quarter of it that a leader keeps for its deliveries, as a node's
    16 MiB keeps an entry of a loaded group's (with 64 KiB, an entry of 60 messages would not be
    kept, and every delivery would read its body back from the entry being applied)."""
    return CACHE_BYTES * max(1, entry_size // 4)
SUB_ID = "s"


# ---- the object counter -------------------------------------------------------------------------

_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
_PERF_TYPE_TRACEPOINT = 2
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
_ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0
_ATTR_DISABLED = 1


class UprobeCounter:
    """The `_Py_NewReference` uprobe counted for this thread, opened only while counting."""

    def __init__(self) -> None:
        number = _PERF_EVENT_OPEN.get(platform.machine())
        if number is None:
            raise SystemExit(f"message_stages: perf_event_open's number on {platform.machine()} is unknown here")
        self._syscall_number = number
        try:
            self._config = int(TRACEFS_ID.read_text())
        except OSError as exc:
            raise SystemExit(f"message_stages: cannot read the uprobe's id ({TRACEFS_ID}): {exc}; "
                             "run as root") from None
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    @contextmanager
    def opened(self) -> Iterator[int]:
        attr = ctypes.create_string_buffer(struct.pack("<IIQQQQQIIQ", _PERF_TYPE_TRACEPOINT, _ATTR_SIZE, self._config,
                                                       0, 0, 0, _ATTR_DISABLED, 0, 0, 0), _ATTR_SIZE)
        fd = self._libc.syscall(self._syscall_number, attr, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(-1),
                                ctypes.c_ulong(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise SystemExit(f"message_stages: perf_event_open of {PROBE_EVENT} failed: {os.strerror(err)} "
                             "(root needed)")
        try:
            yield int(fd)
        finally:
            os.close(fd)

    def count(self, run: Callable[[list[Any]], None], items: list[Any]) -> int:
        """Objects created while `run(items)` runs, minus nothing (see `per_item`)."""
        with self.opened() as fd:
            ioctl = fcntl.ioctl
            ioctl(fd, _IOC_RESET, 0)
            ioctl(fd, _IOC_ENABLE, 0)
            run(items)
            ioctl(fd, _IOC_DISABLE, 0)
            value: int = struct.unpack("<Q", os.read(fd, 8))[0]
        return value

    def per_item(self, run: Callable[[list[Any]], None], items: list[Any]) -> float:
        """(count of the loop - count of the loop skipped) / len(items)."""
        gc.collect()
        baseline = self.count(_skip, items)
        gc.collect()
        measured = self.count(run, items)
        return (measured - baseline) / len(items)


def _skip(items: list[Any]) -> None:
    pass


def _calibration_loop(items: list[Any]) -> None:
    for item in items:
        made = [item]
        _pair = (item, made)  # noqa: F841 (built to be counted)


# ---- the machine: perf probe, no test suite running ---------------------------------------------


def libpython() -> str:
    name = sysconfig.get_config_var("INSTSONAME") or "libpython3.11.so.1.0"
    return str(Path(sysconfig.get_config_var("LIBDIR") or "") / name)


def ensure_probe() -> str:
    """The uprobe exists (created here if `perf probe -l` does not list it); what was done."""
    if shutil.which("perf") is None:
        raise SystemExit("message_stages: perf is not installed (it counts object creations with a uprobe)")
    if os.geteuid() != 0:
        raise SystemExit("message_stages: counting objects needs root (perf uprobes on libpython); run it as root")
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True, check=False)
    if PROBE_EVENT in listed.stdout + listed.stderr:
        return f"uprobe {PROBE_EVENT} already defined"
    made = subprocess.run(["perf", "probe", "-x", libpython(), "-a", "_Py_NewReference"], capture_output=True,
                          text=True, check=False)
    if made.returncode != 0:
        raise SystemExit(f"message_stages: perf probe -x {libpython()} -a _Py_NewReference failed: "
                         f"{made.stderr.strip()}")
    print(f"created the uprobe {PROBE_EVENT} (perf probe -x {libpython()} -a _Py_NewReference)", file=sys.stderr)
    return f"uprobe {PROBE_EVENT} created by this run"


def _test_runs() -> list[str]:
    found = subprocess.run(["pgrep", "-f", "pytest"], capture_output=True, text=True, check=False)
    mine = {str(os.getpid()), str(os.getppid())}
    return [pid for pid in found.stdout.split() if pid not in mine]


def wait_until_quiet(what: str, max_seconds: float = QUIET_MAX_SECONDS) -> float:
    """Wait while a test suite runs (a uprobe or a timing must not slow or be slowed by it);
    seconds waited. Gives up with an error after `max_seconds`."""
    started = time.monotonic()
    while (running := _test_runs()):
        waited = time.monotonic() - started
        if waited >= max_seconds:
            raise SystemExit(f"message_stages: pytest still running after {waited / 60:.0f} min (pids "
                             f"{' '.join(running[:5])}); not starting {what}")
        print(f"pytest is running ({len(running)} processes): waiting before {what} ({waited:.0f} s so far)",
              file=sys.stderr)
        time.sleep(QUIET_POLL_SECONDS)
    return time.monotonic() - started


# ---- the path's hosts ---------------------------------------------------------------------------


class _SessionHost:
    """What a `StompSession` needs of its node (raftmq.server.seams.host.SessionHost)."""

    def __init__(self) -> None:
        from raftmq.config import NodeConfig
        from raftmq.security import Security, SecurityConfig

        self.config = NodeConfig()
        self.security = Security(SecurityConfig())
        self.is_leader = True
        self.leader_hint: str | None = None
        self.draining: str | None = None
        self.hand_over_secret: str | None = None

    def has_destination(self, destination: str) -> bool:
        return True

    def reserve_unfinished(self, grow: int) -> bool:
        return True


class _Position:
    __slots__ = ("index", "term")

    def __init__(self) -> None:
        self.index = 0
        self.term = 1


class _Log:
    """What the replica reads of the commit log."""

    def __init__(self, leader: bool) -> None:
        self.position = _Position()
        self.is_leader = leader
        self.leader_term = 1 if leader else 0


class _Sink:
    """A session's connection on the leader, keeping what `Replica.apply` hands it (formatting
    is measured as its own stage, from these)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.effects: list[Any] = []
        self.bodies: list[Any] = []
        self.receipts: list[str] = []
        self.open_for_output = True
        self.version = "1.2"

    def deliver(self, effect: Any, body: bytes | None = None) -> None:
        self.effects.append(effect)
        self.bodies.append(body)

    def receipt(self, receipt_id: str) -> None:
        self.receipts.append(receipt_id)

    def fail(self, message: str, detail: str = "", receipt_id: str | None = None, **_: Any) -> None:
        raise RuntimeError(f"session {self.session_id} failed: {message}: {detail}")

    def write(self, data: bytes) -> None:
        pass


class _ReplicaHost:
    """What a `Replica` needs of its node (raftmq.server.seams.host.ReplicaHost)."""

    def __init__(self, leader: bool, sessions: dict[str, Any]) -> None:
        from raftmq.clock import SystemClock
        from raftmq.config import NodeConfig

        self.config = NodeConfig()
        self.commit_log = _Log(leader)
        self.sessions = sessions
        self.awaiting_adoption: dict[str, Any] = {}
        self.clock = SystemClock()
        self.name = "n1" if leader else "n2"

    def fail(self, reason: str) -> None:
        raise RuntimeError(reason)

    def replayed(self) -> None:
        pass

    def managed(self, effect: Any) -> None:
        pass

    def connected(self, connection: Any, command: Any) -> None:
        pass

    def disconnected(self, connection: Any) -> None:
        pass


def _frame_bytes(command: str, headers: list[tuple[str, str]], body: bytes = b"") -> bytes:
    from raftmq.protocol.codec import encode_frame
    from raftmq.protocol.frame import Frame

    return encode_frame(Frame(command, headers, body), "1.2")


def send_headers(seq: int, receipt: int) -> list[tuple[str, str]]:
    """A SEND's headers as `raftmq bench` (raftmq/bench/worker.py) and its client write them;
    `encode_frame` appends content-length."""
    return [("destination", DESTINATION), ("bench-run", "r1"), ("bench-producer", "0"), ("persistent", "true"),
            ("bench-seq", str(seq)), ("bench-ts", str(time.time_ns())), ("receipt", str(receipt))]


def review_send(seq: int) -> bytes:
    """The review's SEND (§6): destination, receipt, content-length and two user headers (N = 5)."""
    headers = [("destination", DESTINATION), ("x-one", "1"), ("x-seq", str(seq)), ("receipt", str(seq + 1))]
    return _frame_bytes("SEND", headers, os.urandom(BODY_BYTES))


class _Sessions:
    """The producer's and the consumer's `StompSession`, connected (and subscribed) through the
    real code; `setup` is what they proposed, one entry each."""

    def __init__(self, prefetch: int) -> None:
        from raftmq.server.stomp.decisions import Propose
        from raftmq.server.stomp.session import StompSession

        host = _SessionHost()
        self.producer = StompSession(host, "p")
        self.consumer = StompSession(host, "c")
        self.setup: list[list[Any]] = []
        connect = _frame_bytes("CONNECT", [("accept-version", "1.2"), ("host", "bench")])
        subscribe = _frame_bytes("SUBSCRIBE", [("id", SUB_ID), ("destination", DESTINATION),
                                               ("ack", "client-individual"),
                                               ("activemq.prefetchSize", str(prefetch))])
        for session, data in ((self.producer, connect), (self.consumer, connect), (self.consumer, subscribe)):
            for decision in session.receive(data, NOW_MS):
                if isinstance(decision, Propose):
                    self.setup.append(list(decision.commands))
            session.connect_committed(1)


class _Store:
    """A body journal in a temp dir and its `BodyStore` (caches small: steady state at once)."""

    def __init__(self, stack: ExitStack, entry_size: int) -> None:
        from raftmq.server.replica.bodies import BodyStore
        from raftmq.storage.journal import Journal

        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="message-stages-"))
        self.journal = Journal(directory, cache_bytes=cache_bytes(entry_size))
        stack.callback(self.journal.close)
        self.bodies = BodyStore(self.journal, cache_bytes(entry_size))


def _replica(stack: ExitStack, leader: bool, setup: Sequence[Sequence[Any]],
             entry_size: int) -> tuple[Any, _ReplicaHost, dict[str, _Sink]]:
    """A replica over a fresh journal that applied `setup` (connects, subscribe) as entries 1.."""
    from raftmq.server.replica.state_machine import Replica

    sinks = {"p": _Sink("p"), "c": _Sink("c")}
    host = _ReplicaHost(leader, dict(sinks) if leader else {})
    replica = Replica(host, _Store(stack, entry_size).bodies, None)  # type: ignore[arg-type]
    for index, commands in enumerate(setup, 1):
        host.commit_log.position.index = index
        replica.apply(commands)
    return replica, host, sinks


# ---- the set-up pass: every stage's inputs, from the real path -----------------------------------


@dataclass
class Prepared:
    """Inputs of every stage for `count` messages, each the output of the stages before it.
    The `*_index`, `*_entries`, `*_entry_commands` and `*_entry_batches` lists are per Raft
    entry (`entry_size` messages each); the rest per message."""

    count: int
    prefetch: int
    entry_size: int = 1
    setup: list[list[Any]] = field(default_factory=list)  # leader commands: connects, subscribe
    setup_entries: list[bytes] = field(default_factory=list)
    send_bytes: list[bytes] = field(default_factory=list)
    send_commands: list[list[Any]] = field(default_factory=list)  # the Propose's commands
    send_batches: list[bytes] = field(default_factory=list)
    send_entries: list[bytes] = field(default_factory=list)
    send_index: list[int] = field(default_factory=list)
    deliveries: list[tuple[Any, bytes]] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    ack_bytes: list[bytes] = field(default_factory=list)
    ack_commands: list[list[Any]] = field(default_factory=list)
    ack_batches: list[bytes] = field(default_factory=list)
    ack_entries: list[bytes] = field(default_factory=list)
    ack_index: list[int] = field(default_factory=list)
    send_entry_commands: list[list[Any]] = field(default_factory=list)
    send_entry_batches: list[list[bytes]] = field(default_factory=list)
    ack_entry_commands: list[list[Any]] = field(default_factory=list)
    ack_entry_batches: list[list[bytes]] = field(default_factory=list)
    follower_setup: list[list[Any]] = field(default_factory=list)
    follower_sends: list[list[Any]] = field(default_factory=list)
    follower_acks: list[list[Any]] = field(default_factory=list)
    review_sends: list[bytes] = field(default_factory=list)


def _grouped(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def prepare(count: int, entry_size: int = 1) -> Prepared:
    from raftmq.replication.command_codec import encode_rows
    from raftmq.replication.entry_codec import decode_entry, encode_entry
    from raftmq.server.stomp.decisions import Propose

    if count % entry_size:
        raise SystemExit(f"message_stages: {count} messages do not make whole entries of {entry_size}")
    prepared = Prepared(count, prefetch=count + 1000, entry_size=entry_size)
    sessions = _Sessions(prepared.prefetch)
    prepared.setup = sessions.setup
    prepared.setup_entries = [encode_entry([encode_rows(commands)]) for commands in sessions.setup]
    first = len(sessions.setup) + 1
    body = os.urandom(BODY_BYTES)  # as `raftmq bench`: one random body per producer
    for seq in range(count):
        data = _frame_bytes("SEND", send_headers(seq, seq + 1), body)
        decisions = sessions.producer.receive(data, NOW_MS)
        (propose,) = [d for d in decisions if isinstance(d, Propose)]
        commands = list(propose.commands)
        batch = encode_rows(commands)
        prepared.send_bytes.append(data)
        prepared.send_commands.append(commands)
        prepared.send_batches.append(batch)
    with ExitStack() as stack:
        replica, host, sinks = _replica(stack, True, prepared.setup, 1)
        for index, commands in enumerate(prepared.send_commands, start=first):  # a message per entry
            host.commit_log.position.index = index
            replica.apply(commands)
        consumer, producer = sinks["c"], sinks["p"]
        if len(consumer.effects) != count or len(producer.receipts) != count:
            raise RuntimeError(f"set-up: {len(consumer.effects)} deliveries and {len(producer.receipts)} receipts "
                               f"for {count} SENDs")
        prepared.deliveries = list(zip(consumer.effects, consumer.bodies, strict=True))
        prepared.receipts = list(producer.receipts)
    for seq, deliver in enumerate(consumer.effects):
        data = _frame_bytes("ACK", [("id", deliver.ack_id)])
        (propose,) = [d for d in sessions.consumer.receive(data, NOW_MS) if isinstance(d, Propose)]
        commands = list(propose.commands)
        batch = encode_rows(commands)
        prepared.ack_bytes.append(data)
        prepared.ack_commands.append(commands)
        prepared.ack_batches.append(batch)
    for kind in ("send", "ack"):
        commands_of = _grouped(getattr(prepared, f"{kind}_commands"), entry_size)
        batches_of = _grouped(getattr(prepared, f"{kind}_batches"), entry_size)
        setattr(prepared, f"{kind}_entry_commands",
                [[c for commands in group for c in commands] for group in commands_of])
        setattr(prepared, f"{kind}_entry_batches", batches_of)
        setattr(prepared, f"{kind}_entries", [encode_entry(batches) for batches in batches_of])
    entries = count // entry_size
    prepared.send_index = list(range(first, first + entries))
    prepared.ack_index = list(range(first + entries, first + 2 * entries))
    prepared.follower_setup = [decode_entry(entry) for entry in prepared.setup_entries]
    prepared.follower_sends = [decode_entry(entry) for entry in prepared.send_entries]
    prepared.follower_acks = [decode_entry(entry) for entry in prepared.ack_entries]
    prepared.review_sends = [review_send(seq) for seq in range(count)]
    return prepared


# ---- the stages: each a factory of (loop, inputs) on fresh instances -------------------------------

Loop = Callable[[list[Any]], None]
Factory = Callable[[Prepared, ExitStack], tuple[Loop, list[Any]]]


def _parse(inputs: Callable[[Prepared], list[bytes]]) -> Factory:
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        from raftmq.config import NodeConfig
        from raftmq.protocol.codec import FrameParser

        feed = FrameParser(NodeConfig().limits, "1.2").feed

        def loop(items: list[Any]) -> None:
            for data in items:
                feed(data)
        return loop, inputs(p)
    return factory


def _receive(consumer: bool) -> Factory:
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        sessions = _Sessions(p.prefetch)
        receive = (sessions.consumer if consumer else sessions.producer).receive
        now = NOW_MS

        def loop(items: list[Any]) -> None:
            for data in items:
                receive(data, now)
        return loop, p.ack_bytes if consumer else p.send_bytes
    return factory


def _encode_batch(inputs: Callable[[Prepared], list[list[Any]]]) -> Factory:
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        from raftmq.replication.command_codec import encode_rows

        def loop(items: list[Any]) -> None:
            for commands in items:
                encode_rows(commands)
        return loop, inputs(p)
    return factory


def _encode_entry(inputs: Callable[[Prepared], list[list[bytes]]]) -> Factory:
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        from raftmq.replication.entry_codec import encode_entry

        def loop(items: list[Any]) -> None:
            for batches in items:
                encode_entry(batches)
        return loop, inputs(p)  # RaftLog._pump's list of each entry's batches
    return factory


def _decode(entries: Callable[[Prepared], list[bytes]], batch_only: bool) -> Factory:
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        from raftmq.replication.command_codec import decode_batch
        from raftmq.replication.entry_codec import decode_entry

        decode = decode_batch if batch_only else decode_entry

        def loop(items: list[Any]) -> None:
            for data in items:
                decode(data)
        return loop, entries(p)
    return factory


def _entry_batch(entry: bytes) -> bytes:
    """The batch a follower's `decode_entry` hands `decode_batch`: the entry, decompressed."""
    import lz4.block

    return bytes(lz4.block.decompress(memoryview(entry)[1:]))


def _sends_applied(p: Prepared, leader: bool, replica: Any, host: _ReplicaHost) -> None:
    sends = p.send_entry_commands if leader else p.follower_sends
    for index, commands in zip(p.send_index, sends, strict=True):
        host.commit_log.position.index = index
        replica.apply(commands)


def _entries(p: Prepared, leader: bool, acks: bool) -> tuple[list[int], list[list[Any]]]:
    if acks:
        return p.ack_index, p.ack_entry_commands if leader else p.follower_acks
    return p.send_index, p.send_entry_commands if leader else p.follower_sends


def _apply(leader: bool, acks: bool) -> Factory:
    """`Replica.apply` of each entry, as the commit log calls it (the leader: its own commands)."""
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        replica, host, _sinks = _replica(stack, leader, p.setup if leader else p.follower_setup, p.entry_size)
        if acks:
            _sends_applied(p, leader, replica, host)
        position = host.commit_log.position
        apply = replica.apply

        def loop(items: list[Any]) -> None:
            for index, commands in items:
                position.index = index
                apply(commands)
        indexes, commands = _entries(p, leader, acks)
        return loop, list(zip(indexes, commands, strict=True))
    return factory


def _begin(leader: bool, acks: bool, with_end: bool) -> Factory:
    """`BodyStore.begin` (and `end`) alone, on a store whose journal holds what came before."""
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        replica, host, _sinks = _replica(stack, leader, p.setup if leader else p.follower_setup, p.entry_size)
        if acks:
            _sends_applied(p, leader, replica, host)
        bodies = replica.bodies
        begin, end = bodies.begin, bodies.end

        def loop(items: list[Any]) -> None:
            for index, commands in items:
                begin(index, 1, commands, cache=leader)
                if with_end:
                    end()
        indexes, commands = _entries(p, leader, acks)
        return loop, list(zip(indexes, commands, strict=True))
    return factory


def _core(leader: bool, acks: bool) -> Factory:
    """`Broker.begin_entry` and the core alone, of each entry's commands as the replica hands
    them over: the leader's own commands, one `Broker.apply` each, or the follower's decoded
    ones, all in one `Broker.apply_all` (quiet: it serves no session)."""
    def factory(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
        from raftmq.config import NodeConfig
        from raftmq.core.broker import Broker

        broker = Broker(NodeConfig().core)
        for commands in p.setup:
            for command in commands:
                broker.apply(command)
        apply, begin_entry, quiet = broker.apply, broker.begin_entry, not leader
        if acks:
            for index, commands in zip(*_entries(p, leader, False), strict=True):
                begin_entry(index, quiet=quiet)
                for command in commands:
                    apply(command)

        def loop(items: list[Any]) -> None:
            for index, commands in items:
                begin_entry(index, quiet=quiet)
                for command in commands:
                    apply(command)

        def loop_quiet(items: list[Any]) -> None:
            apply_all = broker.apply_all
            for index, commands in items:
                begin_entry(index, quiet=True)
                apply_all(commands)
        indexes, entries = _entries(p, leader, acks)
        if quiet:
            return loop_quiet, list(zip(indexes, entries, strict=True))
        return loop, list(zip(indexes, entries, strict=True))
    return factory


def _message_frames(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
    from raftmq.server.stomp.frames import message_frame

    term = 1
    heads: dict[str, tuple[str, bytes]] = {}  # the connection's, kept between deliveries

    def loop(items: list[Any]) -> None:  # as Connection.deliver
        for effect, body in items:
            message_frame(effect, "1.2", body, term, heads)
    return loop, p.deliveries


def _receipt_frames(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
    from raftmq.server.stomp.frames import receipt_frame

    receipt_for = _Sessions(p.prefetch).producer.receipt_for

    def loop(items: list[Any]) -> None:  # as Connection.receipt
        for receipt_id in items:
            named = receipt_for(receipt_id)
            if named is not None:
                receipt_frame(named, "1.2")
    return loop, p.receipts


def _parse_head(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
    """`FrameParser._parse_head` alone on the review's SEND: the header block's share of a parse."""
    from raftmq.config import NodeConfig
    from raftmq.protocol.codec import _BLANK_LINE, FrameParser

    parse_head = FrameParser(NodeConfig().limits, "1.2")._parse_head
    heads = []
    for data in p.review_sends:
        blank = _BLANK_LINE.search(data)
        assert blank is not None
        heads.append((data, 0, blank.start(), blank.end()))

    def loop(items: list[Any]) -> None:
        for data, start, eol, body_start in items:
            parse_head(data, start, eol, body_start)
    return loop, heads


def _calibration(p: Prepared, stack: ExitStack) -> tuple[Loop, list[Any]]:
    return _calibration_loop, list(range(1000, 1000 + p.count))


# Regions measured by the children, in order (the ACK regions after the SEND ones).
REGIONS: dict[str, Factory] = {
    "calibration": _calibration,
    "review.parse": _parse(lambda p: p.review_sends),
    "review.parse_head": _parse_head,
    "send.parse": _parse(lambda p: p.send_bytes),
    "send.receive": _receive(consumer=False),
    "send.encode_batch": _encode_batch(lambda p: p.send_commands),
    "send.encode_entry": _encode_entry(lambda p: p.send_entry_batches),
    "send.begin": _begin(True, False, with_end=False),
    "send.begin_end": _begin(True, False, with_end=True),
    "send.core": _core(True, False),
    "send.apply": _apply(True, False),
    "send.message_frame": _message_frames,
    "send.receipt_frame": _receipt_frames,
    "ack.parse": _parse(lambda p: p.ack_bytes),
    "ack.receive": _receive(consumer=True),
    "ack.encode_batch": _encode_batch(lambda p: p.ack_commands),
    "ack.encode_entry": _encode_entry(lambda p: p.ack_entry_batches),
    "ack.begin": _begin(True, True, with_end=False),
    "ack.begin_end": _begin(True, True, with_end=True),
    "ack.core": _core(True, True),
    "ack.apply": _apply(True, True),
    "fsend.decode_entry": _decode(lambda p: p.send_entries, batch_only=False),
    "fsend.decode_batch": _decode(lambda p: [_entry_batch(entry) for entry in p.send_entries], batch_only=True),
    "fsend.begin": _begin(False, False, with_end=False),
    "fsend.begin_end": _begin(False, False, with_end=True),
    "fsend.core": _core(False, False),
    "fsend.apply": _apply(False, False),
    "fack.decode_entry": _decode(lambda p: p.ack_entries, batch_only=False),
    "fack.decode_batch": _decode(lambda p: [_entry_batch(entry) for entry in p.ack_entries], batch_only=True),
    "fack.begin": _begin(False, True, with_end=False),
    "fack.begin_end": _begin(False, True, with_end=True),
    "fack.core": _core(False, True),
    "fack.apply": _apply(False, True),
}


# Regions whose items are Raft entries (`entry_size` messages each); the rest take a message each.
ENTRY_REGIONS = frozenset(name for name in REGIONS
                          if name.partition(".")[2] in ("encode_entry", "begin", "begin_end", "core", "apply",
                                                        "decode_entry", "decode_batch"))


def _messages_per_item(name: str, prepared: Prepared) -> int:
    return prepared.entry_size if name in ENTRY_REGIONS else 1


# ---- the children -------------------------------------------------------------------------------


def _child_start() -> dict[str, Any]:
    import raftmq
    import raftmq.compiled
    from raftmq.server.gc_tuning import tune_gc

    tune_gc()  # as a node starts: freeze what imports built, gen-0 threshold 20,000
    return {"build": raftmq.compiled.mode(), "raftmq": raftmq.__file__, "python": sys.version.split()[0]}


def child_count(messages: int, regions: Sequence[str], entry_size: int = 1) -> dict[str, Any]:
    info = _child_start()
    counter = UprobeCounter()
    prepared = prepare(messages, entry_size)
    objects: dict[str, float] = {}
    for name in regions:
        with ExitStack() as stack:
            loop, inputs = REGIONS[name](prepared, stack)
            objects[name] = counter.per_item(loop, inputs) / _messages_per_item(name, prepared)
        if name == "calibration" and abs(objects[name] - CALIBRATION_PER_ITEM) > CALIBRATION_TOLERANCE:
            raise SystemExit(f"message_stages: calibration read {objects[name]:.4f} objects per iteration, "
                             f"expected {CALIBRATION_PER_ITEM}: the counter misses objects; nothing reported")
    return {**info, "messages": messages, "entry_size": entry_size, "objects": objects}


def child_cpu(messages: int, rounds: int, regions: Sequence[str], entry_size: int = 1) -> dict[str, Any]:
    info = _child_start()
    prepared = prepare(messages, entry_size)
    micros: dict[str, list[float]] = {name: [] for name in regions if name != "calibration"}
    for _ in range(rounds):
        for name in micros:
            with ExitStack() as stack:
                loop, inputs = REGIONS[name](prepared, stack)
                gc.collect()
                started = time.process_time()
                loop(inputs)
                per_message = len(inputs) * _messages_per_item(name, prepared)
                micros[name].append((time.process_time() - started) / per_message * 1e6)
    return {**info, "messages": messages, "entry_size": entry_size, "rounds": rounds, "cpu_us": micros}


def child_calibrate_whole(loop: bool, count: int) -> None:
    """For `perf stat` of the whole process: the calibration loop, or nothing."""
    items = list(range(1000, 1000 + count))
    if loop:
        _calibration_loop(items)


def _run_child(args: list[str], pure: bool, timeout: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("RAFTMQ_PURE_PYTHON", None)
    if pure:
        env["RAFTMQ_PURE_PYTHON"] = "1"
    command = [sys.executable, "-m", "bench.message_stages", *args]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX):])
            return result
    raise SystemExit(f"message_stages: child {' '.join(args)} failed (rc {done.returncode}):\n{done.stderr[-3000:]}")


def perf_stat_calibration(count: int) -> dict[str, Any]:
    """The brief's whole-process method on the calibration loop: perf stat of a child with and
    without the loop; (with - without) / count must equal what the in-process counter reads."""
    counts = []
    for loop in (True, False):
        command = ["perf", "stat", "-x,", "-e", PROBE_EVENT, "--", sys.executable, "-m", "bench.message_stages",
                   "--child", "whole", "--messages", str(count)] + (["--loop"] if loop else [])
        done = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True,
                              text=True, timeout=600, check=False)
        line = next((x for x in done.stderr.splitlines() if PROBE_EVENT in x), None)
        if done.returncode != 0 or line is None or not line.split(",")[0].isdigit():
            raise SystemExit(f"message_stages: perf stat failed (rc {done.returncode}): {done.stderr[-2000:]}")
        counts.append(int(line.split(",")[0]))
    per = (counts[0] - counts[1]) / count
    if abs(per - CALIBRATION_PER_ITEM) > CALIBRATION_TOLERANCE:
        raise SystemExit(f"message_stages: perf stat calibration read {per:.4f} objects per iteration, expected "
                         f"{CALIBRATION_PER_ITEM}; nothing reported")
    return {"with_loop": counts[0], "without_loop": counts[1], "iterations": count, "per_iteration": per}


# ---- the whole leader process under a light load ---------------------------------------------------


def _perf_stat_pid(pid: int) -> subprocess.Popen[str]:
    return subprocess.Popen(["perf", "stat", "-x,", "-e", PROBE_EVENT, "-p", str(pid)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _perf_stat_end(perf: subprocess.Popen[str]) -> int:
    perf.send_signal(2)  # SIGINT: perf stat prints its counts and exits
    _out, err = perf.communicate(timeout=60)
    line = next((x for x in err.splitlines() if PROBE_EVENT in x), "")
    value = line.split(",")[0]
    if not value.isdigit():
        raise SystemExit(f"message_stages: perf stat -p gave no count: {err[-1000:]}")
    return int(value)


async def _light_load(address: tuple[str, int], messages: int, warmup: int, leader_pid: int) -> dict[str, Any]:
    import asyncio

    from raftmq.client.stomp_client import connect

    producer = await connect(address[0], address[1])
    consumer = await connect(address[0], address[1])
    received = 0
    enough = asyncio.Event()
    wanted = warmup

    def on_message(frame: Any) -> None:
        nonlocal received
        consumer.ack_nowait(frame)
        received += 1
        if received >= wanted:
            enough.set()

    subscription = consumer.subscribe(DESTINATION, ack="client-individual", prefetch=1000, callback=on_message,
                                      receipt=True)
    assert subscription.receipt is not None
    await subscription.receipt
    body = os.urandom(BODY_BYTES)

    async def send(seqs: range) -> None:
        for seq in seqs:
            headers = [("bench-run", "r1"), ("bench-producer", "0"), ("persistent", "true"),
                       ("bench-seq", str(seq)), ("bench-ts", str(time.time_ns()))]
            await producer.send(DESTINATION, body, headers, receipt=True)

    await send(range(warmup))
    await asyncio.wait_for(enough.wait(), 60)
    await asyncio.sleep(0.5)
    idle_perf = _perf_stat_pid(leader_pid)
    await asyncio.sleep(1.0)  # perf attached
    idle_started = time.monotonic()
    await asyncio.sleep(5.0)
    idle_seconds = time.monotonic() - idle_started
    idle = _perf_stat_end(idle_perf)
    enough.clear()
    wanted = warmup + messages
    perf = _perf_stat_pid(leader_pid)
    await asyncio.sleep(1.0)
    started = time.monotonic()
    await send(range(warmup, warmup + messages))
    await asyncio.wait_for(enough.wait(), 120)
    await asyncio.sleep(0.3)  # the last ACK commits
    seconds = time.monotonic() - started + 1.0  # perf counted from its start
    loaded = _perf_stat_end(perf)
    idle_seconds += 1.0
    await producer.disconnect()
    await consumer.disconnect()
    idle_rate = idle / idle_seconds
    return {"messages": messages, "seconds_under_perf": round(seconds, 2), "count": loaded,
            "idle_count": idle, "idle_seconds": round(idle_seconds, 2),
            "objects_per_message": (loaded - idle_rate * seconds) / messages,
            "idle_objects_per_second": idle_rate}


def light_load(messages: int, pure: bool) -> dict[str, Any]:
    """The leader process's object creations per delivered message (SEND with receipt, MESSAGE,
    ACK) under a light load: a 3-node group of real `raftmq node` processes (bench/node_group.py,
    the shipped configs/group.toml), one producer awaiting each receipt, one client-individual
    consumer acking each message, both on the leader; `perf stat -p LEADER` over the run, minus
    the same process's idle rate (measured for 5 s just before) times the run's length. The
    uprobe slows the leader ~15 µs per object, so the load is lighter still than it looks."""
    import asyncio
    import tomllib

    from bench.node_group import TEMPLATE, NodeGroup, toml_dumps

    document = tomllib.loads(TEMPLATE.read_text(encoding="utf-8"))
    document.pop("node", None)  # NodeGroup writes its own members
    template = Path(tempfile.mkdtemp(prefix="message-stages-")) / "group.toml"
    template.write_text(toml_dumps(document), encoding="utf-8")
    previous = os.environ.get("RAFTMQ_PURE_PYTHON")
    if pure:
        os.environ["RAFTMQ_PURE_PYTHON"] = "1"
    else:
        os.environ.pop("RAFTMQ_PURE_PYTHON", None)
    try:
        with NodeGroup.create(size=3, template=template) as group:
            leader = group.start_all()
            member = group.members[leader]
            assert member.pid is not None
            result = asyncio.run(_light_load(member.client, messages, 200, member.pid))
            return {**result, "leader": leader}
    finally:
        shutil.rmtree(template.parent, ignore_errors=True)
        if previous is None:
            os.environ.pop("RAFTMQ_PURE_PYTHON", None)
        else:
            os.environ["RAFTMQ_PURE_PYTHON"] = previous


# ---- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    group: str
    stage: str
    where: str
    review: str  # the third house review's reading (§6) for this row ("" where it gives none)
    plus: tuple[str, ...] = ()  # regions added (empty: not measured here)
    minus: tuple[str, ...] = ()  # regions subtracted
    reviewed: float | None = None  # the review's figure, summed into its total


def _review_parse(lines: int) -> float:
    return 5 + 9 + 5 * lines  # §6 rows 2-3: 5 for the frame, 9 + 5N for the headers


# Cross-check against the review's reading (§6 rows 2-3, its SEND: N = 5 header lines, 1 KiB
# body): it reads 5 objects for the frame and 9 + 5N = 34 for the header block, 39 in all.
# Measured when this was written (the `review.parse` and `review.parse_head` regions):
# `FrameParser.feed` 49.0 compiled / 58.0 pure, of which `_parse_head` 43.0 / 48.0, leaving
# 6.0 / 10.0 for the frame level. The review's list is right as far as it goes; what it leaves
# out: the bytes slice `buf[start:eol]` that is decoded (1); in the source build, each list
# comprehension's function object and the iterator it walks (2 x 2 = 4 in CPython 3.11, where
# comprehensions are functions; mypyc inlines them); and int objects: CPython caches only -5..256,
# so every offset, length or sum above 256 (`body_end`, `pos`, `len(chunk)`, the content length,
# differences of offsets), which the compiled build also boxes where it passes them to Python
# code, is one more object each time. A 1.2 ACK (`id` only) parses to 22.0 / 30.0 against the
# review's ~14 for the same reasons. The SEND `raftmq bench` sends has N = 8 (five user
# headers), hence its row reads 54.


SEND_LINES = 8  # destination, 5 user headers, receipt, content-length
USER_HEADERS = 5

ROWS: list[Row] = [
    Row("leader SEND", "read", "stomp/connection.py:Connection.data_received", "2", reviewed=2),
    Row("leader SEND", "parse", "protocol/codec.py:FrameParser.feed/_parse/_parse_head",
        f"{_review_parse(SEND_LINES):.0f} (14+5N, N={SEND_LINES})", ("send.parse",),
        reviewed=_review_parse(SEND_LINES)),
    Row("leader SEND", "decide + translate", "stomp/session.py:StompSession.receive/_frames/_translate, "
        "stomp/translate.py:FrameTranslator._send (receive minus parse)", "9", ("send.receive",), ("send.parse",),
        reviewed=9),
    Row("leader SEND", "propose", "stomp/connection.py:_propose_now, replication/raft_log.py:RaftLog.propose",
        "5 (partial, int, callback, Future, queue tuple)", reviewed=5),
    Row("leader SEND", "encode batch", "replication/command_codec.py:encode_rows", "5",
        ("send.encode_batch",), reviewed=5),
    Row("leader SEND", "entry bookkeeping", "raft_log.py:_pump/_submit, in_flight.py:InFlightEntries.add", "8",
        reviewed=8),
    Row("leader SEND", "encode entry", "replication/entry_codec.py:encode_entry", "5", ("send.encode_entry",),
        reviewed=5),
    Row("leader SEND", "Raft", "replication/pysyncobj/* (submit, journal, wire)", "pysyncobj's"),
    Row("leader SEND", "hand-off", "replication/handoff.py:OrderedHandoff.send x2, raft_log.py:_deliver", "5",
        reviewed=5),
    Row("leader SEND", "body refs", "replica/bodies.py:BodyStore.begin, storage/payload.py:encode_payload",
        "10 (7 + 3)", ("send.begin",), reviewed=10),
    Row("leader SEND", "core", "core/broker.py:Broker.apply (dispatch.py, message_headers.py)", "13",
        ("send.core",), reviewed=13),
    Row("leader SEND", "effects out", "replica/state_machine.py:Replica.apply/receipt_first/_execute/_body_of, "
        "bodies.py:BodyStore.body (apply minus refs, journal, core)", "4 (2-3 + 1)",
        ("send.apply",), ("send.begin_end", "send.core"), reviewed=4),
    Row("leader SEND", "body journal", "bodies.py:BodyStore.end, storage/journal.py:Journal.append_batch, "
        "storage/records.py (begin+end minus begin)", "5", ("send.begin_end",), ("send.begin",), reviewed=5),
    Row("leader SEND", "MESSAGE frame", "stomp/frames.py:message_frame (as Connection.deliver)", "15",
        ("send.message_frame",), reviewed=15),
    Row("leader SEND", "RECEIPT frame", "stomp/session.py:receipt_for, frames.py:receipt_frame (as Connection.receipt)",
        "2", ("send.receipt_frame",), reviewed=2),
    Row("leader SEND", "output", "stomp/output.py:Output.write/_flush", "4", reviewed=4),
    Row("leader SEND", "settle", "raft_log.py:_settle, Future.set_result", "2", reviewed=2),
    Row("leader ACK", "parse", "protocol/codec.py:FrameParser.feed/_parse/_parse_head", "14 (N=1)", ("ack.parse",),
        reviewed=14),
    Row("leader ACK", "decide + translate", "stomp/session.py:StompSession.receive, translate.py:FrameTranslator._ack "
        "(receive minus parse)", "8 (4 + 3 + Ack)", ("ack.receive",), ("ack.parse",), reviewed=8),
    Row("leader ACK", "propose", "stomp/connection.py:_propose_now, raft_log.py:RaftLog.propose", "5", reviewed=5),
    Row("leader ACK", "encode batch", "replication/command_codec.py:encode_rows", "5", ("ack.encode_batch",),
        reviewed=5),
    Row("leader ACK", "entry bookkeeping + Raft + hand-off", "raft_log.py, in_flight.py, pysyncobj, handoff.py",
        "its entry"),
    Row("leader ACK", "encode entry", "replication/entry_codec.py:encode_entry", "its entry", ("ack.encode_entry",)),
    Row("leader ACK", "body refs", "replica/bodies.py:BodyStore.begin (no Send)", "", ("ack.begin",)),
    Row("leader ACK", "core", "core/broker.py:Broker.apply, dispatch.py:settle", "1", ("ack.core",), reviewed=1),
    Row("leader ACK", "effects out", "replica/state_machine.py:Replica.apply (apply minus refs, journal, core)", "",
        ("ack.apply",), ("ack.begin_end", "ack.core")),
    Row("leader ACK", "body journal", "bodies.py:BodyStore.end (nothing to write)", "", ("ack.begin_end",),
        ("ack.begin",)),
    Row("leader ACK", "output, settle", "output.py, raft_log.py:_settle", "2 (+ output)", reviewed=2),
    Row("follower SEND", "Raft + hand-off", "pysyncobj, handoff.py, raft_log.py:_deliver", "pysyncobj's"),
    Row("follower SEND", "entry envelope", "replication/entry_codec.py:decode_entry: lz4, msgpack "
        "(decode_entry minus decode_batch)", "", ("fsend.decode_entry",), ("fsend.decode_batch",)),
    Row("follower SEND", "decode batch", "replication/command_codec.py:decode_batch/_decode_row",
        f"{7 + 3 * USER_HEADERS} (7+3U, U={USER_HEADERS})", ("fsend.decode_batch",), reviewed=7 + 3 * USER_HEADERS),
    Row("follower SEND", "body refs", "bodies.py:BodyStore.begin, payload.py:encode_payload", "",
        ("fsend.begin",)),
    Row("follower SEND", "core", "core/broker.py:Broker.begin_entry/apply_all (quiet: no Deliver, no Receipt)",
        "~20 (refs + core)", ("fsend.core",), reviewed=20),
    Row("follower SEND", "effects out", "replica/state_machine.py:Replica.apply, no sessions (apply minus refs, "
        "journal, core)", "", ("fsend.apply",), ("fsend.begin_end", "fsend.core")),
    Row("follower SEND", "body journal", "bodies.py:BodyStore.end, journal.py:Journal.append_batch", "",
        ("fsend.begin_end",), ("fsend.begin",)),
    Row("follower ACK", "Raft + hand-off", "pysyncobj, handoff.py, raft_log.py:_deliver", "pysyncobj's"),
    Row("follower ACK", "entry envelope", "entry_codec.py:decode_entry (minus decode_batch)", "",
        ("fack.decode_entry",), ("fack.decode_batch",)),
    Row("follower ACK", "decode batch", "command_codec.py:decode_batch/_decode_row", "", ("fack.decode_batch",)),
    Row("follower ACK", "body refs", "bodies.py:BodyStore.begin (no Send)", "", ("fack.begin",)),
    Row("follower ACK", "core", "core/broker.py:Broker.apply_all", "", ("fack.core",)),
    Row("follower ACK", "effects out", "state_machine.py:Replica.apply (minus refs, journal, core)", "",
        ("fack.apply",), ("fack.begin_end", "fack.core")),
    Row("follower ACK", "body journal", "bodies.py:BodyStore.end (nothing to write)", "", ("fack.begin_end",),
        ("fack.begin",)),
]

TOTALS: list[tuple[str, tuple[str, ...]]] = [
    ("leader SEND (measured stages)", ("leader SEND",)),
    ("leader ACK (measured stages)", ("leader ACK",)),
    ("leader SEND + ACK (measured stages)", ("leader SEND", "leader ACK")),
    ("follower SEND + ACK (measured stages)", ("follower SEND", "follower ACK")),
]


def _value(row: Row, values: dict[str, float]) -> float | None:
    if not row.plus or any(name not in values for name in row.plus + row.minus):
        return None
    return sum(values[name] for name in row.plus) - sum(values[name] for name in row.minus)


def _total(groups: tuple[str, ...], values: dict[str, float]) -> float | None:
    measured = [_value(row, values) for row in ROWS if row.group in groups and row.plus]
    return None if any(v is None for v in measured) else sum(v for v in measured if v is not None)


def build_table(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows with their figures per build: objects and CPU µs per message (None: not measured)."""
    columns: dict[str, dict[str, float]] = {}
    for build in ("installed", "pure"):
        got = results.get(build, {})
        columns[f"objects_{build}"] = got.get("count", {}).get("objects", {})
        columns[f"cpu_{build}"] = {name: min(v) for name, v in got.get("cpu", {}).get("cpu_us", {}).items() if v}
    table = []
    for row in ROWS:
        table.append({"group": row.group, "stage": row.stage, "where": row.where, "review": row.review,
                      "measured": bool(row.plus), **{key: _value(row, values) for key, values in columns.items()}})
    for label, groups in TOTALS:
        reviewed = sum(row.reviewed for row in ROWS if row.group in groups and row.plus and row.reviewed is not None)
        table.append({"group": "total", "stage": label, "where": "sum of the measured rows above",
                      "review": f"{reviewed:.0f} (same rows)", "measured": True,
                      **{key: _total(groups, values) for key, values in columns.items()}})
    return table


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_table(table: list[dict[str, Any]], results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    builds = {b: results.get(b, {}).get("count", results.get(b, {}).get("cpu", {})).get("build", "?")
              for b in ("installed", "pure")}
    title = (f"Per message, by stage: objects created and CPU µs (installed build: {builds['installed']}; "
             f"pure: {builds['pure']}); {results.get('messages')} messages counted, {results.get('cpu_messages')} "
             f"timed, best of {results.get('rounds')}; {results.get('entry_size', 1)} per Raft entry")
    table_out = Table(title=title, show_lines=False)
    for name in ("group", "stage", "where (file:function)"):
        table_out.add_column(name, overflow="fold")
    for name in ("review's reading", "objects installed", "objects pure", "CPU µs installed", "CPU µs pure"):
        table_out.add_column(name, justify="right")
    previous = None
    for row in table:
        if previous is not None and row["group"] != previous:
            table_out.add_section()
        previous = row["group"]
        if not row["measured"]:
            figures = ["not measured here"] + ["-"] * 3
        else:
            figures = [_fmt(row["objects_installed"], 1), _fmt(row["objects_pure"], 1), _fmt(row["cpu_installed"], 2),
                       _fmt(row["cpu_pure"], 2)]
        style = "bold" if row["group"] == "total" else ("dim" if not row["measured"] else None)
        table_out.add_row(row["group"], row["stage"], row["where"], row["review"], *figures, style=style)
    console.print(table_out)
    console.print(cross_check(results))
    console.print(light_load_line(results))


def light_load_line(results: dict[str, Any]) -> str:
    parts = []
    for build in ("installed", "pure"):
        got = results.get(build, {}).get("light_load")
        if got:
            parts.append(f"{build} {got['objects_per_message']:.0f} ({got['messages']} messages in "
                         f"{got['seconds_under_perf']:.1f} s under the uprobe; "
                         f"idle {got['idle_objects_per_second']:.0f} "
                         "objects/s subtracted)")
    if not parts:
        return "Whole leader process under a light load: not run."
    return ("Whole leader process, light load (3-node group, 1 producer awaiting each receipt, 1 consumer acking "
            "each; perf stat -p, every thread; a light-load figure, not the 4Px4C one): objects per delivered "
            "message (SEND + MESSAGE + RECEIPT + ACK): " + "; ".join(parts) + ".")


def cross_check(results: dict[str, Any]) -> str:
    parts = []
    for build in ("installed", "pure"):
        objects = results.get(build, {}).get("count", {}).get("objects", {})
        feed, head = objects.get("review.parse"), objects.get("review.parse_head")
        if feed is not None and head is not None:
            parts.append(f"{build} {feed:.1f} (frame {feed - head:.1f} + headers {head:.1f})")
    return (f"Cross-check, FrameParser.feed of the review's SEND (N = 5 header lines, 1 KiB body): the review reads "
            f"{_review_parse(5):.0f} (frame 5 + headers 34); measured {'; '.join(parts) or '-'}. "
            "Why they differ: the comment above _review_parse in bench/message_stages.py.")


def markdown_table(table: list[dict[str, Any]]) -> str:
    lines = ["| | stage | where (file:function) | review's reading | objects/msg installed | objects/msg pure "
             "| CPU µs/msg installed | CPU µs/msg pure |", "|---|---|---|--:|--:|--:|--:|--:|"]
    for row in table:
        if row["measured"]:
            figures = [_fmt(row["objects_installed"], 1), _fmt(row["objects_pure"], 1), _fmt(row["cpu_installed"], 2),
                       _fmt(row["cpu_pure"], 2)]
        else:
            figures = ["not measured here", "", "", ""]
        cells = [row["group"], row["stage"], f"`{row['where']}`", row["review"], *figures]
        if row["group"] == "total":
            cells = [f"**{cell}**" if cell else cell for cell in cells]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---- main ---------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3000, help="messages per counted stage (default 3000)")
    parser.add_argument("--cpu-messages", type=int, default=20_000, help="messages per timed stage (default 20000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds; the best counts (default 3)")
    parser.add_argument("--json", type=Path, help="save the raw numbers here")
    parser.add_argument("--markdown", type=Path, help="save the table as Markdown here (for docs/benchmarks.md)")
    parser.add_argument("--builds", choices=("both", "installed", "pure"), default="both")
    parser.add_argument("--no-cpu", action="store_true", help="objects only")
    parser.add_argument("--no-count", action="store_true", help="CPU only (no perf, no root needed)")
    parser.add_argument("--light-load", type=int, default=2000, metavar="N",
                        help="also count the leader process's objects per message over N messages through a real "
                             "3-node group (0: skip; default 2000)")
    parser.add_argument("--entry-size", type=int, default=1, metavar="N",
                        help="messages per Raft entry in the entry-level stages (default 1: light load; a loaded "
                             "group's, from bench.cpu_budget: about 60)")
    parser.add_argument("--child", choices=("count", "cpu", "whole"), help=argparse.SUPPRESS)
    parser.add_argument("--loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    regions = list(REGIONS)
    if args.child == "count":
        print(RESULT_PREFIX + json.dumps(child_count(args.messages, regions, args.entry_size)))
        return
    if args.child == "cpu":
        print(RESULT_PREFIX + json.dumps(child_cpu(args.cpu_messages, args.rounds, regions, args.entry_size)))
        return
    if args.child == "whole":
        child_calibrate_whole(args.loop, args.messages)
        return
    started = time.monotonic()
    if args.messages % args.entry_size or args.cpu_messages % args.entry_size:
        parser.error(f"--messages and --cpu-messages must be multiples of --entry-size {args.entry_size}")
    results: dict[str, Any] = {"messages": args.messages, "cpu_messages": args.cpu_messages, "rounds": args.rounds,
                               "entry_size": args.entry_size,
                               "command": " ".join([Path(sys.executable).name, "-m", "bench.message_stages",
                                                    *(argv if argv is not None else sys.argv[1:])])}
    builds = ["installed", "pure"] if args.builds == "both" else [args.builds]
    waited = 0.0
    if not args.no_count:
        results["probe"] = ensure_probe()
        waited += wait_until_quiet("the perf stat calibration")
        results["perf_stat_calibration"] = perf_stat_calibration(100_000)
        print(f"perf stat calibration: {results['perf_stat_calibration']['per_iteration']:.4f} objects per iteration "
              f"(expected {CALIBRATION_PER_ITEM})", file=sys.stderr)
    for build in builds:
        pure = build == "pure"
        got: dict[str, Any] = results.setdefault(build, {})
        if not args.no_count:
            waited += wait_until_quiet(f"counting objects ({build})")
            print(f"counting objects, {build} build ...", file=sys.stderr)
            got["count"] = _run_child(["--child", "count", "--messages", str(args.messages), "--entry-size",
                                       str(args.entry_size)], pure, timeout=3600)
            print(f"  calibration in the count child: {got['count']['objects']['calibration']:.4f} per iteration",
                  file=sys.stderr)
        if not args.no_cpu:
            waited += wait_until_quiet(f"timing ({build})")
            print(f"timing, {build} build ...", file=sys.stderr)
            got["cpu"] = _run_child(["--child", "cpu", "--cpu-messages", str(args.cpu_messages), "--rounds",
                                     str(args.rounds), "--entry-size", str(args.entry_size)], pure, timeout=3600)
        if not args.no_count and args.light_load > 0:
            waited += wait_until_quiet(f"the light-load run ({build})")
            print(f"light load through a 3-node group, {build} build ...", file=sys.stderr)
            got["light_load"] = light_load(args.light_load, pure)
        build_ran = (got.get("count") or got.get("cpu") or {}).get("build")
        if build == "installed" and build_ran != "compiled":
            print(f"warning: the installed build ran as {build_ran!r}, not compiled", file=sys.stderr)
    results["table"] = build_table(results)
    results["seconds"] = round(time.monotonic() - started, 1)
    results["waited_for_tests_seconds"] = round(waited, 1)
    print_table(results["table"], results)
    print(f"{results['seconds']:.0f} s (of which {waited:.0f} s waiting for test runs to end)")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(markdown_table(results["table"]) + "\n" + cross_check(results) + "\n\n"
                                 + light_load_line(results) + "\n")


if __name__ == "__main__":
    main()

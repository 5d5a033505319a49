"""Process control, the one implementation `raftmq up`, the benchmarks, the tests and the chaos
harness share: free loopback ports, starting a process with its output in a file, waiting for
its readiness line, signalling and stopping it by pid, and telling whether a pid is still the
process we started (pids are reused).

Every wait is bounded; nothing here finds processes by name.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from raftmq.errors import ProcessNotReady

LOOPBACK = "127.0.0.1"
# free_ports picks from PICK_LOW up to the ephemeral range (a span of at least PICK_MIN_SPAN),
# or from RAFTMQ_PORT_RANGE=LOW-HIGH (both included) where that is set: the test suite gives each
# of its workers a slice of its own (tests/conftest.py), so two workers never pick the same port.
PICK_LOW = 20_000
PICK_MIN_SPAN = 4_000
PORT_RANGE_ENV = "RAFTMQ_PORT_RANGE"
# Never handed out: the fixed ports of the presets and configs/*.toml (client 61613..., raft
# 62613..., admin 8161..., MQTT 1883) and the single node's admin port (8160), which `raftmq up
# --preset`, `raftmq node` and the chaos harness's namespaces bind.
RESERVED_PORTS = (range(1883, 2000), range(8160, 8300), range(61613, 61800), range(62613, 62800))
POLL_SECONDS = 0.05
# Right after fork+exec the kernel shows an empty cmdline for a moment.
EMPTY_CMDLINE_WAIT_SECONDS = 0.5
KILL_WAIT_SECONDS = 10.0


class PortPool:
    """Hands out the ports of [low, high), each once: from `start` upward, wrapping to `low`,
    skipping the reserved ports, the ones already handed out and the ones `is_free` finds taken.
    Only once a whole turn of the range finds too few does it forget what it handed out and
    start over (a port handed out long ago is, by then, free again or still taken and skipped)."""

    def __init__(self, low: int, high: int, start: int | None = None,
                 reserved: Sequence[range] = RESERVED_PORTS) -> None:
        if not 0 < low < high <= 65536:
            raise ValueError(f"no ports in {low}-{high - 1}")
        self.low, self.high = low, high
        self.reserved = tuple(reserved)
        self.handed_out: set[int] = set()
        self._next = low if start is None else low + (start - low) % (high - low)

    def take(self, count: int, is_free: Callable[[int], bool]) -> list[int]:
        picked: list[int] = []
        for _turn in range(2):
            for _ in range(self.high - self.low):
                if len(picked) == count:
                    return picked
                port = self._next
                self._next = port + 1 if port + 1 < self.high else self.low
                if port in self.handed_out or any(port in span for span in self.reserved) or not is_free(port):
                    continue
                self.handed_out.add(port)
                picked.append(port)
            if len(picked) == count:
                return picked
            self.handed_out = set(picked)  # exhausted: start over
        raise RuntimeError(f"no {count} free ports in {self.low}-{self.high - 1}")


_pools: dict[tuple[int, int], PortPool] = {}
_pools_lock = threading.Lock()


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """`count` distinct ports free on `host` right now, none of them handed out before by this
    process (until the range runs out). Another process may still take one before it is bound:
    they are picked below the kernel's ephemeral range, since a port the kernel hands out
    (`bind(0)`) is one any outgoing connection may take next, before the server it was picked
    for binds it (seen as "address already in use" with two test workers connecting busily);
    and in RAFTMQ_PORT_RANGE where that is set (each test worker has its own)."""
    low, high = port_range()
    with _pools_lock:
        pool = _pools.get((low, high))
        if pool is None:
            pool = _pools[(low, high)] = PortPool(low, high, start=random.SystemRandom().randrange(low, high))
        return pool.take(count, lambda port: _bindable(host, port))


def free_port(host: str = LOOPBACK) -> int:
    return free_ports(1, host)[0]


def port_range(environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """[low, high) that free_ports picks from: RAFTMQ_PORT_RANGE=LOW-HIGH (both included) or
    the span under the ephemeral range (net.ipv4.ip_local_port_range; 32768 by default)."""
    text = environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return _pick_range()
    low_text, sep, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text) + 1
    except ValueError:
        low = high = 0
    if not sep or not 0 < low < high <= 65536:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected LOW-HIGH, two ports with LOW <= HIGH")
    return low, high


def split_port_range(low: int, high: int, index: int, count: int) -> tuple[int, int]:
    """The `index`th of `count` disjoint slices of [low, high) that together cover it."""
    if not 0 <= index < count or high - low < count:
        raise ValueError(f"no slice {index} of {count} in {low}-{high - 1}")
    return low + (high - low) * index // count, low + (high - low) * (index + 1) // count


def format_port_range(low: int, high: int) -> str:
    """[low, high) as RAFTMQ_PORT_RANGE spells it."""
    return f"{low}-{high - 1}"


def bind_error(host: str, port: int) -> OSError | None:
    """Why a listener could not bind (host, port) now, or None: a bind as a server's listener
    (SO_REUSEADDR, so a port in TIME_WAIT is free), let go at once."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc
    return None


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _pick_range() -> tuple[int, int]:
    """[low, high) under the ephemeral range (net.ipv4.ip_local_port_range; 32768 by default)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    high = max(ephemeral_low, PICK_MIN_SPAN + PICK_LOW)
    return (PICK_LOW if high - PICK_LOW >= PICK_MIN_SPAN else 1024), high


def spawn(
    argv: Sequence[str],
    stdout_path: Path,
    stderr_path: Path | None = None,
    *,
    append: bool = False,
    note: str | None = None,
    cwd: Path | None = None,
    new_session: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `argv` with stdout to `stdout_path` and stderr to `stderr_path` (None: into the same
    file). `note` is written first (a restart marker in an appended log); `new_session` detaches
    the process from our terminal's signals (`raftmq up`'s members); `env` is its whole
    environment (None: ours)."""
    mode = "ab" if append else "wb"
    with contextlib.ExitStack() as files:
        stdout = files.enter_context(open(stdout_path, mode))
        if note is not None:
            stdout.write(f"--- {note} ---\n".encode())
            stdout.flush()
        stderr = subprocess.STDOUT if stderr_path is None else files.enter_context(open(stderr_path, "ab"))
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, cwd=cwd, start_new_session=new_session,
            env=None if env is None else dict(env),
        )


def wait_for_line(
    proc: subprocess.Popen[bytes], path: Path, text: str, timeout: float, errors: Path | None = None
) -> None:
    """Wait until `text` appears in `path` (the process's output); raise `ProcessNotReady` naming
    the end of `errors` (or of `path`) if the process exits or `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(POLL_SECONDS)
    tail = _tail(errors or path)
    state = f"exited with {proc.returncode}" if proc.poll() is not None else f"not ready in {timeout:.0f} s"
    raise ProcessNotReady(f"pid {proc.pid} {state}: {tail}")


def send_signal(pid: int, sig: signal.Signals) -> bool:
    """Signal `pid`; False when it no longer exists."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def kill(proc: subprocess.Popen[bytes], timeout: float = KILL_WAIT_SECONDS) -> int | None:
    """SIGKILL (after SIGCONT, so a stopped process dies at once) and reap; the exit status."""
    if proc.poll() is None:
        send_signal(proc.pid, signal.SIGCONT)
        send_signal(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        return proc.wait(timeout=timeout)
    return None


def terminate(proc: subprocess.Popen[bytes], grace: float) -> int | None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL; reaped either way."""
    if proc.poll() is None:
        send_signal(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=grace)
    return kill(proc)


# -- is this pid still the process we started? -------------------------------------------------


def process_start_time(pid: int) -> int | None:
    """Start time in clock ticks since boot, or None when there is no such live process (a
    zombie counts as gone: it has exited, only its exit status waits to be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and ')'
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def process_argv(pid: int) -> tuple[str, ...] | None:
    """The argv in /proc/<pid>/cmdline; None once the process is gone. An empty one (just after
    exec) is read again, boundedly, before it is believed."""
    deadline = time.monotonic() + EMPTY_CMDLINE_WAIT_SECONDS
    while True:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return None
        if cmdline or time.monotonic() >= deadline:
            return tuple(part.decode(errors="replace") for part in cmdline.split(b"\0") if part)
        time.sleep(0.005)


def is_same_process(pid: int, start_time: int, argv: tuple[str, ...]) -> bool:
    """True while `pid` is still the process we recorded (same argv, same start time)."""
    return pid > 0 and process_start_time(pid) == start_time and process_argv(pid) == argv


def own_identity() -> tuple[int, int, tuple[str, ...]]:
    """(pid, start time, argv) of this process."""
    pid = os.getpid()
    return pid, process_start_time(pid) or 0, process_argv(pid) or ()


def _tail(path: Path, size: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""

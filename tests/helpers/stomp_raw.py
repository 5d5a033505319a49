"""Test helpers for the server tests: a raw-socket STOMP client with its own tiny frame reader
(independent of raftmq's codec), a stomp-py listener with bounded waits, and a node runner."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import stomp

from raftmq import processes
from raftmq.config import NodeConfig
from raftmq.processes import free_port
from raftmq.replication.commit_log import CommitLog
from raftmq.server.node import Node

WAIT = 5.0  # seconds any single wait in these tests may take before it fails


def unique(prefix: str = "/queue/t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@dataclass
class RawFrame:
    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def frame_bytes(command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    lines = [command] + [f"{k}:{v}" for k, v in (headers or {}).items()]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


class RawClient:
    """A blocking socket speaking hand-written STOMP. Every one still open is closed when its
    test ends (`close_all`, from tests/conftest.py)."""

    open_clients: ClassVar[list[RawClient]] = []

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=WAIT)
        self.buf = b""
        self.heartbeats = 0
        self.closed = False
        RawClient.open_clients.append(self)

    @classmethod
    def close_all(cls) -> None:
        clients, cls.open_clients[:] = list(cls.open_clients), []
        for client in clients:
            client.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, version: str = "1.2", **headers: str) -> RawFrame:
        hdrs = {"accept-version": version, "host": "localhost", **headers}
        self.send(frame_bytes("CONNECT", hdrs))
        frame = self.read_frame()
        assert frame.command == "CONNECTED", frame
        return frame

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([self.sock], [], [], remaining)
        if not ready:
            return False
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def _take_frame(self) -> RawFrame | None:
        while self.buf[:1] in (b"\n", b"\r"):
            if self.buf[:1] == b"\n":
                self.heartbeats += 1
            self.buf = self.buf[1:]
        head_end = self.buf.find(b"\n\n")
        if head_end < 0:
            return None
        lines = self.buf[:head_end].decode().split("\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, _, value = line.partition(":")
            headers.setdefault(key, value)
        start = head_end + 2
        if "content-length" in headers:
            end = start + int(headers["content-length"])
            if len(self.buf) < end + 1:
                return None
        else:
            end = self.buf.find(b"\0", start)
            if end < 0:
                return None
        assert self.buf[end : end + 1] == b"\0"
        frame = RawFrame(lines[0], headers, self.buf[start:end])
        self.buf = self.buf[end + 1 :]
        return frame

    def read_frame(self, timeout: float = WAIT) -> RawFrame:
        deadline = time.monotonic() + timeout
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            if not self._fill(deadline):
                raise TimeoutError(f"no frame within {timeout}s (closed={self.closed}, buffered={self.buf[:80]!r})")

    def read_until_closed(self, timeout: float = WAIT) -> list[RawFrame]:
        """Every frame until the server closes the socket; fails if it does not close in time."""
        deadline = time.monotonic() + timeout
        frames = []
        while not self.closed:
            frame = self._take_frame()
            if frame is not None:
                frames.append(frame)
                continue
            if not self._fill(deadline) and not self.closed:
                raise TimeoutError(f"socket still open after {timeout}s; frames so far: {frames}")
        while (frame := self._take_frame()) is not None:
            frames.append(frame)
        return frames

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Listener(stomp.ConnectionListener):
    """stomp-py listener that queues what arrives, so tests wait with a timeout."""

    def __init__(self) -> None:
        self.messages: queue.Queue = queue.Queue()
        self.receipts: queue.Queue = queue.Queue()
        self.errors: queue.Queue = queue.Queue()
        self.connected_headers: dict[str, str] = {}
        self.connected = threading.Event()
        self.disconnected = threading.Event()

    def on_connected(self, frame) -> None:  # noqa: ANN001
        self.connected_headers = dict(frame.headers)
        self.connected.set()

    def on_message(self, frame) -> None:  # noqa: ANN001
        self.messages.put(frame)

    def on_receipt(self, frame) -> None:  # noqa: ANN001
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame) -> None:  # noqa: ANN001
        self.errors.put(frame)

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def message(self, timeout: float = WAIT):  # noqa: ANN201
        return self.messages.get(timeout=timeout)

    def no_message(self, within: float = 0.3) -> bool:
        try:
            frame = self.messages.get(timeout=within)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message {frame.headers} {frame.body!r}")

    def receipt(self, expected: str, timeout: float = WAIT) -> None:
        got = self.receipts.get(timeout=timeout)
        assert got == expected


def stomp_connection(address: tuple[str, int], version: str = "1.2", transport: str = "tcp", **kwargs):  # noqa: ANN201
    """A stomp-py connection and its listener; `transport` "ws": over WebSocket (STOMP 1.2 only)."""
    if transport == "ws":
        assert version == "1.2", "stomp-py's WebSocket connection speaks STOMP 1.2"
        conn = stomp.WSConnection([address], ws_path="/ws", timeout=WAIT, reconnect_attempts_max=1, **kwargs)
    else:
        cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
        conn = cls([address], timeout=WAIT, reconnect_attempts_max=1, **kwargs)
    listener = Listener()
    conn.set_listener("test", listener)
    return conn, listener


def connect(address: tuple[str, int], version: str = "1.2", headers: dict | None = None,  # noqa: ANN201
            transport: str = "tcp", **kwargs):
    conn, listener = stomp_connection(address, version, transport, **kwargs)
    conn.connect(wait=True, headers=headers or {})
    assert listener.connected.wait(WAIT)  # stomp-py may return before listeners saw CONNECTED
    return conn, listener


class NodeProcess:
    """`python -m raftmq node` as a real subprocess, started and killed by pid."""

    def __init__(self, extra_args: list[str] | None = None) -> None:
        self.port = free_port()
        self.address = ("127.0.0.1", self.port)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{self.port}", "--in-memory",
             *(extra_args or [])],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr_lines: list[str] = []
        self._stderr_reader = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_reader.start()
        self._wait_ready(timeout=15.0)

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        line = ""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("raftmq node listening on"):
                assert line.strip() == (f"raftmq node listening on 127.0.0.1:{self.port} "
                                        "(in memory: nothing survives a restart)"), line
                return
        self.kill()
        raise RuntimeError(f"node not ready in {timeout}s; stdout {line!r}; "
                           f"stderr {''.join(self.stderr_lines)[-2000:]}")

    def terminate(self, timeout: float = 10.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def _close_pipes(self) -> None:
        self._stderr_reader.join(timeout=5)  # ends at the pipe's EOF, once the process is gone
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def kill(self) -> None:
        processes.kill(self.proc)  # type: ignore[arg-type]  # a text-mode Popen
        self._close_pipes()


class InProcessNode:
    """A `Node` on its own event loop in a background thread, for tests that need a custom
    config or an injected commit log but talk to it over real sockets."""

    def __init__(self, config: NodeConfig | None = None, commit_log: CommitLog | None = None) -> None:
        config = config or NodeConfig()
        config = config.with_address("127.0.0.1", 0)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.node = Node(config, commit_log)
        self.call(self.node.start())
        self.address = self.node.address

    def call(self, coro, timeout: float = WAIT):  # noqa: ANN001, ANN201
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def run(self, fn, *args):  # noqa: ANN001, ANN201
        """Run a plain function on the node's loop and return its result."""

        async def wrapper():  # noqa: ANN202
            return fn(*args)

        return self.call(wrapper())

    def stop(self) -> None:
        try:
            self.call(self.node.stop(), timeout=10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
            if not self.thread.is_alive():
                self.loop.close()


@contextlib.contextmanager
def in_process_node(config: NodeConfig | None = None, commit_log: CommitLog | None = None) -> Iterator[InProcessNode]:
    runner = InProcessNode(config, commit_log)
    try:
        yield runner
    finally:
        runner.stop()

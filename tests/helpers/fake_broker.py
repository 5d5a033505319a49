"""A scripted STOMP server on 127.0.0.1 for client edge cases a real broker will not produce on
demand (ERROR at a chosen moment, a silent peer, a burst of large MESSAGEs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from raftmq.protocol.codec import FrameParser, encode_frame
from raftmq.protocol.frame import Frame

FrameHandler = Callable[["FakeConnection", Frame], None]


class FakeConnection:
    def __init__(self, broker: FakeBroker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.parser = FrameParser()
        self.frames: list[Frame] = []
        self.chunks = 0  # reads that returned data
        self.bytes_read = 0
        self._beating: asyncio.Task | None = None

    def send(self, command: str, headers: list[tuple[str, str]] | None = None, body: bytes = b"") -> None:
        self.writer.write(encode_frame(Frame(command, headers or [], body), self.parser.version))

    def close(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
        self.writer.close()

    def start_beating(self, interval: float) -> None:
        async def beat() -> None:
            while not self.writer.is_closing():
                self.writer.write(b"\n")
                await asyncio.sleep(interval)

        self._beating = asyncio.get_running_loop().create_task(beat())

    async def serve(self) -> None:
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.chunks += 1
                self.bytes_read += len(data)
                for frame in self.parser.feed(data):
                    self.frames.append(frame)
                    self.broker.handler(self, frame)
                    if frame.command == "DISCONNECT":
                        await self.writer.drain()
                        self.writer.close()
                        return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.close()


def default_handler(conn: FakeConnection, frame: Frame) -> None:
    """CONNECTED for CONNECT (using the broker's settings), RECEIPT for any receipt header."""
    if frame.command in ("CONNECT", "STOMP"):
        conn.send("CONNECTED", [("version", conn.broker.version), ("heart-beat", conn.broker.heartbeat)])
        if conn.broker.beat_every_ms:
            conn.start_beating(conn.broker.beat_every_ms / 1000)
        return
    receipt = frame.get("receipt")
    if receipt is not None:
        conn.send("RECEIPT", [("receipt-id", receipt)])


class FakeBroker:
    def __init__(
        self,
        handler: FrameHandler = default_handler,
        version: str = "1.2",
        heartbeat: str = "0,0",
        beat_every_ms: int = 0,
    ) -> None:
        self.handler = handler
        self.version = version
        self.heartbeat = heartbeat  # what CONNECTED announces
        self.beat_every_ms = beat_every_ms  # how often it really sends an EOL (0 = never)
        self.connections: list[FakeConnection] = []
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for conn in self.connections:
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = FakeConnection(self, reader, writer)
        self.connections.append(conn)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await conn.serve()
        finally:
            self._tasks.discard(task)

    async def connection(self, timeout: float = 5.0) -> FakeConnection:
        async with asyncio.timeout(timeout):
            while not self.connections:
                await asyncio.sleep(0.005)
        return self.connections[-1]

    async def wait_for_frames(self, conn: FakeConnection, count: int, timeout: float = 5.0) -> list[Frame]:
        async with asyncio.timeout(timeout):
            while len(conn.frames) < count:
                await asyncio.sleep(0.005)
        return conn.frames

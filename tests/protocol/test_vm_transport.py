"""raftmq.vm's transport pair, without a broker: two recording protocols, on one event loop and
on two (a loop per thread, as a sync client's caller and an embedded broker's)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from raftmq import vm
from raftmq.errors import NoVmBroker


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """The test as a plain function running its coroutine on a new loop."""
    @functools.wraps(test)
    def plain(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))
    return plain


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: list[bytes] = []
        self.events: list[str] = []
        self.lost = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)

    def eof_received(self) -> bool:
        self.events.append("eof")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")
        self.lost.set()

    def pause_writing(self) -> None:
        self.events.append("pause_writing")

    def resume_writing(self) -> None:
        self.events.append("resume_writing")


async def _pair(name: str, server: Recorder,
                loop: asyncio.AbstractEventLoop | None = None) -> tuple[Recorder, vm.VmBroker]:
    broker = vm.serve(name, loop or asyncio.get_running_loop(), lambda: server)
    client = Recorder()
    await vm.dial(name, client)
    return client, broker


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@run
async def test_one_turns_writes_arrive_as_one_chunk_in_order_on_the_next_turn() -> None:
    server = Recorder()
    client, broker = await _pair("t-order", server)
    try:
        await _settle()
        assert client.transport is not None and server.transport is not None
        client.transport.write(b"CONNECT\n\n\x00")
        client.transport.writelines([b"SEND", b"\n\n\x00"])
        assert server.chunks == []  # never inside the writer's call
        await _settle()
        assert server.chunks == [b"CONNECT\n\n\x00SEND\n\n\x00"]
        server.transport.write(b"CONNECTED\n\n\x00")
        await _settle()
        assert client.chunks == [b"CONNECTED\n\n\x00"]
        assert client.transport.get_extra_info("peername") == ("vm", "t-order")
    finally:
        vm.unserve(broker)


@run
async def test_close_delivers_what_was_written_then_eof_and_lost_on_both_sides() -> None:
    server = Recorder()
    client, broker = await _pair("t-close", server)
    try:
        await _settle()
        assert client.transport is not None
        client.transport.write(b"last words")
        client.transport.close()
        client.transport.write(b"after close")  # dropped, as a closing socket's
        await asyncio.wait_for(server.lost.wait(), 2)
        await asyncio.wait_for(client.lost.wait(), 2)
        assert server.chunks == [b"last words"]
        assert server.events == ["made", "eof", "lost"]
        assert client.events == ["made", "lost"]
        assert client.transport.is_closing()
    finally:
        vm.unserve(broker)


@run
async def test_abort_ends_both_sides_without_an_eof() -> None:
    server = Recorder()
    client, broker = await _pair("t-abort", server)
    try:
        await _settle()
        assert client.transport is not None
        client.transport.write(b"in flight")  # may arrive, as over a socket
        client.transport.abort()
        client.transport.write(b"never sent")
        await asyncio.wait_for(server.lost.wait(), 2)
        await asyncio.wait_for(client.lost.wait(), 2)
        assert b"never sent" not in b"".join(server.chunks)
        assert server.events[-1] == "lost" and "eof" not in server.events
    finally:
        vm.unserve(broker)


@run
async def test_a_paused_reader_is_handed_nothing_and_the_writer_is_paused_then_resumed() -> None:
    server = Recorder()
    client, broker = await _pair("t-flow", server)
    try:
        await _settle()
        assert client.transport is not None and server.transport is not None
        server.transport.pause_reading()
        assert not server.transport.is_reading()
        block = b"x" * 65536
        for _ in range(vm.HIGH_WATER_BYTES // len(block) + 2):
            client.transport.write(block)
        await _settle()
        assert server.chunks == []
        assert client.events[-1] == "pause_writing"
        assert client.transport.get_write_buffer_size() > vm.HIGH_WATER_BYTES
        server.transport.resume_reading()
        await _settle()
        assert sum(map(len, server.chunks)) == (vm.HIGH_WATER_BYTES // len(block) + 2) * len(block)
        assert client.events[-1] == "resume_writing"
        assert client.transport.get_write_buffer_size() == 0
    finally:
        vm.unserve(broker)


@pytest.fixture
def other_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


@run
async def test_across_two_loops_every_chunk_arrives_in_order(other_loop: asyncio.AbstractEventLoop) -> None:
    server = Recorder()
    client, broker = await _pair("t-threads", server, other_loop)
    try:
        for _ in range(100):
            if server.transport is not None:
                break
            await asyncio.sleep(0.01)
        assert client.transport is not None and server.transport is not None
        for number in range(2000):
            client.transport.write(b"%d," % number)
        for _ in range(500):
            if b"".join(server.chunks).endswith(b"1999,"):
                break
            await asyncio.sleep(0.01)
        assert b"".join(server.chunks) == b"".join(b"%d," % n for n in range(2000))
        other_loop.call_soon_threadsafe(server.transport.write, b"answer")
        for _ in range(500):
            if client.chunks:
                break
            await asyncio.sleep(0.01)
        assert client.chunks == [b"answer"]
    finally:
        vm.unserve(broker)


@run
async def test_a_name_nobody_serves_is_a_clear_error_naming_those_that_run() -> None:
    broker = vm.serve("t-known", asyncio.get_running_loop(), Recorder)
    try:
        with pytest.raises(NoVmBroker, match=r"no in-VM broker named 'nobody' in this process "
                                             r"\(in-VM brokers running: t-known\); start one with "
                                             r"EmbeddedBroker\(name='nobody'\)"):
            await vm.dial("nobody", Recorder())
        with pytest.raises(ValueError, match="already runs"):
            vm.serve("t-known", asyncio.get_running_loop(), Recorder)
        with pytest.raises(ValueError, match="letters, digits"):
            vm.serve("a/b", asyncio.get_running_loop(), Recorder)
    finally:
        vm.unserve(broker)
    with pytest.raises(NoVmBroker, match="no in-VM broker runs"):
        vm.served("t-known")

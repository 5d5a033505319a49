"""The README's first command, `raftmq node` with no arguments, keeps what it acknowledged:
500 receipted persistent messages, kill -9, restart the same way, all 500 come back. The
in-memory mode is a choice the startup line names."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raftmq.client import connect
from raftmq.processes import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

COUNT = 500


def start(cwd: Path, port: int, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    out = cwd / f"node-{time.monotonic_ns()}.stdout"
    with open(out, "wb") as stdout, open(cwd / "node.stderr", "ab") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "raftmq", "node", "--mqtt", "off",
             "--listen", f"127.0.0.1:{port}", *extra],
                                cwd=cwd, stdout=stdout, stderr=stderr)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = out.read_text()
        if "raftmq node listening on" in line:
            return proc, line.strip()
        assert proc.poll() is None, (cwd / "node.stderr").read_text()[-2000:]
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("node not ready")


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


async def send_all(port: int) -> None:
    client = await connect("127.0.0.1", port)
    await asyncio.gather(*(client.send("/queue/durable", f"m{i}".encode(), [("persistent", "true")], receipt=True)
                           for i in range(COUNT)))
    await client.disconnect()


async def receive_all(port: int, wait: float) -> set[bytes]:
    client = await connect("127.0.0.1", port)
    got: set[bytes] = set()
    client.subscribe("/queue/durable", callback=lambda frame: got.add(frame.body))
    deadline = time.monotonic() + wait
    while len(got) < COUNT and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await client.disconnect()
    return got


def test_the_default_node_keeps_what_it_acknowledged_through_kill_9(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    proc, line = start(tmp_path, port)
    try:
        assert line == f"raftmq node listening on 127.0.0.1:{port} (durable: data in .raftmq/node1)"
        asyncio.run(send_all(port))
        kill(proc)
        proc, _ = start(tmp_path, port)
        got = asyncio.run(receive_all(port, 15))
        assert got == {f"m{i}".encode() for i in range(COUNT)}, f"{COUNT - len(got)} acknowledged messages lost"
    finally:
        kill(proc)


def test_in_memory_is_a_choice_the_startup_line_names(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    proc, line = start(tmp_path, port, "--in-memory")
    try:
        assert line == f"raftmq node listening on 127.0.0.1:{port} (in memory: nothing survives a restart)"
        asyncio.run(send_all(port))
        kill(proc)
        proc, _ = start(tmp_path, port, "--in-memory")
        assert asyncio.run(receive_all(port, 1.0)) == set()
        assert not (tmp_path / ".raftmq").exists()
    finally:
        kill(proc)

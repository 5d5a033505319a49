"""The node as the operator runs it: `python -m raftmq node`, readiness line, logs, SIGTERM."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.stomp_raw import NodeProcess, RawClient, frame_bytes, unique

pytestmark = pytest.mark.integration


def test_sigterm_tells_clients_and_exits_cleanly() -> None:
    node = NodeProcess()
    try:
        queue = unique()
        client = RawClient(node.address)
        client.connect()
        client.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "s", "receipt": "sub"}))
        assert client.read_frame().headers["receipt-id"] == "sub"
        assert node.terminate(timeout=10) == 0
        frames = client.read_until_closed()
        assert [f.command for f in frames] == ["ERROR"]
        assert frames[0].headers["message"] == "broker shutting down"
        stderr = "".join(node.stderr_lines)
        assert "node.started" in stderr and "node.stopped" in stderr
        assert "Traceback" not in stderr
        # Logs go to stderr; stdout carries only the readiness line.
        assert node.proc.stdout is not None and node.proc.stdout.read() == ""
    finally:
        node.kill()


def test_port_in_use_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=20,
            cwd=tmp_path,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""

"""`raftmq bench` end to end against a real node subprocess (see conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from raftmq import processes
from raftmq.bench.cli import bench_command

pytestmark = pytest.mark.integration

EXPECTED_FIELDS = {
    "publish_rate",
    "consume_rate",
    "receipt_latency_ms",
    "e2e_latency_ms",
    "sent",
    "receipted",
    "received",
    "lost",
    "duplicated",
    "redelivered",
    "errors",
}


def _url(broker: tuple[str, int]) -> str:
    return f"stomp://{broker[0]}:{broker[1]}"


def test_bench_run_in_process_reports_no_loss(broker: tuple[str, int], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        bench_command,
        ["--url", _url(broker), "-p", "2", "-c", "2", "-n", "300", "--warmup", "20", "-s", "256",
         "--receipt-window", "10", "--json", str(out), "--timeout", "5"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert EXPECTED_FIELDS <= data.keys()
    assert (data["sent"], data["receipted"], data["received"]) == (320, 320, 320)
    assert (data["lost"], data["duplicated"], data["errors"]) == (0, 0, 0)
    assert data["published"] == 300 and data["consumed"] == 300
    assert data["publish_rate"] > 0 and data["consume_rate"] > 0
    for key in ("receipt_latency_ms", "e2e_latency_ms"):
        latency = data[key]
        assert latency["count"] == 300
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
    assert "lost" in result.output


def test_bench_in_two_processes_without_receipts(broker: tuple[str, int], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    completed = subprocess.run(
        [sys.executable, "-m", "raftmq", "bench", "--url", _url(broker), "-p", "2", "-c", "2",
         "--processes", "2", "-n", "400", "--receipt-window", "0", "--ack", "client",
         "--non-persistent", "--json", str(out), "--quiet", "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["processes"] == 2
    assert (data["sent"], data["receipted"], data["received"]) == (400, 0, 400)
    assert (data["lost"], data["missing_unconfirmed"], data["duplicated"], data["errors"]) == (0, 0, 0, 0)
    # Cumulative ACKs (every 100 messages, and one before DISCONNECT) settle everything.
    assert data["redelivered"] == 0
    assert data["consumed"] == 400
    assert data["receipt_latency_ms"]["count"] == 0
    assert data["e2e_latency_ms"]["count"] == 400


def test_receipted_messages_nobody_consumed_count_as_lost(broker: tuple[str, int], tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        bench_command,
        ["--url", _url(broker), "-p", "1", "-c", "0", "-n", "30", "--json", str(out), "--quiet", "--timeout", "5"],
    )
    assert result.exit_code == 1, result.output
    data = json.loads(out.read_text())
    assert (data["receipted"], data["received"], data["lost"]) == (30, 0, 30)


def test_bench_reports_an_unreachable_broker(tmp_path: Path) -> None:
    port = processes.free_port()  # nothing listens here
    out = tmp_path / "result.json"
    result = CliRunner().invoke(
        bench_command,
        ["--url", f"stomp://127.0.0.1:{port}", "-n", "10", "--json", str(out), "--quiet", "--timeout", "2",
         "--drain-timeout", "0"],
    )
    data = json.loads(out.read_text())
    assert data["errors"] == 2 and data["sent"] == 0
    assert any("cannot connect" in text for text in data["error_messages"])
    assert result.exit_code == 2, result.output


class _ReceiptlessBroker:
    """Answers CONNECT and every receipt except those of SENDs: a broker that stalls."""

    def __init__(self) -> None:
        import asyncio
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(5)

    async def _start(self) -> int:
        import asyncio

        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer) -> None:  # noqa: ANN001
        from raftmq.protocol.codec import FrameParser, encode_frame
        from raftmq.protocol.frame import Frame

        parser = FrameParser()
        while data := await reader.read(65536):
            for frame in parser.feed(data):
                if frame.command == "CONNECT":
                    writer.write(encode_frame(Frame("CONNECTED", [("version", "1.2")])))
                elif frame.command != "SEND" and frame.get("receipt"):
                    writer.write(encode_frame(Frame("RECEIPT", [("receipt-id", frame.get("receipt") or "")])))
        writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def test_a_stalled_broker_ends_the_run_with_an_error(tmp_path: Path) -> None:
    broker = _ReceiptlessBroker()
    try:
        out = tmp_path / "result.json"
        result = CliRunner().invoke(
            bench_command,
            ["--url", f"stomp://127.0.0.1:{broker.port}", "-n", "5", "--json", str(out), "--quiet",
             "--timeout", "1", "--drain-timeout", "0"],
        )
    finally:
        broker.stop()
    data = json.loads(out.read_text())
    assert any("no receipt within 1 s" in text for text in data["error_messages"])
    assert (data["sent"], data["receipted"], data["lost"], data["missing_unconfirmed"]) == (1, 0, 0, 1)
    assert result.exit_code == 2, result.output


def test_several_urls_spread_producers_and_consumers_and_a_slow_consumer_takes_less(
        broker: tuple[str, int], tmp_path: Path) -> None:
    # Two spellings of the same broker stand for two groups of a cluster: consumer 0 (slow,
    # 5 ms per message, prefetch 5) connects to the first, consumer 1 to the second.
    out = tmp_path / "result.json"
    first, second = _url(broker), f"{broker[0]}:{broker[1]}"
    result = CliRunner().invoke(
        bench_command,
        ["--url", first, "--url", second, "-p", "2", "-c", "2", "-n", "400", "-s", "64", "--receipt-window", "20",
         "--prefetch", "5", "--slow-consumers", "1", "--consumer-work-ms", "5", "--json", str(out), "--timeout", "5"],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert (data["received"], data["lost"], data["duplicated"], data["errors"]) == (400, 0, 0, 0)
    by_url = data["received_by_url"]
    slow, fast = by_url[f"failover:({first})"], by_url[f"failover:({second})"]
    assert slow + fast == 400
    assert 0 < slow < fast  # 5 ms a message holds the slow one back
    assert "received at" in result.output

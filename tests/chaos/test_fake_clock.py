"""Clock faults with libfaketime (chaos.clock_fault): a probe process's clocks move as told in both
modes (wall clock only, or every clock), sleeps and timed waits still work under it, and a
real raftmq node runs under a skewed clock, answers a SEND with a RECEIPT, delivers it, and
expires messages by its own (skewed) wall clock."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from chaos.clock_fault import ClockControl, available, remove_leftovers
from raftmq import processes
from tests.helpers.stomp_raw import RawClient, frame_bytes, unique

pytestmark = pytest.mark.integration

REASON = available()
needs_libfaketime = pytest.mark.skipif(REASON is not None, reason=f"clock faults unavailable: {REASON}")

ANSWER_SECONDS = 5.0
CLOSE = 0.5  # seconds: how close two readings of "the same" time must be (process start-up, scheduling)

PROBE = r"""
import json, sys, threading, time
for line in sys.stdin:
    command, _, argument = line.strip().partition(" ")
    started = time.monotonic()
    if command == "sleep":
        time.sleep(float(argument))
    elif command == "wait":
        threading.Event().wait(float(argument))
    print(json.dumps({"time": time.time(), "monotonic": time.monotonic(),
                      "raw": time.clock_gettime(time.CLOCK_MONOTONIC_RAW), "took": time.monotonic() - started}),
          flush=True)
"""


class Probe:
    """A Python child under the control's environment that reads its clocks when asked."""

    def __init__(self, clock: ClockControl) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=clock.environ())
        clock.attach(self.proc.pid)

    def ask(self, command: str = "now") -> dict[str, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{command}\n".encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_SECONDS)
        if not ready:
            raise AssertionError(f"the probe did not answer {command!r} within {ANSWER_SECONDS} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the probe exited: {self.stderr()}")
        answer: dict[str, float] = json.loads(line)
        return answer

    def ahead(self) -> float:
        """How far the probe's wall clock is ahead of ours."""
        ours_before = time.time()
        theirs = self.ask()["time"]
        return theirs - (ours_before + time.time()) / 2

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        processes.kill(self.proc)
        remove_leftovers(self.proc.pid)


@pytest.fixture
def probe_for(tmp_path: Path) -> Iterator[Any]:
    probes: list[Probe] = []

    def start(wall_only: bool) -> tuple[ClockControl, Probe]:
        clock = ClockControl(tmp_path / f"clock-{len(probes)}", wall_only=wall_only)
        probe = Probe(clock)
        probes.append(probe)
        return clock, probe

    try:
        yield start
    finally:
        for probe in probes:
            probe.close()


@needs_libfaketime
def test_wall_only_skew_jump_and_reset_move_the_wall_clock_alone(probe_for: Any) -> None:
    clock, probe = probe_for(True)
    assert abs(probe.ahead()) < CLOSE  # preloaded, not yet skewed
    ours = time.monotonic()
    clock.skew(3600)
    assert abs(probe.ahead() - 3600) < CLOSE
    clock.jump(-30)
    assert abs(probe.ahead() - 3570) < CLOSE and clock.deviation() == 3570
    reading = probe.ask()
    # Monotonic time is the machine's (the same clock as ours: one per boot), untouched.
    assert abs(reading["monotonic"] - ours) < 2 * ANSWER_SECONDS
    assert abs(reading["raw"] - time.clock_gettime(time.CLOCK_MONOTONIC_RAW)) < CLOSE
    clock.reset()
    assert abs(probe.ahead()) < CLOSE
    # time.sleep (an absolute CLOCK_MONOTONIC clock_nanosleep) and a timed lock wait work.
    assert 0.15 <= probe.ask("sleep 0.2")["took"] < 0.2 + CLOSE
    assert 0.15 <= probe.ask("wait 0.2")["took"] < 0.2 + CLOSE


@needs_libfaketime
def test_faking_every_clock_moves_monotonic_time_with_the_wall_clock(probe_for: Any) -> None:
    clock, probe = probe_for(False)
    before = probe.ask()
    assert abs(probe.ahead()) < CLOSE
    clock.skew(3600)
    after = probe.ask()
    assert abs(after["time"] - before["time"] - 3600) < CLOSE
    assert abs(after["monotonic"] - before["monotonic"] - 3600) < CLOSE  # a VM pause, seen from inside
    assert abs(after["raw"] - before["raw"] - 3600) < CLOSE  # pysyncobj's clock too
    clock.jump(-30)
    back = probe.ask()
    assert abs(back["monotonic"] - after["monotonic"] + 30) < CLOSE  # documented: monotonic goes back too
    clock.reset()
    assert abs(probe.ahead()) < CLOSE
    # Sleeps and timed lock waits take their real time (sem_clockwait goes through the shim).
    assert 0.15 <= probe.ask("sleep 0.2")["took"] < 0.2 + CLOSE
    assert 0.15 <= probe.ask("wait 0.2")["took"] < 0.2 + CLOSE


@needs_libfaketime
@pytest.mark.parametrize("wall_only", [True, False], ids=["wall-only", "every-clock"])
def test_a_faster_clock_continues_from_its_reading(probe_for: Any, wall_only: bool) -> None:
    clock, probe = probe_for(wall_only)
    time.sleep(0.3)  # a while since the start: a rate applied to all of it would show as a jump
    clock.skew(10)
    clock.rate(2)
    first = probe.ask()
    assert abs(first["time"] - time.time() - 10) < CLOSE  # no step at the change
    time.sleep(1.0)
    second = probe.ask()
    assert 1.7 < second["time"] - first["time"] < 2.5
    if wall_only:
        assert 0.8 < second["monotonic"] - first["monotonic"] < 1.5
    else:
        assert 1.7 < second["monotonic"] - first["monotonic"] < 2.5
    clock.skew(-5)  # under a rate too
    assert abs(probe.ahead() + 5) < CLOSE
    clock.reset()
    assert abs(probe.ahead()) < CLOSE


def _log_timestamp(log: Path, event: str) -> float:
    for line in log.read_text(errors="replace").splitlines():
        if f"event='{event}'" in line:
            stamp = line.split("timestamp='", 1)[1].split("'", 1)[0]
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    raise AssertionError(f"no {event} in {log}")


@needs_libfaketime
@pytest.mark.parametrize("wall_only", [True, False], ids=["wall-only", "every-clock"])
def test_a_durable_node_under_a_skewed_clock_receipts_delivers_and_expires_by_its_clock(
    tmp_path: Path, wall_only: bool
) -> None:
    clock = ClockControl(tmp_path / "clock", wall_only=wall_only)
    clock.skew(3600)
    port = processes.free_port()
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    argv = [sys.executable, "-m", "raftmq", "node", "--mqtt", "off", "--listen", f"127.0.0.1:{port}",
            "--data-dir", str(tmp_path / "data")]
    # A single durable node is a one-member Raft group: pysyncobj's tick thread, its sleeps and
    # the journal's worker threads all run under libfaketime.
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=clock.environ(),
                                cwd=os.getcwd())
    try:
        processes.wait_for_line(proc, stdout, f"raftmq node listening on 127.0.0.1:{port}", 30, errors=stderr)
        assert abs(_log_timestamp(stderr, "node.listening") - time.time() - 3600) < 5  # it lives 1 h ahead
        client = RawClient(("127.0.0.1", port))
        client.connect()
        queue, expiring = unique("/queue/clock"), unique("/queue/expiring")
        # Expires in 30 min by our clock, which is 30 min ago by the node's: it expires at once.
        in_half_an_hour = int((time.time() + 1800) * 1000)
        client.send(frame_bytes("SEND", {"destination": expiring, "receipt": "e", "expires": str(in_half_an_hour)},
                                b"old"))
        client.send(frame_bytes("SEND", {"destination": expiring, "receipt": "k"}, b"kept"))
        client.send(frame_bytes("SUBSCRIBE", {"destination": queue, "id": "1", "ack": "auto"}))
        client.send(frame_bytes("SEND", {"destination": queue, "receipt": "s1"}, b"ahead"))
        frames = [client.read_frame() for _ in range(4)]
        assert [f.headers.get("receipt-id") for f in frames if f.command == "RECEIPT"] == ["e", "k", "s1"]
        assert [f.body for f in frames if f.command == "MESSAGE"] == [b"ahead"]
        client.send(frame_bytes("SUBSCRIBE", {"destination": expiring, "id": "2", "ack": "auto"}))
        assert client.read_frame().body == b"kept"
        with pytest.raises(TimeoutError):
            client.read_frame(timeout=0.5)  # the expired one is not delivered
        clock.jump(-7200)  # now 1 h behind: the node goes on
        client.send(frame_bytes("SEND", {"destination": queue, "receipt": "s2"}, b"behind"))
        frames = [client.read_frame() for _ in range(2)]
        assert {f.command for f in frames} == {"MESSAGE", "RECEIPT"} and frames[0].body + frames[1].body == b"behind"
        client.close()
        assert proc.poll() is None
    finally:
        processes.kill(proc)
        remove_leftovers(proc.pid)
        clock.reset()

"""Free port choice (raftmq.processes.free_ports): each test worker picks from a slice of the
range of its own, a process never hands the same port out twice until its range runs out, and
the presets' fixed ports are never handed out."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from raftmq import processes
from raftmq.processes import PortPool, port_range, split_port_range

REPOSITORY = Path(__file__).resolve().parent.parent


def always_free(port: int) -> bool:
    return True


def test_the_worker_slices_are_disjoint_and_cover_the_range() -> None:
    for low, high, count in [(20_000, 32_768, 2), (20_000, 32_768, 3), (1024, 1031, 7), (5, 100, 4)]:
        slices = [split_port_range(low, high, index, count) for index in range(count)]
        ports = [port for start, end in slices for port in range(start, end)]
        assert ports == list(range(low, high)), slices  # in order, each port in exactly one slice
        assert all(end - start >= (high - low) // count for start, end in slices)
    with pytest.raises(ValueError):
        split_port_range(1024, 1025, 0, 2)  # fewer ports than workers
    with pytest.raises(ValueError):
        split_port_range(1024, 2048, 2, 2)


def test_the_range_comes_from_the_environment_where_set() -> None:
    assert port_range({processes.PORT_RANGE_ENV: "21000-21999"}) == (21_000, 22_000)
    assert port_range({processes.PORT_RANGE_ENV: "21000-21000"}) == (21_000, 21_001)
    low, high = port_range({})
    assert 1024 <= low < high and high - low >= processes.PICK_MIN_SPAN
    assert processes.format_port_range(21_000, 22_000) == "21000-21999"
    for bad in ("21000", "a-b", "22000-21000", "0-10", "1-65536"):
        with pytest.raises(ValueError, match=processes.PORT_RANGE_ENV):
            port_range({processes.PORT_RANGE_ENV: bad})


def test_a_pool_never_hands_a_port_out_twice_until_its_range_is_exhausted() -> None:
    pool = PortPool(30_000, 30_100, start=30_090, reserved=())
    first = [port for _ in range(25) for port in pool.take(4, always_free)]
    assert sorted(first) == list(range(30_000, 30_100))  # each port once, in 100 picks
    assert first[:12] == [*range(30_090, 30_100), 30_000, 30_001]  # from start, wrapping round
    # Exhausted: it starts over rather than fail, and still hands out distinct ports per call.
    again = pool.take(50, always_free)
    assert len(set(again)) == 50 and set(again) <= set(range(30_000, 30_100))


def test_a_pool_skips_taken_and_reserved_ports() -> None:
    taken = {30_001, 30_003}
    pool = PortPool(30_000, 30_010, start=30_000, reserved=(range(30_004, 30_008),))
    assert pool.take(3, lambda port: port not in taken) == [30_000, 30_002, 30_008]
    assert pool.take(1, lambda port: port not in taken) == [30_009]
    taken.clear()  # released meanwhile: found again on the next turn, the reserved ports never
    assert sorted(pool.take(4, always_free)) == [30_000, 30_001, 30_002, 30_003]
    with pytest.raises(RuntimeError, match="no 7 free ports in 30000-30009"):
        pool.take(7, always_free)  # only six ports in the range are not reserved


def test_the_default_reserved_ports_hold_every_fixed_port_of_the_presets_and_configs() -> None:
    files = [*sorted((REPOSITORY / "raftmq" / "presets").glob("*.toml")),
             *sorted((REPOSITORY / "configs").glob("*.toml"))]
    fixed = {int(port) for path in files for port in re.findall(r"127\.0\.0\.1:(\d+)", path.read_text())}
    assert len(fixed) > 30  # the presets' clients, raft ports and admins
    assert {port for port in fixed if not any(port in span for span in processes.RESERVED_PORTS)} == set()
    pool = PortPool(8000, 8400, start=8000)
    handed = pool.take(400 - len(range(8160, 8300)), always_free)
    assert not fixed & set(handed)


@pytest.mark.integration
def test_free_ports_hands_out_ports_of_its_range_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = port_range()
    # A range of this worker's own, by the end of its slice. Ports there may still be held by
    # what earlier tests of this worker left running (a session's node, a socket in TIME_WAIT):
    # the pool skips those, so the range must hold 30 free ones when the test starts (seen
    # once with a 40-port range: a pass found too few, and the pool began again).
    first = high - 200
    free = [port for port in range(first, high) if processes._bindable(processes.LOOPBACK, port)]
    assert len(free) >= 30, f"only {len(free)} free ports in {first}-{high - 1}"
    monkeypatch.setenv(processes.PORT_RANGE_ENV, processes.format_port_range(first, high))
    picked = processes.free_ports(10) + [processes.free_port() for _ in range(20)]
    assert len(set(picked)) == 30 and all(first <= port < high for port in picked)
    with socket.socket() as busy:  # a port in use is never handed out
        busy.bind((processes.LOOPBACK, picked[0]))
        monkeypatch.setenv(processes.PORT_RANGE_ENV, f"{picked[0]}-{picked[0]}")
        with pytest.raises(RuntimeError, match=f"no 1 free ports in {picked[0]}-{picked[0]}"):
            processes.free_ports(1)

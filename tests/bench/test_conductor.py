from __future__ import annotations

import pytest

from raftmq.bench.board import Board, Tally
from raftmq.bench.options import BenchOptions, parse_url, split_evenly
from raftmq.bench.runner import Conductor


def test_parse_url() -> None:
    assert parse_url("stomp://127.0.0.1:61623") == ("127.0.0.1", 61623)
    assert parse_url("tcp://broker") == ("broker", 61613)
    assert parse_url("localhost:1234") == ("localhost", 1234)
    for bad in ("http://x:1", "stomp://:5", "stomp://h:notaport"):
        with pytest.raises(ValueError):
            parse_url(bad)


def test_split_evenly_and_assignment_to_processes() -> None:
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(2, 4) == [1, 1, 0, 0]
    opts = BenchOptions(producers=3, consumers=2, processes=2, messages=10, warmup=5)
    assert opts.producers_of(0) == [0, 2] and opts.producers_of(1) == [1]
    assert opts.consumers_of(0) == [0] and opts.consumers_of(1) == [1]
    assert [opts.messages_of(p) for p in range(3)] == [4, 3, 3]
    assert sum(opts.warmup_of(p) for p in range(3)) == 5


def _board(tally: Tally) -> Board:
    board = Board.local(1)
    board.publish(0, tally)
    return board


def test_conductor_starts_once_every_consumer_is_subscribed() -> None:
    opts = BenchOptions(producers=1, consumers=2)
    tally = Tally(consumers_ready=1)
    board = _board(tally)
    conductor = Conductor(opts, board)
    assert not conductor.step(0.0) and not board.start.is_set()
    tally.consumers_ready = 2
    board.publish(0, tally)
    assert not conductor.step(0.1) and board.start.is_set()


def test_conductor_starts_anyway_when_a_worker_hangs() -> None:
    opts = BenchOptions(consumers=1, connect_timeout=1.0)
    board = _board(Tally())
    conductor = Conductor(opts, board)
    conductor.step(0.0)
    assert not board.start.is_set()
    conductor.step(100.0)
    assert board.start.is_set()


def test_conductor_stops_when_everything_sent_arrived() -> None:
    opts = BenchOptions(producers=1, consumers=1, drain_timeout=5.0)
    tally = Tally(consumers_ready=1, sent=10, received=9)
    board = _board(tally)
    conductor = Conductor(opts, board)
    conductor.step(0.0)
    assert not conductor.step(1.0)  # producer still running
    tally.producers_done = 1
    board.publish(0, tally)
    assert not conductor.step(2.0) and not board.stop.is_set()  # draining: one missing
    tally.received = 10
    board.publish(0, tally)
    assert conductor.step(2.1) and board.stop.is_set()


def test_conductor_gives_up_draining_after_the_timeout() -> None:
    opts = BenchOptions(producers=1, consumers=1, drain_timeout=5.0)
    board = _board(Tally(consumers_ready=1, sent=10, received=3, producers_done=1))
    conductor = Conductor(opts, board)
    conductor.step(0.0)
    assert not conductor.step(1.0)
    assert not conductor.step(5.9)
    assert conductor.step(6.1) and board.stop.is_set()


def test_board_totals_sum_worker_rows() -> None:
    board = Board.local(2)
    board.publish(0, Tally(sent=3, received=1, errors=1))
    board.publish(1, Tally(sent=4, received=2, finished=1))
    totals = board.totals()
    assert (totals.sent, totals.received, totals.errors, totals.finished) == (7, 3, 1, 1)
    assert board.get(1, "sent") == 4

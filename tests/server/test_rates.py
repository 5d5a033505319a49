"""Rates from counter samples (the node's clock, never the core's), and the health verdict."""

from __future__ import annotations

import pytest

from raftmq.server.admin.metrics import health
from raftmq.server.rates import RateSampler


def counters(enqueued: int, dequeued: int) -> dict[str, int]:
    return {"depth": 0, "enqueued": enqueued, "dequeued": dequeued}


def test_rates_are_unknown_until_the_span_is_long_enough() -> None:
    sampler = RateSampler(window=10, min_span=0.5)
    sampler.sample(100.0, {"/queue/a": counters(0, 0)})
    live = {"/queue/a": counters(3, 1)}
    totals = sampler.rates(100.2, live)
    assert totals["destinations"]["/queue/a"] == {"enqueue_rate": None, "dequeue_rate": None}
    assert totals["enqueue_rate"] is None and live == {"/queue/a": counters(3, 1)}  # the counters are left alone
    assert totals["enqueued"] == 3 and totals["dequeued"] == 1


def test_rates_cover_the_rolling_window() -> None:
    sampler = RateSampler(window=10, min_span=0.5)

    def count(second: int) -> dict[str, dict[str, int]]:
        return {"/queue/a": counters(min(second, 10) * 10, 0)}  # 10 msg/s in, then nothing after t=10

    for second in range(0, 13):
        sampler.sample(float(second), count(second))
    live = count(12)
    totals = sampler.rates(12.0, live)
    assert totals["enqueue_rate"] == 8.0  # base sample t=2 (20): 80 more in 10 s
    assert totals["destinations"] == {"/queue/a": {"enqueue_rate": 8.0, "dequeue_rate": 0.0}}
    for second in range(13, 21):
        sampler.sample(float(second), count(second))
    totals = sampler.rates(20.5, count(20))  # the window holds only quiet seconds now
    assert totals["enqueue_rate"] == 0.0 and totals["span_seconds"] == 9.5


def test_new_destinations_start_from_zero_and_totals_add_up() -> None:
    sampler = RateSampler(window=10, min_span=0.5)
    sampler.sample(0.0, {"/queue/a": counters(10, 0)})
    live = {"/queue/a": counters(30, 10), "/topic/t": counters(8, 4)}
    totals = sampler.rates(4.0, live)
    assert totals["destinations"] == {
        "/queue/a": {"enqueue_rate": 5.0, "dequeue_rate": 2.5}, "/topic/t": {"enqueue_rate": 2.0, "dequeue_rate": 1.0},
    }
    assert totals["enqueue_rate"] == 7.0 and totals["dequeue_rate"] == 3.5
    assert (totals["enqueued"], totals["dequeued"]) == (38, 14)


def test_counters_that_go_back_give_no_negative_rate() -> None:
    # A member whose state was replaced (an empty restore) counts from 0 again.
    sampler = RateSampler(window=10, min_span=0.5)
    sampler.sample(0.0, {"/queue/a": counters(50, 50)})
    totals = sampler.rates(2.0, {"/queue/a": counters(2, 1)})
    assert totals["destinations"]["/queue/a"] == {"enqueue_rate": 0.0, "dequeue_rate": 0.0}


def test_samples_are_bounded_by_the_window() -> None:
    sampler = RateSampler(window=10, min_span=0.5)
    for second in range(1000):
        sampler.sample(float(second), {})
    assert len(sampler._samples) <= 12


def test_health_verdicts() -> None:
    assert health({"role": "leader", "leader": None, "failure": None}) == ("ok", None)
    assert health({"role": "follower", "leader": "127.0.0.1:61613", "failure": None}) == ("ok", None)
    verdict, reason = health({"role": "follower", "leader": None, "failure": None})
    assert verdict == "unavailable" and "no leader" in reason
    failed = health({"role": "leader", "failure": "cannot write the body journal"})
    assert failed == ("failed", "cannot write the body journal")


def test_restart_forgets_growth_that_was_not_traffic() -> None:
    sampler = RateSampler(window=10, min_span=0.5)
    sampler.sample(100.0, {"/queue/a": counters(0, 0)})
    sampler.restart(101.0, {"/queue/a": counters(500, 200)})  # a replayed journal
    totals = sampler.rates(103.0, {"/queue/a": counters(504, 202)})
    assert totals["destinations"]["/queue/a"] == {"enqueue_rate": 2.0, "dequeue_rate": 1.0}


async def _node_rates_after(stamp_ms: int) -> dict[str, object]:
    import time

    from raftmq.config import NodeConfig
    from raftmq.core.commands import Connect, Send
    from raftmq.server.node import Node

    node = Node(NodeConfig(port=0, tick_interval_ms=0))
    await node.start()
    try:
        node.rates.sample(time.monotonic() - 2.0, node.broker.stats()["destinations"])  # 2 s of history
        node.replica.apply([Connect("s1", stamp_ms)] + [Send("s1", "/queue/a", "", b"x", stamp_ms) for _ in range(40)])
        return node.status()["rates"]["destinations"]["/queue/a"]
    finally:
        await node.stop()


@pytest.mark.integration
def test_a_replayed_batch_is_not_reported_as_a_rate() -> None:
    import asyncio
    import time

    now_ms = int(time.time() * 1000)
    live = asyncio.run(_node_rates_after(now_ms))
    assert live["enqueue_rate"] is not None and live["enqueue_rate"] > 10  # 40 fresh messages in ~2 s
    replayed = asyncio.run(_node_rates_after(now_ms - 60_000))  # stamped a minute ago: a replay
    assert replayed["enqueue_rate"] is None  # the window restarted at the replay


def test_a_clustered_destination_also_has_forward_and_arrive_rates() -> None:
    sampler = RateSampler(window=10.0, min_span=0.5)
    clustered = {"enqueued": 0, "dequeued": 0, "forwarded": 0, "arrived": 0}
    sampler.sample(0.0, {"/queue/hot": clustered, "/queue/alone": {"enqueued": 0, "dequeued": 0}})
    assert sampler.rates(0.1, {"/queue/hot": clustered})["destinations"]["/queue/hot"] == {
        "enqueue_rate": None, "dequeue_rate": None, "forward_rate": None, "arrive_rate": None}
    later = {"/queue/hot": {"enqueued": 40, "dequeued": 20, "forwarded": 60, "arrived": 10},
             "/queue/alone": {"enqueued": 4, "dequeued": 0}}
    rates = sampler.rates(2.0, later)["destinations"]
    assert rates["/queue/hot"] == {"enqueue_rate": 20.0, "dequeue_rate": 10.0, "forward_rate": 30.0, "arrive_rate": 5.0}
    assert rates["/queue/alone"] == {"enqueue_rate": 2.0, "dequeue_rate": 0.0}

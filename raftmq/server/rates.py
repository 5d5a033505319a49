"""Enqueue / dequeue rates per destination, from periodic samples of the core's counters.

The core keeps only counts (it has no clock: it is the replicated state machine). The node
samples them (`sample`) with its monotonic clock about once a second while they move, and every
`IDLE_SAMPLE_SECONDS` while they stand still; `rates` compares the
live counters with the oldest sample still inside the window, so a rate covers up to
`window` seconds and is available about `min_span` seconds after the node started.
"""

from __future__ import annotations

from collections import deque
from typing import Any

WINDOW_SECONDS = 10.0
MIN_SPAN_SECONDS = 0.5  # shorter spans give rates too noisy to show
SAMPLE_SECONDS = 1.0
IDLE_SAMPLE_SECONDS = WINDOW_SECONDS / 2  # while the counters stand still

Counts = dict[str, tuple[int, int, int, int]]  # destination -> (enqueued, dequeued, forwarded, arrived)
# In a cluster of groups a destination also counts what it sent on to other groups and what
# came from them: their rates are `forward_rate` and `arrive_rate`.
CLUSTER_COUNTERS = ("forwarded", "arrived")


def _count(counters: dict[str, Any]) -> tuple[int, int, int, int]:
    return (counters.get("enqueued", 0), counters.get("dequeued", 0), counters.get("forwarded", 0),
            counters.get("arrived", 0))


def _counts(destinations: dict[str, dict[str, Any]]) -> Counts:
    return {name: _count(counters) for name, counters in destinations.items()}


class RateSampler:
    def __init__(self, window: float = WINDOW_SECONDS, min_span: float = MIN_SPAN_SECONDS) -> None:
        self.window = window
        self.min_span = min_span
        self._samples: deque[tuple[float, Counts]] = deque()

    def sample(self, now: float, destinations: dict[str, dict[str, Any]]) -> None:
        """Remember the counters of `destinations` (a `Broker.stats()["destinations"]`) at `now`."""
        samples = self._samples
        samples.append((now, _counts(destinations)))
        # Keep one sample at or beyond the window's start, so a rate always spans the window.
        while len(samples) > 1 and now - samples[1][0] >= self.window:
            samples.popleft()

    def restart(self, now: float, destinations: dict[str, dict[str, Any]]) -> None:
        """Forget every sample and start again from the counters as they are now: the growth
        so far was not traffic (a replayed journal, a restored snapshot)."""
        self._samples.clear()
        self.sample(now, destinations)

    def rates(self, now: float, destinations: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """`enqueue_rate` / `dequeue_rate` (msg/s, None while too young) in all and per
        destination (`destinations`: the live counters), with the span they cover."""
        base: tuple[float, Counts] | None = None
        for taken, counts in self._samples:
            if now - taken <= self.window + 1e-9:
                base = (taken, counts)
                break
        if base is None and self._samples:
            base = self._samples[-1]
        span = now - base[0] if base is not None else 0.0
        usable = base is not None and span >= self.min_span
        totals: dict[str, Any] = {"enqueued": 0, "dequeued": 0, "enqueue_rate": 0.0 if usable else None,
                                  "dequeue_rate": 0.0 if usable else None, "span_seconds": round(span, 3),
                                  "window_seconds": self.window}
        per_destination: dict[str, dict[str, float | None]] = {}
        totals["destinations"] = per_destination
        for name, counters in destinations.items():
            enqueued, dequeued, forwarded, arrived = _count(counters)
            clustered = "forwarded" in counters
            totals["enqueued"] += enqueued
            totals["dequeued"] += dequeued
            if not usable:
                per_destination[name] = {"enqueue_rate": None, "dequeue_rate": None}
                if clustered:
                    per_destination[name].update(forward_rate=None, arrive_rate=None)
                continue
            assert base is not None
            # A destination absent from the base sample was created since: it started at 0.
            # Counters only go back when the state is replaced wholesale: no rate then.
            old_enqueued, old_dequeued, old_forwarded, old_arrived = base[1].get(name, (0, 0, 0, 0))
            enqueue_rate = max(0, enqueued - old_enqueued) / span
            dequeue_rate = max(0, dequeued - old_dequeued) / span
            per_destination[name] = {"enqueue_rate": round(enqueue_rate, 2), "dequeue_rate": round(dequeue_rate, 2)}
            if clustered:
                per_destination[name]["forward_rate"] = round(max(0, forwarded - old_forwarded) / span, 2)
                per_destination[name]["arrive_rate"] = round(max(0, arrived - old_arrived) / span, 2)
            totals["enqueue_rate"] += enqueue_rate
            totals["dequeue_rate"] += dequeue_rate
        if usable:
            totals["enqueue_rate"] = round(totals["enqueue_rate"], 2)
            totals["dequeue_rate"] = round(totals["dequeue_rate"], 2)
        return totals

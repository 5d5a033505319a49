"""A fixed-memory latency histogram with log-spaced buckets (HDR-style), and rates.

Values are non-negative integers (the bench records nanoseconds). Below 2**SIGNIFICANT_BITS
every value has its own bucket; above, each power-of-two range is split into
2**(SIGNIFICANT_BITS - 1) equal buckets, so a bucket is at most 1/2**(SIGNIFICANT_BITS - 1)
of its values wide (0.4 % with 9 bits). Counts merge by addition, so histograms from several
processes combine exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

SIGNIFICANT_BITS = 9
MAX_VALUE_BITS = 44  # 2**44 ns is about 4.9 hours; larger values land in the last bucket

_EXACT = 1 << SIGNIFICANT_BITS  # values below this have a bucket each
_HALF = _EXACT >> 1  # buckets per power of two above that
BUCKET_COUNT = _EXACT + (MAX_VALUE_BITS - SIGNIFICANT_BITS) * _HALF


def bucket_index(value: int) -> int:
    """The bucket that holds `value` (clamped into range)."""
    if value < _EXACT:
        return value if value > 0 else 0
    shift = value.bit_length() - SIGNIFICANT_BITS
    index = _EXACT + (shift - 1) * _HALF + ((value >> shift) - _HALF)
    return index if index < BUCKET_COUNT else BUCKET_COUNT - 1


def bucket_bounds(index: int) -> tuple[int, int]:
    """The smallest and largest value that map to bucket `index`."""
    if index < _EXACT:
        return index, index
    shift, offset = divmod(index - _EXACT, _HALF)
    shift += 1
    low = (offset + _HALF) << shift
    return low, low + (1 << shift) - 1


@dataclass(frozen=True, slots=True)
class Summary:
    count: int
    min: int
    max: int
    mean: float
    p50: int
    p90: int
    p99: int
    p999: int


class LatencyHistogram:
    """Counts of values per bucket plus the exact count, sum, min and max."""

    __slots__ = ("counts", "count", "total", "min", "max")

    def __init__(self) -> None:
        self.counts = [0] * BUCKET_COUNT
        self.count = 0
        self.total = 0
        self.min = 0
        self.max = 0

    def record(self, value: int) -> None:
        if value < 0:
            value = 0  # clocks of two processes can disagree by a little
        self.counts[bucket_index(value)] += 1
        if self.count == 0 or value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        self.count += 1
        self.total += value

    def merge(self, other: LatencyHistogram) -> None:
        if other.count == 0:
            return
        counts = self.counts
        for index, n in enumerate(other.counts):
            if n:
                counts[index] += n
        self.min = other.min if self.count == 0 else min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.count += other.count
        self.total += other.total

    def percentile(self, percent: float) -> int:
        """Nearest-rank percentile: the value of rank ceil(p/100 * count), to bucket precision.

        Reports the highest value of the bucket that holds that rank, clamped to the observed
        min and max, so p100 is the exact maximum and a single-valued run is exact.
        """
        if not 0 <= percent <= 100:
            raise ValueError(f"percent must be within [0, 100], got {percent}")
        if self.count == 0:
            return 0
        rank = max(1, math.ceil(percent / 100.0 * self.count))
        seen = 0
        for index, n in enumerate(self.counts):
            if n:
                seen += n
                if seen >= rank:
                    high = bucket_bounds(index)[1]
                    return max(self.min, min(high, self.max))
        return self.max

    def summary(self) -> Summary:
        mean = self.total / self.count if self.count else 0.0
        return Summary(
            count=self.count,
            min=self.min,
            max=self.max,
            mean=mean,
            p50=self.percentile(50),
            p90=self.percentile(90),
            p99=self.percentile(99),
            p999=self.percentile(99.9),
        )

    # -- transport between processes ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "buckets": {i: n for i, n in enumerate(self.counts) if n},
            "count": self.count,
            "total": self.total,
            "min": self.min,
            "max": self.max,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        histogram = cls()
        for index, n in data["buckets"].items():
            histogram.counts[int(index)] = n
        histogram.count = data["count"]
        histogram.total = data["total"]
        histogram.min = data["min"]
        histogram.max = data["max"]
        return histogram


def rate(count: int, seconds: float) -> float:
    """Events per second; 0 when nothing happened or no time passed."""
    return count / seconds if count and seconds > 0 else 0.0

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftmq.bench.stats import BUCKET_COUNT, SIGNIFICANT_BITS, LatencyHistogram, bucket_bounds, bucket_index, rate

# A bucket is at most this fraction of its smallest value wide.
RELATIVE_PRECISION = 1 / 2 ** (SIGNIFICANT_BITS - 1)
MAX_TRACKED = bucket_bounds(BUCKET_COUNT - 1)[1]

values = st.integers(min_value=0, max_value=MAX_TRACKED)
# Latencies in ns cluster over a few decades; mixing in small values exercises exact buckets.
samples = st.lists(
    st.one_of(values, st.integers(0, 2_000), st.integers(50_000, 5_000_000)), min_size=1, max_size=400
)
percents = st.one_of(st.sampled_from([0, 50, 90, 99, 99.9, 100]), st.floats(0, 100))


def nearest_rank(sorted_values: list[int], percent: float) -> int:
    rank = max(1, math.ceil(percent / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def test_buckets_tile_the_range_without_gaps() -> None:
    previous_high = -1
    for index in range(BUCKET_COUNT):
        low, high = bucket_bounds(index)
        assert low == previous_high + 1
        assert bucket_index(low) == index and bucket_index(high) == index
        assert high - low <= max(0, low * RELATIVE_PRECISION)
        previous_high = high


def test_small_values_are_exact_and_huge_values_clamp() -> None:
    for value in range(2**SIGNIFICANT_BITS):
        assert bucket_bounds(bucket_index(value)) == (value, value)
    assert bucket_index(MAX_TRACKED * 10) == BUCKET_COUNT - 1
    assert bucket_index(-5) == 0


@settings(max_examples=150, deadline=None)
@given(samples, percents)
def test_percentile_matches_a_sorted_list_within_bucket_precision(data: list[int], percent: float) -> None:
    histogram = LatencyHistogram()
    for value in data:
        histogram.record(value)
    expected = nearest_rank(sorted(data), percent)
    got = histogram.percentile(percent)
    assert bucket_index(got) == bucket_index(expected)
    assert abs(got - expected) <= expected * RELATIVE_PRECISION
    assert min(data) <= got <= max(data)


@settings(max_examples=60, deadline=None)
@given(samples, samples)
def test_merge_equals_recording_everything_in_one(first: list[int], second: list[int]) -> None:
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for value in first:
        a.record(value)
        both.record(value)
    for value in second:
        b.record(value)
        both.record(value)
    a.merge(LatencyHistogram.from_dict(b.to_dict()))
    assert a.counts == both.counts
    assert (a.count, a.total, a.min, a.max) == (both.count, both.total, both.min, both.max)


def test_summary_of_known_data() -> None:
    histogram = LatencyHistogram()
    for value in range(1, 101):  # 1..100, all exact buckets
        histogram.record(value)
    summary = histogram.summary()
    assert (summary.count, summary.min, summary.max) == (100, 1, 100)
    assert (summary.p50, summary.p90, summary.p99, summary.p999) == (50, 90, 99, 100)
    assert summary.mean == pytest.approx(50.5)
    assert histogram.percentile(0) == 1 and histogram.percentile(100) == 100


def test_empty_histogram_and_bad_percent() -> None:
    histogram = LatencyHistogram()
    assert histogram.percentile(99) == 0
    assert histogram.summary().count == 0
    with pytest.raises(ValueError):
        histogram.percentile(101)
    histogram.record(-3)  # skewed clocks: recorded as 0
    assert histogram.min == 0 and histogram.max == 0


def test_large_values_report_within_precision_and_exact_max() -> None:
    histogram = LatencyHistogram()
    for value in (1_000_000, 1_000_001, 7_654_321):
        histogram.record(value)
    assert histogram.percentile(100) == 7_654_321
    assert abs(histogram.percentile(50) - 1_000_001) <= 1_000_001 * RELATIVE_PRECISION


def test_rate() -> None:
    assert rate(100, 2.0) == 50.0
    assert rate(0, 2.0) == 0.0
    assert rate(5, 0.0) == 0.0

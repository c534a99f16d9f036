"""core.plan.partition_spans: the partition key read as one column under a known function, and the parts 256 MiB
blocks write into each partition, reckoned from the footers' row groups (``tests/integration/test_partition_spans.py``
holds the partition indexes against the engine)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.plan.partition_spans import (
    MAX_SPAN,
    key_partitions,
    partition_figures,
    partitions_of,
)
from airflow_provider_s3ch.core.plan.parts import predicted_parts
from airflow_provider_s3ch.core.sizes import MiB

UNITS = {"d": "day", "ts": "us", "n": "int", "s ms": "ms"}


def test_keys_of_one_column_under_a_known_function() -> None:
    for key, column in [("toYYYYMM(d)", "d"), ("toStartOfMonth(ts)", "ts"), ("toDate(`s ms`)", "s ms"),
                        ("n", "n"), ("`d`", "d"), ("intDiv(n, 1000)", "n"), (" toMonday( d ) ", "d"),
                        ("toStartOfInterval(d, INTERVAL 10 MONTH)", "d"),
                        ("toStartOfInterval(ts, toIntervalHour(6))", "ts"),
                        ("toStartOfInterval(`s ms`, interval 2 week)", "s ms")]:
        found = key_partitions(key, UNITS)
        assert found is not None and found[0] == column, key


def test_other_keys_are_not_read() -> None:
    for key in ["(toYYYYMM(d), n)", "cityHash64(n) % 10", "toYYYYMM(other)", "intDiv(d, 7)", "tuple()",
                "toYYYYMM(n)", "ts", "sipHash64(d)", "toYYYYMM(d) + 1", "",
                "toStartOfInterval(d, INTERVAL 1 HOUR)", "toStartOfInterval(ts, INTERVAL 1 MONTH, '2020-02-01')",
                "toStartOfInterval(ts, INTERVAL 0 DAY)", "toStartOfInterval(ts, INTERVAL 1 MILLISECOND)"]:
        assert key_partitions(key, UNITS) is None, key


@given(st.integers(-10**6, 10**6), st.integers(0, 5000))
def test_months_of_days_are_consecutive(low: int, width: int) -> None:
    _, index = key_partitions("toYYYYMM(d)", UNITS)
    span = partitions_of((low, low + width), index)
    months = {index(day) for day in range(low, low + width + 1)}
    if span is None:
        assert len(months) > MAX_SPAN or width > MAX_SPAN * 31
    else:
        assert set(span) == months


@given(st.integers(0, 200_000), st.integers(0, 5000), st.integers(1, 13))
def test_month_intervals_count_from_1900(low: int, width: int, n: int) -> None:
    """Intervals of n months begin where the months since 1900-01 are a multiple of n; n = 1 is toStartOfMonth."""
    _, interval = key_partitions(f"toStartOfInterval(d, INTERVAL {n} MONTH)", UNITS)
    _, month = key_partitions("toStartOfMonth(d)", UNITS)
    for day in (low, low + width):
        assert interval(day) == (month(day) - 1900 * 12) // n
    if n == 1:
        assert len(partitions_of((low, low + width), interval)) == len(partitions_of((low, low + width), month))


def _window(files: list[tuple[int, tuple[int, int]]], spans: tuple[int, int]) -> KeyWindow:
    return KeyWindow(files=tuple(((size, {"n": span}),) for size, span in files), units={"n": "int"},
                     spans={"n": spans})


@given(st.lists(st.tuples(st.integers(1, 512 * MiB), st.integers(0, 200), st.integers(0, 50)), min_size=1,
                max_size=20), st.integers(1, 64) , st.integers(64 * MiB, 1024 * MiB))
def test_the_figures_are_the_parts_model_over_the_window(
    files: list[tuple[int, int, int]], blocks: int, block: int
) -> None:
    spans = [(size, (low, low + width)) for size, low, width in files]
    whole = (min(s[0] for _, s in spans), max(s[1] for _, s in spans))
    window = _window(spans, whole)
    data = blocks * block
    figures = partition_figures("n", window, data, block)
    assert figures is not None
    estimate = predicted_parts([(size, frozenset(range(s[0], s[1] + 1))) for size, s in spans], block)
    partitions = whole[1] - whole[0] + 1
    assert figures.partitions == partitions
    assert figures.partitions_per_block == round(estimate.partitions_per_block, 2)
    expected = min(float(blocks), blocks * estimate.partitions_per_block / partitions)
    assert math.isclose(figures.parts_per_partition, round(expected, 2))
    assert figures.parts_per_partition <= blocks  # a block writes at most one part into a partition


def test_one_partition_and_unknowns() -> None:
    one = partition_figures("", None, 10 * 256 * MiB, 256 * MiB)
    assert one is not None and (one.partitions, one.parts_per_partition, one.part_bytes) == (1, 10.0, 256 * MiB)
    assert partition_figures(None, None, 10 * 256 * MiB, 256 * MiB) is None  # a Distributed table
    assert partition_figures("n", None, 10 * 256 * MiB, 256 * MiB) is None  # no footers
    no_stats = KeyWindow(files=(((64 * MiB, {}),),), units={"n": "int"}, spans={"n": (0, 9)})
    assert partition_figures("n", no_stats, 10 * 256 * MiB, 256 * MiB) is None  # a row group without statistics
    empty = _window([(0, (0, 9))], (0, 9))
    assert partition_figures("n", empty, 10 * 256 * MiB, 256 * MiB) is None  # row groups of no bytes
    too_fine = _window([(64 * MiB, (0, 10**6))], (0, 10**6))
    assert partition_figures("n", too_fine, 10 * 256 * MiB, 256 * MiB) is None


@given(st.integers(-30_000, 60_000), st.sampled_from([("ms", 10**3), ("us", 10**6), ("ns", 10**9)]))
def test_a_timestamps_last_unit_of_a_day_stays_in_its_day(day: int, unit: tuple[str, int]) -> None:
    """Integer arithmetic: 31622399999999998 ns is 1971-01-01 23:59:59.999999998, not the next day (a float says so)."""
    name, per_second = unit
    _, index = key_partitions("toDate(ts)", {"ts": name})
    start = day * 86400 * per_second
    assert (index(start - 1), index(start), index(start + 86400 * per_second - 1)) == (day - 1, day, day)

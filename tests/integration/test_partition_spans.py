"""The partition indexes the block rule reckons (core.plan.partition_spans) against the engine: over a range of a
column's raw Parquet values (days, or ms/us/ns timestamps), the partitions ClickHouse's own function puts them in
are exactly those the rule counts."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.plan.partition_spans import _FUNCTIONS, MAX_SPAN, key_partitions, partitions_of
from airflow_provider_s3ch.local import LocalStack

#: How the engine reads a raw value of each unit (as a Parquet reader would: days, or a timestamp in UTC).
RAW = {
    "day": "addDays(toDate32('1970-01-01'), {})",
    "ms": "fromUnixTimestamp64Milli(toInt64({}), 'UTC')",
    "us": "fromUnixTimestamp64Micro(toInt64({}), 'UTC')",
    "ns": "fromUnixTimestamp64Nano(toInt64({}), 'UTC')",
}
PER_DAY = {"day": 1, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
#: 1971-01-01 to 2099-12-31, in days.
DAYS = (365, 47_481)


def _points(low: int, high: int, step: int) -> list[int]:
    """Every value where a partition may begin (each multiple of ``step``), and the ends."""
    first = -(-low // step) * step
    return sorted({low, high, *range(first, high + 1, step)})


def _engine_partitions(stack: LocalStack, call: str, unit: str, points: list[int]) -> int:
    """The partitions the engine's ``call`` (``{}`` for the value) puts ``points`` of ``unit`` in."""
    return stack.clickhouse_client().execute(
        f"SELECT uniqExact({call.format(RAW[unit].format('p'))}) FROM (SELECT arrayJoin(%(p)s) AS p)", {"p": points},
    )[0][0]


@pytest.mark.parametrize("unit", sorted(RAW))
@pytest.mark.parametrize("function", sorted(_FUNCTIONS))
@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_partitions_of_a_range_are_the_engines(stack: LocalStack, function: str, unit: str,
                                                   data: st.DataObject) -> None:
    found = key_partitions(f"{function}(c)", {"c": unit})
    if found is None:  # toStartOfHour of a date: an hour index of a day is no partition the engine makes
        assert function == "tostartofhour" and unit == "day"
        return
    _, index = found
    day = data.draw(st.integers(*DAYS))
    width_days = data.draw(st.integers(0, 400 if unit == "day" else 40))
    low = day * PER_DAY[unit] + data.draw(st.integers(0, PER_DAY[unit] - 1))
    high = low + width_days * PER_DAY[unit] + data.draw(st.integers(0, PER_DAY[unit] - 1))
    name = {f.lower(): f for f in ("toYYYYMM", "toStartOfMonth", "toYear", "toStartOfYear", "toYYYYMMDD", "toDate",
                                   "toDate32", "toStartOfDay", "toMonday", "toStartOfWeek", "toStartOfQuarter",
                                   "toStartOfHour")}[function]
    points = _points(low, high, 1 if unit == "day" else PER_DAY[unit] // 24)  # each day; each hour
    engine = _engine_partitions(stack, name + "({})", unit, points)
    span = partitions_of((low, high), index)
    assert span is not None and len(span) == engine, (function, unit, low, high)


#: toStartOfInterval's kinds, with the step at which a partition may begin (in seconds; days for the date kinds).
INTERVAL_KINDS = {"YEAR": 86_400, "QUARTER": 86_400, "MONTH": 86_400, "WEEK": 86_400, "DAY": 86_400, "HOUR": 3_600,
                  "MINUTE": 60, "SECOND": 1}


@pytest.mark.parametrize("unit", sorted(RAW))
@pytest.mark.parametrize("kind", sorted(INTERVAL_KINDS))
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_partitions_of_an_interval_are_the_engines(stack: LocalStack, kind: str, unit: str,
                                                       data: st.DataObject) -> None:
    """``toStartOfInterval(c, INTERVAL n KIND)``, n drawn (intervals that do not divide a year or a day included)."""
    n = data.draw(st.integers(1, 13))
    found = key_partitions(f"toStartOfInterval(c, INTERVAL {n} {kind})", {"c": unit})
    if found is None:  # an hour, a minute or a second of a date: not a partition the engine makes
        assert kind in ("HOUR", "MINUTE", "SECOND") and unit == "day"
        return
    _, index = found
    step = 1 if unit == "day" else INTERVAL_KINDS[kind] * (PER_DAY[unit] // 86_400)
    day = data.draw(st.integers(*DAYS))
    low = day * PER_DAY[unit] + data.draw(st.integers(0, PER_DAY[unit] - 1))
    high = low + data.draw(st.integers(0, 3000 if unit == "day" else 1500)) * step + data.draw(st.integers(0, step))
    engine = _engine_partitions(stack, f"toStartOfInterval({{}}, INTERVAL {n} {kind})", unit, _points(low, high, step))
    span = partitions_of((low, high), index)
    if span is None:  # past MAX_SPAN partitions the rule leaves a range unreckoned
        assert engine > MAX_SPAN, (kind, n, unit, low, high)
    else:
        assert len(span) == engine, (kind, n, unit, low, high)


def test_the_engines_own_text_of_an_interval_key_is_read(stack: LocalStack) -> None:
    """``system.tables.partition_key`` as the engine writes it back is a key the rule reads."""
    client = stack.clickhouse_client()
    client.execute("DROP TABLE IF EXISTS interval_key")
    client.execute("CREATE TABLE interval_key (d DateTime64(3)) ENGINE = MergeTree "
                   "PARTITION BY toStartOfInterval(d, INTERVAL 10 MONTH) ORDER BY d")
    try:
        key = client.execute("SELECT partition_key FROM system.tables WHERE database = currentDatabase() "
                             "AND name = 'interval_key'")[0][0]
        found = key_partitions(key, {"d": "ms"})
        assert found is not None and found[0] == "d", key
    finally:
        client.execute("DROP TABLE interval_key")

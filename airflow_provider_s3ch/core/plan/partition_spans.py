"""How many partitions an insert block spans, from the Parquet footers' ranges of the partition key's column.

The block rule (:func:`~airflow_provider_s3ch.core.plan.settings.block_size`) grows the block past ClickHouse's
256 MiB only where, at 256 MiB, the insert would write many small parts into each partition: there ClickHouse
merges them beside the insert, and a larger block writes fewer (docs/benchmarks.md, "The parts an insert writes").
What decides it is how the rows fall into partitions in the order they are read, which the files' names and sizes
do not say. The Parquet footers do: each row group's smallest and largest value of every integer column (dates and
timestamps included), in file order.

:func:`key_partitions` turns the table's partition key, where it is one column under a monotonic function
ClickHouse's tables are commonly partitioned by (``toYYYYMM(d)``, ``toDate(ts)``, ``intDiv(id, 1000)``,
``toStartOfInterval(d, INTERVAL 10 MONTH)``, the column itself...), into the partitions a range of that column's
raw values falls in. :func:`partition_figures`
reckons, over the first files in read order (:class:`KeyWindow`, read with the footers), the partitions each
256 MiB block spans (:func:`~airflow_provider_s3ch.core.plan.parts.predicted_parts`), and from the key's whole range
the partitions the load touches: so the parts a partition gets and their size. For a text load the window is a
sample of the first rows of the first and last files (:mod:`airflow_provider_s3ch.core.key_sample`): a block spans
the partitions the key moves through over its bytes, as it moved over the sample's. A key it cannot read (several
columns, another function, a column without statistics, a format neither footers nor a sample read) gives None,
and the rule keeps ClickHouse's block.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.plan.parts import predicted_parts
from airflow_provider_s3ch.core.sizes import MiB

#: A row group whose range falls in more partitions than this is left unreckoned: ClickHouse refuses an insert
#: block of more than ``max_partitions_per_insert_block`` (100) partitions anyway, and a set this large says the
#: key is finer than the rule can use.
MAX_SPAN = 1000

_EPOCH = datetime.date(1970, 1, 1).toordinal()

#: Raw units per second of a timestamp column (integers: a float loses the last units of a nanosecond timestamp).
_PER_SECOND = {"ms": 10**3, "us": 10**6, "ns": 10**9}


#: 2000-01-01 in each unit: a value every function of a unit it reads gives an index for.
_PROBE = {"day": 10_957, "int": 10_957, **{unit: 946_684_800 * per for unit, per in _PER_SECOND.items()}}


@dataclass(frozen=True)
class PartitionFigures:
    """What one block size makes of the load's partitions."""

    block: int
    #: Partitions a block spans on average (parts it writes).
    partitions_per_block: float
    #: Partitions the load touches.
    partitions: int
    #: Parts each partition gets over the whole load.
    parts_per_partition: float
    #: The mean part's uncompressed bytes.
    part_bytes: int
    #: Where the figures come from, for the plan's reason.
    source: str


def _day(value: int, unit: str) -> int | None:
    if unit == "day":
        return value
    if unit in _PER_SECOND:
        return value // (86400 * _PER_SECOND[unit])
    return None


def _date(days: int) -> datetime.date:
    return datetime.date.fromordinal(max(1, min(_EPOCH + days, datetime.date.max.toordinal())))


def _month(value: int, unit: str) -> int | None:
    day = _day(value, unit)
    return None if day is None else _date(day).year * 12 + _date(day).month - 1


def _quarter(value: int, unit: str) -> int | None:
    month = _month(value, unit)
    return None if month is None else month // 3


def _year(value: int, unit: str) -> int | None:
    day = _day(value, unit)
    return None if day is None else _date(day).year


def _week(value: int, unit: str) -> int | None:
    day = _day(value, unit)
    return None if day is None else (day + 3) // 7  # weeks from a Monday: 1970-01-01 was a Thursday


def _sunday_week(value: int, unit: str) -> int | None:
    day = _day(value, unit)
    return None if day is None else (day + 4) // 7  # toStartOfWeek's default mode 0: weeks from a Sunday


def _seconds(value: int, unit: str) -> int | None:
    return value // _PER_SECOND[unit] if unit in _PER_SECOND else None


def _hour(value: int, unit: str) -> int | None:
    seconds = _seconds(value, unit)
    return None if seconds is None else seconds // 3600


def _months_since_1900(value: int, unit: str) -> int | None:
    month = _month(value, unit)
    return None if month is None else month - 1900 * 12


def _monday_days(value: int, unit: str) -> int | None:
    day = _day(value, unit)
    return None if day is None else day - 4  # 1970-01-05 was a Monday


def _interval(kind: str, n: int) -> Callable[[int, str], int | None] | None:
    """``toStartOfInterval(c, INTERVAL n kind)`` without an origin, as the engine reckons it: months counted from
    1900-01 (so 10-month intervals begin in 1970-01, 7-month ones do not), years as multiples of ``n``, weeks from
    Monday 1970-01-05, days from 1970-01-01, hours from each midnight, minutes and seconds from the epoch (UTC).
    Values before those origins are left unreckoned (the engine's integer division rounds them the other way)."""
    def counted(base: Callable[[int, str], int | None], width: int) -> Callable[[int, str], int | None]:
        def index(value: int, unit: str) -> int | None:
            count = base(value, unit)
            return None if count is None or count < 0 else count // width
        return index

    if kind == "hour":  # hours counted from each midnight: 5-hour intervals end a day with one of 4 hours
        per_day = -(-24 // n)

        def hours(value: int, unit: str) -> int | None:
            seconds = _seconds(value, unit)
            if seconds is None or seconds < 0:
                return None
            return seconds // 86400 * per_day + seconds % 86400 // 3600 // n
        return hours
    by = {"year": (_year, n), "quarter": (_months_since_1900, 3 * n), "month": (_months_since_1900, n),
          "week": (_monday_days, 7 * n), "day": (_day, n), "minute": (_seconds, 60 * n), "second": (_seconds, n)}
    return counted(*by[kind]) if kind in by else None


def _itself(value: int, unit: str) -> int | None:
    return value if unit in ("int", "day") else None


#: Monotonic functions of one column, each as the partition index of a raw value in its unit.
_FUNCTIONS: dict[str, Callable[[int, str], int | None]] = {
    "toyyyymm": _month, "tostartofmonth": _month, "toyear": _year, "tostartofyear": _year,
    "toyyyymmdd": _day, "todate": _day, "todate32": _day, "tostartofday": _day,
    "tomonday": _week, "tostartofweek": _sunday_week, "tostartofquarter": _quarter, "tostartofhour": _hour,
}

_NAME = r"`(?P<q{n}>[^`]+)`|(?P<c{n}>[A-Za-z_][A-Za-z0-9_]*)"
_CALL = re.compile(rf"^\s*(?P<f>[A-Za-z_][A-Za-z0-9_]*)\s*\(\s*(?:{_NAME.format(n=1)})\s*\)\s*$")
_BARE = re.compile(rf"^\s*(?:{_NAME.format(n=1)})\s*$")
_INTERVAL = re.compile(
    rf"^\s*toStartOfInterval\s*\(\s*(?:{_NAME.format(n=1)})\s*,\s*(?:INTERVAL\s+(?P<n1>[1-9][0-9]*)\s+(?P<k1>[A-Za-z]+)"
    rf"|toInterval(?P<k2>[A-Za-z]+)\s*\(\s*(?P<n2>[1-9][0-9]*)\s*\))\s*\)\s*$", re.IGNORECASE)
_DIV = re.compile(rf"^\s*intDiv\s*\(\s*(?:{_NAME.format(n=1)})\s*,\s*(?P<d>[1-9][0-9]*)\s*\)\s*$")


def _column(match: re.Match[str]) -> str:
    return match.group("q1") or match.group("c1")


def _parse(partition_key: str) -> tuple[str, Callable[[int, str], int | None]] | None:
    """The key's column and the partition index of a raw value in a unit; None for a key this module cannot read."""
    function: Callable[[int, str], int | None]
    if (match := _DIV.match(partition_key)) is not None:
        divisor = int(match.group("d"))

        def function(value: int, unit: str) -> int | None:
            return value // divisor if unit == "int" else None

        return _column(match), function
    if (match := _INTERVAL.match(partition_key)) is not None:
        kind = (match.group("k1") or match.group("k2")).lower()
        interval = _interval(kind[:-1] if kind.endswith("s") else kind, int(match.group("n1") or match.group("n2")))
        return None if interval is None else (_column(match), interval)
    if (match := _CALL.match(partition_key)) is not None and match.group("f").lower() in _FUNCTIONS:
        return _column(match), _FUNCTIONS[match.group("f").lower()]
    if (match := _BARE.match(partition_key)) is not None and match.group("c1") != "tuple":
        return _column(match), _itself
    return None


def key_column(partition_key: str) -> str | None:
    """The one column of a partition key this module reads (:func:`key_partitions`); None for another key."""
    parsed = _parse(partition_key)
    return parsed[0] if parsed is not None else None


def key_partitions(partition_key: str, units: dict[str, str]) -> tuple[str, Callable[[int], int | None]] | None:
    """The partition key's column and the partition index of one of its raw values (consecutive partitions,
    consecutive indexes).

    :param partition_key: the table's ``partition_key`` as ``system.tables`` gives it.
    :param units: the files' integer columns' units (:class:`KeyWindow`).
    :return: None where the key is not one column the files hold under a function this module knows.
    """
    parsed = _parse(partition_key)
    if parsed is None:
        return None
    column, function = parsed
    unit = units.get(column)
    if unit is None or function(_PROBE.get(unit, 0), unit) is None:
        return None
    return column, lambda value: function(value, unit)


def partitions_of(span: tuple[int, int], index: Callable[[int], int | None]) -> range | None:
    """The partitions (indexes) a range of raw values falls in; None past :data:`MAX_SPAN` or unreadable."""
    first, last = index(span[0]), index(span[1])
    if first is None or last is None or last < first or last - first >= MAX_SPAN:
        return None
    return range(first, last + 1)


def partition_figures(partition_key: str | None, window: KeyWindow | None, data_bytes: int,
                      block: int) -> PartitionFigures | None:
    """The parts an insert of ``data_bytes`` with ``block``-byte blocks writes into each partition, and their size.

    A table without a partition key has one partition: every block is one part. Otherwise the figures come from
    the footers' window (:class:`KeyWindow`): the partitions a block spans from its row groups in read order, the
    partitions the load touches from the column's range over every footer read (every partition in it counted);
    or from a text load's sample (``sampled_rows``: :func:`_sampled_per_block`, and the sample's bytes in memory in
    place of ``data_bytes``); None when the key, the footers or the sample cannot say.

    :param partition_key: the target's ``partition_key`` (``""``: none); None when unknown (a Distributed table).
    :param window: the footers' or the sample's figures; None when none were read.
    :param data_bytes: the uncompressed bytes one node inserts.
    :param block: ``min_insert_block_size_bytes``.
    """
    if partition_key is None or data_bytes <= 0 or block <= 0:
        return None
    if window is not None and window.data_bytes:  # a sample's estimate of the bytes in memory
        data_bytes = window.data_bytes
    blocks = max(1, math.ceil(data_bytes / block))
    if partition_key.strip() in ("", "tuple()"):
        return PartitionFigures(block, 1.0, 1, float(blocks), min(block, data_bytes), "the table has one partition")
    if window is None or not window.files:
        return None
    found = key_partitions(partition_key, window.units)
    if found is None or found[0] not in window.spans:
        return None
    column, index = found
    whole = partitions_of(window.spans[column], index)
    per_block = (_sampled_per_block if window.sampled_rows else _footers_per_block)(window, column, index, block)
    if whole is None or per_block is None or per_block <= 0:  # row groups of no bytes: nothing to reckon from
        return None
    source = (f"a sample: `{column}` in the first {window.sampled_rows // len(window.files):,} rows of the first and "
              f"last files, ~{data_bytes / MiB:,.0f} MiB in memory" if window.sampled_rows else
              f"the footers: `{column}` in the row groups of the first {len(window.files)} files read, and")
    return PartitionFigures(
        block, round(per_block, 2), len(whole), round(min(float(blocks), blocks * per_block / len(whole)), 2),
        int(min(block, data_bytes) / per_block), f"{source} over {len(whole)} partitions",
    )


def _footers_per_block(window: KeyWindow, column: str, index: Callable[[int], int | None], block: int) -> float | None:
    """The partitions a block spans from the footers' row groups in read order (the parts model)."""
    groups: list[tuple[int, frozenset[int]]] = []
    for file in window.files:
        for size, ranges in file:
            spanned = partitions_of(ranges[column], index) if column in ranges else None
            if spanned is None:
                return None
            groups.append((size, frozenset(spanned)))
    return predicted_parts(groups, block).partitions_per_block if groups else None


def _sampled_per_block(window: KeyWindow, column: str, index: Callable[[int], int | None], block: int) -> float | None:
    """The partitions a block spans from a sample (:mod:`airflow_provider_s3ch.core.key_sample`): each sampled
    file's first rows move the key so far over so many bytes; a block read on from there moves it ``block`` / bytes
    as far (within the load's range), and spans the partitions of that stretch. Averaged over the files sampled."""
    bottom, top = window.spans[column]
    spans = []
    for (size, ranges), *_ in window.files:
        low, high = ranges[column]
        width = min(top - bottom, (high - low) * block // max(1, size))
        start = max(bottom, min(low, top - width))
        spanned = partitions_of((start, start + width), index)
        if spanned is None:
            return None
        spans.append(len(spanned))
    return sum(spans) / len(spans)

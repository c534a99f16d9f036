"""A sample of a text load's rows: the block rule's input where no Parquet footers say how rows fall in partitions.

A gzip'd CSV file carries no statistics. Two reads stand in for them, both cheap beside a load of hundreds of
MiB (:data:`SAMPLE_FROM_BYTES`):

- the engine reads the first :data:`SAMPLE_ROWS` rows of the first and the last file (the load's own ``s3()``
  source, one file each: :func:`render_key_sample`), and answers, for each, the smallest and largest raw value of
  the partition key's column as the table types it, and the rows' bytes in memory (``byteSize(*)``);
- the worker reads the first :data:`HEAD_BYTES` of the first file (one ranged GET) and counts its rows per byte of
  file (:func:`rows_per_file_byte`: newline-delimited formats only).

Together they give the load's bytes in memory (rows per file byte x bytes a row x the files' bytes), the key's
range over the load (from the first file's first rows to the last file's) and how far the key moves per byte
read (:class:`~airflow_provider_s3ch.core.key_window.KeyWindow` with ``sampled``;
:func:`~airflow_provider_s3ch.core.plan.partition_spans.partition_figures` reckons the parts from it). Where any
of it cannot be read (another format or compression, a column the files do not name, a type that is not a date,
a time or an integer) there is no sample, and the rule keeps ClickHouse's block.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

from airflow_provider_s3ch.core.glob import key_url, split_archive
from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.manifest import first_file
from airflow_provider_s3ch.core.models import LoadPlan, Manifest, S3Object, SettingValue
from airflow_provider_s3ch.core.plan.partition_spans import key_column
from airflow_provider_s3ch.core.plan.settings import data_estimate
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sizes import MiB
from airflow_provider_s3ch.core.sql import RenderedSQL, S3Credentials, quote_identifier, render_source, rendered

#: A text load is sampled from this many bytes in memory (the plan's estimate) up, as Parquet's footers are read for
#: the rule from 512 MiB of files (:data:`~airflow_provider_s3ch.core.manifest.WINDOW_FROM_BYTES`): below it the data
#: cap keeps the block at 128 MiB or less, and the small-block rule has nothing to change.
SAMPLE_FROM_BYTES = 512 * MiB

#: Rows the engine reads from the start of each sampled file.
SAMPLE_ROWS = 20_000

#: How the engine reads the sample: one download stream of 1 MiB buffers and no parallel parsing, so that it reads
#: little more than the rows it answers from (ClickHouse's defaults read ahead tens of MiB a file). On the ladder's
#: 1 GB of gzip'd CSV the statement took 1.0-1.2 s with the defaults (25,000 rows of schema inference, no cache),
#: 0.51-0.57 s with 100 rows of inference (the schema check's, :func:`~airflow_provider_s3ch.core.schema.
#: describe_settings`) and 0.20-0.21 s with these too (docs/benchmarks.md).
SAMPLE_READ_SETTINGS: dict[str, SettingValue] = {
    "input_format_parallel_parsing": 0, "max_download_threads": 1, "max_download_buffer_size": 1 * MiB,
}

#: Bytes of the first file the worker reads to count its rows per byte of file.
HEAD_BYTES = 1 * MiB

#: Formats whose rows end at a newline (a CSV field with a newline in quotes counts twice: more rows, more bytes,
#: so more parts reckoned, and the rule errs towards ClickHouse's block).
LINE_FORMATS = frozenset(name.lower() for name in (
    "CSV", "CSVWithNames", "CSVWithNamesAndTypes", "TSV", "TSVWithNames", "TSVWithNamesAndTypes", "TabSeparated",
    "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes", "TSVRaw", "JSONEachRow", "JSONLines", "NDJSON",
    "JSONCompactEachRow", "JSONStringsEachRow",
))

_DECOMPRESSORS: dict[str, Callable[[], Callable[[bytes], bytes]]] = {
    "": lambda: lambda data: data,
    "gzip": lambda: zlib.decompressobj(47).decompress, "deflate": lambda: zlib.decompressobj(47).decompress,
    "bz2": lambda: bz2.BZ2Decompressor().decompress, "xz": lambda: lzma.LZMADecompressor().decompress,
}

_WRAPPED = re.compile(r"^(?:Nullable|LowCardinality)\((?P<inner>.*)\)$")
_INTEGER = re.compile(r"^U?Int(?:8|16|32|64)$")


def _decompressor(compression: str | None) -> Callable[[], Callable[[bytes], bytes]] | None:
    """What reads a file's first bytes as text (none, gzip, deflate, bz2, xz); None for another compression."""
    method = (compression or "none").lower()
    return _DECOMPRESSORS.get("" if method == "none" else method)


def samples(fmt: str, compression: str | None) -> bool:
    """Whether a load of ``fmt`` files with ``compression`` can be sampled (:data:`LINE_FORMATS`, a compression
    the worker reads)."""
    return fmt.lower() in LINE_FORMATS and _decompressor(compression) is not None


class SampleTarget(NamedTuple):
    """What a sample reads: the key's column, and the first and last files (with their URLs as the plan reads)."""

    column: str
    first: S3Object
    urls: tuple[str, ...]


def sample_target(plan: LoadPlan, manifest: Manifest, table: TableInfo) -> SampleTarget | None:
    """What to sample for the block rule; None where no sample is wanted: a load of one node into a partitioned
    table that exists, by a key of one column (:func:`~airflow_provider_s3ch.core.plan.partition_spans.key_column`),
    of :data:`LINE_FORMATS` files with no footers read, of at least :data:`SAMPLE_FROM_BYTES` in memory as the plan
    estimates them."""
    if plan.strategy != "single" or table.is_distributed or not table.exists or manifest.key_window is not None:
        return None
    if split_archive(manifest.pattern)[1] is not None:  # files in archives: the first bytes are the archive's
        return None
    column = key_column(table.partition_key)  # None for no key, tuple() and keys the rule cannot read
    if column is None or manifest.uncompressed_bytes or not samples(plan.format, plan.compression):
        return None
    first = first_file(manifest.objects)
    last = next((o for o in reversed(manifest.objects) if o.size > 0), None)
    if first is None or last is None or data_estimate(manifest, plan.format, plan.compression)[0] < SAMPLE_FROM_BYTES:
        return None
    keys = [first.key] if last.key == first.key else [first.key, last.key]
    return SampleTarget(column, first, tuple(key_url(plan.source_url, manifest.pattern, key) for key in keys))


def rows_per_file_byte(head: bytes, compression: str | None) -> float | None:
    """Rows per byte of file in ``head`` (the first bytes of a file, or all of it): its newlines over its bytes;
    None when it holds no whole row or does not decompress."""
    decompress = _decompressor(compression)
    if decompress is None or not head:
        return None
    try:
        text = decompress()(head)
    except (zlib.error, OSError, lzma.LZMAError, EOFError):
        return None
    rows = text.count(b"\n")
    return rows / len(head) if rows else None


def raw_expression(column: str, type_: str) -> tuple[str, str] | None:
    """The raw integer the partition rule reckons with, of ``column`` cast to the table's ``type_``, and its
    unit (``day``, ``ms`` or ``int``); None for a type that is not a date, a time or an integer."""
    base = type_
    while (match := _WRAPPED.match(base)) is not None:
        base = match.group("inner")
    cast = f"CAST({quote_identifier(column)} AS {type_})"
    if base in ("Date", "Date32"):
        return f"toInt32({cast})", "day"
    if base == "DateTime" or base.startswith("DateTime("):
        return f"toInt64(toUnixTimestamp({cast})) * 1000", "ms"
    if base.startswith("DateTime64("):
        return f"toUnixTimestamp64Milli({cast})", "ms"
    if _INTEGER.match(base):
        return f"toInt64({cast})", "int"
    return None


def render_key_sample(plan: LoadPlan, credentials: S3Credentials | None, urls: Sequence[str], expression: str,
                      settings: dict[str, SettingValue] | None = None) -> RenderedSQL:
    """``SELECT`` of each file in ``urls`` (the load's own source, one file each): its index, the smallest and
    largest ``expression`` of its first :data:`SAMPLE_ROWS` rows, their bytes in memory and their count. It reads
    with :data:`SAMPLE_READ_SETTINGS`, under ``settings`` (the schema check's: the user's format settings apply)."""

    def statement(redact: bool) -> str:
        parts = []
        for i, url in enumerate(urls):
            one = plan.model_copy(update={"source_url": url, "strategy": "single"})
            parts.append(f"SELECT {i} AS f, min(k), max(k), sum(b), count() FROM (SELECT {expression} AS k, "
                         f"byteSize(*) AS b FROM {render_source(one, credentials, redact=redact)} "
                         f"LIMIT {SAMPLE_ROWS})")
        return " UNION ALL ".join(parts)

    return rendered(statement, {**SAMPLE_READ_SETTINGS, **(settings or {})}, credentials)


def sampled_window(column: str, unit: str, rows: Sequence[Sequence[object]], *, rows_per_byte: float,
                   file_bytes: int) -> KeyWindow | None:
    """The :class:`KeyWindow` of a sample: each sampled file (in read order) as one row group of its first rows'
    bytes and the key's range, the key's range over them all, and the load's bytes in memory.

    :param rows: :func:`render_key_sample`'s answer.
    :param rows_per_byte: :func:`rows_per_file_byte` of the first file.
    :param file_bytes: the load's bytes of file.
    """
    read = [(int(f), int(low), int(high), int(size), int(count))  # type: ignore[call-overload]
            for f, low, high, size, count in rows if count and low is not None and high is not None]
    read.sort()
    if not read or len(read) != len(rows) or rows_per_byte <= 0:
        return None
    size, count = sum(r[3] for r in read), sum(r[4] for r in read)
    if size <= 0:
        return None
    return KeyWindow(
        files=tuple(((r[3], {column: (r[1], r[2])}),) for r in read),
        units={column: unit},
        spans={column: (min(r[1] for r in read), max(r[2] for r in read))},
        data_bytes=int(file_bytes * rows_per_byte * size / count),
        sampled_rows=count,
    )

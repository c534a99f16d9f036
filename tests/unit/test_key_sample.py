"""A text load's sample (core.key_sample) and the block it chooses: 64 MiB where, at 64 MiB, the insert would
write fewer than 6 parts a partition; ClickHouse's 256 MiB where it would write more, or where nothing was sampled.
The engine's side (the raw values, the partitions, the bytes) is held in tests/integration/test_key_sample.py."""

from __future__ import annotations

import bz2
import datetime
import gzip
import lzma

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.key_sample import (
    SAMPLE_FROM_BYTES,
    SAMPLE_ROWS,
    raw_expression,
    render_key_sample,
    rows_per_file_byte,
    sample_target,
    sampled_window,
    samples,
)
from airflow_provider_s3ch.core.plan.partition_spans import partition_figures
from airflow_provider_s3ch.core.plan.settings import (
    DEFAULT_BLOCK_BYTES,
    MANY_PARTS_PER_PARTITION,
    MIN_DATA_BLOCK_BYTES,
)
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sizes import GiB, MiB
from airflow_provider_s3ch.core.sql import S3Credentials
from tests.unit.test_planner import manifest, plan, profile, request

DAY = datetime.date(2008, 7, 1).toordinal() - datetime.date(1970, 1, 1).toordinal()
CREDS = S3Credentials(access_key_id="AKIAEXAMPLE", secret_access_key="s3cr3t-never-shown")


@pytest.mark.parametrize("compression", [None, "gzip", "bz2", "xz"])
@given(lines=st.lists(st.text("abc,1234567890", min_size=1, max_size=60), min_size=1, max_size=300))
def test_rows_per_byte_are_the_heads_newlines_over_its_bytes(compression: str | None, lines: list[str]) -> None:
    text = "".join(f"{line}\n" for line in lines).encode()
    head = {None: lambda b: b, "gzip": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[compression](text)
    assert rows_per_file_byte(head, compression) == pytest.approx(len(lines) / len(head))


def test_a_head_cut_short_still_counts_its_whole_rows() -> None:
    head = gzip.compress(b"1,2\n" * 100_000)[:2_000]
    rate = rows_per_file_byte(head, "gzip")
    assert rate is not None and rate > 0


def test_no_rate_without_rows_or_from_bytes_that_do_not_decompress() -> None:
    assert rows_per_file_byte(b"", "gzip") is None
    assert rows_per_file_byte(b"no newline", None) is None
    assert rows_per_file_byte(b"not gzip at all\n", "gzip") is None
    assert rows_per_file_byte(b"x\n", "zstd") is None


@pytest.mark.parametrize(("type_", "unit"), [
    ("Date", "day"), ("Date32", "day"), ("Nullable(Date)", "day"), ("DateTime", "ms"), ("DateTime('UTC')", "ms"),
    ("DateTime64(3)", "ms"), ("DateTime64(6, 'UTC')", "ms"), ("LowCardinality(Nullable(UInt32))", "int"),
    ("Int64", "int"), ("UInt8", "int"),
])
def test_the_raw_value_casts_the_column_to_the_tables_type(type_: str, unit: str) -> None:
    found = raw_expression("Creation Date", type_)
    assert found is not None and found[1] == unit
    assert f"CAST(`Creation Date` AS {type_})" in found[0]


@pytest.mark.parametrize("type_", ["String", "Float64", "UUID", "Decimal(10, 2)", "Array(Date)"])
def test_no_raw_value_for_other_types(type_: str) -> None:
    assert raw_expression("d", type_) is None


def test_the_samples_statement_reads_each_file_once_and_never_shows_the_secret() -> None:
    p = plan(request(s3_uri="s3://bucket/data/*.csv.gz"), manifest(fmt="CSVWithNames", compression="gzip"))
    sql = render_key_sample(p, CREDS, ["http://s3/bucket/data/a.csv.gz", "http://s3/bucket/data/z.csv.gz"],
                            "toInt32(CAST(`d` AS Date))", {"format_csv_delimiter": ";"})
    assert sql.sql.count(f"LIMIT {SAMPLE_ROWS}") == 2 and sql.sql.count("UNION ALL") == 1
    assert "byteSize(*)" in sql.sql and "a.csv.gz" in sql.sql and "z.csv.gz" in sql.sql
    assert sql.settings["format_csv_delimiter"] == ";"
    assert "s3cr3t-never-shown" in sql.sql and "s3cr3t-never-shown" not in sql.redacted


def _table(key: str = "toYYYYMM(d)", **kw: object) -> TableInfo:
    return TableInfo(database="db", name="events", engine="MergeTree", partition_key=key, **kw)  # type: ignore[arg-type]


def _csv(total: int = GiB, files: int = 20) -> tuple[object, object]:
    man = manifest(files=files, total=total, fmt="CSVWithNames", compression="gzip")
    return man, plan(request(s3_uri="s3://bucket/data/*.csv.gz"), man)


def test_a_sample_is_read_only_where_it_can_change_the_block() -> None:
    man, p = _csv()
    found = sample_target(p, man, _table())  # type: ignore[arg-type]
    assert found is not None and found.column == "d" and len(found.urls) == 2
    assert sample_target(p, man, _table("tuple()")) is None  # one partition: the blocks say it all
    assert sample_target(p, man, _table("cityHash64(d) % 8")) is None  # a key the rule cannot read
    assert sample_target(p, man, _table(exists=False)) is None  # to be created: no column types yet
    archived = man.model_copy(update={"pattern": "data/a.tar :: *.csv"})  # type: ignore[attr-defined]
    assert sample_target(p, archived, _table()) is None  # the first bytes are the archive's
    small_man, small_p = _csv(total=SAMPLE_FROM_BYTES // 8)
    assert sample_target(small_p, small_man, _table()) is None  # under 512 MiB in memory
    parquet = manifest(files=20, total=GiB)
    assert sample_target(plan(request(), parquet), parquet, _table()) is None  # footers say it
    assert samples("CSVWithNames", "gzip") and samples("JSONEachRow", None) and not samples("CSV", "zstd")
    assert not samples("Native", None)


def _window(first: tuple[int, int], last: tuple[int, int], *, sample_bytes: int = 16 * MiB,
            data: int = int(2.6 * GiB)) -> object:
    rows = [(0, first[0], first[1], sample_bytes, SAMPLE_ROWS), (1, last[0], last[1], sample_bytes, SAMPLE_ROWS)]
    rate = SAMPLE_ROWS / sample_bytes * data / GiB  # so that a GiB of file holds `data` bytes in memory
    return sampled_window("d", "day", rows, rows_per_byte=rate, file_bytes=GiB)


def test_a_sample_reckons_the_loads_bytes_in_memory_from_its_rows() -> None:
    window = _window((DAY, DAY + 20), (DAY + 3_400, DAY + 3_420))
    assert window.data_bytes == pytest.approx(2.6 * GiB, rel=1e-6)  # type: ignore[attr-defined]
    assert window.spans == {"d": (DAY, DAY + 3_420)}  # type: ignore[attr-defined]
    assert sampled_window("d", "day", [(0, None, None, 0, 0)], rows_per_byte=1.0, file_bytes=GiB) is None


@given(months=st.integers(13, 240), files_days=st.integers(1, 60))
def test_files_in_time_order_span_a_few_partitions_a_block(months: int, files_days: int) -> None:
    """Each file's first rows cover a few days: a 64 MiB block covers a few times as many, never the load."""
    top = DAY + months * 30
    window = _window((DAY, DAY + files_days), (top - files_days, top))
    figures = partition_figures("toYYYYMM(d)", window, GiB, MIN_DATA_BLOCK_BYTES)  # type: ignore[arg-type]
    last = datetime.date.fromordinal(datetime.date(1970, 1, 1).toordinal() + top)
    assert figures is not None and figures.partitions == (last.year - 2008) * 12 + last.month - 7 + 1
    assert 1 <= figures.partitions_per_block <= files_days * 4 / 28 + 2


def test_files_each_across_the_whole_range_span_every_partition() -> None:
    window = _window((DAY, DAY + 2_920), (DAY + 3, DAY + 2_919))
    figures = partition_figures("toYYYYMM(d)", window, GiB, MIN_DATA_BLOCK_BYTES)  # type: ignore[arg-type]
    assert figures is not None and figures.partitions_per_block == figures.partitions == 96
    assert figures.parts_per_partition == 42  # each of the 42 blocks of 64 MiB writes a part into each


def _block(window: object, key: str) -> tuple[int, str]:
    man, _ = _csv()
    man = man.model_copy(update={"key_window": window})  # type: ignore[attr-defined]
    p = plan(request(s3_uri="s3://bucket/data/*.csv.gz"), man, profile(cores=2, tbl=_table(key)))
    return p.settings.values["min_insert_block_size_bytes"], p.settings.reasons["min_insert_block_size_bytes"]


def test_gzip_csv_into_12_partitions_takes_64_mib_blocks() -> None:
    """The ladder's 1 GB of gzip'd CSV, 120 months in time order, into 10-month partitions: ~3 parts a partition."""
    window = _window((DAY, DAY + 20), (DAY + 3_400, DAY + 3_420))
    block, reason = _block(window, "toStartOfInterval(d, INTERVAL 10 MONTH)")
    assert block == MIN_DATA_BLOCK_BYTES
    assert "fewer than 6" in reason and "a sample: `d`" in reason and "into each of 12 partitions" in reason


def test_gzip_csv_into_one_partition_keeps_256_mib() -> None:
    window = _window((DAY, DAY + 20), (DAY + 3_400, DAY + 3_420))
    block, reason = _block(window, "tuple()")
    assert block == DEFAULT_BLOCK_BYTES and "bought no speed" in reason


def test_more_data_a_partition_keeps_256_mib() -> None:
    """3 GB (7.8 GiB in memory) into 12 partitions: ~10 parts a partition at 64 MiB."""
    window = _window((DAY, DAY + 7), (DAY + 3_400, DAY + 3_407), data=int(7.8 * GiB))
    figures = partition_figures("toStartOfInterval(d, INTERVAL 10 MONTH)", window, GiB,  # type: ignore[arg-type]
                                MIN_DATA_BLOCK_BYTES)
    assert figures is not None and figures.parts_per_partition >= MANY_PARTS_PER_PARTITION
    block, _ = _block(window, "toStartOfInterval(d, INTERVAL 10 MONTH)")
    assert block == DEFAULT_BLOCK_BYTES


def test_without_a_sample_the_block_is_as_before() -> None:
    block, reason = _block(None, "toYYYYMM(d)")
    assert block == DEFAULT_BLOCK_BYTES and "not known" in reason

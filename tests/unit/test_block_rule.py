"""The block rule past ClickHouse's 256 MiB: only for files clustered by the partition key, or beyond the size
ladder when the files' spread is unknown; the spread itself from the files' ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.manifest import SPREAD_FROM_BYTES, SPREAD_SAMPLE, column_spread, spread_sample
from airflow_provider_s3ch.core.models import S3Object
from airflow_provider_s3ch.core.plan.settings import (
    CLUSTERED_SPREAD,
    DEFAULT_BLOCK_BYTES,
    LADDER_TOP_BYTES,
    clustering,
    key_columns,
)
from airflow_provider_s3ch.core.sizes import GiB, MiB
from tests.unit.test_planner import distributed_table, footer_manifest, plan, profile, request, table

MONTHLY = "toYYYYMM(CreationDate)"


def block_of(uncompressed: int, spread: dict[str, float] | None, key: str = MONTHLY, **tbl: object) -> tuple[int, str]:
    """The plan's block and its reason: 8 cores (4 threads), a 32 GiB cap, Parquet whose footers say
    ``uncompressed`` bytes and ``spread``."""
    man = footer_manifest(64 * MiB, uncompressed, files=40, total=uncompressed // 3).model_copy(
        update={"column_spread": spread, "spread_files": 6 if spread is not None else 0})
    p = plan(request(memory_cap="32GiB"), man, profile(cores=8, tbl=table(partition_key=key, **tbl)))
    return p.settings.values["min_insert_block_size_bytes"], p.settings.reasons["min_insert_block_size_bytes"]


def test_files_spanning_every_partition_keep_clickhouses_256_mib() -> None:
    """The ladder's shape: every file across the whole range; the data cap would be 512 MiB."""
    block, reason = block_of(8 * GiB, {"CreationDate": 1.0, "Id": 0.2})
    assert block == DEFAULT_BLOCK_BYTES
    assert "not clustered" in reason and "100% of the data's range of CreationDate" in reason
    assert "size ladder" in reason and "data cap" in reason


def test_clustered_files_grow_the_block_with_the_data() -> None:
    """The 3.3 GB dataset's shape: each file 24 of 96 months."""
    block, reason = block_of(8 * GiB, {"CreationDate": 0.25})
    assert block == 8 * GiB // (4 * 4)
    assert "clustered by the partition key" in reason and "25%" in reason and "1.6-1.9x" in reason


def test_unknown_spread_keeps_256_mib_within_the_ladder_and_the_guide_beyond() -> None:
    small, reason = block_of(LADDER_TOP_BYTES, None)
    assert small == DEFAULT_BLOCK_BYTES and "unknown" in reason
    big, reason = block_of(4 * LADDER_TOP_BYTES, None)
    assert big > DEFAULT_BLOCK_BYTES and "bigger than the size ladder measured" in reason


def test_a_table_without_partitions_or_with_a_scattering_key_is_unknown() -> None:
    for key in ("", "tuple()", "cityHash64(UserId) % 16", "intHash32(Id)"):
        block, reason = block_of(8 * GiB, {"CreationDate": 0.05, "UserId": 0.05, "Id": 0.05}, key=key)
        assert block == DEFAULT_BLOCK_BYTES, key
        assert "no partition key" in reason or "scatters" in reason, reason


def test_a_distributed_target_is_unknown() -> None:
    clustered, why = clustering(distributed_table(), {"CreationDate": 0.01}, 6)
    assert not clustered and "Distributed" in why


def test_a_small_load_never_reaches_256_mib_whatever_the_spread() -> None:
    for spread in (None, {"CreationDate": 0.01}, {"CreationDate": 1.0}):
        block, _ = block_of(1 * GiB, spread)
        assert block == 1 * GiB // 16


def test_the_key_columns_are_the_names_in_the_expression() -> None:
    assert "CreationDate" in key_columns(MONTHLY)
    assert key_columns("(toYYYYMM(`event time`), region)")[1:] == ["event time", "region"]


@given(st.floats(0, 1))
def test_the_threshold_decides(share: float) -> None:
    clustered, why = clustering(table(partition_key=MONTHLY), {"CreationDate": share}, 6)
    assert clustered == (share <= CLUSTERED_SPREAD)
    assert "CreationDate" in why


# --- the spread from the files' ranges ------------------------------------------------------------------------


@given(st.integers(2, 40), st.integers(1, 10**6), st.integers(-(10**9), 10**9))
def test_files_of_disjoint_equal_ranges_spread_one_over_their_number(files: int, width: int, start: int) -> None:
    ranges = [{"d": (start + i * width, start + (i + 1) * width - 1)} for i in range(files)]
    assert abs(column_spread(ranges)["d"] - (width - 1) / (files * width - 1)) < 1e-3


@given(st.lists(st.tuples(st.integers(-(10**12), 10**12), st.integers(0, 10**12)), min_size=2, max_size=30))
def test_the_spread_is_a_share_and_one_when_every_file_spans_all(spans: list[tuple[int, int]]) -> None:
    ranges = [{"d": (low, low + width)} for low, width in spans]
    got = column_spread(ranges)
    if "d" in got:
        assert 0 <= got["d"] <= 1
    whole = (min(low for low, _ in spans), max(low + width for low, width in spans))
    if whole[1] > whole[0]:
        assert column_spread([{"d": whole}] * len(spans)) == {"d": 1.0}


def test_a_column_missing_from_a_file_or_constant_has_no_spread() -> None:
    assert column_spread([{"a": (0, 9), "b": (1, 1)}, {"a": (10, 19), "b": (1, 1)}, {"b": (1, 1)}]) == {}
    assert column_spread([{"a": (0, 9)}]) == {}


def test_the_spread_sample_is_spread_over_the_key_order_and_only_for_big_listings() -> None:
    objects = [S3Object(key=f"k{i:03d}", size=SPREAD_FROM_BYTES // 100) for i in range(100)]
    chosen = spread_sample(objects, SPREAD_FROM_BYTES)
    assert len(chosen) == SPREAD_SAMPLE and chosen[0] == objects[0] and chosen[-1] == objects[-1]
    assert spread_sample(objects, SPREAD_FROM_BYTES - 1) == []
    assert spread_sample(objects[:3], SPREAD_FROM_BYTES) == objects[:3]

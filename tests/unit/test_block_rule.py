"""The data-sized block stops at ClickHouse's 256 MiB, and grows past it (up to 1 GiB, under the guide's formula)
only where, at 256 MiB, the insert would write many small parts into each partition (the footers' ranges of the
partition key's column say so)."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.plan.partition_spans import PartitionFigures
from airflow_provider_s3ch.core.plan.settings import (
    DEFAULT_BLOCK_BYTES,
    GUIDE_FROM_BYTES,
    LARGE_BLOCK_BYTES,
    MANY_PARTS_PER_PARTITION,
    MIN_BLOCKS_PER_THREAD,
    MIN_DATA_BLOCK_BYTES,
    SMALL_PART_BYTES,
    block_size,
    many_small_parts,
)
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sizes import GiB, MiB
from tests.unit.test_planner import footer_manifest, plan, profile, request

LOW = (datetime.date(2015, 1, 1) - datetime.date(1970, 1, 1)).days
HIGH = (datetime.date(2022, 12, 31) - datetime.date(1970, 1, 1)).days


def window(file_spans: list[tuple[int, int]], group_bytes: int = 64 * MiB, groups: int = 4) -> KeyWindow:
    """Files in read order, each of ``groups`` row groups over its (min, max) days of column ``d``."""
    return KeyWindow(files=tuple(tuple((group_bytes, {"d": span}) for _ in range(groups)) for span in file_spans),
                     units={"d": "day"}, spans={"d": (LOW, HIGH)})


def planned_block(uncompressed: int, cores: int = 2, cap: str | None = None, *, key: str = "toYYYYMM(d)",
                  keys: KeyWindow | None = None) -> tuple[int, str]:
    """The plan's block and reason for Parquet whose footers say ``uncompressed`` bytes (no memory cap: half of
    a 32 GiB server), into a table partitioned by ``key``."""
    man = footer_manifest(64 * MiB, uncompressed, files=40, total=uncompressed // 3)
    man = man.model_copy(update={"key_window": keys})
    table = TableInfo(database="db", name="events", engine="MergeTree", partition_key=key)
    p = plan(request(memory_cap=cap), man, profile(cores=cores, tbl=table))
    return p.settings.values["min_insert_block_size_bytes"], p.settings.reasons["min_insert_block_size_bytes"]


def test_every_file_across_every_month_gets_1_gib_blocks() -> None:
    """0.8 GB, every file across all 96 months: 256 MiB blocks write ~10 parts of ~3 MiB a partition."""
    block, reason = planned_block(int(2.4 * GiB), keys=window([(LOW, HIGH)] * 4))
    assert block == LARGE_BLOCK_BYTES
    assert "~10 parts of ~2.67 MiB into each of 96 partitions" in reason and "`d`" in reason


def test_files_of_one_era_each_get_1_gib_blocks_at_3_gb_not_at_08() -> None:
    """Each file the 24 months of its era, files of an era together: ~8 parts of ~11 MiB a partition at 8.2 GiB,
    ~2.5 at 2.4 GiB."""
    eras = window([(LOW + (i // 3) * 731, LOW + (i // 3) * 731 + 730) for i in range(6)])
    assert planned_block(int(8.24 * GiB), keys=eras)[0] == LARGE_BLOCK_BYTES
    block, reason = planned_block(int(2.4 * GiB), keys=eras)
    assert block == DEFAULT_BLOCK_BYTES
    assert f"not {MANY_PARTS_PER_PARTITION} under 64 MiB" in reason


def test_the_ladders_files_keep_256_mib() -> None:
    """The ladder's files each span 6 of 120 months, in order: 1-3 parts a partition."""
    ladder = window([(LOW + i * 183, LOW + i * 183 + 182) for i in range(8)], group_bytes=80 * MiB)
    for uncompressed in (int(2.47 * GiB), int(7.34 * GiB), int(9.7 * GiB)):
        block, reason = planned_block(uncompressed, keys=ladder)
        assert block == DEFAULT_BLOCK_BYTES
        assert reason.startswith("ClickHouse's 256 MiB, not the data cap") and "size ladder" in reason


def test_one_partition_keeps_256_mib_at_any_size() -> None:
    """Without a partition key every block is one 256 MiB part: large parts are left for later merges."""
    for uncompressed in (int(2.47 * GiB), int(9.7 * GiB), 30 * GiB):
        block, reason = planned_block(uncompressed, key="", keys=None)
        assert block == DEFAULT_BLOCK_BYTES
        assert "into each of 1 partition (the table has one partition)" in reason


def test_unknown_partitions_keep_256_mib_beyond_the_ladder() -> None:
    """No footers' window (gzip'd CSV, a key of two columns): ClickHouse's block however big the load."""
    block, reason = planned_block(int(9.7 * GiB), keys=None)
    assert block == DEFAULT_BLOCK_BYTES and "not known" in reason
    block, _ = planned_block(int(8.24 * GiB), key="(toYYYYMM(d), region)", keys=window([(LOW, HIGH)] * 4))
    assert block == DEFAULT_BLOCK_BYTES


def test_a_small_budget_keeps_the_guides_formula() -> None:
    many = PartitionFigures(DEFAULT_BLOCK_BYTES, 96.0, 96, 10.0, 3 * MiB, "a test")
    block, reason = block_size(3 * GiB, 2, int(2.4 * GiB), many)
    assert block == 3 * GiB // (3 * 2) and "(the guide), under 1 GiB" in reason


def test_a_small_load_keeps_its_smaller_block() -> None:
    block, _ = planned_block(1 * GiB)
    assert block == 1 * GiB // (2 * MIN_BLOCKS_PER_THREAD)
    block, _ = planned_block(100 * MiB)
    assert block == MIN_DATA_BLOCK_BYTES


figures = st.builds(
    PartitionFigures, block=st.just(DEFAULT_BLOCK_BYTES), partitions_per_block=st.floats(1, 200),
    partitions=st.integers(1, 1000), parts_per_partition=st.floats(1, 100), part_bytes=st.integers(1, 512 * MiB),
    source=st.just("a test"),
)


@given(st.integers(1, 4 * GUIDE_FROM_BYTES), st.integers(64 * MiB, 256 * GiB), st.integers(1, 64), st.none() | figures)
def test_the_block_is_the_guides_rule_capped_by_data_and_partitions(
    data: int, budget: int, threads: int, found: PartitionFigures | None
) -> None:
    block, reason = block_size(budget, threads, data, found)
    formula = budget // (3 * threads)
    many = found is not None and found.parts_per_partition >= MANY_PARTS_PER_PARTITION and (
        found.part_bytes < SMALL_PART_BYTES)
    assert many_small_parts(found) == many
    if many:
        cap = max(DEFAULT_BLOCK_BYTES, min(LARGE_BLOCK_BYTES, data // threads))
    else:
        cap = max(MIN_DATA_BLOCK_BYTES, data // (threads * MIN_BLOCKS_PER_THREAD))
        cap = cap if data > GUIDE_FROM_BYTES else min(cap, DEFAULT_BLOCK_BYTES)
    assert block == min(formula, cap)
    assert block <= LARGE_BLOCK_BYTES or (data > GUIDE_FROM_BYTES and not many)
    assert ("merges small parts" in reason) == many

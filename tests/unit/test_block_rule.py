"""The data-sized block stops at ClickHouse's 256 MiB up to the size ladder's largest load (8 GiB uncompressed a
node), where bigger blocks bought no speed; beyond it, the data-sized block and the guide's formula stand."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.plan.settings import (
    DEFAULT_BLOCK_BYTES,
    LADDER_TOP_BYTES,
    MIN_BLOCKS_PER_THREAD,
    MIN_DATA_BLOCK_BYTES,
    block_size,
)
from airflow_provider_s3ch.core.sizes import GiB, MiB
from tests.unit.test_planner import footer_manifest, plan, profile, request


def planned_block(uncompressed: int, cores: int = 2, cap: str | None = None) -> tuple[int, str]:
    """The plan's block and reason for Parquet whose footers say ``uncompressed`` bytes (no memory cap: half of
    a 32 GiB server)."""
    man = footer_manifest(64 * MiB, uncompressed, files=40, total=uncompressed // 3)
    p = plan(request(memory_cap=cap), man, profile(cores=cores))
    return p.settings.values["min_insert_block_size_bytes"], p.settings.reasons["min_insert_block_size_bytes"]


def test_the_ladders_loads_get_clickhouses_256_mib() -> None:
    """1 GB and 3 GB of Parquet (2.47 and 7.34 GiB uncompressed) on 2 cores: the data cap would be 316 and 940 MiB."""
    for uncompressed in (int(2.47 * GiB), int(7.34 * GiB)):
        block, reason = planned_block(uncompressed)
        assert block == DEFAULT_BLOCK_BYTES
        assert reason.startswith("ClickHouse's 256 MiB, not the data cap") and "size ladder" in reason


def test_beyond_the_ladder_the_data_sized_block_stands() -> None:
    """The 3.3 GB dataset: 8.24 GiB uncompressed, where 1 GiB blocks loaded 1.6-1.9x faster than 256 MiB."""
    block, reason = planned_block(int(8.24 * GiB))
    assert block == int(8.24 * GiB) // (2 * MIN_BLOCKS_PER_THREAD)
    assert "several blocks" in reason


def test_a_small_load_keeps_its_smaller_block() -> None:
    block, _ = planned_block(1 * GiB)
    assert block == 1 * GiB // (2 * MIN_BLOCKS_PER_THREAD)
    block, _ = planned_block(100 * MiB)
    assert block == MIN_DATA_BLOCK_BYTES


@given(st.integers(1, 4 * LADDER_TOP_BYTES), st.integers(64 * MiB, 256 * GiB), st.integers(1, 64))
def test_the_block_is_the_guides_rule_with_the_ladders_cap(data: int, budget: int, threads: int) -> None:
    block, reason = block_size(budget, threads, data)
    formula = budget // (3 * threads)
    cap = max(MIN_DATA_BLOCK_BYTES, data // (threads * MIN_BLOCKS_PER_THREAD))
    if data <= LADDER_TOP_BYTES:
        cap = min(cap, DEFAULT_BLOCK_BYTES)
    assert block == min(formula, cap)
    share = data // (threads * MIN_BLOCKS_PER_THREAD)
    held = data <= LADDER_TOP_BYTES and formula > DEFAULT_BLOCK_BYTES and share > DEFAULT_BLOCK_BYTES
    assert reason.startswith("ClickHouse's 256 MiB, not the data cap") == held
    assert ("3.3 GB" in reason) == (block > DEFAULT_BLOCK_BYTES and block == cap)

"""The parts an insert writes, reckoned from its files (core.plan.parts); held against the engine in
bench/parts_model.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.plan.parts import WIDE_PART_BYTES, predicted_parts

MiB = 1024 * 1024

files_strategy = st.lists(
    st.tuples(st.integers(1, 400 * MiB), st.frozensets(st.integers(0, 119), min_size=1, max_size=12)),
    min_size=1, max_size=40)


@given(files_strategy, st.integers(1 * MiB, 2048 * MiB))
def test_every_block_writes_at_least_one_part_and_at_most_its_partitions(files, block) -> None:
    got = predicted_parts(files, block)
    total = sum(size for size, _ in files)
    assert got.blocks == -(-total // block)
    every = frozenset().union(*(p for _, p in files))
    assert got.blocks <= got.parts <= got.blocks * len(every)
    assert got.parts >= len(every)  # every partition gets a part
    assert 0 <= got.wide_parts <= got.parts


@given(st.integers(1, 40), st.integers(1, 120), st.integers(1, 300 * MiB), st.integers(1 * MiB, 2048 * MiB))
def test_files_that_all_span_the_same_partitions_write_blocks_times_partitions(n, partitions, size, block) -> None:
    same = frozenset(range(partitions))
    got = predicted_parts([(size, same)] * n, block)
    assert got.parts == got.blocks * partitions


@given(st.integers(2, 40), st.integers(1, 300 * MiB))
def test_a_larger_block_saves_parts_only_where_files_share_partitions(n, size) -> None:
    shared = [(size, frozenset(range(24)))] * n
    assert predicted_parts(shared, 1024 * MiB).parts <= predicted_parts(shared, 256 * MiB).parts
    # One month a file, in order: each block spans the files it takes in, whatever its size.
    monthly = [(size, frozenset([m])) for m in range(n)]
    small, large = predicted_parts(monthly, 256 * MiB), predicted_parts(monthly, 1024 * MiB)
    assert small.parts - small.blocks <= n and large.parts >= n


def test_the_ladder_and_the_eras() -> None:
    """The two layouts of docs/benchmarks.md: the ladder's 1 GB rung (20 files of ~120 MiB uncompressed, 6 months
    each, in order) and 3.3 GB whose files each span the 24 months of their era (320 files of ~26 MiB, 4 eras)."""
    ladder = [(120 * MiB, frozenset(range(6 * i, 6 * i + 6))) for i in range(20)]
    at256, at1g = predicted_parts(ladder, 256 * MiB), predicted_parts(ladder, 1024 * MiB)
    assert 12 <= at256.partitions_per_block <= 18  # the engine wrote ~14 a block (ladder_1gb_p120_compact_paired)
    assert at1g.parts >= 0.7 * at256.parts  # a 1 GiB block saves few parts here (under a third)
    eras = [(26 * MiB, frozenset(range(24 * (i // 80), 24 * (i // 80) + 24))) for i in range(320)]
    e256, e1g = predicted_parts(eras, 256 * MiB), predicted_parts(eras, 1024 * MiB)
    assert e1g.parts <= 0.35 * e256.parts  # ~3x fewer parts
    assert e256.wide_parts >= 0.75 * e256.parts and (256 * MiB) / 24 >= WIDE_PART_BYTES  # Wide but at era edges


def test_no_bytes_no_parts_and_a_bad_block_is_refused() -> None:
    assert predicted_parts([], 256 * MiB).parts == 0
    with pytest.raises(ValueError, match="block=0"):
        predicted_parts([(1, frozenset([1]))], 0)

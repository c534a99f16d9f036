"""bench/guide_regime.py: the table prints make_plan's values for the guide's nodes (pure: no server)."""

from __future__ import annotations

from airflow_provider_s3ch.core.plan import make_plan
from airflow_provider_s3ch.core.sizes import GiB
from bench import guide_regime


def _row(label: str) -> dict:
    return next(r for r in guide_regime.rows() if r["case"].label == label)


def _table_line(label: str) -> str:
    return next(line for line in guide_regime.lines() if line.startswith(f"| {label} |"))


def test_sixteen_cores_get_eight_threads_from_make_plan() -> None:
    plan = make_plan(guide_regime.guide_request(), guide_regime.guide_manifest(),
                     guide_regime.guide_profile(16, 64 * GiB), source_url=guide_regime.GUIDE_URL)
    assert plan.settings.values["max_insert_threads"] == 8
    row = _row("16 cores / 64 GiB, single node")
    assert row["max_insert_threads"] == 8
    cells = [c.strip() for c in _table_line("16 cores / 64 GiB, single node").split("|")]
    assert cells[3] == "8"
    assert cells[4].startswith(f"{plan.settings.values['min_insert_block_size_bytes']:,} ")


def test_eight_cores_with_all_memory_get_the_guides_block_fitted_under_the_cap() -> None:
    # The guide: 32 GiB / (3 x 4 threads) = 2,863,311,530 bytes, 4 threads, rows threshold off. Its three copies
    # per thread fill the whole cap; the plan fits the block under it with what else the load holds.
    row = _row("8 cores / 32 GiB, single node, memory_cap 32 GiB")
    assert row["max_insert_threads"] == 4
    assert 0.75 * guide_regime.GUIDE_BLOCK < row["min_insert_block_size_bytes"] < guide_regime.GUIDE_BLOCK
    assert 32 * GiB // 12 == guide_regime.GUIDE_BLOCK
    assert row["other"]["min_insert_block_size_rows"] == 0
    assert "fitted to the budget" in row["reasons"]["min_insert_block_size_bytes"]
    line = _table_line("8 cores / 32 GiB, single node, memory_cap 32 GiB").split("|")[4]
    assert line.strip().startswith(f"{row['min_insert_block_size_bytes']:,} ")


def test_every_printed_row_matches_its_plan() -> None:
    for case in guide_regime.cases():
        plan = guide_regime.plan_for(case)
        values = plan.settings.values
        cells = [c.strip() for c in _table_line(case.label).split("|")]
        assert cells[3] == str(values["max_insert_threads"])
        assert cells[4].startswith(f"{values['min_insert_block_size_bytes']:,} ")
        buffer = values.get("max_download_buffer_size")
        if buffer is None:
            assert cells[5] == "default (10 MiB)"
        else:
            assert cells[5].startswith(f"{buffer:,} ")
        assert cells[2].startswith(plan.strategy)


def test_cluster_is_distributed_with_parallel_insert_and_sixteen_cores_differ_from_guide() -> None:
    cluster = _row("3 x (8 cores / 32 GiB), cluster")
    assert cluster["strategy"] == "distributed"
    assert cluster["other"]["parallel_distributed_insert_select"] == 2
    capped = _row("16 cores / 64 GiB, single node, memory_cap 64 GiB")
    # The plan's data cap (~72 GB / (8 threads x 4 blocks)) sits below the guide's formula here.
    assert capped["min_insert_block_size_bytes"] < guide_regime.GUIDE_BLOCK
    assert "data cap" in capped["reasons"]["min_insert_block_size_bytes"]


def test_section_heading() -> None:
    assert guide_regime.lines()[0] == "## The guide's regime on paper"

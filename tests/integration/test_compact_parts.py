"""``compact_parts=True`` on the engine: the staging table writes its parts Compact, they reach the target so, and
the default keeps the target's own part format (docs/tuning.md#compact-parts)."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_s3ch.errors import InvalidRequestError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset, posts_ddl
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context, query_log

#: Every part of the table Wide, whatever its size: what a default load must keep.
ALL_WIDE = " SETTINGS min_bytes_for_wide_part = 0"


def _table(stack: LocalStack, settings: str = ALL_WIDE) -> str:
    name = f"default.posts_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client().execute(posts_ddl(name) + settings)
    return name


def _part_types(stack: LocalStack, table: str) -> dict[str, int]:
    database, name = table.split(".")
    rows = stack.clickhouse_client().execute(
        "SELECT part_type, count() FROM system.parts WHERE database = %(d)s AND table = %(t)s AND active AND rows > 0 "
        "GROUP BY part_type", {"d": database, "t": name})
    return dict(rows)


@pytest.mark.parametrize("mode", ["append", "replace_partitions"])
def test_compact_parts_reach_the_table_compact_and_the_default_keeps_its_format(
    stack: LocalStack, posts: SampleDataset, mode: str
) -> None:
    plain, compact = _table(stack), _table(stack)
    default = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=plain, mode=mode).execute(
        fake_context())
    result = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=compact, mode=mode,
                                    compact_parts=True).execute(fake_context())

    assert count(stack, plain) == count(stack, compact) == posts.rows
    assert _part_types(stack, plain) == {"Wide": len(posts.keys)}
    assert _part_types(stack, compact) == {"Compact": len(posts.keys)}
    assert "compact_parts" not in default and "min_bytes_for_wide_part" not in default["mode_reason"]
    assert result["compact_parts"] == {"min_bytes_for_wide_part": 64 * 1024 * 1024}
    assert "written Compact" in result["mode_reason"]
    # Only the staging table's definition changed: the target keeps its own setting.
    engine = stack.clickhouse_client().execute(
        "SELECT engine_full FROM system.tables WHERE database = 'default' AND name = %(t)s",
        {"t": compact.split(".")[1]})[0][0]
    assert "min_bytes_for_wide_part = 0" in engine
    # The figures are the insert's own (the staging table's writes, as without the option).
    assert result["written_rows"] == query_log(stack, result["query_id"])["written_rows"] == posts.rows


def test_a_table_whose_own_setting_is_larger_keeps_it(stack: LocalStack, posts: SampleDataset) -> None:
    table = _table(stack, " SETTINGS min_bytes_for_wide_part = 1073741824")
    result = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=table, compact_parts=True).execute(
        fake_context())
    assert "compact_parts" not in result
    assert "min_bytes_for_wide_part (1073741824) is kept" in result["mode_reason"]
    assert _part_types(stack, table) == {"Compact": len(posts.keys)} and count(stack, table) == posts.rows


def test_overwrite_with_compact_parts_is_refused_before_the_server(stack: LocalStack, posts: SampleDataset) -> None:
    table = _table(stack)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=table, mode="overwrite",
                                compact_parts=True)
    with pytest.raises(InvalidRequestError, match="compact_parts=True with mode='overwrite'.*mode='append'"):
        op.execute(fake_context())
    assert count(stack, table) == 0

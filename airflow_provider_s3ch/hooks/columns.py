"""Typed reads for the schema check: the target's columns and one file's, as the server sees them.

What they mean is :mod:`airflow_provider_s3ch.core.schema`'s business.
"""

from __future__ import annotations

from airflow_provider_s3ch.core.models import TableInfo
from airflow_provider_s3ch.core.schema import COLUMNS_SQL, Column
from airflow_provider_s3ch.core.sql import RenderedSQL
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.quiet import quiet_loggers


def table_columns(hook: ClickHouseHook, table: TableInfo) -> list[Column]:
    """The table's columns from ``system.columns``: name, type, default_kind (a Distributed table's own)."""
    return hook.rows(Column, COLUMNS_SQL, {"d": table.database, "t": table.name})


def describe(hook: ClickHouseHook, statement: RenderedSQL) -> list[Column]:
    """Run a ``DESCRIBE TABLE s3(…)``: the statement holds S3 credentials, so clickhouse-driver's logger
    is held back (the operator logs nothing of it)."""
    with quiet_loggers("clickhouse_driver"):
        rows = hook.execute(statement.sql, settings=statement.settings)
    return [Column(name=str(row[0]), type=str(row[1])) for row in rows]

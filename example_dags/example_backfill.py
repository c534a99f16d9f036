"""A monthly backfill: one Parquet file per month, each run replaces its month's partition.

The posts table is ``PARTITION BY toYYYYMM(CreationDate)`` and each file holds one
month, so ``mode="replace_partitions"`` makes a run idempotent: running a month again
(a retry, a cleared task, a re-run backfill) leaves exactly the rows of that month's
file, never a second copy. The load goes into a staging table first; the target's
partition is swapped atomically (``ALTER TABLE … REPLACE PARTITION``), so readers see
the old month or the new month, never a half-loaded one, and a failed try leaves the
target untouched.

Catchup runs every month from ``start_date`` to ``end_date`` (the sample's first half
year, 2008-07 to 2008-12). Re-run one month with
``airflow dags test s3_to_clickhouse_backfill 2008-08-01``; run the whole range with
``airflow backfill create --dag-id s3_to_clickhouse_backfill --from-date 2008-07-01 --to-date 2008-12-01``.

Connections: ``clickhouse_default`` and ``aws_default`` (on the local stack, from the
``AIRFLOW_CONN_*`` variables ``s3ch-local up`` prints).
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from airflow_provider_s3ch.core.sql import quote_identifier
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local.sample import POSTS_PREFIX, posts_ddl
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3_to_clickhouse_backfill",
    schedule="@monthly",
    start_date=datetime.datetime(2008, 7, 1, tzinfo=datetime.timezone.utc),
    end_date=datetime.datetime(2008, 12, 31, tzinfo=datetime.timezone.utc),
    catchup=True,
    max_active_runs=3,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=1)},
    params={
        "bucket": Param("s3ch-sample", type="string", description="the bucket holding the monthly files"),
        "prefix": Param(POSTS_PREFIX, type="string", description="the key prefix of the monthly files"),
        "database": Param("default", type="string"),
    },
    tags=["s3ch", "example", "backfill"],
) as dag:

    @task
    def create_table(database: str) -> str:
        """Create the partitioned posts table if it is missing (the operator loads into existing tables)."""
        hook = ClickHouseHook()
        hook.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        hook.execute(posts_ddl(f"{quote_identifier(database)}.{quote_identifier('posts')}"))
        return f"{database}.posts"

    # The run's month, rendered from its data interval: 2008-08 for the run of 2008-08-01.
    load_month = S3ToClickHouseOperator(
        task_id="load_month",
        s3_uri="s3://{{ params.bucket }}/{{ params.prefix }}{{ data_interval_start.strftime('%Y-%m') }}.parquet",
        table="{{ params.database }}.posts",
        mode="replace_partitions",
        memory_cap="2GiB",
    )

    @task
    def report(figures: dict) -> None:
        """Log what the run did: rows, the partitions it replaced, and whether it took an earlier try's load."""
        print(
            f"{figures['written_rows']} rows into partitions {figures['partitions']} ({figures['mode']}); "
            f"attached to earlier try: {figures['attached_to']}"
        )

    create_table("{{ params.database }}") >> load_month
    report(load_month.output)

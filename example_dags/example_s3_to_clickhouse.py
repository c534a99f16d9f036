"""The guide's scenario: Stack Overflow posts by month, from Parquet in S3 into a MergeTree table.

Connections: ``clickhouse_default`` (type ``clickhouse``) and ``aws_default`` (type ``aws``).
On the local stack (``s3ch-local up``) both come from the printed ``AIRFLOW_CONN_*`` variables.

Run it with ``airflow dags test s3_to_clickhouse_posts -c '{"s3_uri": "s3://bucket/prefix/*.parquet"}'``.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from airflow_provider_s3ch.core.sql import quote_identifier
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local.sample import posts_ddl
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3_to_clickhouse_posts",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={
        "s3_uri": Param(
            "s3://s3ch-sample/stackoverflow/parquet/posts/by_month/*.parquet",
            type="string",
            description="the files to load (a glob)",
        ),
        "database": Param("default", type="string"),
        "memory_cap": Param("4GiB", type="string", description="the load's memory cap"),
    },
    tags=["s3ch", "example"],
) as dag:

    @task
    def create_table(database: str) -> str:
        """Create the posts table if it is missing (the operator loads into existing tables)."""
        hook = ClickHouseHook()
        hook.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        table = f"{quote_identifier(database)}.{quote_identifier('posts')}"
        hook.execute(posts_ddl(table))
        return f"{database}.posts"

    table = create_table("{{ params.database }}")

    load_posts = S3ToClickHouseOperator(
        task_id="load_posts",
        s3_uri="{{ params.s3_uri }}",
        table="{{ params.database }}.posts",
        memory_cap="{{ params.memory_cap }}",
    )

    @task
    def report(figures: dict) -> None:
        """Log the load's figures (the operator's XCom, read from system.query_log)."""
        print(
            f"loaded {figures['written_rows']} rows from {figures['files']} files in {figures['duration_ms']} ms "
            f"({figures['rows_per_second']} rows/s, peak memory {figures['memory_usage']} bytes), "
            f"strategy {figures['strategy']}, settings {figures['settings']}"
        )

    table >> load_posts
    report(load_posts.output)

"""The guide's scenario: Stack Overflow posts by month, from Parquet in S3 into a MergeTree table.

Connections: ``clickhouse_native_default`` (type ``clickhouse_native``) and ``aws_default`` (type ``aws``).
On the local stack (``s3ch-local up``) both come from the printed ``AIRFLOW_CONN_*`` variables.

Run it with ``airflow dags test s3_to_clickhouse_posts -c '{"s3_uri": "s3://bucket/prefix/*.parquet"}'``.
"""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG, Param, task
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator

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

    # Airflow's SQL operator runs on the same connection (the hook is a DbApiHook).
    create_database = SQLExecuteQueryOperator(
        task_id="create_database",
        conn_id="clickhouse_native_default",
        sql="CREATE DATABASE IF NOT EXISTS `{{ params.database }}`",
    )

    # The first run creates the posts table from the files' columns (ClickHouse's schema inference),
    # with the guide's keys; later runs load into it.
    load_posts = S3ToClickHouseOperator(
        task_id="load_posts",
        s3_uri="{{ params.s3_uri }}",
        table="{{ params.database }}.posts",
        memory_cap="{{ params.memory_cap }}",
        create_table="if_missing",
        order_by="(PostTypeId, toDate(CreationDate), CreationDate)",
        partition_by="toYYYYMM(CreationDate)",
    )

    @task
    def report(figures: dict) -> None:
        """Log the load's figures (the operator's XCom, read from system.query_log)."""
        print(
            f"loaded {figures['written_rows']} rows from {figures['files']} files in {figures['duration_ms']} ms "
            f"({figures['rows_per_second']} rows/s, peak memory {figures['memory_usage']} bytes), "
            f"strategy {figures['strategy']}, settings {figures['settings']}"
        )

    create_database >> load_posts
    report(load_posts.output)

"""A deferrable load and, when a second table is named, the same files loaded without deferring.

The files, the tables and how often the trigger looks come from the environment
(``S3CH_DEFERRABLE_URI``, ``S3CH_DEFERRABLE_TABLE``, ``S3CH_NORMAL_TABLE``, ``S3CH_POLL_INTERVAL``), so that
``airflow dags test`` and the real scheduler's test run the same DAG on their own stacks. The tests slow
the insert on the server with a ``MATERIALIZED sleepEachRow(…)`` column of the target, which
``function_sleep_max_microseconds_per_block = 0`` lets sleep for more than 3 s per block.
"""

from __future__ import annotations

import datetime
import os

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

URI = os.environ.get("S3CH_DEFERRABLE_URI", "s3://s3ch-deferrable/posts/*.parquet")
SETTINGS = {"function_sleep_max_microseconds_per_block": 0}

with DAG(
    dag_id="s3ch_deferrable",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(seconds=2)},
    tags=["s3ch", "test"],
):
    S3ToClickHouseOperator(
        task_id="deferred",
        s3_uri=URI,
        table=os.environ.get("S3CH_DEFERRABLE_TABLE", "default.deferred_posts"),
        settings=SETTINGS,
        deferrable=True,
        poll_interval=float(os.environ.get("S3CH_POLL_INTERVAL", "1")),
    )
    if os.environ.get("S3CH_NORMAL_TABLE"):
        S3ToClickHouseOperator(
            task_id="normal",
            s3_uri=URI,
            table=os.environ["S3CH_NORMAL_TABLE"],
            settings=SETTINGS,
            deferrable=False,
        )

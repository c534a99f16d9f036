"""A monthly backfill for the real scheduler's test: the example backfill's load, with a short retry delay."""

from __future__ import annotations

import datetime
import os

from airflow.providers.common.compat.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3ch_scheduler_backfill",
    schedule=CronDataIntervalTimetable("@monthly", timezone="UTC"),  # as the backfill example
    start_date=datetime.datetime(2008, 7, 1, tzinfo=datetime.UTC),
    end_date=datetime.datetime(2008, 12, 31, tzinfo=datetime.UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(seconds=2)},
    tags=["s3ch", "test"],
) as dag:
    S3ToClickHouseOperator(
        task_id="load_month",
        s3_uri="s3://" + os.environ.get("S3CH_TEST_BUCKET", "s3ch-scheduler")
        + "/stackoverflow/parquet/posts/by_month/{{ logical_date.strftime('%Y-%m') }}.parquet",
        table="scheduled.posts",
        mode="replace_partitions",
        memory_cap=os.environ.get("S3CH_TEST_MEMORY_CAP", "1GiB"),
        create_table="if_missing",
        order_by="(PostTypeId, toDate(CreationDate), CreationDate)",
        partition_by="toYYYYMM(CreationDate)",
    )

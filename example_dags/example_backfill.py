"""A monthly backfill: one Parquet file per month, each run replaces its month's partition.

The posts table, created by the first run from the files' columns, is
``PARTITION BY toYYYYMM(CreationDate)`` and each file holds one
month, so ``mode="replace_partitions"`` makes a run idempotent: running a month again
(a retry, a cleared task, a re-run backfill) leaves exactly the rows of that month's
file, never a second copy. The load goes into a staging table first; the target's
partition is swapped atomically (``ALTER TABLE … REPLACE PARTITION``), so readers see
the old month or the new month, never a half-loaded one, and a failed try leaves the
target untouched.

Each run loads the month that ended. The schedule is ``CronDataIntervalTimetable``: the run
for August is made when August has ended (at 2008-09-01 00:00 UTC), with logical date
2008-08-01 and data interval 2008-08-01 to 2008-09-01, and it loads 2008-08; a backfill's
run of 2008-08-01 and a manual run with ``-l 2008-08-15`` (Airflow 2: ``-e``) load 2008-08 too. (Airflow 3's
default for a cron schedule, ``CronTriggerTimetable``, would start that run at 2008-08-01
00:00 with logical date 2008-08-01, when August's file has not arrived yet.) A manual run
without a logical date (on Airflow 2, whose logical date is then the trigger time) loads the last month
that ended before it was triggered.

Catchup runs every month from ``start_date`` to ``end_date`` (the sample's first half
year, 2008-07 to 2008-12). Re-run one month with
``airflow dags test s3_to_clickhouse_backfill 2008-08-01`` or
``airflow dags trigger s3_to_clickhouse_backfill -l 2008-08-01``; run the whole range with
``airflow backfill create --dag-id s3_to_clickhouse_backfill --from-date 2008-07-01 --to-date 2008-12-01``.

Connections: ``clickhouse_native_default`` and ``aws_default`` (on the local stack, from the
``AIRFLOW_CONN_*`` variables ``s3ch-local up`` prints).
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Param, task
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_s3ch.local.sample import POSTS_PREFIX
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator


def run_month(dag_run: Any) -> str:
    """The month a run loads, ``YYYY-MM`` (UTC): its logical date's once that month has ended (with
    ``CronDataIntervalTimetable``, a scheduled run's logical date is the start of the month that ended).
    A run whose logical date is missing (a manual run without one, Airflow 3) or falls in the month still
    under way (the same run on Airflow 2, whose logical date is the trigger time) loads the last month that
    ended before the run was triggered."""
    triggered = getattr(dag_run, "run_after", None) or dag_run.queued_at or datetime.datetime.now(datetime.UTC)
    month_begun = triggered.astimezone(datetime.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    logical = dag_run.logical_date
    if logical is not None and logical.astimezone(datetime.UTC) < month_begun:
        return logical.astimezone(datetime.UTC).strftime("%Y-%m")
    return (month_begun - datetime.timedelta(days=1)).strftime("%Y-%m")


with DAG(
    dag_id="s3_to_clickhouse_backfill",
    # A run per month, made when the month has ended: logical date = the month's first day.
    schedule=CronDataIntervalTimetable("@monthly", timezone="UTC"),
    start_date=datetime.datetime(2008, 7, 1, tzinfo=datetime.UTC),
    end_date=datetime.datetime(2008, 12, 31, tzinfo=datetime.UTC),
    catchup=True,
    max_active_runs=3,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=1)},
    params={
        "bucket": Param("s3ch-sample", type="string", description="the bucket holding the monthly files"),
        "prefix": Param(POSTS_PREFIX, type="string", description="the key prefix of the monthly files"),
        "database": Param("default", type="string"),
    },
    user_defined_macros={"run_month": run_month},
    tags=["s3ch", "example", "backfill"],
) as dag:

    create_database = SQLExecuteQueryOperator(
        task_id="create_database",
        conn_id="clickhouse_native_default",
        sql="CREATE DATABASE IF NOT EXISTS `{{ params.database }}`",
    )

    # The month the run names: 2008-08 for the run of 2008-08-01, and for a manual run of 2008-08-15.
    load_month = S3ToClickHouseOperator(
        task_id="load_month",
        s3_uri="s3://{{ params.bucket }}/{{ params.prefix }}{{ run_month(dag_run) }}.parquet",
        table="{{ params.database }}.posts",
        mode="replace_partitions",
        memory_cap="2GiB",
        # The first run creates the table from the files, partitioned by month (CREATE TABLE IF NOT
        # EXISTS: runs that start together end with one table).
        create_table="if_missing",
        order_by="(PostTypeId, toDate(CreationDate), CreationDate)",
        partition_by="toYYYYMM(CreationDate)",
    )

    @task
    def report(figures: dict) -> None:
        """Log what the run did: rows, the partitions it replaced, and whether it took an earlier try's load."""
        print(
            f"{figures['written_rows']} rows into partitions {figures['partitions']} ({figures['mode']}); "
            f"attached to earlier try: {figures['attached_to']}"
        )

    create_database >> load_month
    report(load_month.output)

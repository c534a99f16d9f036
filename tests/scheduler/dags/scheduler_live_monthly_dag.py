"""A live monthly schedule for the real scheduler's test, written as the README and the backfill example write
it: the run the scheduler makes now must load the month that ended, not the month that just began."""

from __future__ import annotations

import datetime
import os

from airflow.providers.common.compat.sdk import DAG
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from example_dags.example_backfill import run_month

BUCKET = os.environ.get("S3CH_TEST_BUCKET", "s3ch-live")
_first = datetime.datetime.now(datetime.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
TWO_MONTHS_AGO = ((_first - datetime.timedelta(days=1)).replace(day=1) - datetime.timedelta(days=1)).replace(day=1)

with DAG(
    dag_id="s3ch_live_monthly",
    schedule=CronDataIntervalTimetable("@monthly", timezone="UTC"),
    start_date=TWO_MONTHS_AGO,
    catchup=False,  # only the latest month that ended
    user_defined_macros={"run_month": run_month},
    tags=["s3ch", "test"],
) as dag:
    table = {"create_table": "if_missing", "order_by": "(PostTypeId, CreationDate)",
             "partition_by": "toYYYYMM(CreationDate)", "memory_cap": "1Gi"}
    # The README's template, as written.
    S3ToClickHouseOperator(task_id="readme", table="live.readme", **table,
                           s3_uri=f"s3://{BUCKET}/live/{{{{ logical_date.strftime('%Y-%m') }}}}*.parquet")
    # The backfill example's macro, as written.
    S3ToClickHouseOperator(task_id="example", s3_uri=f"s3://{BUCKET}/live/{{{{ run_month(dag_run) }}}}.parquet",
                           table="live.example", **table)

"""Late files of past months: each monthly run reads the last three months, and loads only what is new.

Daily CSV.gz files land under ``events/YYYY-MM/``. Most arrive during their month, some late: a file
for September that lands in mid-October is outside the September run's glob (that run is over) and
would be loaded only by running September again. Here each run's glob spans the month that ended and
the two before it (``events/{2008-07,2008-08,2008-09}/*.csv.gz`` for the run of September 2008), and
``skip_loaded=True`` keeps that wider glob safe: the file ledger leaves out every file an earlier run
loaded, by key and ETag, so the October run loads October's files and September's late one, each once.

A file later than the window (here: more than two months late) is not seen by any run; widen
``MONTHS`` to wait longer, at the cost of listing more keys each run. ``mode="append"`` adds the new
files' rows to their partitions and keeps the rows of the files loaded before (``replace_partitions``
would rebuild a month from the new files alone).

Connections: ``clickhouse_native_default`` and ``aws_default`` (on the local stack, from the
``AIRFLOW_CONN_*`` variables ``s3ch-local up`` prints).
"""

from __future__ import annotations

import datetime
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Param
from airflow.timetables.interval import CronDataIntervalTimetable

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

#: How many months each run reads: the month that ended and the ones before it.
MONTHS = 3


def recent_months(dag_run: Any, months: int = MONTHS) -> str:
    """The glob's month list, ``{2008-07,2008-08,2008-09}``: the run's month (its logical date's, in UTC)
    and the ``months - 1`` before it."""
    first = dag_run.logical_date.astimezone(datetime.UTC).replace(day=1)
    listed = []
    for _ in range(months):
        listed.append(first.strftime("%Y-%m"))
        first = (first - datetime.timedelta(days=1)).replace(day=1)
    return "{" + ",".join(reversed(listed)) + "}"


with DAG(
    dag_id="s3_to_clickhouse_late_files",
    # A run per month, made when the month has ended: logical date = the month's first day.
    schedule=CronDataIntervalTimetable("@monthly", timezone="UTC"),
    start_date=datetime.datetime(2008, 7, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=1)},
    params={
        "bucket": Param("s3ch-sample", type="string", description="the bucket holding the daily files"),
        "prefix": Param("events/", type="string", description="the key prefix of the months' folders"),
        "table": Param("default.events", type="string"),
    },
    user_defined_macros={"recent_months": recent_months},
    tags=["s3ch", "example", "incremental"],
) as dag:
    S3ToClickHouseOperator(
        task_id="load_recent_months",
        s3_uri="s3://{{ params.bucket }}/{{ params.prefix }}{{ recent_months(dag_run) }}/*.csv.gz",
        table="{{ params.table }}",
        skip_loaded=True,
        mode="append",
        memory_cap="1Gi",
        create_table="if_missing",
        order_by="(day, id)",
        partition_by="toYYYYMM(day)",
    )

"""Two loads with retries: a type error (terminal: no retry) and a server that does not answer (retried)."""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3ch_retries",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(seconds=1)},
):
    S3ToClickHouseOperator(task_id="type_error", s3_uri="s3://s3ch-retries/typed/*.csv", table="default.typed")
    S3ToClickHouseOperator(
        task_id="server_down",
        s3_uri="s3://s3ch-retries/typed/*.csv",
        table="default.typed",
        clickhouse_conn_id="clickhouse_down",
    )

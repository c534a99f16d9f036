"""Wait for the month's files with the operator's own glob, deferred to the triggerer, then load them."""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor

S3_URI = "s3://s3ch-sensor/events/{01..12}/part-*.csv"

with DAG(dag_id="s3ch_glob_sensor", schedule=None, start_date=datetime.datetime(2024, 1, 1), catchup=False):
    wait = S3GlobSensor(
        task_id="wait",
        s3_uri=S3_URI,
        min_files=2,
        success_marker="_SUCCESS",  # s3ch-sensor/events/_SUCCESS
        deferrable=True,
        poke_interval=1,
        timeout=300,
    )
    load = S3ToClickHouseOperator(task_id="load", s3_uri=S3_URI, table="default.sensor_events")
    wait >> load

"""A DAG written from the README: Parquet, gzip'd CSV with a header and TSVWithNames, `{a,b}` and `**` globs."""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(dag_id="s3ch_formats", schedule=None, start_date=datetime.datetime(2024, 1, 1), catchup=False):
    S3ToClickHouseOperator(
        task_id="parquet",
        s3_uri="s3://s3ch-formats/parquet/{2008-07,2008-08}.parquet",
        table="default.f_posts",
        memory_cap="1GiB",
    )
    S3ToClickHouseOperator(
        task_id="csv_gz",
        s3_uri="s3://s3ch-formats/csv/**.csv.gz",
        table="default.f_events_csv",
    )
    S3ToClickHouseOperator(
        task_id="tsv",
        s3_uri="s3://s3ch-formats/tsv/{eu,us}/*.tsv",
        table="default.f_events_tsv",
        memory_cap="512MiB",
    )

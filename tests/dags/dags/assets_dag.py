"""A dry run and a load with the target's ``clickhouse://`` asset as their outlet: only the load emits an event."""

from __future__ import annotations

import datetime
import json
import os

from airflow.providers.common.compat.sdk import DAG, Asset

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

# The asset names the server the default connection points at (the local stack's port when it is set).
_conn = json.loads(os.environ.get("AIRFLOW_CONN_CLICKHOUSE_NATIVE_DEFAULT") or "{}")
POSTS = Asset(f"clickhouse://{_conn.get('host', 'localhost')}:{_conn.get('port', 9000)}/default/asset_posts")

with DAG(dag_id="s3ch_assets", schedule=None, start_date=datetime.datetime(2024, 1, 1), catchup=False):
    dry_run = S3ToClickHouseOperator(
        task_id="dry_run",
        s3_uri="s3://s3ch-assets/posts/*.parquet",
        table="default.asset_posts",
        dry_run=True,
        outlets=[POSTS],
    )
    load = S3ToClickHouseOperator(
        task_id="load",
        s3_uri="s3://s3ch-assets/posts/*.parquet",
        table="default.asset_posts",
        outlets=[POSTS],
    )
    dry_run >> load

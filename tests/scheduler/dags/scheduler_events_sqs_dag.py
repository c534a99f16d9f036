"""Continuous ingestion from S3 event notifications under the real scheduler and triggerer: an asset with the SQS
notification watcher (one event per file: no batch wait), and a DAG on it whose first task holds the run while a
marker file exists, so that a test can land files while a run is active. Defined only for the test that runs it
(``S3CH_TEST_SQS_URI`` set)."""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

URI = os.environ.get("S3CH_TEST_SQS_URI")

if URI:
    from airflow.providers.common.compat.sdk import DAG
    from airflow.providers.standard.operators.python import PythonOperator

    from airflow_provider_s3ch.compat import Asset
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
    from airflow_provider_s3ch.triggers.s3_notifications import notification_watcher

    HOLD = Path(os.environ["S3CH_TEST_SQS_HOLD"])

    def hold() -> None:
        """Wait while the marker exists (at most a minute)."""
        deadline = time.monotonic() + 60
        while HOLD.exists() and time.monotonic() < deadline:
            time.sleep(0.2)

    landing = Asset(
        name="s3ch_events_sqs_landing",
        uri=URI.rsplit("/", 1)[0] + "/",
        watchers=[notification_watcher("s3ch_events_sqs", queue_url=os.environ["S3CH_TEST_SQS_QUEUE"], s3_uri=URI,
                                       wait_time=1, batch_wait=0)],
    )

    with DAG(
        dag_id="s3ch_events_sqs",
        schedule=[landing],
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,
        tags=["s3ch", "test"],
    ):
        PythonOperator(task_id="hold", python_callable=hold) >> S3ToClickHouseOperator(
            task_id="load", s3_uri=URI, table=os.environ["S3CH_TEST_SQS_TABLE"], format="CSV",
            structure="file UInt16, id UInt32, v String", skip_loaded=True, skip_when_empty=True, files_from="events")

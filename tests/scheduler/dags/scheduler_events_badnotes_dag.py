"""Continuous ingestion when notifications go missing or come twice, under the real scheduler and triggerer: an
asset with the SQS notification watcher on a queue the test itself sends notifications to (the bucket sends none),
the listing watcher as the backstop, and a DAG on it whose load reads at most a few files an insert. Defined only
for the test that runs it (``S3CH_TEST_BAD_URI`` set)."""

from __future__ import annotations

import datetime
import os

URI = os.environ.get("S3CH_TEST_BAD_URI")

if URI:
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_s3ch.compat import Asset
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
    from airflow_provider_s3ch.triggers.s3_events import listing_watcher
    from airflow_provider_s3ch.triggers.s3_notifications import notification_watcher

    landing = Asset(
        name="s3ch_events_bad_landing",
        uri=URI.rsplit("/", 1)[0] + "/",
        watchers=[
            notification_watcher("s3ch_events_bad_sqs", queue_url=os.environ["S3CH_TEST_BAD_QUEUE"], s3_uri=URI,
                                 wait_time=1),
            listing_watcher("s3ch_events_bad_listing", s3_uri=URI, poll_interval=5.0, keys_sort_by_arrival=True),
        ],
    )

    with DAG(
        dag_id="s3ch_events_bad",
        schedule=[landing],
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,
        tags=["s3ch", "test"],
    ):
        S3ToClickHouseOperator(
            task_id="load", s3_uri=URI, table=os.environ["S3CH_TEST_BAD_TABLE"], format="CSV",
            structure="file UInt16, id UInt32, v String", skip_loaded=True, skip_when_empty=True, files_from="events",
            max_files_per_load=int(os.environ["S3CH_TEST_BAD_MAX_FILES"]))

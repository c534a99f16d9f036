"""Continuous ingestion under the real scheduler and triggerer: an asset with the S3 listing watcher, and a DAG
scheduled on it whose load takes its files from the asset events. Defined only for the test that runs it
(``S3CH_TEST_EVENTS_URI`` set), so that the other scheduler tests' triggerers run no watcher."""

from __future__ import annotations

import datetime
import os

URI = os.environ.get("S3CH_TEST_EVENTS_URI")

if URI:
    from airflow.providers.common.compat.sdk import DAG

    from airflow_provider_s3ch.compat import Asset
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
    from airflow_provider_s3ch.triggers.s3_events import listing_watcher

    landing = Asset(
        name="s3ch_events_landing",
        uri=URI.rsplit("/", 1)[0] + "/",
        watchers=[listing_watcher("s3ch_events_listing", s3_uri=URI, poll_interval=1.0)],
    )

    with DAG(
        dag_id="s3ch_events",
        schedule=[landing],
        start_date=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        catchup=False,
        max_active_runs=1,
        tags=["s3ch", "test"],
    ):
        S3ToClickHouseOperator(task_id="load", s3_uri=URI, table=os.environ["S3CH_TEST_EVENTS_TABLE"], format="CSV",
                               structure="file UInt16, id UInt32, v String", skip_loaded=True, skip_when_empty=True,
                               files_from="events")

"""files_from: checked when the DAG is parsed; ``events`` needs Airflow 3's asset watchers."""

from __future__ import annotations

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.errors import InvalidRequestError, NeedsNewerAirflowError
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator


def operator(**kwargs: object) -> S3ToClickHouseOperator:
    return S3ToClickHouseOperator(task_id="load", s3_uri="s3://b/in/*.csv", table="t", skip_loaded=True, **kwargs)


def test_an_unknown_source_of_files_is_refused_at_parse_time() -> None:
    with pytest.raises(InvalidRequestError, match=r"files_from='sqs': give one of 'listing', 'events'"):
        operator(files_from="sqs")


def test_listing_is_the_default() -> None:
    assert operator().files_from == "listing"


@pytest.mark.skipif(not AIRFLOW_3, reason="Airflow 3's asset watchers")
def test_events_on_airflow_3() -> None:
    assert operator(files_from="events").files_from == "events"


@pytest.mark.skipif(AIRFLOW_3, reason="Airflow 2 has no asset watchers")
def test_events_need_airflow_3() -> None:
    with pytest.raises(NeedsNewerAirflowError, match=r"files_from='events'.*needs Apache Airflow 3\.0 or later"):
        operator(files_from="events")

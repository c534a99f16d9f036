"""The operator's defaults are written as values in its signature (the reference shows them as such); they are
the core's defaults, so the two cannot drift apart."""

from __future__ import annotations

import inspect

from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator


def test_the_timeouts_are_seconds_shown_as_values() -> None:
    params = inspect.signature(S3ToClickHouseOperator.__init__).parameters
    assert params["claim_timeout"].default == DEFAULT_CLAIM_TIMEOUT == 3600.0
    assert params["earlier_try_timeout"].default == 6 * 3600.0
    assert S3ToClickHouseOperator(task_id="t", s3_uri="s3://b/k.csv", table="t").claim_timeout == 3600.0

"""A small load's predicted peak memory against the server's own figure (``system.query_log``).

The model's base (100 MiB) is what a load of real size holds whatever its data; a load of a few files of
kilobytes to megabytes holds a few MiB. Its prediction is within 64 MiB of what the server measured.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_s3ch.core.sizes import MiB
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context, query_log

pytestmark = pytest.mark.integration

BUCKET = "s3ch-small"


@pytest.mark.parametrize("rows", [100, 10_000, 100_000])
def test_a_small_loads_predicted_peak_is_within_64_mib_of_the_servers(stack: LocalStack, rows: int) -> None:
    stack.create_bucket(BUCKET)
    key = f"small-{uuid.uuid4().hex[:6]}.csv"
    body = "".join(f"{i},v{i}-{'x' * (i % 40)}\n" for i in range(rows))
    stack.s3_client().put_object(Bucket=BUCKET, Key=key, Body=body.encode())
    table = f"default.small_{uuid.uuid4().hex[:6]}"
    stack.clickhouse_client().execute(f"CREATE TABLE {table} (id UInt32, v String) ENGINE = MergeTree ORDER BY id")
    result = S3ToClickHouseOperator(task_id="small", s3_uri=f"s3://{BUCKET}/{key}", table=table, format="CSV",
                                    structure="id UInt32, v String", learn_from_history=False,
                                    ).execute(fake_context("small"))
    measured = int(query_log(stack, result["query_id"])["memory_usage"])
    predicted = result["predicted_memory_usage"]
    assert result["written_rows"] == rows and measured < 100 * MiB
    assert abs(predicted - measured) <= 64 * MiB, (predicted, measured, result["predicted_memory_reason"])
    assert "a small load" in result["predicted_memory_reason"]

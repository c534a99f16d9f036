"""A Parquet sample's columns from its footer: the engine's ``DESCRIBE`` of the footer's schema alone
(``format(Parquet, …)``, what the schema check sends) against its ``DESCRIBE`` of the file in S3."""

from __future__ import annotations

import hashlib

from clickhouse_driver.errors import ServerException
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.parquet_footer import schema_file
from airflow_provider_s3ch.core.sql import render_describe_schema
from airflow_provider_s3ch.local import LocalStack
from tests.integration.support import SAMPLE_BUCKET
from tests.unit.test_parquet_footer import parquet_files

#: Schema inference settings a user may send with a load (they reach the check's ``DESCRIBE``).
INFERENCE = st.fixed_dictionaries({}, optional={
    "schema_inference_make_columns_nullable": st.sampled_from([0, 1, "auto"]),
    "input_format_parquet_use_native_reader_v3": st.booleans(),
    "input_format_parquet_skip_columns_with_unsupported_types_in_schema_inference": st.booleans(),
})


def _outcome(client, sql: str, values: dict) -> object:
    try:
        return client.execute(sql, settings=values)
    except ServerException as exc:
        return ("error", exc.code)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(data=parquet_files(), values=INFERENCE)
def test_the_footers_schema_describes_as_the_file(stack: LocalStack, data: bytes, values: dict) -> None:
    key = f"footer-schema/{hashlib.sha256(data).hexdigest()}.parquet"
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=key, Body=data)
    client = stack.clickhouse_client()
    from_s3 = _outcome(client, f"DESCRIBE TABLE s3('{stack.s3_endpoint}/{SAMPLE_BUCKET}/{key}', "
                               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')", values)
    statement = render_describe_schema(schema_file(data), "Parquet", name=f"s3://{SAMPLE_BUCKET}/{key}",
                                       settings=values)
    event("an error" if isinstance(from_s3, tuple) else "columns")
    assert _outcome(client, statement.sql, statement.settings) == from_s3
    assert "PAR1" not in statement.redacted and f"s3://{SAMPLE_BUCKET}/{key}" in statement.redacted

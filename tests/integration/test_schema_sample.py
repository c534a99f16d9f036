"""The schema check's ``DESCRIBE`` of a file whose header names its columns reads a few rows, not 25,000: the
engine finds the same names either way. And a load describes its sample file once, beside the footer reads."""

from __future__ import annotations

import gzip
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.schema import HEADER_SAMPLE_ROWS, describe_settings
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, fake_context

NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True), min_size=1, max_size=5, unique=True)
#: A column's values: empty for its first rows (``blank``), then values of one kind.
VALUES = st.tuples(st.sampled_from(["int", "float", "word", "date", "empty"]), st.integers(0, 2 * HEADER_SAMPLE_ROWS))


def _value(kind: str, row: int) -> str:
    return {"int": str(row * 7), "float": f"{row / 3:.3f}", "word": f"w{row}x", "date": f"2024-01-{row % 28 + 1:02d}",
            "empty": ""}[kind]


def _text(names: list[str], columns: list[tuple[str, int]], rows: int, sep: str) -> bytes:
    lines = [sep.join(names)]
    lines += [sep.join("" if row < blank else _value(kind, row) for kind, blank in columns) for row in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def _describe(stack: LocalStack, key: str, fmt: str, with_settings: dict[str, Any]) -> list[str] | str:
    aws = stack.aws_connection()
    url = f"{stack.s3_endpoint}/{SAMPLE_BUCKET}/{key}"
    try:
        rows = stack.clickhouse_client().execute(
            f"DESCRIBE TABLE s3('{url}', '{aws['login']}', '{aws['password']}', '{fmt}')",
            settings={"schema_inference_use_cache_for_s3": 0, **with_settings})
    except Exception as exc:  # noqa: BLE001 - compared as the error's first line
        return str(exc).splitlines()[0]
    return [row[0] for row in rows]


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fmt=st.sampled_from(["CSVWithNames", "TSVWithNames"]), gz=st.booleans(),
       rows=st.integers(1, 3 * HEADER_SAMPLE_ROWS))
def test_a_header_names_the_columns_whatever_rows_are_read(stack: LocalStack, data: st.DataObject, fmt: str,
                                                           gz: bool, rows: int) -> None:
    names = data.draw(NAMES)
    columns = data.draw(st.lists(VALUES, min_size=len(names), max_size=len(names)))
    body = _text(names, columns, rows, "," if fmt.startswith("CSV") else "\t")
    key = f"schema-sample/{uuid.uuid4().hex[:8]}.{'csv' if fmt.startswith('CSV') else 'tsv'}{'.gz' if gz else ''}"
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=key, Body=gzip.compress(body) if gz else body)
    few = describe_settings(fmt, {})
    assert few == {"input_format_max_rows_to_read_for_schema_inference": HEADER_SAMPLE_ROWS}
    assert _describe(stack, key, fmt, few) == _describe(stack, key, fmt, {}) == names


def test_other_formats_read_the_servers_default_rows() -> None:
    assert describe_settings("JSONEachRow", {"input_format_json_try_infer_numbers_from_strings": 1}) == {
        "input_format_json_try_infer_numbers_from_strings": 1}
    assert describe_settings("JSONEachRow", {"max_insert_threads": 4}) == {}  # the insert's: not the DESCRIBE's
    assert describe_settings("Parquet", {}) == {}
    assert describe_settings("CSVWithNames", {"input_format_max_rows_to_read_for_schema_inference": 5}) == {
        "input_format_max_rows_to_read_for_schema_inference": 5}


def test_a_load_describes_its_sample_once_with_few_rows(stack: LocalStack) -> None:
    prefix = f"schema-sample-load/{uuid.uuid4().hex[:8]}"
    for n in range(2):
        body = "id,name\n" + "".join(f"{n * 1000 + i},n{i}\n" for i in range(500))
        stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}/part-{n}.csv.gz",
                                     Body=gzip.compress(body.encode()))
    table = f"default.sample_{uuid.uuid4().hex[:8]}"
    client = stack.clickhouse_client()
    client.execute(f"CREATE TABLE {table} (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
    result = S3ToClickHouseOperator(task_id="sample", s3_uri=f"s3://{SAMPLE_BUCKET}/{prefix}/*.csv.gz",
                                    table=table).execute(fake_context("sample"))
    assert client.execute(f"SELECT count() FROM {table}")[0][0] == 1000 == result["written_rows"]
    assert next(c for c in result["checks"] if c["name"] == "schema")["status"] == "ok"
    client.execute("SYSTEM FLUSH LOGS")
    described = client.execute(
        "SELECT Settings['input_format_max_rows_to_read_for_schema_inference'] FROM system.query_log "
        "WHERE type = 'QueryFinish' AND query_kind = 'Describe' AND query LIKE %(k)s", {"k": f"%{prefix}/part-0%"})
    assert described == [(str(HEADER_SAMPLE_ROWS),)]

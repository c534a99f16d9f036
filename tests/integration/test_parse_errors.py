"""A parse error names the problem, the column, the row and the file, and quotes none of the file's rows.

Each file below carries a recognisable value in every row (``PRIVATE-<n>``) and one value its column's type
cannot take; the server's own message quotes both (its row dump, ``before: '…'``, ``text "…"``). The provider's
error, the driver's error chained to it and the task's log hold neither; the query the error suggests shows
the rows to whoever has the bucket's credentials.
"""

from __future__ import annotations

import logging
import re
import traceback

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch.errors import ClickHouseQueryError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context

ROWS = 40
BAD_ROW = 23

#: format, structure, a good row, the bad row (the value its type cannot take), header; the column that fails.
CASES = {
    "float.csv": ("CSVWithNames", "id UInt64, name String, score Nullable(Float64)",
                  "{n},PRIVATE-{n},{n}.5", "{n},PRIVATE-{n},twelve", "id,name,score", "score"),
    "uint.csv": ("CSVWithNames", "id UInt64, name String", "{n},PRIVATE-{n}", "abc{n},PRIVATE-{n}", "id,name", "id"),
    "date.csv": ("CSVWithNames", "id UInt64, d Date, name String", "{n},2024-01-02,PRIVATE-{n}",
                 "{n},PRIVATE-DATE,PRIVATE-{n}", "id,d,name", "d"),
    "uint.tsv": ("TSVWithNames", "id UInt64, name String", "{n}\tPRIVATE-{n}", "x{n}\tPRIVATE-{n}", "id\tname", "id"),
    "uint.json": ("JSONEachRow", "id UInt64, name String", '{{"id":{n},"name":"PRIVATE-{n}"}}',
                  '{{"id":"PRIVATE-{n}","name":"PRIVATE-{n}"}}', None, "id"),
    "wide.csv": ("CSV", "id UInt64, name String", "{n},PRIVATE-{n}", "{n},PRIVATE-{n},PRIVATE-extra", None, None),
}


def _body(good: str, bad: str, header: str | None) -> bytes:
    lines = [bad.format(n=n) if n == BAD_ROW else good.format(n=n) for n in range(1, ROWS + 1)]
    return ("\n".join(([header] if header else []) + lines) + "\n").encode()


def _put(stack: LocalStack, bucket: str, name: str) -> str:
    _, _, good, bad, header, _ = CASES[name]
    stack.s3_client().put_object(Bucket=bucket, Key=f"parse/{name}", Body=_body(good, bad, header))
    return f"parse/{name}"


def _no_rows(text: str) -> None:
    assert "PRIVATE" not in text and "twelve" not in text, text


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_error_keeps_the_reason_and_drops_the_rows(stack: LocalStack, posts: SampleDataset, name: str) -> None:
    fmt, structure, *_, column = CASES[name]
    key = _put(stack, posts.bucket, name)
    url = f"{stack.s3_endpoint}/{posts.bucket}/{key}"
    hook = ClickHouseHook()
    with pytest.raises(Exception) as raw:  # the server's own message quotes the rows
        hook.client().execute(f"SELECT * FROM s3('{url}', '{stack.s3_access_key}', '{stack.s3_secret_key}', "
                              f"'{fmt}', '{structure}')")
    assert "PRIVATE" in raw.value.message
    error = hook.translate_error(raw.value)
    assert isinstance(error, ClickHouseQueryError) and isinstance(error, AirflowFailException)
    _no_rows(str(error))
    _no_rows(str(raw.value))  # the driver's error, which Airflow prints as the cause
    assert f"in file {posts.bucket}/{key}" in str(error) and "retrying would fail the same way" in str(error)
    assert f"row {BAD_ROW}" in str(error) or name == "wide.csv", error
    if column:
        assert f"'{column}'" in str(error), error
    # The query it suggests shows the bad row to whoever holds the credentials.
    shown = re.search(r"SELECT \* FROM s3\('([^']+)', 'LineAsString'\)( LIMIT \d+(?: OFFSET \d+)?)", str(error))
    assert shown, error
    lines = hook.client().execute(f"SELECT * FROM s3('{shown.group(1)}', '{stack.s3_access_key}', "
                                  f"'{stack.s3_secret_key}', 'LineAsString'){shown.group(2)}")
    assert any(f"PRIVATE-{BAD_ROW}" in line for (line,) in lines), lines


def test_a_load_that_fails_to_parse_logs_no_row(
    stack: LocalStack, posts: SampleDataset, caplog: pytest.LogCaptureFixture
) -> None:
    key = _put(stack, posts.bucket, "float.csv")
    client = stack.clickhouse_client()
    client.execute("CREATE TABLE default.parsed (id UInt64, name String, score Nullable(Float64)) "
                   "ENGINE = MergeTree ORDER BY id")
    op = S3ToClickHouseOperator(task_id="parsed", s3_uri=f"s3://{posts.bucket}/{key}", table="default.parsed")
    with caplog.at_level(logging.DEBUG), pytest.raises(ClickHouseQueryError) as info:
        op.execute(fake_context("parsed"))
    printed = "".join(traceback.format_exception(info.value))  # what Airflow prints: the chain of causes
    _no_rows(printed)
    _no_rows(caplog.text)
    assert "'score' of type Nullable(Float64)" in str(info.value) and "LineAsString" in str(info.value)
    assert client.execute("SELECT count() FROM default.parsed") == [(0,)]
    assert client.execute("SELECT count() FROM system.tables WHERE name LIKE '_s3ch_stage_%'")[0][0] == 0

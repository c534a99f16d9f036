"""Files whose columns do not match the table: a terminal error before anything is loaded, not rows of defaults."""

from __future__ import annotations

import io
import logging
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch.errors import S3chTerminalError, SchemaError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, as_json, fake_context

KEPT = [(1, "kept")]


def _parquet(stack: LocalStack, key: str, columns: dict[str, Any]) -> str:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=key, Body=buf.getvalue())
    return f"s3://{SAMPLE_BUCKET}/{key}"


def _table(stack: LocalStack, columns: str = "id UInt64, name String", engine: str = "MergeTree ORDER BY id") -> str:
    """A fresh table holding one row, ``(1, 'kept')``."""
    table = f"default.schema_{uuid.uuid4().hex[:8]}"
    client = stack.clickhouse_client()
    client.execute(f"CREATE TABLE {table} ({columns}) ENGINE = {engine}")
    client.execute(f"INSERT INTO {table} (id, name) VALUES (1, 'kept')")
    return table


def _rows(stack: LocalStack, table: str, columns: str = "id, name") -> list[tuple[Any, ...]]:
    return stack.clickhouse_client().execute(f"SELECT {columns} FROM {table} ORDER BY id")


def _staging_tables(stack: LocalStack) -> int:
    return int(stack.clickhouse_client().execute(
        "SELECT count() FROM system.tables WHERE name LIKE '\\_s3ch\\_stage\\_%'"
    )[0][0])  # fmt: skip


def _load(table: str, s3_uri: str, **kwargs: Any) -> dict[str, Any]:
    return S3ToClickHouseOperator(task_id="schema", s3_uri=s3_uri, table=table, **kwargs).execute(
        fake_context("schema")
    )


def _schema_check(result: dict[str, Any]) -> dict[str, Any]:
    checks = result["plan"]["checks"] if result.get("dry_run") else result["checks"]
    return next(c for c in checks if c["name"] == "schema")


@pytest.fixture(scope="module")
def xyz(stack: LocalStack) -> str:
    return _parquet(stack, "schema/xyz/part-0.parquet", {"x": [1, 2], "y": ["a", "b"], "z": [1.5, 2.5]})


@pytest.fixture(scope="module")
def id_name_extra(stack: LocalStack) -> str:
    return _parquet(stack, "schema/extra/part-0.parquet",
                    {"id": pa.array([2, 3], pa.int64()), "name": ["b", "c"], "extra": ["e", "f"]})


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_other_columns_fail_terminally_naming_file_and_columns_and_leave_the_target(
    stack: LocalStack, xyz: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: Parquet x, y, z into (id, name) used to load rows of (0, '')."""
    table = _table(stack)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SchemaError) as info:
        _load(table, xyz, mode=mode)
    err = info.value
    assert isinstance(err, S3chTerminalError) and isinstance(err, AirflowFailException)
    text = str(err)
    assert xyz in text and table in text
    assert "id UInt64, name String" in text and "x, y, z" in text
    assert "structure=" in text and "schema_check=" in text
    assert _rows(stack, table) == KEPT
    assert _staging_tables(stack) == 0, "the check runs before any staging table is created"
    assert stack.s3_secret_key not in caplog.text


def test_a_dry_run_fails_the_same_way(stack: LocalStack, xyz: str) -> None:
    table = _table(stack)
    with pytest.raises(SchemaError, match="x, y, z"):
        _load(table, xyz, dry_run=True)
    assert _rows(stack, table) == KEPT


def test_the_check_shows_in_a_dry_runs_plan(stack: LocalStack, posts: SampleDataset, posts_table: str) -> None:
    result = _load(posts_table, posts.s3_uri, dry_run=True)
    check = _schema_check(result)
    assert check["status"] == "ok" and f"s3://{posts.bucket}/{posts.keys[0]}" in check["message"]
    assert stack.s3_secret_key not in as_json(result)


def test_a_missing_column_with_a_default_loads(stack: LocalStack) -> None:
    uri = _parquet(stack, "schema/default/part-0.parquet", {"id": pa.array([2, 3], pa.int64()), "name": ["b", "c"]})
    table = _table(
        stack, "id UInt64, name String, source String DEFAULT 'from-default', n Nullable(String) DEFAULT NULL"
    )
    result = _load(table, uri)
    assert result["written_rows"] == 2
    assert _rows(stack, table, "id, name, source, n")[1:] == [
        (2, "b", "from-default", None),
        (3, "c", "from-default", None),
    ]
    check = _schema_check(result)
    assert check["status"] == "ok" and "source, n not in the file" in check["message"]


def test_a_missing_nullable_column_without_a_default_fails(stack: LocalStack) -> None:
    uri = _parquet(stack, "schema/nonull/part-0.parquet", {"id": pa.array([2], pa.int64()), "name": ["b"]})
    table = _table(stack, "id UInt64, name String, note Nullable(String)")
    with pytest.raises(SchemaError, match=r"note Nullable\(String\)"):
        _load(table, uri)
    assert _rows(stack, table) == KEPT


def test_an_extra_file_column_fails_unless_told_to_ignore_it(stack: LocalStack, id_name_extra: str) -> None:
    table = _table(stack)
    with pytest.raises(SchemaError, match="file columns extra") as info:
        _load(table, id_name_extra)
    assert "on_schema_change='ignore_extra'" in str(info.value)
    assert _rows(stack, table) == KEPT

    result = _load(table, id_name_extra, schema_check="ignore_extra")  # the older spelling of the same contract
    assert _rows(stack, table) == [*KEPT, (2, "b"), (3, "c")]
    assert _schema_check(result)["status"] == "ok" and "extra" in _schema_check(result)["message"]
    assert result["table_changes"]["left_out_columns"] == ["extra"]


def test_warn_loads_as_the_server_would_and_says_so(stack: LocalStack, xyz: str) -> None:
    table = _table(stack)
    result = _load(table, xyz, schema_check="warn")
    assert _rows(stack, table) == [(0, ""), (0, ""), *KEPT]
    assert _schema_check(result)["status"] == "warn"
    assert any("x, y, z" in w for w in result["warnings"])


def test_off_skips_the_check(stack: LocalStack, xyz: str) -> None:
    table = _table(stack)
    result = _load(table, xyz, schema_check="off", dry_run=True)
    assert _schema_check(result) == {"name": "schema", "status": "skipped", "message": "schema_check='off'"}


def test_a_nested_file_column_into_a_plain_one_fails_before_loading(stack: LocalStack) -> None:
    uri = _parquet(stack, "schema/nested/part-0.parquet", {"id": pa.array([2], pa.int64()), "name": [[1, 2]]})
    table = _table(stack)
    with pytest.raises(SchemaError, match=r"name: Array\(Nullable\(Int64\)\) into String"):
        _load(table, uri)
    assert _rows(stack, table) == KEPT


def test_a_distributed_target_is_compared_with_its_own_columns(stack: LocalStack, xyz: str) -> None:
    name = f"schema_dist_{uuid.uuid4().hex[:6]}"
    dist, local = stack.create_distributed_table(
        name, "CREATE TABLE {table} (id UInt64, name String, d String DEFAULT 'dflt') ENGINE = MergeTree ORDER BY id"
    )
    with pytest.raises(SchemaError, match=f"{dist}.*x, y, z"):
        _load(dist, xyz)
    uri = _parquet(stack, "schema/dist/part-0.parquet", {"id": pa.array([2, 3], pa.int64()), "name": ["b", "c"]})
    result = _load(dist, uri)
    assert _schema_check(result)["status"] == "ok"
    assert _rows(stack, local, "id, name, d") == [(2, "b", "dflt"), (3, "c", "dflt")]


def test_csv_without_names_is_checked_only_with_a_structure(stack: LocalStack) -> None:
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key="schema/plain/part-0.csv", Body=b"2,b\n3,c\n")
    uri = f"s3://{SAMPLE_BUCKET}/schema/plain/*.csv"
    table = _table(stack)
    skipped = _schema_check(_load(table, uri, format="CSV", dry_run=True))
    assert skipped["status"] == "skipped" and "structure=" in skipped["message"]

    with pytest.raises(SchemaError, match="name into id, id into name"):
        _load(table, uri, format="CSV", structure="name String, id UInt64")
    assert _rows(stack, table) == KEPT

    result = _load(table, uri, format="CSV", structure="a UInt64, b String")
    assert "a into id, b into name" in _schema_check(result)["message"]
    assert _rows(stack, table) == [*KEPT, (2, "b"), (3, "c")]


def test_a_structure_column_a_parquet_file_lacks_fails(stack: LocalStack) -> None:
    uri = _parquet(stack, "schema/structured/part-0.parquet", {"id": pa.array([2], pa.int64()), "name": ["b"]})
    table = _table(stack)
    with pytest.raises(SchemaError, match="structure columns nme are not in the file"):
        _load(table, uri, structure="id UInt64, nme String")
    assert _rows(stack, table) == KEPT


def test_a_sample_the_server_cannot_describe_is_reported_and_the_load_decides(stack: LocalStack) -> None:
    """A CSV with a header and no rows has no types to infer; it loads nothing, which is right."""
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key="schema/header/part-0.csv", Body=b"id,name\n")
    table = _table(stack)
    result = _load(table, f"s3://{SAMPLE_BUCKET}/schema/header/*.csv")
    check = _schema_check(result)
    assert check["status"] == "warn" and "could not describe" in check["message"]
    assert _rows(stack, table) == KEPT


def test_the_describe_takes_the_settings_of_reading_the_files_not_those_of_the_insert(stack: LocalStack) -> None:
    """The insert's settings (threads, memory, blocks) are not the DESCRIBE's: only how the files are read and
    their columns inferred go with it."""
    key = f"schema/read_settings_{uuid.uuid4().hex[:8]}.csv"
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=key, Body=b"id,name\n2,two\n")
    table = _table(stack)
    result = _load(table, f"s3://{SAMPLE_BUCKET}/{key}", settings={
        "max_insert_threads": 1, "max_memory_usage": "2Gi", "input_format_csv_trim_whitespaces": 0})
    assert _schema_check(result)["status"] == "ok"
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    described = client.execute(
        "SELECT Settings['max_insert_threads'], Settings['max_memory_usage'], "
        "Settings['input_format_csv_trim_whitespaces'] FROM system.query_log "
        "WHERE query_kind = 'Describe' AND type = 'QueryFinish' AND query LIKE %(k)s", {"k": f"%{key}%"})
    assert described, "the schema check's DESCRIBE is in system.query_log"
    assert all(row == ("", "", "0") for row in described), described
    assert _rows(stack, table) == [*KEPT, (2, "two")]

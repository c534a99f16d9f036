"""Tables from the files, on the real stack: created from the server's schema inference, evolved under
``on_schema_change``, and never loaded with wrong rows."""

from __future__ import annotations

import io
import threading
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_s3ch.errors import InvalidRequestError, S3chTerminalError, SchemaError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, fake_context, secondary_inserts


def _put(stack: LocalStack, key: str, body: bytes) -> None:
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=key, Body=body)


def _parquet(stack: LocalStack, key: str, columns: dict[str, Any]) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    _put(stack, key, buf.getvalue())


def _prefix() -> str:
    return f"tables/{uuid.uuid4().hex[:8]}"


def _name() -> str:
    return f"default.created_{uuid.uuid4().hex[:8]}"


def _load(table: str, s3_uri: str, **kwargs: Any) -> dict[str, Any]:
    return S3ToClickHouseOperator(task_id="tables", s3_uri=s3_uri, table=table, **kwargs).execute(
        fake_context("tables")
    )


def _columns(stack: LocalStack, table: str, node: int = 0) -> list[tuple[str, str]]:
    db, name = table.split(".")
    return [
        (str(n), str(t))
        for n, t in stack.clickhouse_client(node).execute(
            "SELECT name, type FROM system.columns WHERE database = %(d)s AND table = %(t)s ORDER BY position",
            {"d": db, "t": name},
        )
    ]


def _exists(stack: LocalStack, table: str, node: int = 0) -> bool:
    db, name = table.split(".")
    return bool(stack.clickhouse_client(node).execute(
        "SELECT count() FROM system.tables WHERE database = %(d)s AND name = %(t)s", {"d": db, "t": name}
    )[0][0])  # fmt: skip


def _inferred(stack: LocalStack, pattern: str, fmt: str) -> list[tuple[str, str]]:
    """What the server's own schema inference says about the files (union of the files' columns)."""
    rows = stack.clickhouse_client().execute(
        f"DESCRIBE TABLE s3('{stack.s3_endpoint}/{SAMPLE_BUCKET}/{pattern}', '{stack.s3_access_key}', "
        f"'{stack.s3_secret_key}', '{fmt}')",
        settings={"schema_inference_mode": "union"},
    )
    return [(str(r[0]), str(r[1])) for r in rows]


def _strip_nullable(type_name: str) -> str:
    return type_name[len("Nullable(") : -1] if type_name.startswith("Nullable(") else type_name


# ---------------------------------------------------------------------------- creating


FILES = {
    "Parquet": (
        "parquet",
        lambda: _parquet_bytes({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", None, "c"],
                                "score": [1.5, 2.5, None]}),
    ),  # fmt: skip
    "CSVWithNames": ("csv", lambda: b"id,name,score\n1,a,1.5\n2,,2.5\n3,c,\n"),
    "JSONEachRow": (
        "jsonl",
        lambda: (
            b'{"id":1,"name":"a","score":1.5}\n{"id":2,"name":null,"score":2.5}\n'
            b'{"id":3,"name":"c","score":null}\n'
        ),
    ),
}


def _parquet_bytes(columns: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", list(FILES))
def test_a_first_run_creates_the_table_from_the_files_and_a_second_run_appends(stack: LocalStack, fmt: str) -> None:
    ext, body = FILES[fmt]
    prefix, table = _prefix(), _name()
    _put(stack, f"{prefix}/2024-01/part-0.{ext}", body())
    first = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/2024-01/*.{ext}", format=fmt, create_table="if_missing",
                  order_by="id")  # fmt: skip

    assert first["table_changes"]["created"] == "MergeTree table"
    assert first["table_changes"]["ddl"][0].startswith(f"CREATE TABLE IF NOT EXISTS `default`.`{table.split('.')[1]}`")
    inferred = _inferred(stack, f"{prefix}/2024-01/*.{ext}", fmt)
    # The documented policy: the key column loses Nullable, the others are as the server infers them.
    expected = [(n, _strip_nullable(t) if n == "id" else t) for n, t in inferred]
    assert _columns(stack, table) == expected
    assert [n for n, _ in expected] == ["id", "name", "score"]
    rows = stack.clickhouse_client().execute(f"SELECT id, name, score FROM {table} ORDER BY id")
    assert rows == [(1, "a", 1.5), (2, None, 2.5), (3, "c", None)]
    assert first["written_rows"] == 3

    _put(stack, f"{prefix}/2024-02/part-0.{ext}", body())
    second = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/2024-02/*.{ext}", format=fmt, create_table="if_missing",
                   order_by="id")  # fmt: skip
    assert second["table_changes"]["created"] is None and second["table_changes"]["ddl"] == []
    assert stack.clickhouse_client().execute(f"SELECT count(), countDistinct(id) FROM {table}")[0] == (6, 3)


def test_the_union_of_the_files_columns_and_keys_partition(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    _parquet(stack, f"{prefix}/a.parquet", {"id": pa.array([1, 2], pa.int64()), "day": ["2024-01-01", "2024-01-02"]})
    _parquet(stack, f"{prefix}/b.parquet",
             {"id": pa.array([3], pa.int64()), "day": ["2024-02-01"], "extra": ["x"]})  # fmt: skip
    result = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", create_table="if_missing",
                   order_by=["day", "id"], partition_by="toYYYYMM(toDate(day))",
                   table_settings={"index_granularity": 4096})  # fmt: skip
    assert _columns(stack, table) == [("id", "Int64"), ("day", "String"), ("extra", "Nullable(String)")]
    assert result["written_rows"] == 3
    assert stack.clickhouse_client().execute(f"SELECT id, extra FROM {table} ORDER BY id") == [
        (1, None), (2, None), (3, "x")
    ]  # fmt: skip
    keys = stack.clickhouse_client().execute(
        "SELECT sorting_key, partition_key, engine_full FROM system.tables WHERE database = 'default' AND name = %(t)s",
        {"t": table.split(".")[1]},
    )[0]
    assert keys[0] == "day, id" and keys[1] == "toYYYYMM(toDate(day))" and "index_granularity = 4096" in keys[2]
    assert sorted(result["partitions"]) == ["202401", "202402"]


def test_a_dry_run_shows_the_ddl_and_creates_nothing(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    _parquet(stack, f"{prefix}/a.parquet", {"id": pa.array([1], pa.int64()), "name": ["a"]})
    result = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", create_table="if_missing", order_by="id",
                   dry_run=True)  # fmt: skip
    assert result["dry_run"] and result["table_changes"]["created"] == "MergeTree table"
    assert "`id` Int64, `name` Nullable(String) DEFAULT NULL" in result["table_changes"]["ddl"][0]
    assert "ORDER BY id" in result["table_changes"]["ddl"][0]
    assert not _exists(stack, table)


def test_creating_needs_order_by_and_columns_the_files_have(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    _parquet(stack, f"{prefix}/a.parquet", {"id": pa.array([1], pa.int64()), "name": ["a"]})
    uri = f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet"
    with pytest.raises(InvalidRequestError, match="needs order_by"):
        _load(table, uri, create_table="if_missing")
    with pytest.raises(SchemaError, match="order_by='ts' names column 'ts'.*id, name"):
        _load(table, uri, create_table="if_missing", order_by="ts")
    with pytest.raises(InvalidRequestError, match="MergeTree"):
        _load(table, uri, create_table="if_missing", order_by="id", engine="Log")
    assert not _exists(stack, table)


def test_two_creators_at_once_end_with_one_table_and_every_row_once(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    for month in ("01", "02"):
        _parquet(stack, f"{prefix}/{month}/part.parquet",
                 {"id": pa.array(range(int(month) * 1000, int(month) * 1000 + 500), pa.int64()),
                  "name": [f"n{i}" for i in range(500)]})  # fmt: skip
    results: dict[str, Any] = {}

    def run(month: str) -> None:
        try:
            results[month] = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/{month}/*.parquet",
                                   create_table="if_missing", order_by="id")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            results[month] = exc

    threads = [threading.Thread(target=run, args=(m,)) for m in ("01", "02")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(r, dict) for r in results.values()), results
    assert stack.clickhouse_client().execute(f"SELECT count(), countDistinct(id) FROM {table}")[0] == (1000, 1000)
    assert _columns(stack, table) == [("id", "Int64"), ("name", "Nullable(String)")]


def test_a_table_that_exists_with_another_structure_is_never_replaced(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    stack.clickhouse_client().execute(f"CREATE TABLE {table} (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    stack.clickhouse_client().execute(f"INSERT INTO {table} VALUES (1, 'kept')")
    _parquet(stack, f"{prefix}/a.parquet", {"id": pa.array([2], pa.int64()), "name": ["b"], "extra": [1.0]})
    with pytest.raises(SchemaError, match="extra"):
        _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", create_table="if_missing", order_by="id")
    assert _columns(stack, table) == [("id", "UInt32"), ("name", "String")]
    assert stack.clickhouse_client().execute(f"SELECT * FROM {table}") == [(1, "kept")]


# ---------------------------------------------------------------------------- the contract


@pytest.fixture
def grown(stack: LocalStack) -> tuple[str, str, str]:
    """A table loaded from ``id, name`` files, and next month's files that gained ``extra``."""
    prefix, table = _prefix(), _name()
    _parquet(stack, f"{prefix}/01/part.parquet", {"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]})
    _parquet(stack, f"{prefix}/02/part.parquet",
             {"id": pa.array([3, 4], pa.int64()), "name": ["c", "d"], "extra": [10.5, None]})  # fmt: skip
    _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/01/*.parquet", create_table="if_missing", order_by="id")
    return table, f"s3://{SAMPLE_BUCKET}/{prefix}/02/*.parquet", f"s3://{SAMPLE_BUCKET}/{prefix}/02/part.parquet"


def test_a_new_column_fails_by_default_naming_the_fix(stack: LocalStack, grown: tuple[str, str, str]) -> None:
    table, uri, file = grown
    with pytest.raises(SchemaError) as info:
        _load(table, uri)
    text = str(info.value)
    assert isinstance(info.value, S3chTerminalError)
    assert file in text and "extra" in text
    assert "on_schema_change='add_columns'" in text and "on_schema_change='ignore_extra'" in text
    assert _columns(stack, table) == [("id", "Int64"), ("name", "Nullable(String)")]
    assert stack.clickhouse_client().execute(f"SELECT count() FROM {table}")[0][0] == 2


def test_add_columns_adds_it_old_rows_read_null_new_rows_the_values(
    stack: LocalStack, grown: tuple[str, str, str]
) -> None:
    table, uri, _ = grown
    result = _load(table, uri, on_schema_change="add_columns")
    assert result["table_changes"]["added_columns"] == ["extra"]
    assert "ADD COLUMN IF NOT EXISTS `extra` Nullable(Float64) DEFAULT NULL" in result["table_changes"]["ddl"][0]
    assert _columns(stack, table) == [("id", "Int64"), ("name", "Nullable(String)"), ("extra", "Nullable(Float64)")]
    assert stack.clickhouse_client().execute(f"SELECT id, extra FROM {table} ORDER BY id") == [
        (1, None), (2, None), (3, 10.5), (4, None)
    ]  # fmt: skip
    # The old files load again under the new table (the added column has a default).
    again = _load(table, uri.replace("/02/", "/01/"), on_schema_change="add_columns")
    assert again["table_changes"]["added_columns"] == [] and again["written_rows"] == 2


def test_add_columns_in_a_dry_run_changes_nothing(stack: LocalStack, grown: tuple[str, str, str]) -> None:
    table, uri, _ = grown
    result = _load(table, uri, on_schema_change="add_columns", dry_run=True)
    assert result["table_changes"]["added_columns"] == ["extra"]
    assert _columns(stack, table) == [("id", "Int64"), ("name", "Nullable(String)")]


def test_ignore_extra_loads_the_rest_and_names_the_left_out_column(
    stack: LocalStack, grown: tuple[str, str, str]
) -> None:
    table, uri, file = grown
    result = _load(table, uri, on_schema_change="ignore_extra")
    assert result["table_changes"]["left_out_columns"] == ["extra"]
    assert any("extra" in w and file in w and "left out" in w for w in result["warnings"])
    assert _columns(stack, table) == [("id", "Int64"), ("name", "Nullable(String)")]
    assert stack.clickhouse_client().execute(f"SELECT count() FROM {table}")[0][0] == 4


def test_text_into_a_nullable_number_fails_before_loading_naming_file_and_column(stack: LocalStack) -> None:
    """The server would read 'not a number' as NULL there without an error: the check refuses it."""
    prefix, table = _prefix(), _name()
    _parquet(
        stack, f"{prefix}/01/part.parquet", {"id": pa.array([1, 2], pa.int64()), "n": pa.array([5, 6], pa.int64())}
    )
    _parquet(stack, f"{prefix}/02/part.parquet", {"id": pa.array([3], pa.int64()), "n": ["not a number"]})
    _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/01/*.parquet", create_table="if_missing", order_by="id")
    with pytest.raises(SchemaError) as info:
        _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/02/*.parquet", on_schema_change="add_columns")
    text = str(info.value)
    assert "file column n" in text and f"{prefix}/02/part.parquet" in text and "NULL" in text
    assert _columns(stack, table) == [("id", "Int64"), ("n", "Nullable(Int64)")]
    assert stack.clickhouse_client().execute(f"SELECT id, n FROM {table} ORDER BY id") == [(1, 5), (2, 6)]


def test_text_that_does_not_parse_into_a_number_fails_terminally_target_unchanged(stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    stack.clickhouse_client().execute(f"CREATE TABLE {table} (id UInt64, n UInt64) ENGINE = MergeTree ORDER BY id")
    stack.clickhouse_client().execute(f"INSERT INTO {table} VALUES (1, 5)")
    _parquet(stack, f"{prefix}/part.parquet", {"id": pa.array([3, 4], pa.int64()), "n": ["7", "not a number"]})
    with pytest.raises(S3chTerminalError) as info:
        _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", on_schema_change="add_columns")
    text = str(info.value)
    assert "column 'n'" in text and "as UInt64" in text and f"{prefix}/part.parquet" in text
    assert "not a number" not in text  # the file's value stays out of the log (see the query the error gives)
    assert stack.clickhouse_client().execute(f"SELECT id, n FROM {table} ORDER BY id") == [(1, 5)]


def test_on_schema_change_is_checked(stack: LocalStack) -> None:
    with pytest.raises(InvalidRequestError, match="on_schema_change"):
        _load(_name(), f"s3://{SAMPLE_BUCKET}/x.parquet", on_schema_change="drop_columns")
    with pytest.raises(InvalidRequestError, match="give one"):
        _load(_name(), f"s3://{SAMPLE_BUCKET}/x.parquet", on_schema_change="add_columns", schema_check="ignore_extra")


# ---------------------------------------------------------------------------- distributed


CLUSTER = {"clickhouse_conn_id": "clickhouse_cluster", "aws_conn_id": "aws_cluster"}


def test_a_distributed_load_creates_the_tables_on_every_node_and_loads(cluster_stack: LocalStack) -> None:
    prefix, table = _prefix(), _name()
    s3 = cluster_stack.s3_client()
    for i in range(6):
        s3.put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}/part-{i}.parquet", Body=_parquet_bytes(
            {"id": pa.array(range(i * 100, i * 100 + 100), pa.int64()), "name": [f"n{j}" for j in range(100)]}
        ))  # fmt: skip
    result = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", create_table="if_missing", order_by="id",
                   strategy="distributed", **CLUSTER)  # fmt: skip
    assert "node by node" in result["table_changes"]["created"]
    local = f"{table}_local"
    for node in range(3):
        assert _columns(cluster_stack, local, node) == [("id", "Int64"), ("name", "Nullable(String)")]
        assert _exists(cluster_stack, table, node)
    assert result["strategy"] == "distributed" and result["written_rows"] == 600
    assert cluster_stack.clickhouse_client().execute(f"SELECT count(), countDistinct(id) FROM {table}")[0] == (600, 600)
    # Each node wrote its share into its own local table (s3Cluster hands the six files out on demand: a node's
    # share may be none of them); the shares add up to the files' rows.
    per_node = [cluster_stack.clickhouse_client(n).execute(f"SELECT count() FROM {local}")[0][0] for n in range(3)]
    assert sum(per_node) == 600, per_node
    for n in range(3):
        inserts, rows = secondary_inserts(cluster_stack, result["query_id"], n)
        assert inserts >= 1 and rows == per_node[n], (n, inserts, rows, per_node)

    # Next files gain a column: added on every node's local table and on the Distributed table.
    s3.put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}/more/part.parquet", Body=_parquet_bytes(
        {"id": pa.array([1000, 1001], pa.int64()), "name": ["a", "b"], "extra": ["x", "y"]}
    ))  # fmt: skip
    grown = _load(table, f"s3://{SAMPLE_BUCKET}/{prefix}/more/*.parquet", on_schema_change="add_columns", **CLUSTER)
    assert grown["table_changes"]["added_columns"] == ["extra"]
    for node in range(3):
        assert ("extra", "Nullable(String)") in _columns(cluster_stack, local, node)
        assert ("extra", "Nullable(String)") in _columns(cluster_stack, table, node)
    assert cluster_stack.clickhouse_client().execute(f"SELECT count(), countIf(extra IS NOT NULL) FROM {table}")[0] == (
        602, 2
    )  # fmt: skip

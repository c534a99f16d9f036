"""The operator end to end on the real local stack: rows land, figures match system.query_log."""

from __future__ import annotations

import gzip
import json
import uuid

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import as_json, count, fake_context, query_log


def test_parquet_load_lands_every_row_and_figures_match_query_log(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, memory_cap="1GiB")
    result = op.execute(fake_context())

    assert count(stack, posts_table) == posts.rows
    entry = query_log(stack, result["query_id"])
    assert result["written_rows"] == entry["written_rows"] == posts.rows
    assert result["written_bytes"] == entry["written_bytes"]
    assert result["read_rows"] == entry["read_rows"]
    assert result["read_bytes"] == entry["read_bytes"]
    assert result["duration_ms"] == entry["query_duration_ms"]
    assert result["memory_usage"] == entry["memory_usage"]
    assert result["files"] == len(posts.keys) and result["bytes"] == posts.bytes
    assert result["format"] == "Parquet" and result["strategy"] == "single"
    # Every planned setting is in the server's record of the query, with the planned value.
    logged = entry["Settings"]
    assert result["settings"]["insert_deduplicate"] == 0 and result["settings"]["min_insert_block_size_rows"] == 0
    assert result["settings"]["max_memory_usage"] == 1024**3
    for name, value in result["settings"].items():
        assert logged[name] == str(value), name
    json.dumps(result)  # JSON-safe for XCom


def test_settings_override_wins_and_is_reported(stack: LocalStack, posts: SampleDataset, posts_table: str) -> None:
    op = S3ToClickHouseOperator(
        task_id="load", s3_uri=posts.s3_uri, table=posts_table, settings={"max_insert_threads": 2, "max_threads": 3}
    )
    result = op.execute(fake_context())
    logged = query_log(stack, result["query_id"])["Settings"]
    assert logged["max_insert_threads"] == "2" and logged["max_threads"] == "3"
    assert set(result["overrides"]) == {"max_insert_threads", "max_threads"}
    assert count(stack, posts_table) == posts.rows


def test_dry_run_loads_nothing_and_shows_redacted_sql(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, dry_run=True)
    result = op.execute(fake_context())
    assert result["dry_run"] is True
    assert "INSERT INTO `default`." in result["sql"] and "s3(" in result["sql"]
    assert stack.s3_secret_key not in as_json(result)
    assert result["plan"]["settings"]["values"]["insert_deduplicate"] == 0
    assert count(stack, posts_table) == 0


def _put(stack: LocalStack, bucket: str, key: str, body: bytes) -> None:
    stack.s3_client().put_object(Bucket=bucket, Key=key, Body=body)


def test_gzip_csv_with_header_and_tsv_with_names_from_brace_and_double_star_globs(stack: LocalStack) -> None:
    """A README-style use: text formats, compression, `{a,b}` and `**` globs, into existing tables."""
    bucket = "s3ch-text"
    stack.create_bucket(bucket)
    client = stack.clickhouse_client()
    client.execute(
        "CREATE TABLE default.events (id UInt32, name String, amount Float64) ENGINE = MergeTree ORDER BY id"
    )
    expected = 0
    for region in ("eu", "us", "ap"):
        for day in ("01", "02"):
            rows = [(i, f"{region}-{day}-{i}", i * 1.5) for i in range(100 if region != "ap" else 7)]
            csv = "name,id,amount\n" + "".join(f'"{n}",{i},{a}\n' for i, n, a in rows)  # header order != table order
            _put(stack, bucket, f"csv/{region}/2024/{day}/part.csv.gz", gzip.compress(csv.encode()))
            tsv = "id\tname\tamount\n" + "".join(f"{i}\t{n}\t{a}\n" for i, n, a in rows)
            _put(stack, bucket, f"tsv/{region}/day={day}/part.tsv", tsv.encode())
            if region in ("eu", "us"):
                expected += len(rows)

    csv_op = S3ToClickHouseOperator(
        task_id="csv", s3_uri=f"s3://{bucket}/csv/{{eu,us}}/**.csv.gz", table="default.events"
    )
    csv_result = csv_op.execute(fake_context("csv"))
    assert csv_result["format"] == "CSVWithNames" and csv_result["compression"] == "gzip"
    assert csv_result["files"] == 4 and csv_result["written_rows"] == expected
    assert count(stack, "default.events") == expected
    # Column order came from the header, not the position.
    assert client.execute("SELECT name FROM default.events WHERE id = 3 ORDER BY name LIMIT 1")[0][0].endswith("-3")

    client.execute("TRUNCATE TABLE default.events")
    tsv_op = S3ToClickHouseOperator(task_id="tsv", s3_uri=f"s3://{bucket}/tsv/{{eu,us}}/day=0?/*.tsv", table="events")
    tsv_result = tsv_op.execute(fake_context("tsv"))
    assert tsv_result["format"] == "TSVWithNames" and tsv_result["files"] == 4
    assert tsv_result["written_rows"] == count(stack, "default.events") == expected
    assert query_log(stack, tsv_result["query_id"])["written_rows"] == expected


def test_public_bucket_without_credentials(stack: LocalStack, env_conn) -> None:
    """An aws connection with no credentials lists unsigned and ClickHouse reads with NOSIGN."""
    stack.create_bucket("s3ch-public")
    body = b"id,name,amount\n" + b"".join(b"%d,n%d,%d.5\n" % (i, i, i) for i in range(250))
    for part in range(3):
        stack.s3_client().put_object(Bucket="s3ch-public", Key=f"open/{part}.csv", Body=body, ACL="public-read")
    stack.clickhouse_client().execute(
        "CREATE TABLE default.public_rows (id UInt32, name String, amount Float64) ENGINE = MergeTree ORDER BY id"
    )
    env_conn(
        "aws_public", {"conn_type": "aws", "extra": {"endpoint_url": stack.s3_endpoint, "region_name": "eu-west-3"}}
    )
    kwargs = {"s3_uri": "s3://s3ch-public/open/*.csv", "table": "default.public_rows", "aws_conn_id": "aws_public"}
    plan = S3ToClickHouseOperator(task_id="plan", dry_run=True, **kwargs).execute(fake_context())
    assert "NOSIGN" in plan["sql"]
    result = S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context())
    assert result["written_rows"] == count(stack, "default.public_rows") == 750


def test_secrets_never_in_xcom_rendered_fields_or_logs(
    stack: LocalStack, posts: SampleDataset, posts_table: str, caplog: pytest.LogCaptureFixture, capsys
) -> None:
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table)
    with caplog.at_level("DEBUG"):
        result = op.execute(fake_context())
    out = capsys.readouterr()
    text = as_json(result) + caplog.text + out.out + out.err
    assert "SETTINGS" in caplog.text + out.out + out.err, "the redacted SQL should be logged"
    for secret in (stack.s3_secret_key, stack.password):
        assert secret not in text
    rendered = {name: getattr(op, name) for name in op.template_fields}
    assert stack.s3_secret_key not in as_json(rendered)


def test_bucket_in_other_region_on_an_endpoint_that_is_not_aws_loads_unjudged(
    stack: LocalStack, posts_table: str
) -> None:
    """moto answers GetBucketLocation like AWS, but MinIO, Ceph or s3rver answer a fixed or empty location:
    on any endpoint that is not AWS the check says it cannot judge (the warning itself: tests/unit)."""
    stack.create_bucket("s3ch-far", region="us-west-2")
    stack.s3_client().put_object(Bucket="s3ch-far", Key="x/a.csv", Body=b"id,name,amount\n1,a,1\n")
    stack.clickhouse_client().execute(
        "CREATE TABLE IF NOT EXISTS default.far (id UInt32, name String, amount Float64) ENGINE = MergeTree ORDER BY id"
    )
    result = S3ToClickHouseOperator(task_id="far", s3_uri="s3://s3ch-far/x/*.csv", table="default.far").execute(
        fake_context("far")
    )
    assert result["written_rows"] == 1
    assert not any("us-west-2" in w for w in result["warnings"])
    (region,) = [c for c in result["checks"] if c["name"] == "region"]
    assert region["status"] == "skipped" and "not AWS" in region["message"]


def test_a_retry_after_the_s3_uri_changed_loads_afresh(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    """Try 1 loaded one month; the DAG was edited to the next month before try 2: try 2 must not take try 1's
    figures (nor its staging table) but load the new month."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first, second = (f"s3://{posts.bucket}/{key}" for key in posts.keys[:2])
    one = S3ToClickHouseOperator(task_id="load", s3_uri=first, table=posts_table).execute(
        fake_context("load", 1, run_id)
    )
    again = S3ToClickHouseOperator(task_id="load", s3_uri=first, table=posts_table)
    assert again.query_id(fake_context("load", 2, run_id)).stem == one["query_id"].split("-")[1]
    two = S3ToClickHouseOperator(task_id="load", s3_uri=second, table=posts_table).execute(
        fake_context("load", 2, run_id)
    )
    assert two["attached_to"] is None and two["query_id"] != one["query_id"]
    assert two["query_id"].split("-")[1] != one["query_id"].split("-")[1], "a new configuration, a new stem"
    assert count(stack, posts_table) == one["written_rows"] + two["written_rows"]
    assert two["written_rows"] > 0 and two["partitions"] != one["partitions"]


def _flushes(stack: LocalStack, since: str) -> list[tuple[str, str]]:
    """The provider's ``SYSTEM FLUSH LOGS`` statements since ``since`` (a server time), as the server logged them."""
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    return [(str(t), str(q)) for t, q in ch.execute(
        "SELECT toString(type), query FROM system.query_log WHERE endsWith(client_name, 'airflow-provider-s3ch') "
        "AND query LIKE 'SYSTEM FLUSH LOGS%%' AND event_time_microseconds > toDateTime64(%(s)s, 6) "
        "AND type != 'QueryStart' "
        "ORDER BY event_time_microseconds", {"s": since})]


@pytest.mark.parametrize("named", ["query_log", "no_such_log"])
def test_the_figures_are_flushed_from_the_query_log_alone_or_from_every_log_where_the_name_is_refused(
    stack: LocalStack, posts: SampleDataset, posts_table: str, monkeypatch: pytest.MonkeyPatch, named: str
) -> None:
    from airflow_provider_s3ch.core.sql import render_flush_logs
    from airflow_provider_s3ch.hooks import query_log as query_log_module

    # A server that refuses the log's name (here: one it does not have) gets the statement for every log.
    monkeypatch.setattr(query_log_module, "render_flush_logs",
                        lambda version: render_flush_logs(version).replace("query_log", named))
    since = stack.clickhouse_client().execute("SELECT toString(now64(6))")[0][0]
    result = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table).execute(fake_context())

    assert count(stack, posts_table) == posts.rows == result["written_rows"]
    assert result["duration_ms"] == query_log(stack, result["query_id"])["query_duration_ms"]
    flushes = _flushes(stack, since)
    if named == "query_log":  # the server's version flushes one log by name (26.9 here)
        assert flushes == [("QueryFinish", "SYSTEM FLUSH LOGS query_log")]
    else:
        assert flushes == [("ExceptionBeforeStart", "SYSTEM FLUSH LOGS no_such_log"),
                           ("QueryFinish", "SYSTEM FLUSH LOGS")]


def test_an_unpartitioned_tables_load_says_no_partition_key(
    stack: LocalStack, posts: SampleDataset, caplog: pytest.LogCaptureFixture, capsys
) -> None:
    """Not the server's name of its one partition: 'append of partitions tuple()'."""
    table = f"default.unpartitioned_{uuid.uuid4().hex[:8]}"
    client = stack.clickhouse_client()
    client.execute(f"CREATE TABLE {table} ENGINE = MergeTree ORDER BY tuple() EMPTY AS SELECT * FROM "
                   f"s3('{stack.s3_endpoint}/{posts.bucket}/{posts.keys[0]}', '{stack.s3_access_key}', "
                   f"'{stack.s3_secret_key}', 'Parquet')")
    op = S3ToClickHouseOperator(task_id="load", s3_uri=f"s3://{posts.bucket}/{posts.keys[0]}", table=table)
    with caplog.at_level("INFO"):
        result = op.execute(fake_context())
    out = capsys.readouterr()
    logged = caplog.text + out.out + out.err
    assert result["written_rows"] == count(stack, table) > 0
    assert "append (no partition key)" in logged and "Moved the table's rows (no partition key)" in logged
    assert "tuple()" not in logged.replace("ORDER BY tuple()", "")
    client.execute(f"DROP TABLE {table}")

"""A text load's sample for the block rule (core.key_sample) against the engine: the raw values it reads of the
files' key column are those the insert writes into the table, the partitions it reckons over them are those the
engine makes, and its bytes in memory are the table's; and a load of gzip'd CSV plans its block from it, with the
secret kept out of the server's log."""

from __future__ import annotations

import gzip
import logging
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core import key_sample
from airflow_provider_s3ch.core.glob import object_url
from airflow_provider_s3ch.core.key_sample import raw_expression
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.plan import make_plan
from airflow_provider_s3ch.core.plan.partition_spans import key_partitions, partitions_of
from airflow_provider_s3ch.core.sql import S3Credentials
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.hooks.server import get_profile
from airflow_provider_s3ch.load.target import Listed, Target
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, count, fake_context

pytestmark = pytest.mark.integration

DB = "default"
#: Each column type with a key over it, the file's text of row i from a start, and a step that leaves no
#: partition of the range without rows.
KINDS = {
    "Date": ("toYYYYMM(d)", "toDate('{s}') + {i}", 3),
    "DateTime('UTC')": ("toDate(d)", "toDateTime('{s} 00:00:00', 'UTC') + {i} * 3600", 1),
    "DateTime64(3, 'UTC')": ("toStartOfInterval(d, INTERVAL 10 DAY)", "toDateTime64('{s} 00:00:00', 3, 'UTC') + "
                             "toIntervalMillisecond({i} * 43200123)", 2),
    "UInt32": ("intDiv(d, 1000)", "{n} + {i} * 70", 1),
}


def _files(stack: LocalStack, kind: str, start: str, first: int, rows: int) -> str:
    """Two gzip'd CSVWithNames files of ``rows`` rows each, in key order, of ``(id, d)``; their prefix."""
    _, value, step = KINDS[kind]
    text = value.format(s=start, n=first, i=f"number * {step}")
    prefix = f"key-sample/{uuid.uuid4().hex[:8]}/"
    client = stack.clickhouse_client()
    for part in range(2):
        body = client.execute(
            f"SELECT arrayStringConcat(groupArray(line), '\\n') FROM (SELECT concat(toString(number), ',', "
            f"toString({text})) AS line FROM numbers({part * rows}, {rows}))")[0][0]
        stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}part-{part}.csv.gz",
                                     Body=gzip.compress(f"id,d\n{body}\n".encode()))
    return prefix


def _sample(stack: LocalStack, table: str, prefix: str, fmt: str | None = None) -> object:
    request = LoadRequest(s3_uri=f"s3://{SAMPLE_BUCKET}/{prefix}*.csv.gz", table=f"{DB}.{table}", format=fmt)
    s3 = stack.s3_client()
    manifest = build_manifest(s3, request)
    hook = ClickHouseHook()
    profile = get_profile(hook, request.table)
    url = object_url(SAMPLE_BUCKET, request.key_pattern, endpoint_url=stack.s3_endpoint, region=manifest.region)
    plan = make_plan(request, manifest, profile, source_url=url)
    creds = S3Credentials(access_key_id=stack.s3_access_key, secret_access_key=stack.s3_secret_key)
    return Target(hook, request, None, logging.getLogger("test")).key_sample(
        Listed(manifest, url, creds, None, s3), plan, profile)


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(year=st.integers(1990, 2030), month=st.integers(1, 12), first=st.integers(0, 10**6),
       rows=st.integers(50, 400))
def test_the_sample_reads_what_the_insert_writes(stack: LocalStack, monkeypatch: pytest.MonkeyPatch, kind: str,
                                                  year: int, month: int, first: int, rows: int) -> None:
    monkeypatch.setattr(key_sample, "SAMPLE_FROM_BYTES", 0)
    key = KINDS[kind][0]
    prefix = _files(stack, kind, f"{year}-{month:02d}-01", first, rows)
    client = stack.clickhouse_client()
    table = f"key_sample_{uuid.uuid4().hex[:8]}"
    client.execute(f"CREATE TABLE {DB}.{table} (id UInt64, d {kind}) ENGINE = MergeTree PARTITION BY {key} "
                   "ORDER BY id")
    try:
        window = _sample(stack, table, prefix)
        assert window is not None and window.sampled_rows == 2 * rows  # type: ignore[attr-defined]
        aws = stack.aws_connection()
        client.execute(f"INSERT INTO {DB}.{table} SELECT * FROM s3('{stack.s3_endpoint}/{SAMPLE_BUCKET}/{prefix}*', "
                       f"'{aws['login']}', '{aws['password']}', 'CSVWithNames')",
                       settings={"max_partitions_per_insert_block": 0})
        raw, unit = raw_expression("d", kind)  # type: ignore[misc]
        low, high, partitions, ids = client.execute(
            f"SELECT min({raw}), max({raw}), uniqExact(_partition_id), count() FROM {DB}.{table}")[0]
        assert ids == 2 * rows
        assert window.spans == {"d": (low, high)}  # type: ignore[attr-defined]
        found = key_partitions(key, window.units)  # type: ignore[attr-defined]
        assert found is not None
        span = partitions_of((low, high), found[1])
        assert span is not None and len(span) == partitions, (kind, key, low, high)
        in_memory = client.execute(f"SELECT sum(byteSize(*)) FROM {DB}.{table}")[0][0]
        assert 0.5 * in_memory <= window.data_bytes <= 2.5 * in_memory  # type: ignore[attr-defined]
    finally:
        client.execute(f"DROP TABLE IF EXISTS {DB}.{table} SYNC")


def test_a_gzip_csv_load_samples_its_rows(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the size where it counts (patched down here) a load samples its rows and loads every row, and the
    sample's statement reaches the server's log without the secret. (Which block the sample chooses at the sizes
    where it counts: tests/unit/test_key_sample.py, through ``make_plan``; and bench/ladder.py.)"""
    monkeypatch.setattr(key_sample, "SAMPLE_FROM_BYTES", 0)
    prefix = _files(stack, "Date", "2010-01-01", 0, 3_000)
    client = stack.clickhouse_client()
    table = f"key_sample_{uuid.uuid4().hex[:8]}"
    client.execute(f"CREATE TABLE {DB}.{table} (id UInt64, d Date) ENGINE = MergeTree "
                   "PARTITION BY toStartOfInterval(d, INTERVAL 10 MONTH) ORDER BY id")
    try:
        result = S3ToClickHouseOperator(task_id="load", s3_uri=f"s3://{SAMPLE_BUCKET}/{prefix}*.csv.gz",
                                        table=f"{DB}.{table}").execute(fake_context())
        assert result["written_rows"] == 6_000 and count(stack, f"{DB}.{table}") == 6_000
        client.execute("SYSTEM FLUSH LOGS")
        logged = client.execute("SELECT query, result_rows FROM system.query_log WHERE query LIKE "
                                f"'%byteSize(*) AS b%' AND query LIKE '%{prefix}%' AND type = 'QueryFinish'")
        assert [rows for _, rows in logged] == [2]  # one statement, a row for each of the two files
        assert not any(stack.s3_secret_key in q for q, _ in logged)
    finally:
        client.execute(f"DROP TABLE IF EXISTS {DB}.{table} SYNC")


def test_a_sample_the_engine_cannot_read_leaves_the_load_as_it_was(stack: LocalStack,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Files without a header (``CSV``: columns by position) name no ``d`` for the sample to read: the engine
    refuses the statement, and the load goes on without it, every row loaded."""
    monkeypatch.setattr(key_sample, "SAMPLE_FROM_BYTES", 0)
    prefix = f"key-sample/{uuid.uuid4().hex[:8]}/"
    for part in range(2):
        body = "".join(f"{i},2011-0{part + 1}-{i % 28 + 1:02d}\n" for i in range(part * 500, part * 500 + 500))
        stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}part-{part}.csv.gz",
                                     Body=gzip.compress(body.encode()))
    client = stack.clickhouse_client()
    table = f"key_sample_{uuid.uuid4().hex[:8]}"
    client.execute(f"CREATE TABLE {DB}.{table} (id UInt64, d Date) ENGINE = MergeTree PARTITION BY toYYYYMM(d) "
                   "ORDER BY id")
    try:
        assert _sample(stack, table, prefix, fmt="CSV") is None
        result = S3ToClickHouseOperator(task_id="load", s3_uri=f"s3://{SAMPLE_BUCKET}/{prefix}*.csv.gz",
                                        table=f"{DB}.{table}", format="CSV").execute(fake_context())
        assert result["written_rows"] == 1_000 and count(stack, f"{DB}.{table}") == 1_000
    finally:
        client.execute(f"DROP TABLE IF EXISTS {DB}.{table} SYNC")

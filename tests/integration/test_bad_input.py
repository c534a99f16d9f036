"""Bad input: a clear error that names the problem and the fix, and the target table as it was."""

from __future__ import annotations

import subprocess
import sys

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException, AirflowSkipException
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.errors import (
    BucketError,
    ClickHouseAuthError,
    ClickHouseQueryError,
    ClickHouseUnavailableError,
    FormatError,
    InvalidRequestError,
    NoObjectsError,
    PlanError,
    TableError,
)
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.local.stack import free_port
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context, wait_answering

TABLE = "default.guarded"


@pytest.fixture(scope="module")
def guarded(stack: LocalStack, posts: SampleDataset) -> int:
    """A posts-shaped table that already holds one month; every bad load must leave it so."""
    from airflow_provider_s3ch.local.sample import posts_ddl

    client = stack.clickhouse_client()
    client.execute(posts_ddl(TABLE))
    key = posts.keys[0]
    S3ToClickHouseOperator(task_id="seed", s3_uri=f"s3://{posts.bucket}/{key}", table=TABLE).execute(fake_context())
    rows = count(stack, TABLE)
    assert rows > 0
    return rows


def _fails(stack: LocalStack, guarded: int, error: type[Exception], match: str, **kwargs) -> Exception:
    kwargs.setdefault("table", TABLE)
    op = S3ToClickHouseOperator(task_id="bad", **kwargs)
    with pytest.raises(error, match=match) as info:
        op.execute(fake_context("bad"))
    assert count(stack, TABLE) == guarded, "a failed load changed the target table"
    return info.value


def test_no_object_matches(stack, posts, guarded) -> None:
    exc = _fails(stack, guarded, NoObjectsError, "no object", s3_uri=f"s3://{posts.bucket}/{posts.prefix}*.csv")
    assert "s3_uri" in str(exc) and isinstance(exc, AirflowFailException)
    # The files may not have arrived yet: the error names the sensor to wait with, and the skip.
    assert "S3GlobSensor" in str(exc) and "skip_when_empty=True" in str(exc)


@pytest.mark.parametrize("skip_loaded", [False, True])
def test_skip_when_empty_skips_a_run_that_matches_nothing(stack, posts, guarded, skip_loaded) -> None:
    op = S3ToClickHouseOperator(task_id="early", s3_uri=f"s3://{posts.bucket}/{posts.prefix}2031-*.parquet",
                                table=TABLE, skip_when_empty=True, skip_loaded=skip_loaded)
    with pytest.raises(AirflowSkipException, match=r"no object .* matches .*skip_when_empty=True"):
        op.execute(fake_context("early"))
    assert count(stack, TABLE) == guarded


def test_skip_when_empty_does_not_hide_a_missing_listed_key(stack, posts, guarded) -> None:
    """A {a,b} list of which one key exists is a broken request, not 'nothing yet': it still fails."""
    uri = f"s3://{posts.bucket}/{{{posts.keys[0]},{posts.prefix}nope.parquet}}"
    _fails(stack, guarded, NoObjectsError, "do not exist", s3_uri=uri, skip_when_empty=True)


def test_bucket_missing(stack, guarded) -> None:
    exc = _fails(stack, guarded, BucketError, "does not exist", s3_uri="s3://s3ch-nope/x/*.parquet")
    assert "s3ch-nope" in str(exc)


@pytest.mark.parametrize("skip_when_empty", [False, True])
def test_the_listing_speaks_first_when_the_target_is_wrong_too(stack, posts, guarded, skip_when_empty) -> None:
    """The listing runs beside the server's reads: when both go wrong, S3's answer is the one raised (or the
    skip), as when the listing ran alone before anything reached the server."""
    _fails(stack, guarded, BucketError, "does not exist", s3_uri="s3://s3ch-nope/x/*.parquet",
           table="default.no_such_table")
    op = S3ToClickHouseOperator(task_id="early", s3_uri=f"s3://{posts.bucket}/{posts.prefix}2031-*.parquet",
                                table="default.no_such_table", skip_when_empty=skip_when_empty)
    with pytest.raises(AirflowSkipException if skip_when_empty else NoObjectsError, match="no object"):
        op.execute(fake_context("early"))


def test_mixed_formats(stack, posts, guarded) -> None:
    stack.s3_client().put_object(Bucket=posts.bucket, Key="mixed/a.parquet", Body=b"PAR1")
    stack.s3_client().put_object(Bucket=posts.bucket, Key="mixed/b.csv", Body=b"id\n1\n")
    exc = _fails(stack, guarded, FormatError, "format", s3_uri=f"s3://{posts.bucket}/mixed/*")
    assert "format=" in str(exc)


def test_unknown_format(stack, posts, guarded) -> None:
    stack.s3_client().put_object(Bucket=posts.bucket, Key="odd/a.dat", Body=b"??")
    _fails(stack, guarded, FormatError, "format=", s3_uri=f"s3://{posts.bucket}/odd/*.dat")


def test_target_table_missing(stack, posts, guarded) -> None:
    exc = _fails(stack, guarded, TableError, "does not exist", s3_uri=posts.s3_uri, table="default.no_such_table")
    assert "create it" in str(exc)


def test_memory_cap_malformed(stack, posts, guarded) -> None:
    _fails(stack, guarded, InvalidRequestError, "8GiB", s3_uri=posts.s3_uri, memory_cap="lots")


def test_memory_cap_too_small(stack, posts, guarded) -> None:
    exc = _fails(stack, guarded, PlanError, "memory_cap", s3_uri=posts.s3_uri, memory_cap="10MiB")
    assert "MiB" in str(exc)


def test_s3_uri_not_s3(stack, guarded) -> None:
    _fails(stack, guarded, InvalidRequestError, "s3://bucket", s3_uri="https://example.com/x/*.parquet")


def test_region_check_cannot_judge_an_endpoint_that_is_not_aws(stack, posts, guarded) -> None:
    """moto, MinIO or s3rver answer GetBucketLocation with what they like: no mismatch is claimed, even
    under region_check='fail' (the mismatch itself is tested on AWS URLs in tests/unit/test_planner.py)."""
    stack.create_bucket("s3ch-elsewhere", region="us-east-1")
    stack.s3_client().put_object(Bucket="s3ch-elsewhere", Key=posts.keys[0], Body=b"PAR1")
    op = S3ToClickHouseOperator(
        task_id="region", s3_uri=f"s3://s3ch-elsewhere/{posts.keys[0]}", table=TABLE, region_check="fail",
        dry_run=True,
    )
    result = op.execute(fake_context("region"))
    (region,) = [c for c in result["plan"]["checks"] if c["name"] == "region"]
    assert region["status"] == "skipped" and "not AWS" in region["message"], region
    assert count(stack, TABLE) == guarded


def test_wrong_password(stack, posts, guarded, env_conn) -> None:
    conn = stack.clickhouse_connection(0)
    conn["password"] = "not-the-password"
    env_conn("clickhouse_wrong_pw", conn)
    exc = _fails(
        stack, guarded, ClickHouseAuthError, "password", s3_uri=posts.s3_uri, clickhouse_conn_id="clickhouse_wrong_pw"
    )
    assert "not-the-password" not in str(exc)


def test_clickhouse_unreachable_is_retryable(stack, posts, guarded, env_conn) -> None:
    conn = stack.clickhouse_connection(0)
    conn["port"] = free_port()
    conn["extra"]["connect_timeout"] = 2
    env_conn("clickhouse_down", conn)
    exc = _fails(
        stack, guarded, ClickHouseUnavailableError, "did not answer", s3_uri=posts.s3_uri,
        clickhouse_conn_id="clickhouse_down",
    )
    assert not isinstance(exc, AirflowFailException), "an unreachable server is transient: retries apply"


def test_access_denied(stack, guarded, env_conn, tmp_path) -> None:
    """A real S3 server that checks credentials (moto with auth on) refuses unknown keys."""
    port = free_port()
    env = {"INITIAL_NO_AUTH_ACTION_COUNT": "0", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_answering(f"http://127.0.0.1:{port}/")
        env_conn(
            "aws_denied",
            {"conn_type": "aws", "login": "AKIAUNKNOWN", "password": "wrong-secret",
             "extra": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "eu-west-3"}},
        )
        exc = _fails(
            stack, guarded, BucketError, "(?i)access denied|not allowed|refused", s3_uri="s3://s3ch-locked/x/*.parquet",
            aws_conn_id="aws_denied",
        )
        assert "wrong-secret" not in str(exc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_type_error_fails_without_retrying_and_leaves_the_target(stack: LocalStack, posts: SampleDataset) -> None:
    """Text that cannot parse as UInt64: the same load would fail the same way, so no retry is spent on it."""
    client = stack.clickhouse_client()
    client.execute("CREATE TABLE default.typed (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
    client.execute("INSERT INTO default.typed VALUES (1, 'kept')")
    stack.s3_client().put_object(Bucket=posts.bucket, Key="typed/bad.csv", Body=b"id,name\nabc,x\n2,y\n")
    op = S3ToClickHouseOperator(task_id="typed", s3_uri=f"s3://{posts.bucket}/typed/*.csv", table="default.typed")
    with pytest.raises(ClickHouseQueryError, match="retrying would fail the same way") as info:
        op.execute(fake_context("typed"))
    assert isinstance(info.value, AirflowFailException), "a terminal error: Airflow does not retry it"
    assert "abc" in str(info.value) or "UInt64" in str(info.value), info.value
    assert client.execute("SELECT id, name FROM default.typed") == [(1, "kept")]
    assert client.execute("SELECT count() FROM system.tables WHERE name LIKE '_s3ch_stage_%'")[0][0] == 0


def test_files_that_span_more_partitions_than_a_block_may_fail_at_once_naming_the_setting(
    stack: LocalStack, posts: SampleDataset,
) -> None:
    """The server's own error for an insert block over ``max_partitions_per_insert_block`` (code 252, as parts
    throttling): terminal, with the setting to change; the target as it was. With the setting lifted it loads."""
    client = stack.clickhouse_client()
    client.execute("CREATE TABLE default.spread (id UInt64) ENGINE = MergeTree PARTITION BY id ORDER BY id")
    stack.s3_client().put_object(Bucket=posts.bucket, Key="spread/ids.csv",
                                 Body="".join(f"{n}\n" for n in range(150)).encode())
    uri = f"s3://{posts.bucket}/spread/*.csv"
    op = S3ToClickHouseOperator(task_id="spread", s3_uri=uri, table="default.spread", format="CSV")
    with pytest.raises(ClickHouseQueryError, match="max_partitions_per_insert_block") as info:
        op.execute(fake_context("spread"))
    assert isinstance(info.value, AirflowFailException), "a terminal error: Airflow does not retry it"
    assert count(stack, "default.spread") == 0
    assert client.execute("SELECT count() FROM system.tables WHERE name LIKE '_s3ch_stage_%'")[0][0] == 0
    lifted = S3ToClickHouseOperator(task_id="spread", s3_uri=uri, table="default.spread", format="CSV",
                                    settings={"max_partitions_per_insert_block": 0})
    lifted.execute(fake_context("spread_lifted"))
    assert client.execute("SELECT count(), uniqExact(_partition_id) FROM default.spread") == [(150, 150)]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"memory_cap": 10**30}, "memory_cap"), ({"settings": {"max_threads": 10**40}}, "max_threads"),
     ({"settings": {"max_block_size": 1e300}}, "max_block_size")],
)
def test_numbers_out_of_range_fail_before_the_server_sees_them(stack, posts, guarded, kwargs, named) -> None:
    """Unbounded, they reached the server and failed with a retryable error that named nothing."""
    exc = _fails(stack, guarded, InvalidRequestError, named, s3_uri=posts.s3_uri, **kwargs)
    assert isinstance(exc, AirflowFailException) and ("range" in str(exc) or "8 EiB" in str(exc))


def test_a_clickhouse_connection_airflow_does_not_know_is_a_terminal_error(stack, posts, guarded) -> None:
    """(An unknown aws_conn_id is the amazon provider's business: it falls back to boto3's default chain.)"""
    exc = _fails(
        stack, guarded, InvalidRequestError, "no_such_ch", s3_uri=posts.s3_uri, clickhouse_conn_id="no_such_ch"
    )
    assert "define the connection" in str(exc) and "clickhouse_conn_id" in str(exc)
    assert isinstance(exc, AirflowFailException)


# ------------------------------------------------------------------ compression: ClickHouse's closed list
def _engine_reads_compression(stack: LocalStack, bucket: str, key: str, compression: str) -> bool:
    """Whether the server takes ``compression`` as a method: any other answer than error 48 "Unknown
    compression method" (the tiny CSV is not compressed, so a known method fails to decode: that is fine)."""
    from airflow_provider_s3ch.core.sql import quote_literal

    url = f"{stack.s3_endpoint}/{bucket}/{key}"
    try:
        stack.clickhouse_client().execute(
            f"SELECT count() FROM s3({quote_literal(url)}, {quote_literal(stack.s3_access_key)}, "
            f"{quote_literal(stack.s3_secret_key)}, 'CSVWithNames', 'a String', {quote_literal(compression)})")
    except Exception as exc:  # noqa: BLE001 - the answer is the point
        return "Unknown compression method" not in str(exc)
    return True


_NAMES = st.sampled_from(["gzip", "gz", "deflate", "zlib", "br", "brotli", "xz", "lzma", "zstd", "zst", "lz4",
                          "lz4_frame", "bz2", "bzip2", "snappy", "sz", "auto", "none", "raw", "tar"])


@settings(max_examples=60, derandomize=True)
@given(name=_NAMES | _NAMES.map(str.upper) | _NAMES.map(str.title) | _NAMES.map(lambda n: f" {n} ")
       | st.text(alphabet=st.characters(codec="ascii", categories=["L", "N", "P", "Zs"]), max_size=12))
def test_the_compressions_the_provider_takes_are_the_ones_the_server_reads(stack: LocalStack, name: str) -> None:
    """The engine is the truth: the provider takes a value exactly when the server reads its normal form (lower
    case, stripped), and the normal form is what the provider sends."""
    from airflow_provider_s3ch.core.formats import compression_method

    bucket, key = "s3ch-sample", "compression/tiny.csv"
    stack.s3_client().put_object(Bucket=bucket, Key=key, Body=b"a\n1\n")
    normal = compression_method(name)
    assert (normal is not None) == _engine_reads_compression(stack, bucket, key, name.strip().lower()), name
    if normal is not None:
        assert _engine_reads_compression(stack, bucket, key, normal), normal


def test_a_hostile_compression_stops_before_the_server(stack, posts, guarded) -> None:
    value = "gzip'); DROP TABLE default.guarded; --"
    exc = _fails(stack, guarded, InvalidRequestError, "is not a compression method ClickHouse reads",
                 s3_uri=posts.s3_uri, compression=value)
    assert "'gzip'" in str(exc) and "'zstd'" in str(exc) and isinstance(exc, AirflowFailException)
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    assert client.execute("SELECT count() FROM system.query_log WHERE position(query, 'DROP TABLE default.guarded') > 0"
                          " AND query NOT LIKE '%system.query_log%'") == [(0,)]


def test_a_load_that_fails_for_good_leaves_no_staging_table_on_every_run(stack: LocalStack) -> None:
    """Bad data fails the insert on the server: each of several runs drops its staging table before it raises
    (the server reports the error a moment before it lets go of the query: the load waits for that)."""
    from airflow_provider_s3ch.core.recovery import STAGING_PREFIX

    bucket, key = "s3ch-sample", "bad-data/numbers.csv"
    stack.s3_client().put_object(Bucket=bucket, Key=key, Body=b"n\n1\n2\nnot-a-number\n4\n")
    client = stack.clickhouse_client()
    client.execute("CREATE TABLE IF NOT EXISTS default.numbers_bad (n UInt64) ENGINE = MergeTree ORDER BY n")

    def staging_tables() -> list[tuple[str]]:
        return client.execute("SELECT name FROM system.tables WHERE startsWith(name, %(p)s)", {"p": STAGING_PREFIX})

    before = staging_tables()
    for run in range(5):
        op = S3ToClickHouseOperator(task_id="bad_data", s3_uri=f"s3://{bucket}/{key}", table="default.numbers_bad")
        with pytest.raises(AirflowFailException, match="incorrect data in the file"):
            op.execute(fake_context("bad_data", try_number=1 + run % 2))
        assert staging_tables() == before, f"run {run + 1} left a staging table"
    assert count(stack, "default.numbers_bad") == 0

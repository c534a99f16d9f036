"""``s3_credentials`` on the real local stack: the keys stay on the server.

- ``named_collection``: the stack's nodes hold the named collection ``s3ch_local`` with the S3 keys; a
  load through it leaves no key material (key id or secret) in any statement the server logged or ran,
  where the default ``forward`` shows the key id, and loads exactly.
- ``server``: a bucket that needs no keys (public-read) loads with no keys sent; a private one fails
  naming the option and what the server lacks.
- ``role_arn`` (ClickHouse Cloud's ``extra_credentials``): the engine parses the statement as rendered;
  no Cloud here to assume a role.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest

from airflow_provider_s3ch.core.models import LoadPlan
from airflow_provider_s3ch.core.sql import render_insert
from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.local.stack import NAMED_COLLECTION
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import fingerprint
from tests.integration.support import fake_context

pytestmark = pytest.mark.integration

PUBLIC = "s3ch-public"


def statements_since(stack: LocalStack, since: int) -> list[str]:
    """Every statement node 0 logged since ``since`` (microseconds), as the server recorded its text."""
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    return [r[0] for r in client.execute(
        "SELECT query FROM system.query_log WHERE event_time_microseconds >= fromUnixTimestamp64Micro(%(s)s) "
        "AND query NOT LIKE '%%system.query_log%%'", {"s": since})]


def now_us(stack: LocalStack) -> int:
    return int(stack.clickhouse_client().execute("SELECT toUnixTimestamp64Micro(now64(6))")[0][0])


def load_watching(stack: LocalStack, table: str, **kwargs: Any) -> tuple[dict, list[str], list[str]]:
    """A load, the statements the server logged meanwhile, and the texts ``system.processes`` showed."""
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        client = stack.clickhouse_client()
        while not done.is_set():
            seen.extend(r[0] for r in client.execute(
                "SELECT query FROM system.processes WHERE query NOT LIKE '%%system.processes%%'"))

    watcher = threading.Thread(target=watch)
    since = now_us(stack)
    watcher.start()
    try:
        op = S3ToClickHouseOperator(task_id="access", table=table, **kwargs)
        result = op.execute(fake_context("access"))
    finally:
        done.set()
        watcher.join()
    return result, statements_since(stack, since), seen


def keys_in(stack: LocalStack, texts: list[str]) -> list[str]:
    return [t for t in texts if stack.s3_access_key in t or stack.s3_secret_key in t]


def test_a_named_collection_load_sends_no_key_and_loads_exactly(
    stack: LocalStack, posts: SampleDataset, posts_table: str,
) -> None:
    result, logged, running = load_watching(stack, posts_table, s3_uri=posts.s3_uri, s3_credentials="named_collection",
                                            named_collection=NAMED_COLLECTION)
    assert result["written_rows"] == posts.rows
    insert = [t for t in logged if t.startswith("INSERT INTO") and "s3(" in t]
    assert insert and all(f"s3(`{NAMED_COLLECTION}`, url = " in t for t in insert)
    assert keys_in(stack, logged) == [] and keys_in(stack, running) == []
    assert stack.s3_access_key not in json.dumps(result, default=str)
    # the same load with the worker's keys: the key id is in the statement the server logged
    other = f"default.posts_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client().execute(f"CREATE TABLE {other} AS {posts_table}")
    stack.clickhouse_client().execute(f"TRUNCATE TABLE {other}")
    forwarded, logged, _ = load_watching(stack, other, s3_uri=posts.s3_uri)
    assert keys_in(stack, logged) and stack.s3_secret_key not in " ".join(logged)  # the secret is masked
    assert fingerprint(stack, posts_table) == fingerprint(stack, other)


def test_server_credentials_read_a_public_bucket_with_no_key_sent(
    stack: LocalStack, posts: SampleDataset, posts_table: str,
) -> None:
    stack.create_bucket(PUBLIC)
    s3 = stack.s3_client()
    s3.put_bucket_acl(Bucket=PUBLIC, ACL="public-read")
    for key in posts.keys:
        s3.copy_object(Bucket=PUBLIC, Key=key, CopySource={"Bucket": posts.bucket, "Key": key}, ACL="public-read")
    result, logged, running = load_watching(stack, posts_table, s3_uri=f"s3://{PUBLIC}/{posts.prefix}*.parquet",
                                            s3_credentials="server")
    assert result["written_rows"] == posts.rows
    assert keys_in(stack, logged) == [] and keys_in(stack, running) == []
    assert not any("NOSIGN" in t for t in logged)  # the server's own credentials, not an unsigned read forced


def test_server_credentials_on_a_private_bucket_fail_naming_the_option(
    stack: LocalStack, posts: SampleDataset, posts_table: str,
) -> None:
    with pytest.raises(S3chError, match=r"s3_credentials='server'.*has none that may read it"):
        S3ToClickHouseOperator(task_id="access", table=posts_table, s3_uri=posts.s3_uri,
                               s3_credentials="server").execute(fake_context("access"))
    assert stack.clickhouse_client().execute(f"SELECT count() FROM {posts_table}")[0][0] == 0


def test_the_engine_parses_the_role_arn_form_as_rendered(stack: LocalStack, posts_table: str) -> None:
    from airflow_provider_s3ch.core.access import S3Access

    plan = LoadPlan.model_validate({
        "table": {"database": "default", "name": posts_table.split(".")[1]},
        "source_url": f"{stack.s3_endpoint}/b/k.parquet", "format": "Parquet", "compression": "zstd",
        "strategy": "single", "strategy_reason": "", "settings": {}, "budget_bytes": 1, "budget_reason": "",
        "access": S3Access(mode="server", role_arn="arn:aws:iam::123456789012:role/ch-read").model_dump(),
    })
    sql = render_insert(plan, None).sql
    assert "extra_credentials(role_arn = 'arn:aws:iam::123456789012:role/ch-read')" in sql
    ast = "\n".join(r[0] for r in stack.clickhouse_client().execute(f"EXPLAIN AST {sql}"))
    assert "extra_credentials" in ast and "InsertQuery" in ast

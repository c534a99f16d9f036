"""S3 refusing the server's read is terminal, with a hint for the credentials in use and the bucket named.

An S3 server of its own for this module: moto's, enforcing credentials and IAM policies once set up
(``/moto-api/reset-auth`` with 0: every request from then on is authenticated and authorized). Its users:
``lister`` may list the bucket but not read an object; ``nobody`` may do nothing; ``reader`` may read (the
worker's listing where the server reads with credentials of its own). The stack's keys, which
its named collection holds, are unknown to it.

``role_arn`` (ClickHouse Cloud's ``extra_credentials``) is not tried: no Cloud here assumes a role.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch.errors import BucketError, S3AccessDeniedError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import NAMED_COLLECTION
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context, locked_moto

pytestmark = pytest.mark.integration

BUCKET = "s3ch-locked"
REGION = "eu-west-3"


class LockedS3:
    """The module's S3 server, its endpoint and its users' keys."""

    def __init__(self, endpoint: str, keys: dict[str, tuple[str, str]]) -> None:
        self.endpoint = endpoint
        self.keys = keys


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LockedS3]:
    def setup(endpoint: str, kwargs: dict[str, str]) -> None:
        s3 = boto3.client("s3", **kwargs)
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        for n in (1, 2):
            s3.put_object(Bucket=BUCKET, Key=f"d/{n}.csv", Body=f"id,name\n{n},x{n}\n".encode())

    users = {"lister": ["s3:ListBucket", "s3:GetBucketLocation"], "nobody": [], "reader": ["s3:*"]}
    with locked_moto(tmp_path_factory.mktemp("locked-s3") / "moto.log", REGION, users, setup) as (endpoint, keys):
        yield LockedS3(endpoint, keys)


@pytest.fixture
def target(stack: LocalStack) -> Iterator[str]:
    table = f"default.refused_{uuid.uuid4().hex[:8]}"
    client = stack.clickhouse_client()
    client.execute(f"CREATE TABLE {table} (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
    yield table
    client.execute(f"DROP TABLE IF EXISTS {table}")


def _load(stack: LocalStack, locked: LockedS3, env_conn: Any, table: str, user: str, key: str = "d/*.csv",
          **kwargs: Any) -> Exception:
    login, secret = locked.keys[user]
    aws = env_conn("aws_locked", {"conn_type": "aws", "login": login, "password": secret,
                                  "extra": {"endpoint_url": locked.endpoint, "region_name": REGION}})
    ch = env_conn("clickhouse_locked", stack.clickhouse_connection(0, s3_endpoint_url=locked.endpoint))
    op = S3ToClickHouseOperator(task_id="refused", s3_uri=f"s3://{BUCKET}/{key}", table=table, aws_conn_id=aws,
                                clickhouse_conn_id=ch, **kwargs)
    with pytest.raises(BucketError) as info:
        op.execute(fake_context("refused"))
    client = stack.clickhouse_client()
    assert client.execute(f"SELECT count() FROM {table}")[0][0] == 0
    assert client.execute("SELECT count() FROM system.tables WHERE name LIKE '\\_s3ch\\_stage\\_%'")[0][0] == 0
    return info.value


def _refused(exc: Exception, says: str) -> None:
    text = str(exc)
    assert isinstance(exc, S3AccessDeniedError), f"{type(exc).__name__}: {text}"
    assert isinstance(exc, AirflowFailException), "terminal: a retry is refused the same way"
    assert "access denied" in text and f"bucket {BUCKET}" in text and says in text, text
    assert "throttling" not in text


def test_forwarded_keys_that_may_not_read_the_objects(stack, locked, env_conn, target) -> None:
    """The worker lists the files (s3:ListBucket); the server, with the same keys, may not read them."""
    exc = _load(stack, locked, env_conn, target, "lister")
    _refused(exc, "AWS connection's keys (s3_credentials='forward'): they lack s3:GetObject")


def test_the_servers_own_credentials_that_may_not_read(stack, locked, env_conn, target) -> None:
    """One key (the server's anonymous listing of a glob here waits on its credential chain: not tried)."""
    exc = _load(stack, locked, env_conn, target, "reader", key="d/1.csv", s3_credentials="server")
    _refused(exc, "give the ClickHouse server's own role or keys read access")


def test_a_named_collection_whose_keys_s3_does_not_know(stack, locked, env_conn, target) -> None:
    exc = _load(stack, locked, env_conn, target, "reader", s3_credentials="named_collection",
                named_collection=NAMED_COLLECTION)
    _refused(exc, "fix the collection's keys")


def test_the_workers_listing_refused_is_terminal_too(stack, locked, env_conn, target) -> None:
    exc = _load(stack, locked, env_conn, target, "nobody")
    assert type(exc) is BucketError and isinstance(exc, AirflowFailException)
    assert "access denied" in str(exc) and "s3:ListBucket" in str(exc) and BUCKET in str(exc)


def test_the_workers_refusal_gets_no_hint_about_the_servers_credentials(stack, locked, env_conn, target) -> None:
    """The worker's own HeadObject refused: the AWS connection's business, whatever the server reads with."""
    exc = _load(stack, locked, env_conn, target, "lister", key="d/1.csv", s3_credentials="server")
    assert type(exc) is BucketError and "give the aws connection s3:GetObject" in str(exc)
    assert "s3_credentials='server'" not in str(exc), str(exc)


def test_the_insert_refused_is_terminal_and_leaves_no_staging_table(stack, locked, env_conn, target) -> None:
    """Without the schema check's DESCRIBE, the insert itself is the server's first read."""
    exc = _load(stack, locked, env_conn, target, "lister", schema_check="off")
    _refused(exc, "AWS connection's keys (s3_credentials='forward'): they lack s3:GetObject")

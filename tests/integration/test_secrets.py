"""No input puts the S3 secret or session token into system.query_log, a log line or an XCom.

Each load runs with an aws connection that carries a session token; after every hostile input the
test reads system.query_log (the query text, the exception, the settings) and the captured log
records, at DEBUG level, for the secret and the token.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from typing import Any

import pytest

from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context

TOKEN = "T0KEN" + secrets.token_hex(16)

HOSTILE: dict[str, dict[str, Any]] = {
    "log_comment over max_query_size": {"settings": {"log_comment": "x" * 300_000}},
    "max_query_size too small": {"settings": {"max_query_size": 10}},
    "unknown setting": {"settings": {"no_such_setting_at_all": 1}},
    "setting of the wrong type": {"settings": {"max_threads": "lots"}},
    "structure over max_query_size": {
        "structure": ", ".join(f"c{i} UInt8" for i in range(40_000)),
        "format": "Parquet",
    },
    "structure that does not parse": {"structure": "id UInt64, (((", "format": "Parquet"},
    "format the server does not know": {"format": "NoSuchFormat"},
    "compression the server does not know": {"compression": "nosuchcodec"},
    "max_ast_elements too small": {"settings": {"max_ast_elements": 1}},
    "max_parser_depth too small": {"settings": {"max_parser_depth": 1}},
    "max_parser_backtracks too small": {"settings": {"max_parser_backtracks": 1}},
    "another SQL dialect": {"settings": {"dialect": "kusto"}},
    "max_query_size as text": {"settings": {"max_query_size": "10"}},
}


@pytest.fixture
def token_conn(stack: LocalStack, env_conn) -> str:
    conn = stack.aws_connection()
    conn["extra"] = {**conn["extra"], "aws_session_token": TOKEN}
    return env_conn("aws_token", conn)


def _leaks(stack: LocalStack) -> list[tuple[str, str]]:
    """Entries of system.query_log whose text, exception or settings hold the secret or the token
    (searched here, so that this query's own text holds neither)."""
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    rows = client.execute(
        "SELECT query_id, toString(type), query, exception, toString(Settings) FROM system.query_log "
        "WHERE event_date >= yesterday()"
    )
    return [(r[0], r[1]) for r in rows if any(s in field for s in (stack.s3_secret_key, TOKEN) for field in r[2:])]


def _staging_tables(stack: LocalStack) -> set[str]:
    return {r[0] for r in stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE startsWith(name, %(p)s)", {"p": STAGING_PREFIX})}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_no_hostile_input_puts_the_secret_in_query_log_or_a_log_line(
    stack: LocalStack, posts: SampleDataset, posts_table: str, token_conn: str, caplog, case: str
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("botocore", "boto3", "urllib3", "clickhouse_driver"):
        logging.getLogger(name).setLevel(logging.NOTSET)  # DEBUG reaches them through the root
    op = S3ToClickHouseOperator(
        task_id="hostile", s3_uri=posts.s3_uri, table=posts_table, aws_conn_id=token_conn, **HOSTILE[case]
    )
    staging = _staging_tables(stack)
    try:
        result: Any = op.execute(fake_context("hostile", run_id=f"run-{uuid.uuid4().hex[:8]}"))
    except S3chError as exc:
        result = str(exc)
        assert count(stack, posts_table) == 0, "a failed load must leave the target as it was"
    text = caplog.text + repr(result)
    assert _staging_tables(stack) == staging, "a load that ended leaves no staging table"
    assert _leaks(stack) == [], case
    for secret in (stack.s3_secret_key, TOKEN):
        assert secret not in text, case
    assert "x-amz-security-token" not in caplog.text.lower(), "botocore's DEBUG lines carry the token"


def test_botocore_debug_lines_do_carry_the_token_outside_the_provider(stack: LocalStack, caplog) -> None:
    """The control for the test above: at DEBUG, a plain boto3 call logs the token's header."""
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore").setLevel(logging.NOTSET)
    client = stack.s3_client()
    client._request_signer._credentials.token = TOKEN  # a session token on the real client
    client.list_buckets()
    assert "x-amz-security-token" in caplog.text.lower()

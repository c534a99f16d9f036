"""The user's settings checked against the server's own types before any statement carries them.

A value the server cannot take used to reach it: ``max_threads='lots'`` failed as a parse error about the data
after the schema check had warned that it could not describe the file; ``max_memory_usage='lots'`` escaped as
Python's ``ValueError``; ``max_insert_threads=-1`` failed on the server as a conversion error.
"""

from __future__ import annotations

import time

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch.core.server import SETTING_TYPES_SQL
from airflow_provider_s3ch.core.setting_types import setting_problem
from airflow_provider_s3ch.errors import InvalidRequestError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context

pytestmark = pytest.mark.integration

#: One setting of each type the check judges, and the values tried on each.
SETTINGS = [
    "max_memory_usage", "max_threads", "max_insert_threads", "max_block_size", "insert_deduplicate",
    "max_execution_time", "handshake_timeout_ms", "load_balancing", "join_algorithm", "log_comment",
    "format_csv_delimiter", "insert_quorum", "os_threads_nice_value_query",
    "replication_wait_for_inactive_replica_timeout",
    "max_bytes_ratio_before_external_group_by", "query_plan_join_swap_table",
    "opentelemetry_start_keeper_trace_probability", "date_time_input_format", "schema_inference_mode",
    "session_timezone",
]
VALUES = [
    0, 1, -1, 2, 1.0, 1.5, -1.5, 1e20, "0", "1", "-1", "1.5", "+5", " 5", "10G", "10Gi", "10k", "8ki", "10GiB", "10g",
    "1e3", "0x10", "auto", "auto(4)", "AUTO", "auto()", "true", "False", "yes", "on", "lots", "1; DROP TABLE x", "",
    ",", "ab", "random", "best_effort", "union", "hash,parallel_hash", "inf", "nan", "18446744073709551615",
]


def test_a_value_the_check_refuses_the_server_refuses_too(stack: LocalStack) -> None:
    """The check is held to the server: never a refusal of a value the server takes (the native protocol's
    settings, as the load sends them)."""
    hook = ClickHouseHook()
    try:
        types = dict(hook.client().execute(SETTING_TYPES_SQL, {"names": tuple(SETTINGS)}))
        assert set(types) == set(SETTINGS)
        wrong, refused = [], 0
        for name in SETTINGS:
            for value in VALUES:
                problem = setting_problem(name, value, types[name])
                try:
                    hook.client().execute("SELECT 1", settings={name: value})
                    taken = True
                except Exception:  # noqa: BLE001 - the server's answer is the point
                    taken = False
                    hook.close()
                if problem is not None:
                    refused += 1
                    if taken:
                        wrong.append((name, types[name], value))
        assert not wrong, f"the check refuses values the server takes: {wrong}"
        assert refused > 100, "the check judged almost nothing"
    finally:
        hook.close()


def _no_statement_carried(stack: LocalStack, name: str, value: object, since: float) -> None:
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    carried = client.execute(
        "SELECT count() FROM system.query_log WHERE event_time >= toDateTime(%(t)s) "
        "AND client_name LIKE '%%airflow-provider-s3ch%%' AND Settings[%(n)s] = %(v)s",
        {"t": int(since) - 1, "n": name, "v": str(value)},
    )[0][0]
    assert carried == 0, f"{carried} statements reached the server with {name}={value!r}"


@pytest.mark.parametrize(
    ("name", "value", "type_name"),
    [("max_threads", "1; DROP TABLE x", "MaxThreads"), ("max_threads", "lots", "MaxThreads"),
     ("max_memory_usage", "lots", "UInt64"), ("max_insert_threads", -1, "MaxThreads"),
     ("insert_deduplicate", "yes", "Bool"), ("max_block_size", 0, "NonZeroUInt64")],
)
def test_a_bad_value_fails_before_any_statement_carries_it(stack, posts: SampleDataset, posts_table: str, name,
                                                           value, type_name) -> None:
    since = time.time()
    op = S3ToClickHouseOperator(task_id="typed_setting", s3_uri=posts.s3_uri, table=posts_table,
                                settings={name: value})
    with pytest.raises(InvalidRequestError) as info:
        op.execute(fake_context("typed_setting"))
    text = str(info.value)
    assert isinstance(info.value, AirflowFailException), "terminal: a retry sends the same value"
    assert name in text and repr(value) in text and type_name in text, text
    assert count(stack, posts_table) == 0
    _no_statement_carried(stack, name, value, since)


def test_a_setting_the_server_does_not_have_is_named(stack, posts: SampleDataset, posts_table: str) -> None:
    op = S3ToClickHouseOperator(task_id="unknown_setting", s3_uri=posts.s3_uri, table=posts_table,
                                settings={"max_insert_thread": 2})
    with pytest.raises(InvalidRequestError, match="'max_insert_thread' is not a setting of the server"):
        op.execute(fake_context("unknown_setting"))


def test_values_the_server_takes_in_its_own_forms_load(stack, posts: SampleDataset, posts_table: str) -> None:
    """A size with a suffix and ``auto(N)``, as ClickHouse writes them: the plan reads them as the server does
    (``int('8Gi')`` was a bare ValueError before)."""
    op = S3ToClickHouseOperator(task_id="forms", s3_uri=posts.s3_uri, table=posts_table,
                                settings={"max_memory_usage": "8Gi", "max_insert_threads": "auto(2)",
                                          "max_threads": "auto"})
    result = op.execute(fake_context("forms"))
    assert result["written_rows"] == count(stack, posts_table) > 0

"""Helpers for integration tests: read the real servers' state."""

from __future__ import annotations

import json
import types
import uuid
from typing import Any

from airflow_provider_s3ch.local import LocalStack

SAMPLE_BUCKET = "s3ch-sample"


def fake_context(task_id: str = "load", try_number: int = 1, run_id: str | None = None) -> dict[str, Any]:
    """The part of an Airflow context the operator reads (the task instance's identity)."""
    ti = types.SimpleNamespace(
        dag_id="it", task_id=task_id, run_id=run_id or f"run-{uuid.uuid4().hex[:8]}", map_index=-1,
        try_number=try_number,
    )
    return {"ti": ti}


def count(stack: LocalStack, table: str, node: int = 0) -> int:
    return int(stack.clickhouse_client(node).execute(f"SELECT count() FROM {table}")[0][0])


def query_log(stack: LocalStack, query_id: str, node: int = 0) -> dict[str, Any]:
    """The finished entry of a query in a node's system.query_log, as a dict."""
    client = stack.clickhouse_client(node)
    client.execute("SYSTEM FLUSH LOGS")
    rows, cols = client.execute(
        "SELECT written_rows, written_bytes, read_rows, read_bytes, query_duration_ms, memory_usage, Settings "
        "FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'",
        {"q": query_id},
        with_column_types=True,
    )
    assert len(rows) == 1, f"expected one finished entry for {query_id}, got {rows}"
    return dict(zip([c[0] for c in cols], rows[0], strict=True))


def as_json(value: Any) -> str:
    return json.dumps(value, default=str)


def secondary_inserts(stack: LocalStack, query_id: str, node: int) -> tuple[int, int]:
    """(how many, rows written) of the finished secondary inserts of ``query_id`` in a node's system.query_log.

    A distributed load (s3Cluster, ``parallel_distributed_insert_select = 2``) runs one on every shard; s3Cluster
    hands the files out on demand, so how many rows each node writes (none, on a busy machine) is not promised.
    """
    client = stack.clickhouse_client(node)
    client.execute("SYSTEM FLUSH LOGS")
    n, rows = client.execute(
        "SELECT count(), sum(written_rows) FROM system.query_log WHERE initial_query_id = %(q)s "
        "AND NOT is_initial_query AND type = 'QueryFinish' AND query_kind = 'Insert'",
        {"q": query_id},
    )[0]
    return int(n), int(rows)

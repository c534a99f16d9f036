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

"""Run one INSERT under a known query id and read its figures from ``system.query_log``.

Durations, rows/s and peak memory come from the server's ``system.query_log`` (after
``SYSTEM FLUSH LOGS``), never from client timers, as ClickHouse's guide advises.
Time-to-ready is measured after the insert: until no merge of the table runs and its
active parts are at most :data:`READY_PARTS_PER_PARTITION` per partition (or the timeout).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from airflow_provider_s3ch.core.sql import render_settings

#: "Ready" means at most this many active parts per partition and no merge running.
#: ClickHouse's merge selector (base 5) does not merge fewer similar-sized parts of a
#: partition soon, so waiting for fewer would time out on loads that are in fact done.
READY_PARTS_PER_PARTITION = 4

#: Seconds to wait for merges to settle before giving up (the run then reports ``ready: false``).
READY_TIMEOUT_S = 20.0

#: Poll interval for time-to-ready.
READY_POLL_S = 0.25


def flush_and_fetch(client: Any, query_id: str, wait_s: float = 10.0) -> dict[str, Any]:
    """The finished (or failed) ``system.query_log`` entry of ``query_id`` as a dict."""
    deadline = time.monotonic() + wait_s
    while True:
        client.execute("SYSTEM FLUSH LOGS")
        rows, cols = client.execute(
            "SELECT type, query_duration_ms, memory_usage, written_rows, written_bytes, read_rows, read_bytes, "
            "ProfileEvents['S3GetObject'] AS s3_get, ProfileEvents['S3ListObjects'] AS s3_list, "
            "ProfileEvents['S3HeadObject'] AS s3_head, ProfileEvents['InsertedWideParts'] AS wide_parts, "
            "ProfileEvents['InsertedCompactParts'] AS compact_parts, exception, Settings "
            "FROM system.query_log WHERE query_id = %(q)s AND type != 'QueryStart' "
            "ORDER BY event_time_microseconds DESC LIMIT 1",
            {"q": query_id},
            with_column_types=True,
        )
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    if not rows:
        return {"type": "missing"}
    out = dict(zip([c[0] for c in cols], rows[0], strict=True))
    out["exception"] = str(out["exception"]).split("Stack trace:")[0].strip()[:400]
    out["Settings"] = {str(k): str(v) for k, v in dict(out["Settings"]).items()}
    return out


def wait_ready(client: Any, database: str, table: str, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
    """Poll until no merge runs on the table and its active parts are at most
    :data:`READY_PARTS_PER_PARTITION` per partition.

    :return: seconds waited, whether it settled, the final active part and partition counts.
    """
    started = time.monotonic()
    params = {"d": database, "t": table}
    while True:
        merges = client.execute(
            "SELECT count() FROM system.merges WHERE database = %(d)s AND table = %(t)s", params
        )[0][0]
        parts, partitions = client.execute(
            "SELECT count(), uniqExact(partition_id) FROM system.parts "
            "WHERE database = %(d)s AND table = %(t)s AND active",
            params,
        )[0]
        waited = time.monotonic() - started
        settled = merges == 0 and parts <= READY_PARTS_PER_PARTITION * max(1, partitions)
        if settled or waited > timeout_s:
            return {
                "ready_s": round(waited, 2),
                "ready": bool(settled),
                "parts": int(parts),
                "partitions": int(partitions),
                "merges_running": int(merges),
            }
        time.sleep(READY_POLL_S)


def new_table(client: Any, database: str, ddl: Any, tag: str) -> str:
    """Create a fresh table from ``ddl(quoted_name)``; return its bare name."""
    name = f"{tag}_{uuid.uuid4().hex[:8]}"
    client.execute(ddl(f"`{database}`.`{name}`"))
    return name


def run_sql_insert(
    client: Any,
    database: str,
    table: str,
    source: str,
    settings: dict[str, Any],
    *,
    ready: bool = True,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> dict[str, Any]:
    """``INSERT INTO db.table SELECT * FROM <source> SETTINGS ...`` under a fresh query id.

    :param source: the table function call, e.g. ``s3(...)`` or ``file(...)``.
    :param settings: the settings (``{}`` for ClickHouse's defaults).
    :param ready: measure time-to-ready after the insert.
    :return: the query_log figures, the error if any, and time-to-ready.
    """
    query_id = f"bench-{uuid.uuid4().hex}"
    tail = render_settings(settings)
    sql = f"INSERT INTO `{database}`.`{table}` SELECT * FROM {source}" + (f" {tail}" if tail else "")
    error = None
    wall_started = time.monotonic()
    try:
        client.execute(sql, query_id=query_id)
    except Exception as exc:  # noqa: BLE001 - a failed load is a result (e.g. over its memory cap)
        error = str(getattr(exc, "message", None) or exc).split("Stack trace:")[0].strip()[:400]
    wall_s = time.monotonic() - wall_started
    log = flush_and_fetch(client, query_id)
    out = summarize(log, query_id, settings, error, wall_s)
    if ready and error is None:
        out.update(wait_ready(client, database, table, ready_timeout_s))
    return out


def summarize(
    log: dict[str, Any], query_id: str, settings: dict[str, Any], error: str | None, wall_s: float | None
) -> dict[str, Any]:
    """One run's record from its query_log entry."""
    duration_ms = int(log.get("query_duration_ms") or 0)
    rows = int(log.get("written_rows") or 0)
    ok = log.get("type") == "QueryFinish" and error is None
    return {
        "query_id": query_id,
        "ok": ok,
        "error": error or (log.get("exception") if not ok else None) or None,
        "duration_s": round(duration_ms / 1000, 3),
        "rows": rows,
        "rows_per_s": round(rows / (duration_ms / 1000)) if duration_ms and ok else 0,
        "peak_memory": int(log.get("memory_usage") or 0),
        "written_bytes": int(log.get("written_bytes") or 0),
        "read_bytes": int(log.get("read_bytes") or 0),
        "s3_get": int(log.get("s3_get") or 0),
        "s3_list": int(log.get("s3_list") or 0),
        "s3_head": int(log.get("s3_head") or 0),
        # The parts the insert wrote (each block cut by partition): how many partitions its blocks spanned.
        "wide_parts": int(log.get("wide_parts") or 0),
        "compact_parts": int(log.get("compact_parts") or 0),
        "client_wall_s": round(wall_s, 3) if wall_s is not None else None,
        "settings": {k: (v if isinstance(v, int | float) else str(v)) for k, v in settings.items()},
    }

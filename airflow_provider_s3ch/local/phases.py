"""Where a continuous file's latency goes: from ``put_object`` to its rows readable, in the pieces of the path
that each record their own time.

============== ==================================================================================================
``event``      put -> the asset event that names the file (the watcher saw it: SQS or a listing; the triggerer
               wrote the event)
``run``        the event -> its DAG run queued (Airflow's scheduler made the run; waits for a run still going
               on: ``max_active_runs=1``)
``task``       the run queued -> the load task started (the scheduler scheduled it, the executor started the
               task's process)
``startup``    the task started -> the operator's ``execute`` began (Airflow's task process: its start, the
               DAG file parsed, the context)
``operator``   the operator before its insert (its phases in the XCom: the listing or the events, the
               server's facts, the ledger's claims, the plan)
``insert``     the insert (``system.query_log``)
``publish``    the insert's end -> the rows readable (the staging table's moves, the ledger's marks; the poll of
               the table, every 0.2 s, is in it)
============== ==================================================================================================

Read after a live run from Airflow's metadata database (the runs, the task instances, the asset events and the
load's XCom), the ledger (which insert read which file) and ``system.query_log``.
"""

from __future__ import annotations

import datetime
import json
import statistics
from collections.abc import Mapping
from typing import Any

PHASES = ("event", "run", "task", "startup", "operator", "insert", "publish")
#: The operator's phases (``phases_ms`` in its XCom) before its insert.
BEFORE_INSERT = ("s3", "target", "resume")
DAG_ID = "s3_to_clickhouse_continuous"
TASK_ID = "load_landed_files"


def _epoch(value: Any) -> float | None:
    """Seconds since the epoch of a metadata database's timestamp (UTC text)."""
    if value is None:
        return None
    when = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return (when if when.tzinfo else when.replace(tzinfo=datetime.UTC)).timestamp()


def _stem(query_id: str) -> str:
    """A provider query id's stem (``s3ch-<stem>-try<n>[...]``)."""
    parts = query_id.split("-")
    return parts[1] if len(parts) > 2 else query_id


def events_of(db: Any) -> dict[str, float]:
    """Each file's first asset event (key -> when it was stored), whichever run it triggered: a run also loads
    the files of events stored after it was queued (``files_from="events"``)."""
    events: dict[str, float] = {}
    for at, extra in db("SELECT timestamp, extra FROM asset_event"):
        payload = json.loads(extra).get("payload", {}) if extra else {}
        for f in payload.get("files", []) if isinstance(payload, dict) else []:
            key, when = (f.get("key") if isinstance(f, dict) else None), _epoch(at)
            if key is not None and when is not None and (key not in events or when < events[key]):
                events[key] = when
    return events


def runs_of(db: Any) -> dict[str, dict[str, Any]]:
    """The load task's stems -> its run's id, when the run was queued and when the task started."""
    out: dict[str, dict[str, Any]] = {}
    xcoms = db("SELECT x.run_id, x.value FROM xcom x WHERE x.dag_id = ? AND x.task_id = ? AND x.key = 'return_value'",
               DAG_ID, TASK_ID)
    for run_id, value in xcoms:
        try:
            got = json.loads(value if isinstance(value, str) else value.decode())
        except (ValueError, AttributeError):
            continue
        if isinstance(got, str):  # stored as a JSON string of JSON
            got = json.loads(got)
        query_id = got.get("query_id") if isinstance(got, dict) else None
        if not query_id:
            continue
        phases_ms = got.get("phases_ms") or {}
        before = sum(float(phases_ms.get(name) or 0) for name in BEFORE_INSERT) / 1000
        ((queued,),) = db("SELECT queued_at FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)
        started = db("SELECT min(start_date) FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?",
                     DAG_ID, run_id, TASK_ID)[0][0]
        out[_stem(query_id)] = {"run_id": run_id, "queued": _epoch(queued), "started": _epoch(started),
                                "operator_s": before}
    return out


def from_servers(ch: Any, db: Any, table: str, put: Mapping[str, float], seen: Mapping[str, float]
                 ) -> dict[str, Any]:
    """The phase account of a live run's files (:func:`account`, :func:`summarize`), read from ClickHouse (``ch``:
    the ledger beside ``table``, ``system.query_log``) and Airflow's metadata database (``db``)."""
    database = table.split(".")[0] if "." in table else "default"
    loaded_by = dict(ch.execute(
        f"SELECT key, argMax(query_id, version) FROM {database}._s3ch_ledger WHERE table = %(t)s AND state = 'loaded' "
        "GROUP BY key", {"t": table if "." in table else f"default.{table}"}))
    ch.execute("SYSTEM FLUSH LOGS")
    inserts = {q: (s / 1e6, e / 1e6) for q, s, e in ch.execute(
        "SELECT query_id, toUnixTimestamp64Micro(query_start_time_microseconds), "
        "toUnixTimestamp64Micro(event_time_microseconds) FROM system.query_log WHERE type = 'QueryFinish' "
        "AND query_id IN %(q)s", {"q": sorted(set(loaded_by.values())) or [""]})}
    per_file = account(put, seen, loaded_by, inserts, runs_of(db), events_of(db))
    return {**summarize(per_file), "per_file": per_file}


def account(put: Mapping[str, float], seen: Mapping[str, float], loaded_by: Mapping[str, str],
            inserts: Mapping[str, tuple[float, float]], runs: Mapping[str, Mapping[str, Any]],
            events: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Each file's phases (seconds), from what each piece recorded. A file whose event was stored after its run
    was queued (the run took it when it started) spends no time in ``run``: each mark is the later of its own
    and the one before.

    :param put: key -> when ``put_object`` returned (epoch seconds).
    :param seen: key -> when its rows were readable.
    :param loaded_by: key -> the query id of the insert that read it (the ledger).
    :param inserts: query id -> (start, end) of the insert (``system.query_log``).
    :param runs: :func:`runs_of`.
    :param events: :func:`events_of`.
    """
    out: dict[str, dict[str, float]] = {}
    for key, at in put.items():
        query_id = loaded_by.get(key)
        run = runs.get(_stem(query_id)) if query_id else None
        if key not in seen or query_id not in inserts or run is None or key not in events:
            continue
        start, end = inserts[query_id]
        marks = [at, events[key], run["queued"], run["started"], start - run.get("operator_s", 0.0), start, end,
                 seen[key]]
        if any(m is None for m in marks):
            continue
        for i in range(1, len(marks)):
            marks[i] = max(marks[i], marks[i - 1])
        out[key] = {name: round(b - a, 3) for name, a, b in zip(PHASES, marks, marks[1:], strict=False)}
    return out


def summarize(per_file: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Per phase: the median, the p95 and its share of the mean latency; and how many files were accounted."""
    if not per_file:
        return {"files": 0}
    total = statistics.mean(sum(p.values()) for p in per_file.values())
    out: dict[str, Any] = {"files": len(per_file), "mean_latency_s": round(total, 3)}
    for name in PHASES:
        values = sorted(p[name] for p in per_file.values())
        out[name] = {"p50_s": round(statistics.median(values), 3),
                     "p95_s": round(values[max(0, -(-95 * len(values) // 100) - 1)], 3),
                     "mean_share": round(statistics.mean(values) / total, 3) if total else None}
    return out

"""The load's figures from ``system.query_log`` rows: per node, and the Distributed arithmetic. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from airflow_provider_s3ch.core.errors import server_text
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, NodeMetrics

#: The server's own figures of the wait before a query runs, under workload scheduling (ProfileEvents, in
#: microseconds): for its memory reservation (``reserve_memory``) and for a query slot (a workload's
#: ``max_concurrent_queries``). Both are taken before the query starts; a server without them reads 0.
ADMISSION_WAIT_EVENTS = ("MemoryReservationAdmitMicroseconds", "ConcurrentQueryWaitMicroseconds")
ADMISSION_WAIT_SQL = " + ".join(f"ProfileEvents['{e}']" for e in ADMISSION_WAIT_EVENTS)

#: The ``system.query_log`` columns a :class:`QueryLogRow` holds, in the order the hook selects them.
QUERY_LOG_COLUMNS = (
    "query_id",
    "initial_query_id",
    "written_rows",
    "written_bytes",
    "read_rows",
    "read_bytes",
    "query_duration_ms",
    "memory_usage",
    "Settings",
    "is_initial_query",
    "type",
    "exception",
    f"{ADMISSION_WAIT_SQL} AS admission_wait_us",
)


class QueryLogRow(BaseModel):
    """One finished entry of ``system.query_log`` (named columns, not positions)."""

    node: str = ""
    query_id: str
    initial_query_id: str = ""
    written_rows: int = 0
    written_bytes: int = 0
    read_rows: int = 0
    read_bytes: int = 0
    query_duration_ms: int = 0
    memory_usage: int = 0
    settings: dict[str, str] = Field(default_factory=dict, alias="Settings")
    is_initial_query: bool = True
    type: str = "QueryFinish"
    exception: str = ""
    admission_wait_us: int = 0

    model_config = {"populate_by_name": True}

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, v: Any) -> str:
        return str(v)

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v: Any) -> dict[str, str]:
        return {str(k): str(val) for k, val in dict(v or {}).items()}

    @property
    def finished(self) -> bool:
        return self.type == "QueryFinish"

    @property
    def error(self) -> str:
        """The exception's text without the server's stack trace."""
        return server_text(self.exception)

    def node_metrics(self, node: str | None = None, **update: int) -> NodeMetrics:
        """This entry's figures as one node's share (``update`` overrides some)."""
        figures = {
            "node": node if node is not None else self.node,
            "query_id": self.query_id,
            "written_rows": self.written_rows,
            "written_bytes": self.written_bytes,
            "read_rows": self.read_rows,
            "read_bytes": self.read_bytes,
            "duration_ms": self.query_duration_ms,
            "memory_usage": self.memory_usage,
            "admission_wait_ms": round(self.admission_wait_us / 1000),
        }
        figures.update(update)
        return NodeMetrics(**figures)


def merge_by_node(entries: Sequence[NodeMetrics]) -> list[NodeMetrics]:
    """One figure per node: a node may run several secondary inserts for one load.

    Rows and bytes add up; duration, memory and the admission wait are the largest of the node's entries.
    """
    merged: dict[str, NodeMetrics] = {}
    for e in entries:
        m = merged.get(e.node)
        if m is None:
            merged[e.node] = e
            continue
        merged[e.node] = m.model_copy(
            update={
                "written_rows": m.written_rows + e.written_rows,
                "written_bytes": m.written_bytes + e.written_bytes,
                "read_rows": m.read_rows + e.read_rows,
                "read_bytes": m.read_bytes + e.read_bytes,
                "duration_ms": max(m.duration_ms, e.duration_ms),
                "memory_usage": max(m.memory_usage, e.memory_usage),
                "admission_wait_ms": max(m.admission_wait_ms, e.admission_wait_ms),
            }
        )
    return list(merged.values())


def load_metrics(
    entry: QueryLogRow,
    secondary: Sequence[QueryLogRow] = (),
    *,
    distributed: bool = False,
    target_distributed: bool = False,
) -> LoadMetrics:
    """The load's figures from its own ``query_log`` entry and its secondary inserts on each node.

    - A single-node load into a local table is its one entry.
    - A distributed load's rows are written by each node's secondary inserts
      (``initial_query_id`` = the load's id); the initiator's own entry shows
      ``written_rows = 0``. Totals are the sums over nodes.
    - A single-node load into a Distributed table (foreground insert) counts every
      row twice on the initiator: once into the Distributed table, once into its own
      shard. The other shards' rows are their secondary inserts; the initiator's
      shard holds ``written_rows - read_rows`` (every row read is routed: the load is
      ``SELECT *``), and its bytes are that share of its ``written_bytes``.

    The admission wait (workload scheduling) is the load's own query's; each node's, in ``nodes``,
    is the longest of its secondary queries' (they reserve on their node while the load runs).

    :param entry: the load's finished entry on the initiator (its ``node`` set).
    :param secondary: the finished secondary entries on every node (each with its ``node``).
    :param distributed: whether the load ran on every node (s3Cluster).
    :param target_distributed: whether the target is a Distributed table.
    """
    per_node: list[NodeMetrics] = []
    if distributed or target_distributed:
        per_node = [
            row.node_metrics() for row in secondary if row.finished and row.query_id != entry.query_id
        ]
    if target_distributed and not distributed:
        own_rows = max(0, entry.written_rows - entry.read_rows)
        own_bytes = entry.written_bytes * own_rows // entry.written_rows if entry.written_rows else 0
        own = entry.node_metrics(written_rows=own_rows, written_bytes=own_bytes, read_rows=0, read_bytes=0)
        per_node = [own] + [n for n in per_node if n.node != entry.node]
    per_node = merge_by_node(per_node) or [entry.node_metrics()]
    return LoadMetrics(
        query_id=entry.query_id,
        written_rows=sum(n.written_rows for n in per_node),
        written_bytes=sum(n.written_bytes for n in per_node),
        read_rows=sum(n.read_rows for n in per_node) if distributed else entry.read_rows,
        read_bytes=sum(n.read_bytes for n in per_node) if distributed else entry.read_bytes,
        duration_ms=entry.query_duration_ms,
        memory_usage=max([entry.memory_usage] + [n.memory_usage for n in per_node]),
        admission_wait_ms=round(entry.admission_wait_us / 1000),
        settings=entry.settings,
        nodes=per_node,
    )


def summary(plan: LoadPlan, metrics: LoadMetrics, wall_ms: int) -> dict[str, Any]:
    """The XCom return value: the plan's summary and the figures from ``system.query_log`` (JSON-safe).

    ``settings`` are the values the query ran with, as the server logged them (numbers as ints).
    ``admission_wait_ms`` is how long the load waited for workload scheduling to admit it (the server's
    own figure), ``run_ms`` how long it ran after: together ``duration_ms``.
    """
    executed: dict[str, Any] = {}
    for name in plan.settings.values:
        raw = metrics.settings.get(name)
        executed[name] = int(raw) if raw is not None and raw.lstrip("-").isdigit() else raw
    return {
        "query_id": metrics.query_id,
        "table": str(plan.table),
        "strategy": plan.strategy,
        "strategy_reason": plan.strategy_reason,
        "files": plan.manifest.get("files"),
        "bytes": plan.manifest.get("bytes"),
        "format": plan.format,
        "compression": plan.compression,
        "settings": executed,
        "settings_reasons": plan.settings.reasons,
        "overrides": plan.settings.overrides,
        "budget_bytes": plan.budget_bytes,
        "written_rows": metrics.written_rows,
        "written_bytes": metrics.written_bytes,
        "read_rows": metrics.read_rows,
        "read_bytes": metrics.read_bytes,
        "duration_ms": metrics.duration_ms,
        "workload": plan.settings.values.get("workload") or None,
        "admission_wait_ms": metrics.admission_wait_ms,
        "run_ms": metrics.run_ms,
        "memory_usage": metrics.memory_usage,
        "predicted_memory_usage": plan.predicted_peak_bytes,
        "predicted_memory_reason": plan.predicted_peak_reason,
        "memory_vs_predicted": peak_ratio(metrics.memory_usage, plan.predicted_peak_bytes),
        "history": plan.history,
        "rows_per_second": metrics.rows_per_second,
        "wall_ms": wall_ms,
        "nodes": [n.model_dump(mode="json") for n in metrics.nodes],
        "checks": [c.model_dump(mode="json") for c in plan.checks],
        "warnings": plan.warnings,
    }


def peak_ratio(measured: int, predicted: int | None) -> float | None:
    """Measured / predicted peak memory (1.0: exact; the plan's band is PEAK_BAND), or None."""
    if not predicted or not measured:
        return None
    return round(measured / predicted, 3)


def combine_chunks(parts: Sequence[LoadMetrics]) -> LoadMetrics:
    """One load's figures from its chunks' inserts, which ran one after another: rows, bytes, durations and
    admission waits add up; the peak memory is the largest chunk's; the query id and settings are the last
    chunk's (each chunk's own are in the XCom's ``chunks``).

    :param parts: the chunks' figures (non-empty).
    """
    if len(parts) == 1:
        return parts[0]
    last = parts[-1]
    nodes: dict[str, NodeMetrics] = {}
    for node in (n for p in parts for n in p.nodes):
        m = nodes.get(node.node)
        nodes[node.node] = node if m is None else m.model_copy(update={
            "written_rows": m.written_rows + node.written_rows, "written_bytes": m.written_bytes + node.written_bytes,
            "read_rows": m.read_rows + node.read_rows, "read_bytes": m.read_bytes + node.read_bytes,
            "duration_ms": m.duration_ms + node.duration_ms, "memory_usage": max(m.memory_usage, node.memory_usage),
            "admission_wait_ms": m.admission_wait_ms + node.admission_wait_ms,
        })  # fmt: skip
    return LoadMetrics(
        query_id=last.query_id,
        written_rows=sum(p.written_rows for p in parts),
        written_bytes=sum(p.written_bytes for p in parts),
        read_rows=sum(p.read_rows for p in parts),
        read_bytes=sum(p.read_bytes for p in parts),
        duration_ms=sum(p.duration_ms for p in parts),
        memory_usage=max(p.memory_usage for p in parts),
        admission_wait_ms=sum(p.admission_wait_ms for p in parts),
        settings=last.settings,
        nodes=list(nodes.values()),
    )

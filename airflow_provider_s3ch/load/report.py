"""What a load run hands back: a typed report (the XCom is its JSON dump), or a signal to defer or to skip.

Every kind of load ends in :func:`build_report` or in one of the short reports here (a dry run, nothing new):
plain, chunked, attached and deferred loads share it, so a key added here is added for all of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.freshness import Freshness
from airflow_provider_s3ch.core.ledger_rebuild import RebuiltPartition
from airflow_provider_s3ch.core.ledger_rows import WHOLE_FILE
from airflow_provider_s3ch.core.metrics import peak_ratio, summary
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, S3Object
from airflow_provider_s3ch.core.recovery import LoadSteps
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.core.server_models import ServerProfile, TableInfo
from airflow_provider_s3ch.core.sizes import fmt_bytes, is_byte_setting
from airflow_provider_s3ch.core.sql_summary import sql_summary


class LoadReport(BaseModel):
    """The XCom ``return_value`` of a load, typed. Which keys a kind of load reports is fixed (docs/xcom.md,
    the goldens in tests/integration/goldens): :meth:`to_xcom` dumps the fields a load set, None included."""

    model_config = ConfigDict(extra="forbid")

    #: What kind of run it reports: a load (rows inserted, or an earlier try's taken), a dry run (the plan
    #: alone), or a ledger run that found no new file. Not in the XCom, whose keys docs/xcom.md fixes.
    kind: Literal["load", "dry_run", "nothing_new"] = Field("load", exclude=True)

    # the plan and the figures from system.query_log (core/metrics.py summary)
    query_id: str | None = None
    table: str | None = None
    strategy: str | None = None
    strategy_reason: str | None = None
    files: int | None = None
    bytes: int | None = None
    format: str | None = None
    compression: str | None = None
    settings: dict[str, Any] | None = None
    settings_reasons: dict[str, str] | None = None
    overrides: list[str] | None = None
    budget_bytes: int | None = None
    written_rows: int | None = None
    written_bytes: int | None = None
    read_rows: int | None = None
    read_bytes: int | None = None
    duration_ms: int | None = None
    workload: str | None = None
    admission_wait_ms: int | None = None
    run_ms: int | None = None
    memory_usage: int | None = None
    predicted_memory_usage: int | None = None
    predicted_memory_reason: str | None = None
    memory_vs_predicted: float | None = None
    history: dict[str, Any] | None = None
    rows_per_second: float | None = None
    wall_ms: int | None = None
    #: Where ``wall_ms`` went: milliseconds per phase (``s3``, ``target``, ``resume``, ``insert``, ``complete``,
    #: ``lineage``; ``ledger``; ``other``, or ``deferred`` while the triggerer followed the insert).
    phases_ms: dict[str, int] | None = None
    nodes: list[dict[str, Any]] | None = None
    checks: list[dict[str, Any]] | None = None
    warnings: list[str] | None = None
    # how the rows reached the target
    mode: str | None = None
    mode_reason: str | None = None
    attached_to: str | list[str] | None = None
    staging_table: str | None = None
    resume_reason: str | None = None
    partitions: list[str] | None = None
    #: ``replace_partitions`` with the ledger: each partition replaced and the files it was rebuilt from.
    rebuilt: list[dict[str, Any]] | None = None
    table_changes: dict[str, Any] | None = None
    memory_attempts: list[dict[str, Any]] | None = None
    chunks: list[Any] | None = None
    ledger: dict[str, Any] | None = None
    #: A ledger load: how far behind the table was at its start and is at its end (docs/lag.md).
    freshness: Freshness | None = None
    # a dry run
    dry_run: bool | None = None
    sql: str | None = None
    plan: dict[str, Any] | None = None
    steps: dict[str, Any] | None = None
    #: ``compact_parts=True``: the staging tables' ``min_bytes_for_wide_part`` (parts under it written Compact).
    compact_parts: dict[str, Any] | None = None

    def to_xcom(self) -> dict[str, Any]:
        """The JSON-safe dict Airflow stores: the keys this kind of load sets, None values included."""
        return self.model_dump(mode="json", exclude_unset=True)


@dataclass(frozen=True)
class Loaded:
    """One insert's outcome (the load's, or one chunk's)."""

    plan: LoadPlan
    #: The target as the insert wrote it.
    target: TableInfo
    steps: LoadSteps
    #: The XCom's ``table_changes``: what the load did to the target's table (created, columns added).
    table_changes: dict[str, Any]
    resume_reason: str
    attached_to: str | None
    #: The statement as logged (credentials redacted); None when a deferred load had it too long to carry.
    sql: str | None
    #: The files it read; None when a deferred load had too many to carry.
    files: list[S3Object] | None
    chunk: int = WHOLE_FILE
    #: The inserts tried after a memory limit (empty when the first plan fitted).
    memory_attempts: list[dict[str, Any]] = field(default_factory=list)
    #: Its figures from ``system.query_log`` and the partitions it brought in, once complete.
    metrics: LoadMetrics | None = None
    partitions: list[str] = field(default_factory=list)
    #: ``replace_partitions`` with the ledger: each partition replaced and the files it was rebuilt from.
    rebuilt: list[RebuiltPartition] | None = None
    #: When its rows became visible in the target (``time.monotonic()`` right after the publish), once complete.
    published: float | None = None

    def done(self, metrics: LoadMetrics, partitions: list[str],
             rebuilt: list[RebuiltPartition] | None = None, published: float | None = None) -> Loaded:
        """The insert, complete."""
        return replace(self, metrics=metrics, partitions=partitions, rebuilt=rebuilt, published=published)

    def figures(self) -> dict[str, Any]:
        """The chunk's entry in the XCom's ``chunks``."""
        m, files = self.metrics, self.files or []
        assert m is not None
        return {"chunk": self.chunk, "query_id": m.query_id, "files": len(files),
                "bytes": sum(o.size for o in files), "written_rows": m.written_rows,
                "written_bytes": m.written_bytes, "duration_ms": m.duration_ms, "memory_usage": m.memory_usage,
                "attached_to": self.attached_to, "partitions": self.partitions}


class LoadEnd(NamedTuple):
    """What the load's end reports beside its inserts.

    :param columns: the target's columns as the target phase read them (None: read again for the lineage).
    :param objects: the files the load read (None: listed again, when a deferred load had too many to carry).
    :param ledger: the XCom's ``ledger`` entry of a ledger load.
    :param chunked: the ledger cut the load into chunks.
    :param freshness: a ledger load's freshness figures (the XCom's ``freshness``).
    :param rest: what the time outside the measured phases is: ``other`` (clients, logging), or for a deferred
        load ``deferred`` (the triggerer followed the insert).
    """

    columns: list[Column] | None
    objects: list[S3Object] | None
    ledger: dict[str, Any] | None = None
    chunked: bool = False
    rest: str = "other"
    freshness: Freshness | None = None


def build_report(loads: list[Loaded], metrics: LoadMetrics, partitions: list[str], end: LoadEnd, *, wall_ms: int,
                 phases_ms: dict[str, int] | None = None) -> LoadReport:
    """The report of a load that ran (or attached to an earlier try): one insert, or its chunks'."""
    last = loads[-1]
    attached = [one.attached_to for one in loads if one.attached_to]
    result = summary(last.plan, metrics, wall_ms=wall_ms)
    result.update({"mode": last.steps.mode, "mode_reason": last.steps.reason,
                   "attached_to": attached[0] if len(loads) == 1 and attached else (attached or None),
                   "staging_table": str(last.steps.staging) if last.steps.staging else None,
                   "resume_reason": last.resume_reason, "partitions": partitions,
                   "table_changes": loads[0].table_changes,
                   "warnings": list(dict.fromkeys([*(w for one in loads for w in one.plan.warnings),
                                                   *last.steps.warnings]))})
    predicted = [one.plan.predicted_peak_bytes for one in loads if one.plan.predicted_peak_bytes]
    if len(loads) > 1 and predicted:  # chunks: the largest chunk's prediction beside the largest chunk's peak
        result.update(predicted_memory_usage=max(predicted),
                      memory_vs_predicted=peak_ratio(metrics.memory_usage, max(predicted)))
    result["memory_attempts"] = [{**a, "settings": _public(a["settings"], last.plan),
                                  **({"chunk": one.chunk} if one.chunk else {})}
                                 for one in loads for a in one.memory_attempts]
    result.update(settings=_public(result["settings"], last.plan),
                  settings_reasons=_public(result["settings_reasons"], last.plan))
    if len(loads) > 1 or end.chunked:
        files = [o for one in loads for o in one.files or []]
        result.update(files=len(files), bytes=sum(o.size for o in files), chunks=[one.figures() for one in loads])
    if last.steps.compact_parts is not None:
        result["compact_parts"] = {"min_bytes_for_wide_part": last.steps.compact_parts}
    if end.ledger is not None:
        result["ledger"] = end.ledger
    if end.freshness is not None:
        result["freshness"] = end.freshness
    rebuilt = [one.rebuilt for one in loads if one.rebuilt is not None]
    if rebuilt:
        result["rebuilt"] = [p.model_dump(mode="json") for one in rebuilt for p in one]
    if phases_ms is not None:
        result["phases_ms"] = phases_ms
    return LoadReport(**result)


def _public(settings: dict[str, Any] | None, plan: LoadPlan) -> dict[str, Any] | None:
    """The settings for the XCom: without the provider's own ``log_comment`` tag (the history's, which
    ``system.query_log`` keeps), unless the task set it."""
    if settings is None or "log_comment" in plan.settings.overrides:
        return settings
    return {name: value for name, value in settings.items() if name != "log_comment"}


def dry_run_report(query_id: str, sql: str, plan: LoadPlan, steps: LoadSteps, table: dict[str, Any],
                   ledger: dict[str, Any] | None) -> LoadReport:
    """A dry run's report: the plan, the statement (credentials redacted) and the steps; nothing loaded."""
    return LoadReport(kind="dry_run", dry_run=True, query_id=query_id, sql=sql, plan=plan.model_dump(mode="json"),
                      mode=steps.mode, steps=steps.model_dump(mode="json"), table_changes=table,
                      **({"ledger": ledger} if ledger is not None else {}))


def nothing_new_report(table: str, mode: str, wall_ms: int, ledger: dict[str, Any], *, dry_run: bool,
                       freshness: Freshness | None = None) -> LoadReport:
    """A ledger run without a new file: zero rows, and the ledger's entry (what it skipped, and why)."""
    return LoadReport(kind="nothing_new", query_id=None, table=table, dry_run=dry_run, files=0, bytes=0,
                      written_rows=0, written_bytes=0,
                      read_rows=0, read_bytes=0, duration_ms=0, wall_ms=wall_ms, mode=mode, attached_to=None,
                      partitions=[], warnings=[], ledger=ledger,
                      **({"freshness": freshness} if freshness is not None else {}))


class DeferLoad(Exception):
    """The signal out of the insert (or the wait for earlier tries): hand the rest to Airflow's triggerer.

    :param kind: ``insert`` (the load's own query runs on the server) or ``wait`` (earlier tries run).
    :param query_ids: the queries the trigger follows.
    :param nodes: the nodes they run on (``ClusterNode`` dicts).
    :param deadline: when a wait gives up (seconds since the epoch), or None.
    :param load: with ``insert``: the :class:`~airflow_provider_s3ch.core.deferral.DeferredLoad` as JSON.
    """

    def __init__(self, *, kind: str, query_ids: list[str], nodes: list[dict[str, Any]], deadline: float | None = None,
                 load: dict[str, Any] | None = None) -> None:
        super().__init__(f"defer ({kind}): {', '.join(query_ids)}")
        self.kind, self.query_ids, self.nodes, self.deadline, self.load = kind, query_ids, nodes, deadline, load


class NothingNew(Exception):
    """The signal of a run with nothing to load under ``skip_when_empty``: the task is skipped.

    :param report: the run's report, where it has one (a ledger load's: what it skipped and why); the skipped task
        still leaves it as its XCom.
    """

    def __init__(self, message: str, report: LoadReport | None = None) -> None:
        super().__init__(message)
        self.report = report


def log_plan(log: logging.Logger, plan: LoadPlan, steps: LoadSteps, redacted_sql: str, profile: ServerProfile) -> None:
    """The plan in the task's log: the server, the strategy, the budget, each setting with its reason, the
    predicted peak, what history changed, the checks, the warnings, the statement (redacted) and the mode."""
    log.info("Server: ClickHouse %s, %d cores, memory %s (%s), cluster %s with %d nodes, target %s",
             profile.version, profile.cores, fmt_bytes(profile.memory_bytes), profile.memory_source,
             profile.cluster, len(profile.nodes), profile.table.engine)
    log.info("Strategy: %s (%s)", plan.strategy, plan.strategy_reason)
    log.info("Memory budget: %s (%s)", fmt_bytes(plan.budget_bytes), plan.budget_reason)
    for name, value in plan.settings.values.items():
        reason = plan.settings.reasons.get(name, "")
        size = fmt_bytes(value) if is_byte_setting(name) and isinstance(value, int) and value else ""
        readable = f" ({size})" if size and size not in reason.split(":")[0] else ""  # unless its reason says
        log.info("  %s = %s%s: %s", name, value, readable, reason)
    if plan.predicted_peak_bytes:
        log.info("Predicted peak memory: %s (%s)", fmt_bytes(plan.predicted_peak_bytes), plan.predicted_peak_reason)
    for change in (plan.history or {}).get("changes", []):
        log.info("Learned from %d earlier load(s): %s", plan.history["loads"], change)
    for check in plan.checks:
        log.info("Check %s: %s: %s", check.name, check.status, check.message)
    for warning in [*plan.warnings, *steps.warnings]:
        log.warning("%s", warning)
    log.info("SQL: %s", sql_summary(redacted_sql))
    log.debug("SQL in full: %s", redacted_sql)
    log.info("Mode %s: %s", steps.mode, steps.reason)

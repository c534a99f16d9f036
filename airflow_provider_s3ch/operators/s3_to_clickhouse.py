"""S3ToClickHouseOperator: a tuned, measured, server-side load of S3 files into ClickHouse."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_s3ch.compat import BaseOperator, Context
from airflow_provider_s3ch.hooks.aws import S3Source, object_url
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.models import LoadMetrics, LoadPlan, LoadRequest
from airflow_provider_s3ch.planner import make_plan
from airflow_provider_s3ch.s3 import build_manifest
from airflow_provider_s3ch.sql import render_insert


def make_query_id(dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int) -> str:
    """A query id that is the same for every try of one task instance but the suffix.

    ``s3ch-<20 hex of sha256(dag, task, run, map index)>-try<N>``: a retry can find
    the earlier tries' queries by the stem.
    """
    stem = hashlib.sha256(f"{dag_id}\x00{task_id}\x00{run_id}\x00{map_index}".encode()).hexdigest()[:20]
    return f"s3ch-{stem}-try{try_number}"


class S3ToClickHouseOperator(BaseOperator):
    """Load files from S3 into an existing ClickHouse table with one server-side ``INSERT … SELECT``.

    The operator lists the objects the glob matches (the manifest), reads the server's
    profile, plans the insert settings from the server's cores and the task's memory
    cap (ClickHouse's S3 insert tuning guide), chooses a single-node ``s3()`` or a
    distributed ``s3Cluster()`` insert, runs it under a deterministic query id and
    returns the load's figures from ``system.query_log``. Data never passes through
    the worker.

    :param s3_uri: ``s3://bucket/key-or-glob``; globs follow ClickHouse: ``*``, ``**``,
        ``?``, ``{a,b}``, ``{N..M}``. (templated)
    :param table: the target, ``database.table`` or ``table``. (templated)
    :param clickhouse_conn_id: the ``clickhouse`` connection. (templated)
    :param aws_conn_id: the ``aws`` connection used to list the bucket and whose
        credentials ClickHouse reads with; no credentials means a public bucket. (templated)
    :param format: ClickHouse input format; detected from the keys' extensions if None. (templated)
    :param compression: compression method; detected from the extensions if None. (templated)
    :param structure: column structure for formats without names, e.g. ``'a UInt32, b String'``. (templated)
    :param memory_cap: the load's memory cap: bytes, or a string like ``"8GiB"``; default:
        half of the server's memory. (templated)
    :param region_check: what to do when the bucket is in another region than the server:
        ``warn``, ``fail`` or ``off``.
    :param settings: ClickHouse settings that override the planned ones. (templated)
    :param strategy: ``auto``, ``single`` or ``distributed``.
    :param cluster: the cluster for distributed loads; default: the connection's extra ``cluster``. (templated)
    :param dry_run: plan and render only; load nothing.
    """

    template_fields: Sequence[str] = (
        "s3_uri",
        "table",
        "clickhouse_conn_id",
        "aws_conn_id",
        "format",
        "compression",
        "structure",
        "memory_cap",
        "settings",
        "cluster",
    )
    template_fields_renderers = {"settings": "json"}
    ui_color = "#ffcc01"

    def __init__(
        self,
        *,
        s3_uri: str,
        table: str,
        clickhouse_conn_id: str = "clickhouse_default",
        aws_conn_id: str | None = "aws_default",
        format: str | None = None,  # noqa: A002 - ClickHouse's own word
        compression: str | None = None,
        structure: str | None = None,
        memory_cap: int | str | None = None,
        region_check: str = "warn",
        settings: dict[str, Any] | None = None,
        strategy: str = "auto",
        cluster: str | None = None,
        dry_run: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.s3_uri = s3_uri
        self.table = table
        self.clickhouse_conn_id = clickhouse_conn_id
        self.aws_conn_id = aws_conn_id
        self.format = format
        self.compression = compression
        self.structure = structure
        self.memory_cap = memory_cap
        self.region_check = region_check
        self.settings = settings
        self.strategy = strategy
        self.cluster = cluster
        self.dry_run = dry_run
        self._running: tuple[ClickHouseHook, str, list[Any]] | None = None

    # ------------------------------------------------------------------ steps
    def build_request(self) -> LoadRequest:
        """Validate the rendered arguments (terminal errors name the argument and the fix)."""
        return LoadRequest.from_arguments(
            s3_uri=self.s3_uri,
            table=self.table,
            format=self.format or None,
            compression=self.compression or None,
            structure=self.structure or None,
            memory_cap=self.memory_cap,
            region_check=self.region_check,
            settings=self.settings,
            strategy=self.strategy,
            cluster=self.cluster or None,
            dry_run=self.dry_run,
        )

    def query_id(self, context: Context) -> str:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return make_query_id(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, ti.try_number)

    def execute(self, context: Context) -> dict[str, Any]:
        request = self.build_request()
        started = time.monotonic()
        source = S3Source(self.aws_conn_id)
        manifest = build_manifest(source.client(), request)
        self.log.info(
            "Manifest: %d files, %d bytes, format %s, compression %s, bucket region %s",
            manifest.file_count, manifest.total_bytes, manifest.format, manifest.compression, manifest.region,
        )
        hook = ClickHouseHook(self.clickhouse_conn_id)
        profile = hook.get_profile(request.table, cluster=request.cluster)
        self.log.info(
            "Server: ClickHouse %s, %d cores, memory %d bytes (%s), cluster %s with %d nodes, target %s",
            profile.version, profile.cores, profile.memory_bytes, profile.memory_source,
            profile.cluster, len(profile.nodes), profile.table.engine if profile.table else "?",
        )
        url = object_url(
            request.bucket,
            request.key_pattern,
            endpoint_url=hook.s3_endpoint_url or source.endpoint_url,
            region=manifest.region,
        )
        plan = make_plan(request, manifest, profile, source_url=url)
        rendered = render_insert(plan, source.credentials())
        self._log_plan(plan, rendered.redacted)
        query_id = self.query_id(context)
        if request.dry_run:
            return {"dry_run": True, "query_id": query_id, "sql": rendered.redacted, "plan": plan.model_dump(mode="json")}

        distributed = plan.strategy == "distributed"
        nodes = profile.nodes if distributed else []
        self._running = (hook, query_id, nodes)
        try:
            hook.run_insert(rendered.sql, query_id=query_id, log=self.log)
        finally:
            self._running = None
        metrics = hook.load_metrics(
            query_id,
            nodes=profile.nodes,
            distributed=distributed,
            target_distributed=bool(profile.table and profile.table.is_distributed),
        )
        result = self.result(plan, metrics, wall_ms=int((time.monotonic() - started) * 1000))
        self.log.info(
            "Loaded %d rows (%d bytes) in %d ms: %.0f rows/s, peak memory %d bytes",
            metrics.written_rows, metrics.written_bytes, metrics.duration_ms, metrics.rows_per_second,
            metrics.memory_usage,
        )
        return result

    def on_kill(self) -> None:
        if self._running is not None:
            hook, query_id, nodes = self._running
            self.log.info("Killing query %s", query_id)
            hook.kill_query(query_id, nodes)

    # ------------------------------------------------------------------ output
    def _log_plan(self, plan: LoadPlan, redacted_sql: str) -> None:
        self.log.info("Strategy: %s (%s)", plan.strategy, plan.strategy_reason)
        self.log.info("Memory budget: %d bytes (%s)", plan.budget_bytes, plan.budget_reason)
        for name, value in plan.settings.values.items():
            self.log.info("  %s = %s: %s", name, value, plan.settings.reasons.get(name, ""))
        for check in plan.checks:
            self.log.info("Check %s: %s: %s", check.name, check.status, check.message)
        for warning in plan.warnings:
            self.log.warning("%s", warning)
        self.log.info("SQL: %s", redacted_sql)

    @staticmethod
    def result(plan: LoadPlan, metrics: LoadMetrics, wall_ms: int) -> dict[str, Any]:
        """The XCom return value: the plan's summary and the figures from ``system.query_log``."""
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
            "memory_usage": metrics.memory_usage,
            "rows_per_second": metrics.rows_per_second,
            "wall_ms": wall_ms,
            "nodes": [n.model_dump(mode="json") for n in metrics.nodes],
            "checks": [c.model_dump(mode="json") for c in plan.checks],
            "warnings": plan.warnings,
        }

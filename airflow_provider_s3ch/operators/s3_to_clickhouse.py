"""S3ToClickHouseOperator: a tuned, measured, server-side load of S3 files into ClickHouse.

The operator is a shell: it gathers facts (the manifest from S3, the server's profile),
the core decides (:mod:`airflow_provider_s3ch.core`: the plan, the SQL, the recovery
steps), the operator runs the statements the core returns, and measures the load from
``system.query_log``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_provider_s3ch.core.glob import archive_path_syntax, object_url
from airflow_provider_s3ch.core.metrics import load_metrics, summary
from airflow_provider_s3ch.core.models import (
    Check,
    ClusterNode,
    LoadPlan,
    LoadRequest,
    Manifest,
    ServerProfile,
    TableInfo,
)
from airflow_provider_s3ch.core.plan import make_plan
from airflow_provider_s3ch.core.recovery import (
    LoadSteps,
    QueryId,
    Resume,
    Step,
    abandon_statements,
    decide_resume,
    finalize_statements,
    first_try_of_series,
    load_fingerprint,
    plan_steps,
    prepare_statements,
)
from airflow_provider_s3ch.core.schema import add_check, check_schema, sample_file, schema_reads, unchecked
from airflow_provider_s3ch.core.sql import RenderedSQL, render_describe, render_insert, scrub
from airflow_provider_s3ch.errors import ClickHouseQueryError, ClickHouseUnavailableError, LoadError, provider_errors
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.columns import describe, table_columns
from airflow_provider_s3ch.hooks.query_log import QueryLog
from airflow_provider_s3ch.hooks.s3 import S3Source, build_manifest

#: How long a retry waits for an earlier try's query that still runs on the server.
DEFAULT_EARLIER_TRY_TIMEOUT = 6 * 3600.0

#: How long a retry waits for a query that just left ``system.processes`` to reach ``system.query_log``.
SETTLE_SECONDS = 15.0


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
    :param mode: ``append`` (default): add the rows; ``replace_partitions``: each partition the
        files hold replaces the target's partition, atomically per partition; ``overwrite``:
        the files replace the whole table, atomically. Every mode loads into a staging table
        ``_s3ch_stage_<stem>`` first when the target allows it (a local MergeTree table), so a
        failed try leaves the target untouched. (templated)
    :param earlier_try_timeout: seconds a retry waits for an earlier try's query that still
        runs on the server before it fails (it never starts a second load beside it).
    :param schema_check: before loading (and in a dry run), compare the first file's columns, as the
        server's schema inference sees them (or ``structure``'s), with the table's: ``strict``
        (default): a table column the file lacks that has no DEFAULT (MATERIALIZED, ALIAS,
        EPHEMERAL) expression, a file column the table lacks, or a nested type against a plain one
        fails the task (:class:`SchemaError`);
        ``ignore_extra``: the same, but file columns the table lacks are left out; ``warn``: report
        the problems and load as the server would; ``off``: no check.

    Retries: the query id is ``s3ch-<stem>-try<N>``, the stem fixed per task instance and
    load configuration (a retry after the DAG's ``s3_uri``, table, mode, format, compression,
    structure or settings changed is a new load). A retry first looks for the earlier tries'
    queries: one still running is waited for and its figures taken; one that finished is
    attached to (its figures returned, its staging table finished) without inserting again;
    after a failed one the load starts afresh.
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
        "mode",
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
        mode: str = "append",
        earlier_try_timeout: float = DEFAULT_EARLIER_TRY_TIMEOUT,
        schema_check: str = "strict",
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
        self.mode = mode
        self.earlier_try_timeout = earlier_try_timeout
        self.schema_check = schema_check
        self._running: tuple[ClickHouseHook, list[str], Sequence[ClusterNode]] | None = None

    # ------------------------------------------------------------------ steps
    def build_request(self) -> LoadRequest:
        """Validate the rendered arguments (terminal errors name the argument and the fix)."""
        with provider_errors():
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
                mode=self.mode,
                schema_check=self.schema_check,
            )

    def query_id(self, context: Context, request: LoadRequest | None = None) -> QueryId:
        """This try's query id: one stem per task instance and load configuration."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        fingerprint = load_fingerprint(request or self.build_request())
        return QueryId.for_task(
            ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, ti.try_number, fingerprint
        )

    def first_try(self, context: Context) -> int:
        """The first try since the task instance was last cleared (earlier ones are not attached to)."""
        ti = context["ti"]
        max_tries = getattr(ti, "max_tries", None)
        retries = getattr(self, "retries", None) if max_tries is not None else None
        return first_try_of_series(int(ti.try_number), max_tries, retries)

    def execute(self, context: Context) -> dict[str, Any]:
        """Load, every error the provider's (:class:`~airflow_provider_s3ch.errors.S3chError`)."""
        with provider_errors():
            return self._load(context)

    def _load(self, context: Context) -> dict[str, Any]:
        started = time.monotonic()
        request = self.build_request()
        query_id = self.query_id(context, request)
        source = S3Source(self.aws_conn_id)
        manifest = build_manifest(source.client(), request)
        self.log.info("Manifest: %d files, %d bytes, format %s, compression %s, bucket region %s",
                      manifest.file_count, manifest.total_bytes, manifest.format, manifest.compression,
                      manifest.region)
        hook = ClickHouseHook(self.clickhouse_conn_id)
        try:
            profile = hook.get_profile(request.table, cluster=request.cluster)
            url = object_url(request.bucket, request.key_pattern,
                             endpoint_url=hook.s3_endpoint_url or source.endpoint_url, region=manifest.region,
                             archive_syntax=archive_path_syntax(request.settings))
            plan = make_plan(request, manifest, profile, source_url=url)
            add_check(plan, self._check_schema(hook, source, request, plan, manifest, profile.table))
            steps = plan_steps(request.mode, profile.table, query_id.stem)
            rendered = render_insert(plan, source.credentials(), target=steps.staging)
            self._log_plan(plan, steps, rendered.redacted, profile)
            if request.dry_run:
                return {"dry_run": True, "query_id": str(query_id), "sql": rendered.redacted,
                        "plan": plan.model_dump(mode="json"), "mode": steps.mode,
                        "steps": steps.model_dump(mode="json")}
            distributed = plan.strategy == "distributed"
            fan_out = profile.nodes if distributed or profile.table.is_distributed else []
            queries = QueryLog(hook)
            resume = self._resume(hook, queries, query_id, self.first_try(context), fan_out)
            attached_to = resume.query_ids[0] if resume.action == "attach" else None
            if attached_to is None:
                self._insert(hook, queries, rendered, query_id, profile.nodes if distributed else [], steps)
            entry = queries.entry(attached_to or str(query_id), fan_out)
            metrics = load_metrics(entry, queries.secondary_queries(entry.query_id, fan_out) if fan_out else [],
                                   distributed=distributed, target_distributed=profile.table.is_distributed)
            partitions = self._finalize(hook, steps) if steps.staging is not None else []
        finally:
            hook.close()
        result = summary(plan, metrics, wall_ms=int((time.monotonic() - started) * 1000))
        result.update({"mode": steps.mode, "mode_reason": steps.reason, "attached_to": attached_to,
                       "staging_table": str(steps.staging) if steps.staging else None,
                       "resume_reason": resume.reason, "partitions": partitions,
                       "warnings": [*result["warnings"], *steps.warnings]})
        self.log.info("%s %d rows (%d bytes) in %d ms: %.0f rows/s, peak memory %d bytes; %s",
                      f"Took the figures of earlier try {attached_to}:" if attached_to else "Loaded",
                      metrics.written_rows, metrics.written_bytes, metrics.duration_ms, metrics.rows_per_second,
                      metrics.memory_usage, f"{steps.mode} of partitions {', '.join(partitions)}" if partitions
                      else steps.mode)
        return result

    def on_kill(self) -> None:
        if self._running is not None:
            hook, query_ids, nodes = self._running
            for query_id in query_ids:
                self.log.info("Killing query %s", query_id)
                hook.kill_query(query_id, nodes)

    def _check_schema(
        self, hook: ClickHouseHook, source: S3Source, request: LoadRequest, plan: LoadPlan, manifest: Manifest,
        table: TableInfo,
    ) -> Check:
        """The first file's columns (the server's schema inference) or the structure's against the target's."""
        reads, sample = schema_reads(request.schema_check, plan.format, plan.structure), sample_file(plan, manifest)
        if reads.skipped is not None or sample is None:
            return reads.skipped or unchecked("every file is empty")
        name, url = sample
        try:
            described = {
                kind: describe(hook, render_describe(plan, source.credentials(), url=url, structure=kind == "structure",
                                                     settings=request.settings))
                for kind in ("file", "structure") if getattr(reads, kind)
            }
        except (ClickHouseQueryError, LoadError) as exc:  # the load itself may still work: it says so
            why = scrub(str(exc).partition("; retrying")[0], source.credentials())
            return unchecked(f"the server could not describe {name}: {why}")
        return check_schema(
            table_columns(hook, table), file=name, table=f"{table.database}.{table.name}", fmt=plan.format,
            policy=request.schema_check, file_columns=described.get("file"),
            structure_columns=described.get("structure"), settings=request.settings,
        )

    # ------------------------------------------------------------------ retries and staging
    def _resume(
        self, hook: ClickHouseHook, queries: QueryLog, query_id: QueryId, first_try: int,
        nodes: Sequence[ClusterNode],
    ) -> Resume:
        """Find the earlier tries' queries; wait for running ones; decide load or attach."""
        while True:
            resume = decide_resume(queries.earlier_tries(query_id, nodes), query_id.try_number, first_try)
            if resume.action != "wait":
                self.log.info("Try %d: %s", query_id.try_number, resume.reason)
                return resume
            self.log.info("%s: waiting for it (up to %.0f s)", resume.reason, self.earlier_try_timeout)
            self._running = (hook, resume.query_ids, nodes)
            try:
                queries.wait_for_queries(resume.query_ids, nodes, timeout=self.earlier_try_timeout, log=self.log)
            finally:
                self._running = None
            # A query that just left system.processes may reach system.query_log a moment later.
            for waited in resume.query_ids:
                try:
                    queries.entry(waited, nodes, wait=SETTLE_SECONDS)
                except Exception as exc:  # noqa: BLE001 - failed or missing: the next look decides
                    self.log.info("Earlier try %s: %s", waited, exc)

    def _run(self, hook: ClickHouseHook, steps: list[Step]) -> None:
        for step in steps:
            hook.execute(step.sql)
            if step.note:
                self.log.info("%s", step.note)

    def _insert(
        self, hook: ClickHouseHook, queries: QueryLog, rendered: RenderedSQL, query_id: QueryId,
        nodes: Sequence[ClusterNode], steps: LoadSteps,
    ) -> None:
        if steps.staging is not None:
            self._run(hook, prepare_statements(steps, staging_exists=hook.table_comment(steps.staging) is not None))
        self._running = (hook, [str(query_id)], nodes)
        try:
            hook.run_insert(rendered.sql, query_id=str(query_id), settings=rendered.settings, log=self.log)
        except ClickHouseUnavailableError:
            raise  # the server may still be running the load: leave the staging table to the retry
        except Exception:
            if steps.staging is not None:
                try:
                    if not queries.running_queries([str(query_id)], nodes):
                        self._run(hook, abandon_statements(steps))
                except Exception as exc:  # noqa: BLE001 - best effort, the load's own error goes on; the next try drops it
                    self.log.warning("Could not drop staging table %s: %s", steps.staging, exc)
            raise
        finally:
            self._running = None

    def _finalize(self, hook: ClickHouseHook, steps: LoadSteps) -> list[str]:
        """Bring the staging table's rows into the target; idempotent, so a retry can resume it."""
        staging = steps.staging
        if staging is None:
            return []
        staging_comment = hook.table_comment(staging)
        finalize = finalize_statements(
            steps,
            staging_comment=staging_comment,
            target_comment=hook.table_comment(steps.target),
            staging_partitions=hook.partitions(staging) if staging_comment is not None else [],
            target_partitions=hook.partitions(steps.target) if steps.finalize == "exchange" else [],
        )
        self._run(hook, finalize.steps)
        if finalize.done_before:
            self.log.info("Staging table %s is gone: an earlier try finished this load", staging)
        return finalize.partitions

    # ------------------------------------------------------------------ output
    def _log_plan(self, plan: LoadPlan, steps: LoadSteps, redacted_sql: str, profile: ServerProfile) -> None:
        log: logging.Logger = self.log
        log.info("Server: ClickHouse %s, %d cores, memory %d bytes (%s), cluster %s with %d nodes, target %s",
                 profile.version, profile.cores, profile.memory_bytes, profile.memory_source,
                 profile.cluster, len(profile.nodes), profile.table.engine)
        log.info("Strategy: %s (%s)", plan.strategy, plan.strategy_reason)
        log.info("Memory budget: %d bytes (%s)", plan.budget_bytes, plan.budget_reason)
        for name, value in plan.settings.values.items():
            log.info("  %s = %s: %s", name, value, plan.settings.reasons.get(name, ""))
        for check in plan.checks:
            log.info("Check %s: %s: %s", check.name, check.status, check.message)
        for warning in [*plan.warnings, *steps.warnings]:
            log.warning("%s", warning)
        log.info("SQL: %s", redacted_sql)
        log.info("Mode %s: %s", steps.mode, steps.reason)

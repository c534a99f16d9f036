"""S3ToClickHouseOperator: a tuned, measured, server-side load of S3 files into ClickHouse."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from typing import Any

from airflow_provider_s3ch.compat import BaseOperator, Context
from airflow_provider_s3ch.hooks.aws import S3Source, object_url
from airflow_provider_s3ch.errors import ClickHouseUnavailableError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.models import ClusterNode, LoadMetrics, LoadPlan, LoadRequest
from airflow_provider_s3ch.modes import (
    STAGING_MARKER,
    LoadSteps,
    Resume,
    decide_resume,
    first_try_of_series,
    overwrite_steps,
    plan_steps,
    query_id_regex,
    split_query_id,
)
from airflow_provider_s3ch.planner import make_plan
from airflow_provider_s3ch.s3 import build_manifest
from airflow_provider_s3ch.sql import (
    render_create_staging,
    render_drop_table,
    render_exchange,
    render_insert,
    render_move_partition,
    render_replace_partition,
    render_set_comment,
)

#: How long a retry waits for an earlier try's query that still runs on the server.
DEFAULT_EARLIER_TRY_TIMEOUT = 6 * 3600.0


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
    :param mode: ``append`` (default): add the rows; ``replace_partitions``: each partition the
        files hold replaces the target's partition, atomically per partition; ``overwrite``:
        the files replace the whole table, atomically. Every mode loads into a staging table
        ``_s3ch_stage_<stem>`` first when the target allows it (a local MergeTree table), so a
        failed try leaves the target untouched. (templated)
    :param earlier_try_timeout: seconds a retry waits for an earlier try's query that still
        runs on the server before it fails (it never starts a second load beside it).

    Retries: the query id is ``s3ch-<stem>-try<N>``, the stem fixed per task instance. A
    retry first looks for the earlier tries' queries: one still running is waited for and
    its figures taken; one that finished is attached to (its figures returned, its staging
    table finished) without inserting again; after a failed one the load starts afresh.
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
        self._running: tuple[ClickHouseHook, list[str], list[ClusterNode]] | None = None

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
            mode=self.mode,
        )

    def query_id(self, context: Context) -> str:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return make_query_id(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, ti.try_number)

    def first_try(self, context: Context) -> int:
        """The first try since the task instance was last cleared (earlier ones are not attached to)."""
        ti = context["ti"]
        max_tries = getattr(ti, "max_tries", None)
        retries = getattr(self, "retries", None) if max_tries is not None else None
        return first_try_of_series(int(ti.try_number), max_tries, retries)

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
        query_id = self.query_id(context)
        stem, try_number = split_query_id(query_id)
        assert profile.table is not None  # get_profile raises TableError for a missing table
        steps = plan_steps(
            request.mode,
            profile.table,
            stem,
            dependent_views=hook.dependent_views(request.table),
            database_engine=hook.database_engine(profile.table.database),
        )
        rendered = render_insert(plan, source.credentials(), target=steps.staging)
        self._log_plan(plan, rendered.redacted)
        self.log.info("Mode %s: %s", steps.mode, steps.reason)
        for warning in steps.warnings:
            self.log.warning("%s", warning)
        if request.dry_run:
            return {
                "dry_run": True,
                "query_id": query_id,
                "sql": rendered.redacted,
                "plan": plan.model_dump(mode="json"),
                "mode": steps.mode,
                "steps": steps.model_dump(mode="json"),
            }

        distributed = plan.strategy == "distributed"
        target_distributed = profile.table.is_distributed
        nodes = profile.nodes if distributed else []
        lookup_nodes = profile.nodes if distributed or target_distributed else []
        resume = self._resume(hook, stem, try_number, self.first_try(context), lookup_nodes)
        if resume.action == "attach":
            source_query = resume.query_ids[0]
            attached_to: str | None = source_query
        else:
            if steps.staging is not None:
                self._prepare_staging(hook, steps)
            self._insert(hook, rendered.sql, query_id, nodes, steps)
            source_query, attached_to = query_id, None
        metrics = hook.load_metrics(
            source_query,
            nodes=profile.nodes,
            distributed=distributed,
            target_distributed=target_distributed,
        )
        partitions = self._finalize(hook, steps) if steps.staging is not None else []
        result = self.result(plan, metrics, wall_ms=int((time.monotonic() - started) * 1000))
        result.update(
            {
                "mode": steps.mode,
                "mode_reason": steps.reason,
                "staging_table": str(steps.staging) if steps.staging else None,
                "attached_to": attached_to,
                "resume_reason": resume.reason,
                "partitions": partitions,
                "warnings": [*result["warnings"], *steps.warnings],
            }
        )
        self.log.info(
            "%s %d rows (%d bytes) in %d ms: %.0f rows/s, peak memory %d bytes; %s",
            "Took the figures of earlier try " + attached_to + ":" if attached_to else "Loaded",
            metrics.written_rows, metrics.written_bytes, metrics.duration_ms, metrics.rows_per_second,
            metrics.memory_usage,
            f"{steps.mode} of partitions {', '.join(partitions)}" if partitions else steps.mode,
        )
        return result

    def on_kill(self) -> None:
        if self._running is not None:
            hook, query_ids, nodes = self._running
            for query_id in query_ids:
                self.log.info("Killing query %s", query_id)
                hook.kill_query(query_id, nodes)

    # ------------------------------------------------------------------ retries and staging
    def _resume(
        self, hook: ClickHouseHook, stem: str, try_number: int, first_try: int, nodes: list[ClusterNode]
    ) -> Resume:
        """Find the earlier tries' queries; wait for running ones; decide load or attach."""
        regex = query_id_regex(stem)
        waited: list[str] = []
        settle_deadline: float | None = None
        while True:
            tries = hook.earlier_tries(regex, nodes)
            resume = decide_resume(tries, try_number, first_try)
            if resume.action == "wait":
                self.log.info("%s: waiting for it (up to %.0f s)", resume.reason, self.earlier_try_timeout)
                waited.extend(q for q in resume.query_ids if q not in waited)
                self._running = (hook, resume.query_ids, nodes)
                try:
                    hook.wait_for_queries(resume.query_ids, nodes, timeout=self.earlier_try_timeout, log=self.log)
                finally:
                    self._running = None
                continue
            # A query that just left system.processes may reach system.query_log a moment later.
            logged = {t.query_id for t in tries if t.state != "running"}
            missing = [q for q in waited if q not in logged]
            if missing:
                settle_deadline = settle_deadline or time.monotonic() + 15
                if time.monotonic() < settle_deadline:
                    time.sleep(0.5)
                    continue
                self.log.warning("Earlier try %s ended but is not in system.query_log", ", ".join(missing))
            self.log.info("Try %d: %s", try_number, resume.reason)
            return resume

    def _prepare_staging(self, hook: ClickHouseHook, steps: LoadSteps) -> None:
        """Drop the staging table a dead try left (no earlier try runs: checked), create it afresh."""
        assert steps.staging is not None
        if hook.table_exists(steps.staging):
            self.log.info("Dropping staging table %s left by an earlier try", steps.staging)
        hook.execute(render_drop_table(steps.staging))
        hook.execute(render_create_staging(steps.staging, steps.target))
        if steps.marker is not None:
            hook.execute(render_set_comment(steps.staging, steps.marker))
        self.log.info("Created staging table %s AS %s", steps.staging, steps.target)

    def _insert(
        self, hook: ClickHouseHook, sql: str, query_id: str, nodes: list[ClusterNode], steps: LoadSteps
    ) -> None:
        self._running = (hook, [query_id], nodes)
        try:
            hook.run_insert(sql, query_id=query_id, log=self.log)
        except ClickHouseUnavailableError:
            # The server may still be running the load: leave the staging table to the retry.
            raise
        except Exception:
            if steps.staging is not None and not hook.running_queries([query_id], nodes):
                try:
                    hook.execute(render_drop_table(steps.staging))
                    self.log.info("The load failed: dropped staging table %s; %s is untouched", steps.staging,
                                  steps.target)
                except Exception as exc:  # noqa: BLE001 - best effort; the next try drops it too
                    self.log.warning("Could not drop staging table %s: %s", steps.staging, exc)
            raise
        finally:
            self._running = None

    def _finalize(self, hook: ClickHouseHook, steps: LoadSteps) -> list[str]:
        """Bring the staging table's rows into the target; idempotent, so a retry can resume it.

        :return: the partitions this try moved or replaced (for ``overwrite``: the new table's).
        """
        staging, target = steps.staging, steps.target
        assert staging is not None
        if steps.finalize == "exchange":
            assert steps.marker is not None
            todo = overwrite_steps(hook.table_comment(staging), hook.table_comment(target), steps.marker)
            if "exchange" in todo:
                hook.execute(render_exchange(target, staging))
                self.log.info("Exchanged %s and %s", target, staging)
            if "restore_comment" in todo:
                # The old table (now named like the staging table) carries the target's comment.
                old_comment = hook.table_comment(staging) or ""
                hook.execute(render_set_comment(target, "" if old_comment.startswith(STAGING_MARKER) else old_comment))
            if "drop_staging" not in todo:
                self.log.info("Staging table %s is gone: an earlier try finished this load", staging)
                return []
            partitions = [value for _, value in hook.partitions(target)]
        else:
            if not hook.table_exists(staging):
                self.log.info("Staging table %s is gone: an earlier try finished this load", staging)
                return []
            partitions = []
            for partition_id, value in hook.partitions(staging):
                if steps.finalize == "move":
                    hook.execute(render_move_partition(staging, target, partition_id))
                else:
                    hook.execute(render_replace_partition(target, staging, partition_id))
                partitions.append(value)
                self.log.info("%s partition %s", "Moved" if steps.finalize == "move" else "Replaced", value)
        hook.execute(render_drop_table(staging))
        return partitions

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

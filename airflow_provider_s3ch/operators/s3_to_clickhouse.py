"""S3ToClickHouseOperator: a tuned, measured, server-side load of S3 files into ClickHouse.

The operator is a shell: it gathers facts (the manifest from S3, the server's profile),
the core decides (:mod:`airflow_provider_s3ch.core`: the plan, the SQL, the recovery
steps), the operator runs the statements the core returns, and measures the load from
``system.query_log``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import BaseOperator, Context, conf

from airflow_provider_s3ch.core.deferral import DeferredLoad
from airflow_provider_s3ch.core.glob import archive_path_syntax, object_url
from airflow_provider_s3ch.core.history import Learned, TagFacts, history_key, learn
from airflow_provider_s3ch.core.history import tag as history_tag
from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT, WHOLE_FILE, Chunk
from airflow_provider_s3ch.core.ledger import check_request as check_ledger_request
from airflow_provider_s3ch.core.lineage import LoadFacts, outlet_extra
from airflow_provider_s3ch.core.metrics import combine_chunks, load_metrics, peak_ratio, summary
from airflow_provider_s3ch.core.models import (
    Check,
    ClusterNode,
    LoadMetrics,
    LoadPlan,
    LoadRequest,
    Manifest,
    S3Object,
    ServerProfile,
    TableInfo,
)
from airflow_provider_s3ch.core.plan import make_plan, peak_estimate
from airflow_provider_s3ch.core.plan.shrink import STEPS, StepName, changed, smaller
from airflow_provider_s3ch.core.plan.shrink import step as shrink_step
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
from airflow_provider_s3ch.core.schema import (
    Column,
    add_check,
    check_schema,
    left_out,
    sample_file,
    schema_reads,
    unchecked,
)
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import RenderedSQL, render_describe, render_insert, scrub, shorten
from airflow_provider_s3ch.core.tables import (
    Evolution,
    TableSpec,
    creation,
    evolution_skipped,
    evolve,
    planned_table,
    with_added,
)
from airflow_provider_s3ch.errors import (
    ClickHouseQueryError,
    ClickHouseUnavailableError,
    LoadError,
    QueryMemoryLimitError,
    provider_errors,
)
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.columns import describe, table_columns
from airflow_provider_s3ch.hooks.ledger import LedgerRun
from airflow_provider_s3ch.hooks.query_log import QueryLog
from airflow_provider_s3ch.hooks.s3 import S3Source, build_manifest
from airflow_provider_s3ch.hooks.tables import has_keeper, run_ddl
from airflow_provider_s3ch.lineage import operator_lineage
from airflow_provider_s3ch.triggers.load import LoadTrigger

#: How long a retry waits for an earlier try's query that still runs on the server.
DEFAULT_EARLIER_TRY_TIMEOUT = 6 * 3600.0

#: How long a retry waits for a query that just left ``system.processes`` to reach ``system.query_log``.
SETTLE_SECONDS = 15.0


@dataclass(frozen=True)
class _Loaded:
    """One insert's outcome (the load's, or one chunk's)."""

    plan: LoadPlan
    profile: ServerProfile
    steps: LoadSteps
    table: dict[str, Any]
    resume: Resume
    metrics: LoadMetrics
    partitions: list[str]
    attached_to: str | None
    sql: str
    files: list[S3Object]
    chunk: int
    #: The inserts tried after a memory limit (empty when the first plan fitted).
    memory_attempts: list[dict[str, Any]]

    def figures(self) -> dict[str, Any]:
        """The chunk's entry in the XCom's ``chunks``."""
        m = self.metrics
        return {"chunk": self.chunk, "query_id": m.query_id, "files": len(self.files),
                "bytes": sum(o.size for o in self.files), "written_rows": m.written_rows,
                "written_bytes": m.written_bytes, "duration_ms": m.duration_ms, "memory_usage": m.memory_usage,
                "attached_to": self.attached_to, "partitions": self.partitions}


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
    :param clickhouse_conn_id: a ``clickhouse_native`` or ``clickhouse`` connection (docs/connections.md). (templated)
    :param aws_conn_id: the ``aws`` connection used to list the bucket and whose
        credentials ClickHouse reads with; no credentials means a public bucket. (templated)
    :param format: ClickHouse input format; detected from the keys' extensions if None. (templated)
    :param compression: compression method; detected from the extensions if None. (templated)
    :param structure: column structure for formats without names, e.g. ``'a UInt32, b String'``. (templated)
    :param memory_cap: the load's memory cap: bytes, or a string like ``"8GiB"``; default:
        half of the server's memory. (templated)
    :param workload: the server's workload the load runs in (ClickHouse's workload scheduling): the
        insert runs with ``workload`` and ``reserve_memory`` = the per-node memory budget, so the
        server admits it once that much of the workload's memory is free and many loads queue
        instead of running out of memory together. The plan checks that the workload and a
        ``MEMORY RESERVATION`` resource exist and that the reservation fits the workload's
        ``max_memory``, and fails before anything runs when they do not. Default: the connection's
        extra ``workload``; ``""`` runs without one (docs/many-loads.md). (templated)
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
    :param deferrable: start the insert over the server's HTTP interface (it runs on without the worker) and
        free the worker slot: Airflow's triggerer follows the query on every node
        (:class:`~airflow_provider_s3ch.triggers.load.LoadTrigger`) and the task resumes to finish the load
        and return its figures; a retry waits for an earlier try's query in the triggerer too. The HTTP port
        is the connection's extra ``http_port`` (default 8123, 8443 with ``secure``). Default:
        ``[operators] default_deferrable`` (docs/deferrable.md).
    :param poll_interval: with ``deferrable``: seconds between two looks of the triggerer at the query.
    :param schema_check: before loading (and in a dry run), compare the first file's columns, as the
        server's schema inference sees them (or ``structure``'s), with the table's: ``strict``
        (default): a table column the file lacks that has no DEFAULT (MATERIALIZED, ALIAS,
        EPHEMERAL) expression, a file column the table lacks, or a nested type against a plain one
        fails the task (:class:`SchemaError`);
        ``ignore_extra``: the same as ``on_schema_change='ignore_extra'``; ``warn``: report
        the problems and load as the server would; ``off``: no check.
    :param create_table: ``never`` (default): the target must exist; ``if_missing``: create it from the
        server's schema inference over the files (``DESCRIBE s3(…)``, the union of the files' columns)
        with ``CREATE TABLE IF NOT EXISTS``: key columns not nullable, the others as inferred with a
        default. A ``strategy='distributed'`` load creates ``<name>_local`` on every node and a
        ``Distributed`` table over them. A dry run shows the DDL and creates nothing.
    :param order_by: the created table's sorting key: a column, a list of columns or an expression
        (required with ``create_table='if_missing'``). (templated)
    :param partition_by: the created table's partition key, e.g. ``'toYYYYMM(ts)'``. (templated)
    :param primary_key: the created table's primary key when it differs from ``order_by``.
    :param engine: the created table's engine, MergeTree family (default ``MergeTree``).
    :param table_settings: the created table's settings (``SETTINGS index_granularity = …``).
    :param on_schema_change: what happens when the files hold columns the target lacks: ``fail``
        (default): the schema check's error; ``add_columns``: ``ALTER TABLE … ADD COLUMN`` with the
        inferred type and a default (old rows read NULL), on a Distributed target on every node's
        local table and the Distributed table; ``ignore_extra``: load the target's columns only, the
        left-out columns named in the warnings and the XCom. A column is never dropped, a type never
        changed. (templated)
    :param skip_loaded: an incremental load (docs/ledger.md): load only the files that the target's file ledger
        does not record as loaded (by key and ETag), and record them there, exactly once per file whatever
        the retries and however many runs load at once. Files that arrive late or out of key order are
        picked up by the next run. Needs a staging table (a local MergeTree target; not ``overwrite``).
    :param on_changed: with ``skip_loaded``: a file whose ETag differs from the version loaded before is
        ``fail`` (default: the task fails naming it), ``skip`` (left out) or ``reload`` (loaded again; needs
        ``mode='replace_partitions'``, so that its old rows are replaced). (templated)
    :param ledger_table: with ``skip_loaded``: the ledger, ``database.name`` or ``name`` (in the target's
        database); default ``<target database>._s3ch_ledger``, created when missing. (templated)
    :param skip_when_empty: with ``skip_loaded``: a run without a new file ends as skipped instead of
        succeeding with zero rows.
    :param claim_timeout: with ``skip_loaded``: seconds a load's claim on its files holds while the load runs
        no query and has no staging table (a worker that died before inserting); then another run may load them.
    :param max_files_per_load: with ``skip_loaded``: the most files one insert reads. More files load in
        consecutive chunks (in key order), each through its own staging table and committed with its ledger
        rows; a retry resumes at the first chunk not committed. ``mode='append'`` only. (templated)
    :param max_bytes_per_load: with ``skip_loaded``: the most bytes (as listed, e.g. ``'10GiB'``) one insert
        reads; a larger file is a chunk alone. (templated)
    :param learn_from_history: read the target's earlier loads of the same files from ``system.query_log``
        (each insert is tagged with ``log_comment``) and calibrate the plan with them: the data's expansion,
        the predicted peak memory, and the step down the last load at the same cap needed (docs/tuning.md,
        "Learning from past loads"). One query per load; ``False`` plans from this run's facts alone.

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
        "workload",
        "settings",
        "cluster",
        "mode",
        "order_by",
        "partition_by",
        "on_schema_change",
        "on_changed",
        "ledger_table",
        "max_files_per_load",
        "max_bytes_per_load",
    )
    template_fields_renderers = {"settings": "json"}
    ui_color = "#ffcc01"

    def __init__(
        self,
        *,
        s3_uri: str,
        table: str,
        clickhouse_conn_id: str = "clickhouse_native_default",
        aws_conn_id: str | None = "aws_default",
        format: str | None = None,  # noqa: A002 - ClickHouse's own word
        compression: str | None = None,
        structure: str | None = None,
        memory_cap: int | str | None = None,
        workload: str | None = None,
        region_check: str = "warn",
        settings: dict[str, Any] | None = None,
        strategy: str = "auto",
        cluster: str | None = None,
        dry_run: bool = False,
        mode: str = "append",
        earlier_try_timeout: float = DEFAULT_EARLIER_TRY_TIMEOUT,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        schema_check: str = "strict",
        create_table: str = "never",
        order_by: str | list[str] | None = None,
        partition_by: str | None = None,
        primary_key: str | list[str] | None = None,
        engine: str | None = None,
        table_settings: dict[str, Any] | None = None,
        on_schema_change: str = "fail",
        skip_loaded: bool = False,
        on_changed: str = "fail",
        ledger_table: str | None = None,
        skip_when_empty: bool = False,
        claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
        max_files_per_load: int | str | None = None,
        max_bytes_per_load: int | str | None = None,
        learn_from_history: bool = True,
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
        self.workload = workload
        self.region_check = region_check
        self.settings = settings
        self.strategy = strategy
        self.cluster = cluster
        self.dry_run = dry_run
        self.mode = mode
        self.earlier_try_timeout = earlier_try_timeout
        self.deferrable = deferrable
        self.poll_interval = poll_interval
        self.schema_check = schema_check
        self.create_table = create_table
        self.order_by = order_by
        self.partition_by = partition_by
        self.primary_key = primary_key
        self.engine = engine
        self.table_settings = table_settings
        self.on_schema_change = on_schema_change
        self.skip_loaded = skip_loaded
        self.on_changed = on_changed
        self.ledger_table = ledger_table
        self.skip_when_empty = skip_when_empty
        self.claim_timeout = claim_timeout
        self.max_files_per_load = max_files_per_load
        self.max_bytes_per_load = max_bytes_per_load
        self.learn_from_history = learn_from_history
        #: What the target's earlier loads of the same files say (None: not read, or learn_from_history=False).
        self._learned: Learned | None = None
        #: This target's and these files' key in the tags (core/history.py).
        self._key = ""
        self._running: tuple[ClickHouseHook, list[str], Sequence[ClusterNode]] | None = None
        #: The smaller plan an insert of this task needed after a memory limit (later chunks start from it).
        self._memory_step: StepName | None = None
        #: The target's columns as the plan read them (None: read again for the lineage).
        self._columns: list[Column] | None = None

    # ------------------------------------------------------------------ steps
    def build_request(self) -> LoadRequest:
        """Validate the rendered arguments (terminal errors name the argument and the fix)."""
        with provider_errors():
            request = LoadRequest.from_arguments(
                s3_uri=self.s3_uri,
                table=self.table,
                format=self.format or None,
                compression=self.compression or None,
                structure=self.structure or None,
                memory_cap=self.memory_cap,
                workload=self.workload,
                region_check=self.region_check,
                settings=self.settings,
                strategy=self.strategy,
                cluster=self.cluster or None,
                dry_run=self.dry_run,
                mode=self.mode,
                schema_check=self.schema_check,
                create_table=self.create_table,
                on_schema_change=self.on_schema_change,
                skip_loaded=self.skip_loaded,
                on_changed=self.on_changed,
                ledger_table=self.ledger_table or None,
                skip_when_empty=self.skip_when_empty,
                max_files_per_load=self.max_files_per_load,
                max_bytes_per_load=self.max_bytes_per_load,
            )
            check_ledger_request(request)
            return request

    def table_spec(self, request: LoadRequest) -> TableSpec | None:
        """The table to create when it is missing (``create_table='if_missing'``); None otherwise."""
        if request.create_table != "if_missing":
            return None
        with provider_errors():
            return TableSpec.from_arguments(
                order_by=self.order_by or None, partition_by=self.partition_by or None,
                primary_key=self.primary_key or None, engine=self.engine, settings=self.table_settings,
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
        self._lineage_facts = None
        self._memory_step = None
        self._columns = None
        self._learned = None
        with provider_errors():
            result = self._load(context)
        self._outlet_events(context, result)
        return result

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
        ledger = None
        loads: list[_Loaded] = []
        try:
            self._key = self._history_key(hook, request, manifest)
            if self.learn_from_history and "log_comment" not in request.settings:
                self._learned = learn(QueryLog(hook).past_loads(self._key), footers=bool(manifest.uncompressed_bytes))
            url = object_url(request.bucket, request.key_pattern,
                             endpoint_url=hook.s3_endpoint_url or source.endpoint_url, region=manifest.region,
                             archive_syntax=archive_path_syntax(request.settings))
            if request.skip_loaded:  # ledger: the files no load recorded, claimed for this one (docs/ledger.md)
                ledger = LedgerRun(hook, request, query_id, claim_timeout=self.claim_timeout, log=self.log)
                chunks = ledger.prepare(manifest, url)
                if not chunks:
                    return ledger.nothing_new(int((time.monotonic() - started) * 1000))
                for chunk in chunks:  # ledger: each chunk its own insert and staging table, committed in order
                    begun = ledger.begin(chunk)
                    if begun is None:
                        continue
                    chunk, part, part_url = begun
                    if chunk.number != WHOLE_FILE:
                        self.log.info("Chunk%s", chunk.describe().removeprefix("chunk"))
                    one = self._load_one(context, hook, source, request, part, part_url, ledger.query_id_of(chunk),
                                         ledger=ledger, chunk=chunk, started=started)
                    if isinstance(one, dict):  # a dry run: the first chunk's plan
                        return {**one, "ledger": ledger.summary(),
                                "chunks": [c.describe() for c in chunks if c.number != WHOLE_FILE]}
                    loads.append(one)
                if not loads:  # every file was taken by another load while this one renewed its claims
                    return ledger.nothing_new(int((time.monotonic() - started) * 1000))
                loaded = manifest.model_copy(update={"objects": [o for one in loads for o in one.files]})
            else:
                one = self._load_one(context, hook, source, request, manifest, url, query_id, started=started)
                if isinstance(one, dict):
                    return one
                loads, loaded = [one], manifest
            last = loads[-1]
            metrics = combine_chunks([one.metrics for one in loads])
            partitions = sorted({p for one in loads for p in one.partitions})
            self._keep_lineage(hook, request, loaded, last.profile, loads[0].table, last.steps, metrics, partitions,
                               last.attached_to, last.sql)
        except BaseException:
            if ledger is not None:  # ledger: give the claims back when nothing of the load can still land
                ledger.abandon()
            raise
        finally:
            hook.close()
        result = summary(last.plan, metrics, wall_ms=int((time.monotonic() - started) * 1000))
        attached = [one.attached_to for one in loads if one.attached_to]
        result.update({"mode": last.steps.mode, "mode_reason": last.steps.reason,
                       "attached_to": attached[0] if len(loads) == 1 and attached else (attached or None),
                       "staging_table": str(last.steps.staging) if last.steps.staging else None,
                       "resume_reason": last.resume.reason, "partitions": partitions, "table_changes": loads[0].table,
                       "warnings": list(dict.fromkeys([*(w for one in loads for w in one.plan.warnings),
                                                       *last.steps.warnings]))})
        predicted = [one.plan.predicted_peak_bytes for one in loads if one.plan.predicted_peak_bytes]
        if len(loads) > 1 and predicted:  # chunks: the largest chunk's prediction beside the largest chunk's peak
            result.update(predicted_memory_usage=max(predicted),
                          memory_vs_predicted=peak_ratio(metrics.memory_usage, max(predicted)))
        result["memory_attempts"] = [{**a, **({"chunk": one.chunk} if one.chunk else {})}
                                     for one in loads for a in one.memory_attempts]
        if len(loads) > 1 or (ledger is not None and ledger.selection.chunks):
            result.update(files=len(loaded.objects), bytes=sum(o.size for o in loaded.objects),
                          chunks=[one.figures() for one in loads])
        if ledger is not None:  # ledger: new, skipped, reloaded files
            result["ledger"] = ledger.summary()
        self.log.info("%s %d rows (%d bytes) in %d ms%s%s: %.0f rows/s, peak memory %d bytes; %s",
                      f"Took the figures of earlier try {attached[0]}:" if len(loads) == 1 and attached else "Loaded",
                      metrics.written_rows, metrics.written_bytes, metrics.duration_ms,
                      f" over {len(loads)} chunks" if len(loads) > 1 else "",
                      f" (waited {metrics.admission_wait_ms} ms for admission, ran {metrics.run_ms} ms)"
                      if metrics.admission_wait_ms else "", metrics.rows_per_second,
                      metrics.memory_usage, f"{last.steps.mode} of partitions {', '.join(partitions)}" if partitions
                      else last.steps.mode)
        return result

    def _load_one(
        self, context: Context, hook: ClickHouseHook, source: S3Source, request: LoadRequest, manifest: Manifest,
        url: str, query_id: QueryId, *, ledger: LedgerRun | None = None, chunk: Chunk | None = None,
        started: float,
    ) -> _Loaded | dict[str, Any]:
        """One insert: the load, or one chunk of it (``ledger`` and ``chunk``): plan, insert (or take an
        earlier try's), bring the staging table in. A dry run's result instead, for a dry run."""
        profile, plan, table = self._target(hook, source, request, manifest, url)
        plan = self._tagged(plan, manifest, profile, "plan")
        steps = plan_steps(request.mode, profile.table, query_id.stem)
        if ledger is not None:  # ledger: only a load through a staging table
            ledger.check(steps, plan)
        rendered = render_insert(plan, source.credentials(), target=steps.staging)
        self._log_plan(plan, steps, rendered.redacted, profile)
        if request.dry_run:
            return {"dry_run": True, "query_id": str(query_id), "sql": rendered.redacted,
                    "plan": plan.model_dump(mode="json"), "mode": steps.mode,
                    "steps": steps.model_dump(mode="json"), "table_changes": table,
                    **({"ledger": ledger.summary()} if ledger is not None else {})}
        distributed = plan.strategy == "distributed"
        fan_out = profile.nodes if distributed or profile.table.is_distributed else []
        queries = QueryLog(hook)
        resume = self._resume(hook, queries, query_id, self.first_try(context), fan_out)
        attached_to = resume.query_ids[0] if resume.action == "attach" else None
        attempts: list[dict[str, Any]] = []
        if ledger is not None and chunk is not None:  # ledger: an insert it knows finished is finished, not repeated
            attached_to = ledger.attach_to(resume, chunk) or attached_to
        if attached_to is None and self._defers():  # deferrable: start over HTTP, defer (unless done already)
            self._start_deferred(hook, queries, rendered, query_id, steps, plan=plan, profile=profile,
                                 manifest=manifest, request=request, table=table, resume=resume,
                                 fan_out=fan_out, started=started)
        elif attached_to is None:
            plan, rendered, attempts = self._insert_within_cap(
                hook, queries, plan, rendered, source, query_id, profile.nodes if distributed else [], steps,
                request, profile.cores, tag=lambda p, name: self._tagged(p, manifest, profile, name))
        entry = queries.entry(attached_to or str(query_id), fan_out)
        metrics = load_metrics(entry, queries.secondary_queries(entry.query_id, fan_out) if fan_out else [],
                               distributed=distributed, target_distributed=profile.table.is_distributed)
        if ledger is not None and chunk is not None:  # ledger: the staging table holds the files: pending first
            ledger.pending(metrics, chunk)
        partitions = (self._finalize(hook, steps, inserted_now=attached_to is None)
                      if steps.staging is not None else [])
        if ledger is not None and chunk is not None:  # ledger: the partitions are in the target
            ledger.loaded(metrics, chunk)
        return _Loaded(plan=plan, profile=profile, steps=steps, table=table, resume=resume, metrics=metrics,
                       partitions=partitions, attached_to=attached_to, sql=rendered.redacted,
                       files=list(manifest.objects), chunk=chunk.number if chunk is not None else WHOLE_FILE,
                       memory_attempts=attempts)

    def _insert_within_cap(
        self, hook: ClickHouseHook, queries: QueryLog, plan: LoadPlan, rendered: RenderedSQL, source: S3Source,
        query_id: QueryId, nodes: Sequence[ClusterNode], steps: LoadSteps, request: LoadRequest, cores: int,
        tag: Callable[[LoadPlan, str], LoadPlan],
    ) -> tuple[LoadPlan, RenderedSQL, list[dict[str, Any]]]:
        """The insert; after the load's own memory limit (``memory_cap``), the same insert again with smaller
        plans while the target is untouched (a staging table), each attempt logged and recorded
        (:mod:`airflow_provider_s3ch.core.plan.shrink`). ``max_memory_usage`` stays the cap throughout.
        A later chunk of the same task starts from the step that fitted, and so does a load whose last load at
        the same cap needed one (``plan.history``). ``tag`` gives a plan its prediction and ``log_comment``."""
        first = plan.settings
        names = list(STEPS)
        attempts: list[dict[str, Any]] = []
        current = "plan"
        learned_step = (plan.history or {}).get("start_step")
        start = self._memory_step or (learned_step if learned_step in STEPS else None)
        if start is not None:  # an earlier chunk, or the last load at this cap, needed a smaller plan: start there
            current = start
            names = names[names.index(current) + 1:]
            plan = tag(plan.model_copy(update={"settings": smaller(first, current, cores=cores,
                                                                   user=request.settings)}), current)
            rendered = render_insert(plan, source.credentials(), target=steps.staging)
            if self._memory_step is None:
                self.log.info("Starting from step %r: the last load of this target and files at this memory cap "
                              "needed it (learned from system.query_log)", current)
        while True:
            try:
                self._insert(hook, queries, rendered, query_id, nodes, steps)
            except QueryMemoryLimitError as exc:
                why = str(exc).partition("DB::Exception: ")[2].partition(";")[0].strip()[:300] or str(exc)[:300]
                attempts.append({"step": current, "settings": changed(first, plan.settings) if current != "plan"
                                 else dict(plan.settings.values), "error": why})
                if steps.staging is None:
                    raise QueryMemoryLimitError(
                        f"{exc}; the load went straight into {steps.target} ({steps.reason}), so it is not tried "
                        "again with a smaller plan in this task: raise memory_cap, or load into a local MergeTree "
                        "table"
                    ) from exc
                while names:
                    name = names.pop(0)
                    smaller_settings = smaller(first, name, cores=cores, user=request.settings)
                    if changed(plan.settings, smaller_settings):
                        break
                else:
                    tried = "; ".join(f"{a['step']}: {a['error']}" for a in attempts)
                    raise QueryMemoryLimitError(
                        f"the load does not fit memory_cap {fmt_bytes(plan.budget_bytes)} with any plan; tried "
                        f"{len(attempts)}: {tried}; raise memory_cap (the server's max_memory_usage for this load), "
                        "or load fewer or smaller files at once (max_files_per_load with skip_loaded=True)"
                    ) from exc
                self.log.warning("The load hit its memory limit (%s): loading again in this task with a smaller "
                                 "plan, step %r: %s", why, name, shrink_step(name).reason)
                plan = tag(plan.model_copy(update={"settings": smaller_settings}), name)
                rendered = render_insert(plan, source.credentials(), target=steps.staging)
                for setting, value in changed(first, smaller_settings).items():
                    self.log.info("  %s = %s: %s", setting, value, smaller_settings.reasons.get(setting, ""))
                current = name
                continue
            if current != "plan":
                attempts.append({"step": current, "settings": changed(first, plan.settings), "error": None,
                                 **({"from_history": True} if current == learned_step and not attempts else {})})
                self._memory_step = current
            return plan, rendered, attempts

    def _history_key(self, hook: ClickHouseHook, request: LoadRequest, manifest: Manifest) -> str:
        """The key of this target and these files in the tags of earlier loads (core/history.py)."""
        table = request.table.model_copy(update={"database": request.table.database or hook.database})
        return history_key(f"{table.database}.{table.name}", request.bucket, request.key_pattern,
                           request.format or manifest.format)

    def _tagged(self, plan: LoadPlan, manifest: Manifest, profile: ServerProfile, step: str) -> LoadPlan:
        """``plan`` with its predicted peak memory for its settings now and, unless the user set one or
        ``learn_from_history`` is off, the ``log_comment`` tag later loads learn from."""
        estimate = peak_estimate(plan, manifest, profile)
        plan = plan.model_copy(update={"predicted_peak_bytes": estimate.bytes,
                                       "predicted_peak_reason": estimate.reason})
        if not self.learn_from_history or "log_comment" in plan.settings.overrides:
            return plan
        facts = TagFacts(file_bytes=manifest.total_bytes, model_bytes=estimate.model_bytes,
                         cap=int(plan.settings.values.get("max_memory_usage") or 0), step=step)
        values = {**plan.settings.values, "log_comment": history_tag(self._key, facts)}
        reasons = {**plan.settings.reasons, "log_comment": "tags the insert for later loads of this target and "
                   "files to learn from (learn_from_history, docs/tuning.md)"}
        return plan.model_copy(update={"settings": plan.settings.model_copy(update={"values": values,
                                                                                    "reasons": reasons})})

    def on_kill(self) -> None:
        if self._running is not None:
            hook, query_ids, nodes = self._running
            for query_id in query_ids:
                self.log.info("Killing query %s", query_id)
                hook.kill_query(query_id, nodes)

    # ------------------------------------------------------------------ the target's table
    def _target(
        self, hook: ClickHouseHook, source: S3Source, request: LoadRequest, manifest: Manifest, url: str
    ) -> tuple[ServerProfile, LoadPlan, dict[str, Any]]:
        """The profile and plan for the target: created first when missing (``create_table``), its columns
        added under ``on_schema_change='add_columns'``, and checked against the files. A dry run changes
        nothing: it plans against the table as it would be."""
        spec = self.table_spec(request)
        target = request.table.model_copy(update={"database": request.table.database or hook.database})
        missing = None if spec is None else planned_table(
            target, spec, distributed=request.strategy == "distributed", cluster=request.cluster or hook.cluster)
        profile = hook.get_profile(request.table, cluster=request.cluster, missing=missing, workload=request.workload)
        plan = make_plan(request, manifest, profile, source_url=url, learned=self._learned)

        def keeper() -> bool:  # read only when DDL is made (creating the table, adding columns)
            return profile.table.is_distributed and has_keeper(hook)

        report: dict[str, Any] = {"created": None, "ddl": [], "added_columns": [], "left_out_columns": [],
                                  "on_schema_change": request.schema_change}
        columns: list[Column] | None = None
        if spec is not None and not profile.table.exists:
            made = creation(target, self._describe_files(hook, source, request, plan), spec, file=request.s3_uri,
                            distributed=profile.table.is_distributed, cluster=profile.cluster, keeper=keeper())
            report.update(created=made.how, ddl=[d.sql for d in made.statements])
            self.log.info("Table %s.%s is missing: %s", target.database, target.name,
                          "a dry run creates nothing" if request.dry_run else f"creating it, {made.how}")
            for ddl in made.statements:
                self.log.info("DDL: %s", ddl.sql)
            if request.dry_run:
                columns = made.columns
            else:
                run_ddl(hook, made.statements, profile.nodes, self.log)
                profile = hook.get_profile(request.table, cluster=request.cluster, workload=request.workload)
                plan = make_plan(request, manifest, profile, source_url=url, learned=self._learned)
        columns = columns if columns is not None else table_columns(hook, profile.table)
        evolution = Evolution(policy=request.schema_change)
        skipped = evolution_skipped(plan.format, plan.structure) if request.schema_change == "add_columns" else None
        if skipped:
            plan.warnings.append(skipped)
        elif request.schema_change == "add_columns":
            evolution = evolve(profile.table, columns, self._describe_files(hook, source, request, plan),
                               policy="add_columns", file=request.s3_uri, keeper=keeper())
        check, file_columns, sample = self._check_schema(hook, source, request, plan, manifest, profile.table,
                                                         with_added(columns, evolution))
        add_check(plan, check)
        if evolution.statements:
            report.update(added_columns=evolution.added_names, ddl=[*report["ddl"], *(d.sql for d in evolution.statements)])
            for ddl in evolution.statements:
                self.log.info("DDL: %s", ddl.sql)
            if not request.dry_run:
                run_ddl(hook, evolution.statements, profile.nodes, self.log)
        if file_columns is not None and sample is not None:
            report["left_out_columns"] = left_out(file_columns, with_added(columns, evolution), file=sample,
                                                  settings=request.settings)
            if report["left_out_columns"]:
                plan.warnings.append(
                    f"file columns {', '.join(report['left_out_columns'])} of {sample} are not in table "
                    f"{target.database}.{target.name}: left out (on_schema_change={request.schema_change!r}, "
                    f"schema_check={request.schema_check!r})"
                )
        # The target's columns as read here, for the lineage's schema (unless columns were just added).
        self._columns = None if evolution.statements or request.dry_run else columns
        return profile, plan, report

    def _describe_files(self, hook: ClickHouseHook, source: S3Source, request: LoadRequest, plan: LoadPlan) -> list[Column]:
        """The files' columns as the server infers them over the whole glob, united
        (``schema_inference_mode='union'`` unless the settings say otherwise), or the structure's."""
        settings = {"schema_inference_mode": "union", **request.settings}
        return describe(hook, render_describe(plan, source.credentials(), url=plan.source_url,
                                              structure=plan.structure is not None, settings=settings))

    def _check_schema(
        self, hook: ClickHouseHook, source: S3Source, request: LoadRequest, plan: LoadPlan, manifest: Manifest,
        table: TableInfo, target: list[Column],
    ) -> tuple[Check, list[Column] | None, str | None]:
        """The first file's columns (the server's schema inference) or the structure's against the target's
        (``target``: the table's columns as they will be); with the file's columns and name when read."""
        reads, sample = schema_reads(request.schema_check, plan.format, plan.structure), sample_file(plan, manifest)
        if reads.skipped is not None or sample is None:
            return reads.skipped or unchecked("every file is empty"), None, None
        name, url = sample
        try:
            described = {
                kind: describe(hook, render_describe(plan, source.credentials(), url=url, structure=kind == "structure",
                                                     settings=request.settings))
                for kind in ("file", "structure") if getattr(reads, kind)
            }
        except (ClickHouseQueryError, LoadError) as exc:  # the load itself may still work: it says so
            why = scrub(str(exc).partition("; retrying")[0], source.credentials())
            return unchecked(f"the server could not describe {name}: {why}"), None, None
        check = check_schema(
            target, file=name, table=f"{table.database}.{table.name}", fmt=plan.format,
            policy=request.schema_check, file_columns=described.get("file"),
            structure_columns=described.get("structure"), settings=request.settings,
            on_schema_change=request.schema_change,
        )
        return check, described.get("file") if plan.structure is None else None, name

    # ------------------------------------------------------------------ retries and staging
    def _resume(
        self, hook: ClickHouseHook, queries: QueryLog, query_id: QueryId, first_try: int,
        nodes: Sequence[ClusterNode],
    ) -> Resume:
        """Find the earlier tries' queries; wait for running ones; decide load or attach. Try 1 has no
        earlier try (a cleared task instance goes on with the next try number): nothing to read."""
        if query_id.try_number <= 1:
            resume = Resume(action="load", reason="the first try: no earlier try of this task instance ran a load")
            self.log.info("Try %d: %s", query_id.try_number, resume.reason)
            return resume
        while True:
            resume = decide_resume(queries.earlier_tries(query_id, nodes), query_id.try_number, first_try)
            if resume.action != "wait":
                self.log.info("Try %d: %s", query_id.try_number, resume.reason)
                return resume
            self.log.info("%s: waiting for it (up to %.0f s)", resume.reason, self.earlier_try_timeout)
            if self._defers():  # deferrable: the triggerer waits; the task then looks again (execute_complete)
                self._defer_wait(resume.query_ids, nodes)
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
            # A first try's staging table cannot be there (the name holds the try's stem): no read to say so.
            left = query_id.try_number > 1 and hook.table_comment(steps.staging) is not None
            self._run(hook, prepare_statements(steps, staging_exists=left))
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

    def _finalize(self, hook: ClickHouseHook, steps: LoadSteps, *, inserted_now: bool = False) -> list[str]:
        """Bring the staging table's rows into the target; idempotent, so a retry can resume it.

        :param inserted_now: this try's own insert just filled the staging table: it exists, and moving or
            replacing partitions needs no comment (one round trip less each; ``overwrite`` reads them).
        """
        staging = steps.staging
        if staging is None:
            return []
        known = inserted_now and steps.finalize != "exchange"
        staging_comment = "" if known else hook.table_comment(staging)
        finalize = finalize_statements(
            steps,
            staging_comment=staging_comment,
            target_comment=None if steps.finalize != "exchange" else hook.table_comment(steps.target),
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
        if plan.predicted_peak_bytes:
            log.info("Predicted peak memory: %s (%s)", fmt_bytes(plan.predicted_peak_bytes), plan.predicted_peak_reason)
        for change in (plan.history or {}).get("changes", []):
            log.info("Learned from %d earlier load(s): %s", plan.history["loads"], change)
        for check in plan.checks:
            log.info("Check %s: %s: %s", check.name, check.status, check.message)
        for warning in [*plan.warnings, *steps.warnings]:
            log.warning("%s", warning)
        log.info("SQL: %s", shorten(redacted_sql))
        log.info("Mode %s: %s", steps.mode, steps.reason)

    # ------------------------------------------------------------------ lineage and assets
    def _keep_lineage(
        self, hook: ClickHouseHook, request: LoadRequest, manifest: Manifest, profile: ServerProfile,
        report: dict[str, Any], steps: LoadSteps, metrics: LoadMetrics, partitions: list[str],
        attached_to: str | None, redacted_sql: str,
    ) -> None:
        """Keep what the load's lineage and asset events say (names, the table's columns, the figures; no
        credentials) for :meth:`get_openlineage_facets_on_complete` and :meth:`_outlet_events`."""
        try:
            columns = self._columns if self._columns is not None else table_columns(hook, profile.table)
        except Exception as exc:  # noqa: BLE001 - lineage goes without the schema; the load stands
            self.log.warning("Lineage: could not read the columns of %s.%s: %s", profile.table.database,
                             profile.table.name, exc)
            columns = []
        self._lineage_facts = LoadFacts(
            bucket=request.bucket, objects=manifest.objects, host=hook.host, port=hook.port,
            database=profile.table.database, table=profile.table.name, columns=columns,
            query_id=metrics.query_id, written_rows=metrics.written_rows, written_bytes=metrics.written_bytes,
            read_rows=metrics.read_rows, read_bytes=metrics.read_bytes, mode=steps.mode,
            created=bool(report.get("created")), partitions=partitions,
            attached_to=attached_to, sql=redacted_sql,
        )

    def _outlet_events(self, context: Context, result: dict[str, Any]) -> None:
        """The task's asset events: a load's carry its figures in ``extra``; a dry run emits none.

        Airflow emits an event for every asset in ``outlets`` when the task succeeds; a dry run changed
        nothing, so it takes its assets out of this run's ``outlets`` (the task still succeeds)."""
        from airflow.sdk import Asset
        from airflow.sdk.definitions.asset import BaseAsset

        nothing_new = result.get("query_id") is None and result.get("files") == 0  # an incremental run, no new file
        if result.get("dry_run") or nothing_new:
            assets = [o for o in self.outlets if isinstance(o, BaseAsset)]
            if assets:
                self.outlets = [o for o in self.outlets if not isinstance(o, BaseAsset)]
                self.log.info("%s: no asset event for %s", "Dry run" if result.get("dry_run") else "No new file",
                              ", ".join(map(repr, assets)))
            return
        events = context.get("outlet_events")
        facts = getattr(self, "_lineage_facts", None)
        if events is None or facts is None:
            return
        extra = outlet_extra(facts)
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                events[outlet].extra.update(extra)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the files read (``s3://bucket``, per file or grouped), the table written
        (``clickhouse://host:port``, ``database.table``) with its columns and the rows and bytes written
        (:mod:`airflow_provider_s3ch.lineage`); nothing for a dry run."""
        return operator_lineage(getattr(self, "_lineage_facts", None))

    # ------------------------------------------------------------------ deferrable loads (docs/deferrable.md)
    def _defers(self) -> bool:
        """Whether this load defers: ``deferrable``, and no file ledger (an incremental load runs in its worker)."""
        if self.deferrable and getattr(self, "skip_loaded", False):
            self.log.warning("deferrable=True with skip_loaded=True: the load runs in its worker slot, not deferred")
            return False
        return bool(self.deferrable)

    def _defer_wait(self, query_ids: list[str], nodes: Sequence[ClusterNode]) -> None:
        """Hand the wait for earlier tries' queries to the triggerer; the task looks at the tries again when
        they no longer run (:meth:`execute_complete`)."""
        self.log.info("Deferring: the triggerer waits for %s (every %.0f s, up to %.0f s)", ", ".join(query_ids),
                      self.poll_interval, self.earlier_try_timeout)
        self.defer(
            trigger=LoadTrigger(clickhouse_conn_id=self.clickhouse_conn_id, query_ids=list(query_ids),
                                nodes=[n.model_dump(mode="json") for n in nodes], kind="wait",
                                poll_interval=self.poll_interval, deadline=time.time() + self.earlier_try_timeout),
            method_name="execute_complete",
        )

    def _start_deferred(
        self, hook: ClickHouseHook, queries: QueryLog, rendered: RenderedSQL, query_id: QueryId, steps: LoadSteps, *,
        plan: LoadPlan, profile: ServerProfile, manifest: Manifest, request: LoadRequest, table: dict[str, Any],
        resume: Resume, fan_out: Sequence[ClusterNode], started: float,
    ) -> None:
        """Start the insert over HTTP (the server runs it without this process) and defer to the triggerer,
        with what :meth:`execute_complete` needs; returns only when the server finished it before it could
        be seen running (then the load goes on here, as one that did not defer)."""
        insert_nodes = profile.nodes if plan.strategy == "distributed" else []
        if steps.staging is not None:
            # A first try's staging table cannot be there (the name holds the try's stem): no read to say so.
            left = query_id.try_number > 1 and hook.table_comment(steps.staging) is not None
            self._run(hook, prepare_statements(steps, staging_exists=left))
        self._running = (hook, [str(query_id)], insert_nodes)
        try:
            finished = hook.start_insert_http(rendered.sql, query_id=str(query_id), settings=rendered.settings,
                                              log=self.log)
        except ClickHouseUnavailableError:
            self._running = None
            raise  # the server may still run the load: the staging table is the retry's
        except Exception:
            self._running = None
            if steps.staging is not None:
                try:
                    if not queries.running_queries([str(query_id)], insert_nodes):
                        self._run(hook, abandon_statements(steps))
                except Exception as exc:  # noqa: BLE001 - best effort, the load's own error goes on
                    self.log.warning("Could not drop staging table %s: %s", steps.staging, exc)
            raise
        if finished:
            self._running = None
            self.log.info("The server finished query %s before it was seen running: finishing the load here",
                          query_id)
            return
        load = DeferredLoad.carry(
            objects=manifest.objects, sql=rendered.redacted, query_id=str(query_id), resume_reason=resume.reason,
            plan=plan, steps=steps, table=profile.table, insert_nodes=list(insert_nodes), fan_out=list(fan_out),
            distributed=plan.strategy == "distributed", table_changes=table, bucket=request.bucket,
            started_at=time.time() - (time.monotonic() - started),
        )
        self.log.info("Deferring: the triggerer follows query %s (every %.0f s); the worker slot is free",
                      query_id, self.poll_interval)
        self.defer(
            trigger=LoadTrigger(clickhouse_conn_id=self.clickhouse_conn_id, query_ids=[str(query_id)],
                                nodes=[n.model_dump(mode="json") for n in fan_out or insert_nodes], kind="insert",
                                poll_interval=self.poll_interval, load=load.model_dump(mode="json")),
            method_name="execute_complete",
            timeout=self.execution_timeout,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Where a deferred load resumes when its trigger fires: finish the load (staging table -> target)
        and return its figures, as a load that did not defer; after a wait for earlier tries, look at the
        tries again and decide (:meth:`execute`); otherwise raise the load's error."""
        from airflow_provider_s3ch import errors

        event = event or {}
        status, message = event.get("status"), str(event.get("message") or f"the trigger fired {event!r}")
        if event.get("kind") == "wait" and status == "ended":
            self.log.info("%s: looking at the earlier tries again", message)
            return self.execute(context)
        self._lineage_facts = None
        with provider_errors():
            if status == "timeout":
                raise LoadError(message)
            if status == "error" or not event.get("load"):
                cls = getattr(errors, str(event.get("error") or ""), None)
                raise (cls if isinstance(cls, type) and issubclass(cls, errors.S3chError) else LoadError)(message)
            load = DeferredLoad.model_validate(event["load"])
            result = self._complete_deferred(load, status, message, int(event.get("error_code") or 0))
        self._outlet_events(context, result)
        return result

    def _complete_deferred(self, load: DeferredLoad, status: str | None, message: str, code: int) -> dict[str, Any]:
        """Finish a deferred load from what its trigger saw: its figures, the staging step, the summary."""
        hook = ClickHouseHook(self.clickhouse_conn_id)
        queries = QueryLog(hook)
        steps = load.steps
        try:
            if status != "finished":
                error = hook.server_error(code, message) if status == "failed" else LoadError(message)
                if status == "failed" and steps.staging is not None:
                    try:
                        if not queries.running_queries([load.query_id], load.insert_nodes):
                            self._run(hook, abandon_statements(steps))
                    except Exception as exc:  # noqa: BLE001 - best effort; the next try drops it
                        self.log.warning("Could not drop staging table %s: %s", steps.staging, exc)
                raise error
            self.log.info("%s", message)
            entry = queries.entry(load.query_id, load.fan_out)
            metrics = load_metrics(entry, queries.secondary_queries(entry.query_id, load.fan_out) if load.fan_out
                                   else [], distributed=load.distributed, target_distributed=load.table.is_distributed)
            partitions = self._finalize(hook, steps) if steps.staging is not None else []
            self._lineage_facts = self._deferred_lineage(hook, load, metrics, partitions)
        finally:
            hook.close()
        result = summary(load.plan, metrics, wall_ms=int((time.time() - load.started_at) * 1000))
        result.update({"mode": steps.mode, "mode_reason": steps.reason, "attached_to": None,
                       "staging_table": str(steps.staging) if steps.staging else None,
                       "resume_reason": load.resume_reason, "partitions": partitions,
                       "table_changes": load.table_changes, "warnings": [*result["warnings"], *steps.warnings],
                       "memory_attempts": []})  # a deferred load does not step down (docs/tuning.md)
        self.log.info("Loaded %d rows (%d bytes) in %d ms%s: %.0f rows/s, peak memory %d bytes; %s",
                      metrics.written_rows, metrics.written_bytes, metrics.duration_ms,
                      f" (waited {metrics.admission_wait_ms} ms for admission, ran {metrics.run_ms} ms)"
                      if metrics.admission_wait_ms else "", metrics.rows_per_second, metrics.memory_usage,
                      f"{steps.mode} of partitions {', '.join(partitions)}" if partitions else steps.mode)
        return result

    def _deferred_lineage(
        self, hook: ClickHouseHook, load: DeferredLoad, metrics: LoadMetrics, partitions: list[str]
    ) -> LoadFacts | None:
        """A deferred load's lineage facts (as :meth:`_keep_lineage`'s): the files carried through the deferral,
        or listed again when there were too many to carry; the table's columns read now."""
        objects = load.objects
        try:
            if objects is None:
                objects = build_manifest(S3Source(self.aws_conn_id).client(), self.build_request()).objects
            columns = table_columns(hook, load.table)
        except Exception as exc:  # noqa: BLE001 - lineage is best effort; the load stands
            self.log.warning("Lineage: could not read the files or the columns of %s.%s: %s", load.table.database,
                             load.table.name, exc)
            return None
        return LoadFacts(
            bucket=load.bucket, objects=objects, host=hook.host, port=hook.port, database=load.table.database,
            table=load.table.name, columns=columns, query_id=metrics.query_id, written_rows=metrics.written_rows,
            written_bytes=metrics.written_bytes, read_rows=metrics.read_rows, read_bytes=metrics.read_bytes,
            mode=load.steps.mode, created=bool(load.table_changes.get("created")), partitions=partitions,
            attached_to=None, sql=load.sql,
        )

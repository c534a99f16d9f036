"""S3ToClickHouseOperator: a tuned, measured, server-side load of S3 files into ClickHouse.

The operator declares: its arguments, their templating and validation (:meth:`build_request`), and how
Airflow runs it (:meth:`execute`, :meth:`execute_complete`, :meth:`on_kill`, lineage and asset events).
The load itself is :class:`~airflow_provider_s3ch.load.run.LoadRun`'s, one path for every kind of load
(docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from airflow_provider_s3ch import compat
from airflow_provider_s3ch.compat import AirflowSkipException, Asset, BaseAsset, BaseOperator, Context, conf
from airflow_provider_s3ch.core.events import check_events_request, check_files_from, default_on_changed, run_files
from airflow_provider_s3ch.core.freshness import queue_of
from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_HEARTBEAT, DEFAULT_CLAIM_TIMEOUT
from airflow_provider_s3ch.core.ledger_request import check_request as check_ledger_request
from airflow_provider_s3ch.core.lineage import outlet_extra
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.recovery import QueryId, first_try_of_series, load_fingerprint
from airflow_provider_s3ch.core.tables import TableSpec
from airflow_provider_s3ch.errors import provider_errors, require
from airflow_provider_s3ch.hooks.s3_events import manifest_of_files
from airflow_provider_s3ch.lineage import operator_lineage
from airflow_provider_s3ch.load.report import DeferLoad, LoadReport, NothingNew
from airflow_provider_s3ch.load.run import LoadRun, RunOptions, RunParts
from airflow_provider_s3ch.triggers.load import LoadTrigger


class S3ToClickHouseOperator(BaseOperator):
    """Load files from S3 into a ClickHouse table with one server-side ``INSERT … SELECT``.

    The operator lists the objects the glob matches (the manifest), reads the server's profile, plans the
    insert settings from the server's cores and the task's memory cap (ClickHouse's S3 insert tuning guide),
    chooses a single-node ``s3()`` or a distributed ``s3Cluster()`` insert, runs it under a deterministic
    query id and returns the load's figures from ``system.query_log``. Data never passes through the worker.
    The README's operator reference says each argument in full.

    :param s3_uri: ``s3://bucket/key-or-glob``; globs follow ClickHouse: ``*``, ``**``, ``?``, ``{a,b}``,
        ``{N..M}``. (templated)
    :param table: the target, ``database.table`` or ``table``. (templated)
    :param clickhouse_conn_id: a ``clickhouse_native`` or ``clickhouse`` connection (docs/connections.md).
        (templated)
    :param aws_conn_id: the ``aws`` connection that lists the bucket and whose credentials ClickHouse reads
        with; no credentials means a public bucket. (templated)
    :param format: ClickHouse input format; from the keys' extensions if None. (templated)
    :param compression: compression method; from the extensions if None. (templated)
    :param structure: column structure for formats without names, e.g. ``'a UInt32, b String'``. (templated)
    :param memory_cap: the load's memory cap, bytes or ``"8GiB"``; default half the server's memory. (templated)
    :param workload: the server's workload the insert runs in, reserving its memory cap; default the
        connection's extra ``workload``; ``""`` none (docs/many-loads.md). (templated)
    :param region_check: bucket region other than the server's: ``warn``, ``fail`` or ``off``.
    :param settings: ClickHouse settings that override the planned ones. (templated)
    :param strategy: ``auto``, ``single`` or ``distributed``.
    :param cluster: the cluster for distributed loads; default the connection's extra ``cluster``. (templated)
    :param dry_run: plan and render only; load nothing.
    :param mode: ``append``, ``replace_partitions`` or ``overwrite``, through a staging table where the
        target allows it (docs/retries-and-modes.md). (templated)
    :param compact_parts: staging parts under 64 MiB written Compact, until merged (docs/tuning.md#compact-parts).
    :param earlier_try_timeout: seconds a retry waits for an earlier try's query that still runs (6 h).
    :param deferrable: start the insert over HTTP and free the worker slot while the triggerer follows it
        (docs/deferrable.md); default ``[operators] default_deferrable``.
    :param poll_interval: with ``deferrable``: seconds between two looks of the triggerer at the query.
    :param schema_check: compare the files' columns with the table's first: ``strict``, ``ignore_extra``,
        ``warn`` or ``off``.
    :param create_table: ``never`` or ``if_missing`` (create it from the files' columns,
        docs/tables-from-files.md).
    :param order_by: the created table's sorting key (required with ``create_table='if_missing'``). (templated)
    :param partition_by: the created table's partition key, e.g. ``'toYYYYMM(ts)'``. (templated)
    :param primary_key: the created table's primary key when it differs from ``order_by``.
    :param engine: the created table's engine, MergeTree family (default ``MergeTree``).
    :param table_settings: the created table's settings.
    :param on_schema_change: files with columns the target lacks: ``fail``, ``add_columns`` or
        ``ignore_extra``. (templated)
    :param skip_loaded: load only the files the target's file ledger does not record as loaded, exactly once
        per file (docs/ledger.md).
    :param on_changed: with ``skip_loaded``, a file whose ETag changed: ``fail``, ``skip`` or ``reload``; default
        ``fail``, and ``skip`` with ``files_from="events"`` (which refuses ``fail``). (templated)
    :param on_bad_file: with ``skip_loaded``, a file the server cannot read as data: ``fail`` the load, or
        ``set_aside`` (recorded, left out until put again) and load the others (docs/ledger.md#bad-files). (templated)
    :param ledger_table: with ``skip_loaded``: the ledger; default ``<target database>._s3ch_ledger``. (templated)
    :param skip_when_empty: a run with nothing to load (no match; with ``skip_loaded``, no new file) is skipped.
    :param claim_timeout: with ``skip_loaded``: the most seconds a claim holds while its load runs no query and
        has no staging table (1 h); a load that writes heartbeats loses it sooner once they stop.
    :param claim_heartbeat: with ``skip_loaded``: seconds between a load's heartbeats while it holds claims (5);
        they go stale 4 heartbeats after its last: a dead worker's files are free in seconds.
    :param max_files_per_load: with ``skip_loaded``: the most files one insert reads (chunks). (templated)
    :param max_bytes_per_load: with ``skip_loaded``: the most bytes one insert reads. (templated)
    :param learn_from_history: calibrate the plan with the target's earlier loads of the same files
        (docs/tuning.md).
    :param s3_credentials: how the server reads the bucket: ``forward`` (the AWS connection's keys in each
        statement), ``server`` (its own credentials; no keys sent) or ``named_collection`` (docs/connections.md).
    :param named_collection: with ``s3_credentials='named_collection'``: the collection's name. (templated)
    :param role_arn: with ``s3_credentials='server'``: the IAM role ClickHouse Cloud assumes. (templated)
    :param files_from: ``listing`` (list the glob) or ``events``: a run triggered by an S3 watcher's asset events
        loads the files they name that match the glob, without listing (needs ``skip_loaded=True`` and Airflow
        3; a run without such events lists; docs/continuous.md).

    Retries: the query id is ``s3ch-<stem>-try<N>``, the stem fixed per task instance and load configuration.
    A retry first looks for the earlier tries' queries: one still running is waited for; one that finished
    is attached to (its figures returned, its staging table finished) without inserting again; after a
    failed one the load starts afresh.
    """

    template_fields: Sequence[str] = (
        "s3_uri", "table", "clickhouse_conn_id", "aws_conn_id", "format", "compression", "structure", "memory_cap",
        "workload", "settings", "cluster", "mode", "order_by", "partition_by", "on_schema_change", "on_changed",
        "on_bad_file", "ledger_table", "max_files_per_load", "max_bytes_per_load", "named_collection", "role_arn",
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
        earlier_try_timeout: float = 21600.0,  # seconds: 6 h
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
        on_changed: str | None = None,
        on_bad_file: str = "fail",
        ledger_table: str | None = None,
        skip_when_empty: bool = False,
        claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
        claim_heartbeat: float = DEFAULT_CLAIM_HEARTBEAT,
        max_files_per_load: int | str | None = None,
        max_bytes_per_load: int | str | None = None,
        learn_from_history: bool = True,
        s3_credentials: str = "forward",
        named_collection: str | None = None,
        role_arn: str | None = None,
        files_from: str = "listing",
        compact_parts: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        with provider_errors():
            check_files_from(files_from)
        if files_from == "events":
            require("files_from='events' (a run from asset events)", "3.0")
        # what and where
        self.s3_uri, self.table, self.files_from = s3_uri, table, files_from
        self.clickhouse_conn_id, self.aws_conn_id = clickhouse_conn_id, aws_conn_id
        # the files
        self.format, self.compression, self.structure = format, compression, structure
        # the plan
        self.memory_cap, self.workload, self.region_check, self.settings = memory_cap, workload, region_check, settings
        self.strategy, self.cluster, self.learn_from_history = strategy, cluster, learn_from_history
        # how it runs
        self.dry_run, self.mode, self.earlier_try_timeout = dry_run, mode, earlier_try_timeout
        self.deferrable, self.poll_interval = deferrable, poll_interval
        # the table
        self.schema_check, self.create_table, self.order_by = schema_check, create_table, order_by
        self.partition_by, self.primary_key, self.engine = partition_by, primary_key, engine
        self.table_settings, self.on_schema_change = table_settings, on_schema_change
        # the ledger
        self.skip_loaded, self.on_changed, self.ledger_table = skip_loaded, on_changed, ledger_table
        self.on_bad_file, self.compact_parts = on_bad_file, compact_parts
        self.skip_when_empty, self.claim_timeout, self.claim_heartbeat = skip_when_empty, claim_timeout, claim_heartbeat
        self.max_files_per_load, self.max_bytes_per_load = max_files_per_load, max_bytes_per_load
        self.s3_credentials, self.named_collection, self.role_arn = s3_credentials, named_collection, role_arn
        #: The load in progress, or the last one (its lineage facts): the only state a task keeps.
        self._run: LoadRun | None = None
    # ------------------------------------------------------------------ steps
    def build_request(self) -> LoadRequest:
        """Validate the rendered arguments (terminal errors name the argument and the fix)."""
        with provider_errors():
            request = LoadRequest.from_arguments(
                s3_uri=self.s3_uri,
                table=self.table,
                format=self.format or None, compression=self.compression or None,
                structure=self.structure or None, memory_cap=self.memory_cap,
                workload=self.workload,
                region_check=self.region_check,
                settings=self.settings,
                strategy=self.strategy,
                cluster=self.cluster or None,
                dry_run=self.dry_run,
                mode=self.mode,
                compact_parts=self.compact_parts,
                schema_check=self.schema_check,
                create_table=self.create_table,
                on_schema_change=self.on_schema_change,
                skip_loaded=self.skip_loaded,
                on_changed=self.on_changed or default_on_changed(self.files_from),
                on_bad_file=self.on_bad_file,
                ledger_table=self.ledger_table or None,
                skip_when_empty=self.skip_when_empty,
                max_files_per_load=self.max_files_per_load,
                max_bytes_per_load=self.max_bytes_per_load,
                s3_credentials=self.s3_credentials, named_collection=self.named_collection or None,
                role_arn=self.role_arn or None,
            )
            check_ledger_request(request)
            if self.files_from == "events":
                check_events_request(request)
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
        return QueryId.of_task_instance(context["ti"], load_fingerprint(request or self.build_request()))

    def first_try(self, context: Context) -> int:
        """The first try since the task instance was last cleared (earlier ones are not attached to)."""
        ti = context["ti"]
        return first_try_of_series(int(ti.try_number), getattr(ti, "max_tries", None), getattr(self, "retries", None))

    def run_options(self, request: LoadRequest) -> RunOptions:
        """The run's options beside the request: connections, the table to create, how it waits and defers
        (an incremental load runs in its worker, not deferred)."""
        if self.deferrable and self.skip_loaded:
            self.log.warning("deferrable=True with skip_loaded=True: the load runs in its worker slot, not deferred")
        return RunOptions(table_spec=self.table_spec(request), defers=bool(self.deferrable and not self.skip_loaded),
                          earlier_try_timeout=self.earlier_try_timeout, claim_timeout=self.claim_timeout,
                          claim_heartbeat=self.claim_heartbeat, learn_from_history=self.learn_from_history)

    def run_parts(self, context: Context | None = None, request: LoadRequest | None = None) -> RunParts:
        """What the run talks to: the task's ClickHouse and AWS connections; with ``files_from="events"``, in a run
        its S3 watchers' asset events triggered, the files they name in place of the listing
        (:func:`~airflow_provider_s3ch.core.events.run_files`)."""
        parts = RunParts.connections(self.clickhouse_conn_id, self.aws_conn_id)
        if self.files_from != "events" or context is None or request is None:
            return parts
        triggering = context.get("triggering_asset_events") or {}
        extras = [getattr(e, "extra", None) for events in triggering.values() for e in events]
        chosen = run_files(request, extras, [e.extra for e in compat.events_since(triggering)] if extras else [])
        self.log.info("%s", chosen.note)
        if chosen.files is None:
            return parts
        return dataclasses.replace(parts, listing=functools.partial(manifest_of_files, files=chosen.files),
                                   queue=queue_of(chosen))

    # ------------------------------------------------------------------ how Airflow runs it
    def execute(self, context: Context) -> dict[str, Any]:
        """Load, every error the provider's (:class:`~airflow_provider_s3ch.errors.S3chError`)."""
        with provider_errors():
            request = self.build_request()
            query_id, first_try = self.query_id(context, request), self.first_try(context)
            parts = self.run_parts(context, request)
            self._run = run = LoadRun(request, self.run_options(request), self.log, parts)
            return self._finish(context, lambda: run.run(query_id, first_try))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Where a deferred load resumes when its trigger fires: the same ``complete`` as a load that did not
        defer; after a wait for earlier tries, look at the tries again (:meth:`execute`)."""
        event = event or {}
        if event.get("kind") == "wait" and event.get("status") == "ended":
            self.log.info("%s: looking at the earlier tries again", event.get("message"))
            return self.execute(context)
        with provider_errors():
            request = self.build_request()
            self._run = run = LoadRun(request, self.run_options(request), self.log, self.run_parts())
            return self._finish(context, lambda: run.complete_deferred(event))

    def _finish(self, context: Context, load: Callable[[], LoadReport]) -> dict[str, Any]:
        """Run ``load`` and turn its signals into Airflow's: a deferral, a skip; else its report as the XCom."""
        try:
            report = load()
        except DeferLoad as signal:
            self._defer(signal)
            raise  # not reached: defer raises
        except NothingNew as signal:
            if signal.report is not None:  # what the ledger skipped (changed, gone files) stays readable
                context["ti"].xcom_push(key="return_value", value=signal.report.to_xcom())
            raise AirflowSkipException(str(signal)) from None
        self._outlet_events(context, report)
        return report.to_xcom()

    def _defer(self, signal: DeferLoad) -> None:
        """Hand the load's query (or earlier tries' queries) to the triggerer."""
        if signal.kind == "wait":
            self.log.info("Deferring: the triggerer waits for %s (every %.0f s, up to %.0f s)",
                          ", ".join(signal.query_ids), self.poll_interval, self.earlier_try_timeout)
        else:
            self.log.info("Deferring: the triggerer follows query %s (every %.0f s); the worker slot is free",
                          signal.query_ids[0], self.poll_interval)
        trigger = LoadTrigger(clickhouse_conn_id=self.clickhouse_conn_id, query_ids=signal.query_ids,
                              nodes=signal.nodes, kind=signal.kind, poll_interval=self.poll_interval,
                              deadline=signal.deadline, load=signal.load)
        self.defer(trigger=trigger, method_name="execute_complete",
                   timeout=self.execution_timeout if signal.kind == "insert" else None)

    def on_kill(self) -> None:
        if self._run is not None:
            self._run.kill()

    # ------------------------------------------------------------------ lineage and assets
    def _outlet_events(self, context: Context, report: LoadReport) -> None:
        """The task's asset events: a load's carry its figures in ``extra``; a dry run emits none.

        Airflow emits an event for every asset in ``outlets`` when the task succeeds; a dry run changed
        nothing, so it takes its assets out of this run's ``outlets`` (the task still succeeds)."""
        if report.kind != "load":
            assets = [o for o in self.outlets if isinstance(o, BaseAsset)]
            if assets:
                self.outlets = [o for o in self.outlets if not isinstance(o, BaseAsset)]
                self.log.info("%s: no asset event for %s", "Dry run" if report.dry_run else "No new file",
                              ", ".join(map(repr, assets)))
            return
        events = context.get("outlet_events")
        facts = self._run.lineage if self._run is not None else None
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
        return operator_lineage(self._run.lineage if self._run is not None else None)

"""The ``target`` phase: the server's profile and the plan for the target, the table created when missing
(``create_table``), its columns added (``on_schema_change='add_columns'``) and checked against the files.

What to create, add or warn of is :mod:`airflow_provider_s3ch.core.tables`' and
:mod:`~airflow_provider_s3ch.core.schema`'s; this phase reads the facts and runs the DDL they return.
"""

from __future__ import annotations

import contextlib
import logging
import queue
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from airflow_provider_s3ch.core.glob import archive_path_syntax, object_url
from airflow_provider_s3ch.core.history import Learned, PastLoad, history_key
from airflow_provider_s3ch.core.key_sample import (
    HEAD_BYTES,
    raw_expression,
    render_key_sample,
    rows_per_file_byte,
    sample_target,
    sampled_window,
)
from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.manifest import reads_footers
from airflow_provider_s3ch.core.models import Check, LoadPlan, LoadRequest, Manifest
from airflow_provider_s3ch.core.plan import make_plan
from airflow_provider_s3ch.core.schema import (
    Column,
    add_check,
    check_schema,
    describe_settings,
    left_out,
    read_settings,
    sample_file,
    schema_reads,
    unchecked,
)
from airflow_provider_s3ch.core.server_models import ServerProfile, TableInfo
from airflow_provider_s3ch.core.setting_types import check_settings
from airflow_provider_s3ch.core.sql import RenderedSQL, S3Credentials, render_describe, render_describe_schema, scrub
from airflow_provider_s3ch.core.tables import (
    Evolution,
    TableSpec,
    creation,
    evolution_skipped,
    evolve,
    planned_table,
    with_added,
)
from airflow_provider_s3ch.errors import ClickHouseQueryError, LoadError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.key_sample import read_head, sample_rows
from airflow_provider_s3ch.hooks.query_log import QueryLog
from airflow_provider_s3ch.hooks.server import describe, get_profile, has_keeper, run_ddl, table_columns


@dataclass(frozen=True)
class TargetFacts:
    """The target as the load will write it: the profile, the plan, what changed (the XCom's
    ``table_changes``) and its columns as read (None when they changed or a dry run planned them)."""

    profile: ServerProfile
    plan: LoadPlan
    changes: dict[str, Any]
    columns: list[Column] | None


class Listed(NamedTuple):
    """A listing as the target phase reads it: the manifest, the glob's URL for the server, the S3 credentials
    the statements carry and the history key (None: no history is read)."""

    manifest: Manifest
    url: str
    credentials: S3Credentials | None
    history_key: str | None
    #: The listing's boto3 client (the sample's read of a text file's first bytes); None: no sample.
    client: Any = None


@dataclass
class Prefetched:
    """What the ``target`` phase reads from the server, read while the worker builds the S3 client, lists the
    files and reads their footers: the profile; the earlier loads tagged with the history key (None: not
    read); and the sample file's ``DESCRIBE`` by statement, or the error it raised (raised where it runs)."""

    profile: ServerProfile
    past: list[PastLoad] | None = None
    described: dict[str, list[Column] | Exception] = field(default_factory=dict)
    #: A text load's sample for the block rule (:mod:`~airflow_provider_s3ch.core.key_sample`); None: none read.
    key_window: KeyWindow | None = None


class ReadAhead:
    """The target phase's reads of the server, in a thread beside the listing: the profile and (given
    ``early_key``) the earlier loads under it at once; the rest once :meth:`hand` gives the listing.

    The thread makes no Airflow calls (not thread-safe on every Airflow version): what needs them is worked out
    by the caller and handed over as a :class:`Listed`. Its error is raised by :meth:`result`, after the
    listing's own. Leaving the block waits for the thread, so that the hook can be closed after it.
    """

    def __init__(self, target: Target, *, early_key: str | None) -> None:
        self._listed: queue.Queue[Listed | None] = queue.Queue(maxsize=1)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3ch-profile")
        self._future = pool.submit(self._read, target, early_key)
        pool.shutdown(wait=False)

    def _read(self, target: Target, early_key: str | None) -> Prefetched | Exception:
        try:
            return target.read_ahead(self._listed.get, early_key=early_key)
        except Exception as exc:  # noqa: BLE001 - raised after the listing's own errors
            return exc

    def hand(self, listed: Listed | None) -> None:
        """Give the thread the listing (None: there is none; it ends after the profile). Once only."""
        with contextlib.suppress(queue.Full):
            self._listed.put_nowait(listed)

    def result(self) -> Prefetched:
        """What the thread read, or its error raised."""
        self.hand(None)
        got = self._future.result()
        if isinstance(got, BaseException):
            raise got
        return got

    def __enter__(self) -> ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.hand(None)
        wait([self._future])


class Target:
    """The ``target`` phase of one run.

    :param hook: the ClickHouse connection.
    :param request: the validated arguments.
    :param spec: the table to create when it is missing (``create_table``), or None.
    :param log: the task's logger.
    """

    def __init__(self, hook: ClickHouseHook, request: LoadRequest, spec: TableSpec | None, log: logging.Logger) -> None:
        self.hook, self.request, self.spec, self.log = hook, request, spec, log
        #: The target with its database named.
        self.table = request.table.in_database(hook.database)

    def history_key(self, fmt: str) -> str:
        """The key of the loads of this target and files that later loads learn from (format ``fmt``)."""
        request = self.request
        return history_key(f"{self.table.database}.{self.table.name}", request.bucket, request.key_pattern,
                           request.format or fmt)

    def source_url(self, endpoint_url: str | None, region: str | None) -> str:
        """The glob's URL as the server reads it (the connection's S3 endpoint first, else the worker's)."""
        request = self.request
        return object_url(request.bucket, request.key_pattern, endpoint_url=self.hook.s3_endpoint_url or endpoint_url,
                          region=region, archive_syntax=archive_path_syntax(request.settings))

    def read_ahead(self, listed: Callable[[], Listed | None], *, early_key: str | None = None) -> Prefetched:
        """The profile and, given ``early_key``, the earlier loads under it; then, once ``listed`` gives the
        listing (None: the listing failed), the earlier loads under the listing's key (unless read already) and
        the schema check's ``DESCRIBE``s (for a plan of the listing alone: the statements do not depend on the
        footers, and a statement the ``target`` phase renders otherwise runs there).

        :param early_key: the history key as the glob's extension names the format: the earlier loads are read
            while the worker still builds the S3 client, not after the listing.
        """
        hook, request = self.hook, self.request
        ahead = Prefetched(profile=self.read_profile())
        early = QueryLog(hook).past_loads(early_key) if early_key is not None else None
        got = listed()
        if got is None:
            return ahead
        manifest, url, credentials, key, _ = got
        ahead.past = early if key is not None and key == early_key else (
            QueryLog(hook).past_loads(key) if key is not None else None)
        try:
            plan = make_plan(request, manifest, ahead.profile, source_url=url)
        except Exception:  # noqa: BLE001 - the target phase plans again and says why
            return ahead
        reads, sample = schema_reads(request.schema_check, plan.format, plan.structure), sample_file(plan, manifest)
        # A Parquet file's columns come from its footer, read with the others (:func:`_sample_describe`).
        footer = reads_footers(request, manifest.format, manifest.compression)
        if reads.skipped is None and sample is not None and not request.skip_loaded:  # the ledger may skip the file
            for kind in ("file", "structure"):
                if getattr(reads, kind) and not (kind == "file" and footer):
                    statement = _sample_describe(plan, credentials, sample[1], kind, request)
                    try:
                        ahead.described[_key(statement)] = describe(hook, statement)
                    except (ClickHouseQueryError, LoadError) as exc:
                        ahead.described[_key(statement)] = exc
        if not request.skip_loaded:  # the ledger's chunks plan without it
            ahead.key_window = self.key_sample(got, plan, ahead.profile)
        return ahead

    def key_sample(self, listed: Listed, plan: LoadPlan, profile: ServerProfile) -> KeyWindow | None:
        """A text load's sample of the rows for the block rule (:mod:`~airflow_provider_s3ch.core.key_sample`):
        the first bytes of the first file, then the first rows of the first and last files through the engine;
        None where none is wanted or it cannot be read (the rule keeps ClickHouse's block, as without it)."""
        manifest = listed.manifest
        target = sample_target(plan, manifest, profile.table) if listed.client is not None else None
        if target is None:
            return None
        try:  # the sample never fails a load: without it the rule keeps ClickHouse's block
            types = {c.name: c.type for c in table_columns(self.hook, profile.table)}
            raw = raw_expression(target.column, types[target.column]) if target.column in types else None
            if raw is None:
                return None
            rate = rows_per_file_byte(read_head(listed.client, manifest.bucket, target.first.key, HEAD_BYTES) or b"",
                                      plan.compression)
            if rate is None:
                return None
            statement = render_key_sample(plan, listed.credentials, target.urls, raw[0],
                                          describe_settings(plan.format, self.request.settings))
            rows = sample_rows(self.hook, statement)
        except (ClickHouseQueryError, LoadError) as exc:
            self.log.info("No sample of the rows for the block rule: %s",
                          scrub(str(exc).partition("; retrying")[0], listed.credentials))
            return None
        return sampled_window(target.column, raw[1], rows, rows_per_byte=rate, file_bytes=manifest.total_bytes)

    def read_profile(self) -> ServerProfile:
        """The server's profile and the target's facts (the table the load would create, when it is missing);
        the user's settings checked against the types the server has for them, before any statement carries
        them."""
        hook, request = self.hook, self.request
        missing = None if self.spec is None else planned_table(
            self.table, self.spec, distributed=request.strategy == "distributed",
            cluster=request.cluster or hook.cluster)
        profile = get_profile(hook, request.table, cluster=request.cluster, missing=missing,
                              workload=request.workload, settings=sorted(request.settings))
        check_settings(request.settings, profile.setting_types,
                       server=f"ClickHouse {profile.version} at {hook.address}")
        return profile

    def prepare(self, listed: Listed, learned: Learned | None, ahead: Prefetched | None) -> TargetFacts:
        """Create, evolve and check the target; plan the load against it. A dry run changes nothing: it plans
        against the table as it would be.

        :param ahead: what :meth:`read_ahead` read just before; None reads the profile here.
        """
        hook, request, log, target = self.hook, self.request, self.log, self.table
        manifest, url, credentials = listed.manifest, listed.url, listed.credentials
        profile = ahead.profile if ahead is not None else self.read_profile()
        manifest = _with_sample(manifest, ahead)
        plan = make_plan(request, manifest, profile, source_url=url, learned=learned)

        def keeper() -> bool:  # read only when DDL is made (creating the table, adding columns)
            return profile.table.is_distributed and has_keeper(hook)

        report: dict[str, Any] = {"created": None, "ddl": [], "added_columns": [], "left_out_columns": [],
                                  "on_schema_change": request.schema_change}
        columns: list[Column] | None = None
        if self.spec is not None and not profile.table.exists:
            made = creation(target, self._describe_files(credentials, plan), self.spec, file=request.s3_uri,
                            distributed=profile.table.is_distributed, cluster=profile.cluster, keeper=keeper())
            report.update(created=made.how, ddl=[d.sql for d in made.statements])
            log.info("Table %s.%s is missing: %s", target.database, target.name,
                     "a dry run creates nothing" if request.dry_run else f"creating it, {made.how}")
            for ddl in made.statements:
                log.info("DDL: %s", ddl.sql)
            if request.dry_run:
                columns = made.columns
            else:
                run_ddl(hook, made.statements, profile.nodes, log)
                profile = get_profile(hook, request.table, cluster=request.cluster, workload=request.workload)
                plan = make_plan(request, manifest, profile, source_url=url, learned=learned)
        columns = columns if columns is not None else table_columns(hook, profile.table)
        evolution = Evolution(policy=request.schema_change)
        skipped = evolution_skipped(plan.format, plan.structure) if request.schema_change == "add_columns" else None
        if skipped:
            plan.warnings.append(skipped)
        elif request.schema_change == "add_columns":
            evolution = evolve(profile.table, columns, self._describe_files(credentials, plan),
                               policy="add_columns", file=request.s3_uri, keeper=keeper())
        check, file_columns, sample = self._check_schema(listed, plan, profile.table, with_added(columns, evolution),
                                                         ahead.described if ahead is not None else {})
        add_check(plan, check)
        if evolution.statements:
            report.update(added_columns=evolution.added_names,
                          ddl=[*report["ddl"], *(d.sql for d in evolution.statements)])
            for ddl in evolution.statements:
                log.info("DDL: %s", ddl.sql)
            if not request.dry_run:
                run_ddl(hook, evolution.statements, profile.nodes, log)
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
        return TargetFacts(profile=profile, plan=plan, changes=report,
                           columns=None if evolution.statements or request.dry_run else columns)

    def _describe_files(self, credentials: S3Credentials | None, plan: LoadPlan) -> list[Column]:
        """The files' columns as the server infers them over the whole glob, united
        (``schema_inference_mode='union'`` unless the settings say otherwise), or the structure's."""
        settings = {"schema_inference_mode": "union", **read_settings(self.request.settings)}
        return describe(self.hook, render_describe(plan, credentials, url=plan.source_url,
                                                   structure=plan.structure is not None, settings=settings))

    def _check_schema(
        self, listed: Listed, plan: LoadPlan, table: TableInfo, target: list[Column],
        answered: Mapping[str, list[Column] | Exception],
    ) -> tuple[Check, list[Column] | None, str | None]:
        """The first file's columns (the server's schema inference) or the structure's against the target's
        (``target``: the table's columns as they will be); with the file's columns and name when read.

        :param answered: the ``DESCRIBE``s :meth:`read_ahead` ran (a statement rendered otherwise runs here).
        """
        request, manifest, credentials = self.request, listed.manifest, listed.credentials
        reads, sample = schema_reads(request.schema_check, plan.format, plan.structure), sample_file(plan, manifest)
        if reads.skipped is not None or sample is None:
            return reads.skipped or unchecked("every file is empty"), None, None
        name, url = sample

        def columns(kind: str) -> list[Column]:
            statement = _sample_describe(plan, credentials, url, kind, request, manifest)
            known = answered.get(_key(statement))
            if isinstance(known, Exception):
                raise known
            return known if known is not None else describe(self.hook, statement)

        try:
            described = {kind: columns(kind) for kind in ("file", "structure") if getattr(reads, kind)}
        except (ClickHouseQueryError, LoadError) as exc:  # the load itself may still work: it says so
            why = scrub(str(exc).partition("; retrying")[0], credentials)
            return unchecked(f"the server could not describe {name}: {why}"), None, None
        check = check_schema(
            target, file=name, table=f"{table.database}.{table.name}", fmt=plan.format,
            policy=request.schema_check, file_columns=described.get("file"),
            structure_columns=described.get("structure"), settings=request.settings,
            on_schema_change=request.schema_change,
        )
        return check, described.get("file") if plan.structure is None else None, name


def _sample_describe(plan: LoadPlan, credentials: S3Credentials | None, url: str, kind: str,
                     request: LoadRequest, manifest: Manifest | None = None) -> RenderedSQL:
    """The schema check's ``DESCRIBE`` of the sample file: its inferred columns (``file``) or the structure's.
    A Parquet sample whose footer the listing read (``manifest.sample_schema``) is described from the footer's
    schema (``format()``: no read of S3, one latency and three requests fewer before the insert)."""
    structure = kind == "structure"
    settings = read_settings(request.settings) if structure else describe_settings(plan.format, request.settings)
    sample = sample_file(plan, manifest) if manifest is not None and not structure else None
    schema = manifest.sample_schema if manifest is not None else None
    if sample is not None and schema is not None and sample[0] == f"s3://{manifest.bucket}/{schema[0]}":
        return render_describe_schema(schema[1], plan.format, name=sample[0], settings=settings)
    return render_describe(plan, credentials, url=url, structure=structure, settings=settings)


def _with_sample(manifest: Manifest, ahead: Prefetched | None) -> Manifest:
    """The manifest with the read-ahead's sample of a text load's rows, for the block rule (none: as it is)."""
    if ahead is None or ahead.key_window is None or manifest.key_window is not None:
        return manifest
    return manifest.model_copy(update={"key_window": ahead.key_window})


def _key(statement: RenderedSQL) -> str:
    """What tells one ``DESCRIBE`` from another: its SQL (the credentials in it too) and settings."""
    return f"{statement.sql}\n{sorted(statement.settings.items())!r}"

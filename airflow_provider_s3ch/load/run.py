"""One load run, in the phases a reader can name and find:

``target``   the profile and plan for the target; the table created, evolved and checked (:mod:`.target`)
``prepare``  the staging table made ready (:mod:`.insert`)
``resume``   the earlier tries looked at: wait for one that runs, attach to one that finished
``insert``   within the memory cap, stepping down; or started over HTTP, and the deferral signalled
``complete`` the figures from ``system.query_log``, the staging table brought in, the ledger marks, the
             lineage facts and the typed report (:mod:`.report`)

A synchronous load runs :meth:`LoadRun.run`; a deferred one resumes in :meth:`LoadRun.complete_deferred`,
which enters the very same ``complete``. The run knows no Airflow: it signals a deferral (:class:`DeferLoad`)
or a skip (:class:`NothingNew`) and the operator turns them into Airflow's.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from airflow_provider_s3ch.core.access import with_hint
from airflow_provider_s3ch.core.deferral import DeferredLoad
from airflow_provider_s3ch.core.errors import NothingMatchedError
from airflow_provider_s3ch.core.formats import detect_format
from airflow_provider_s3ch.core.glob import archive_path_syntax, object_url
from airflow_provider_s3ch.core.history import Learned, TagFacts, history_key, learn
from airflow_provider_s3ch.core.history import tag as history_tag
from airflow_provider_s3ch.core.ledger import Chunk
from airflow_provider_s3ch.core.ledger_rows import WHOLE_FILE
from airflow_provider_s3ch.core.lineage import LoadFacts
from airflow_provider_s3ch.core.metrics import combine_chunks, load_metrics
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.plan import peak_estimate
from airflow_provider_s3ch.core.recovery import FilledMark, LoadSteps, QueryId, plan_steps
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.core.server_models import ClusterNode, ServerProfile
from airflow_provider_s3ch.core.setting_types import setting_int
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import render_insert
from airflow_provider_s3ch.core.staging import finalize_statements, mode_text
from airflow_provider_s3ch.core.tables import TableSpec
from airflow_provider_s3ch.errors import (
    BucketError,
    LoadError,
    S3AccessDeniedError,
    S3chError,
    in_place_of,
)
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.hooks.s3_source import S3Source, paused_gc
from airflow_provider_s3ch.hooks.server import partitions, table_columns, table_comment
from airflow_provider_s3ch.load.insert import Inserter, run_steps
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.load.rebuild import StagingRead, before_finalize
from airflow_provider_s3ch.load.report import (
    Loaded,
    LoadReport,
    NothingNew,
    build_report,
    dry_run_report,
    log_plan,
)
from airflow_provider_s3ch.load.resume import EarlierTries
from airflow_provider_s3ch.load.target import Listed, ReadAhead, prepare_target, read_ahead


@dataclass(frozen=True)
class RunOptions:
    """What the run needs beside the request: the connections, the table to create, and how it waits. No
    defaults here: the operator's arguments are the one place that sets them.

    :param defers: the load starts its insert over HTTP and signals a deferral (``deferrable``, no ledger).
    """

    clickhouse_conn_id: str
    aws_conn_id: str | None
    table_spec: TableSpec | None
    defers: bool
    earlier_try_timeout: float
    claim_timeout: float
    learn_from_history: bool


class LoadRun:
    """One load: ``target`` -> ``prepare`` -> ``resume`` -> ``insert`` -> ``complete``.

    :param request: the validated arguments.
    :param options: the run's options.
    :param log: the task's logger.
    """

    def __init__(self, request: LoadRequest, options: RunOptions, log: logging.Logger) -> None:
        self.request, self.options, self.log = request, options, log
        #: The inserts of the run (what ``on_kill`` kills); None before the first.
        self.inserter: Inserter | None = None
        #: What the load's lineage and asset events say (None: a dry run, or nothing loaded).
        self.lineage: LoadFacts | None = None
        self._learned: Learned | None = None
        self._key = ""
        #: The target's columns as the last ``target`` phase read them (None: read again for the lineage).
        self._columns: list[Column] | None = None
        #: Milliseconds spent in each phase of this process's part of the load (the XCom's ``phases_ms``).
        self.phases: dict[str, float] = {}
        #: What was read beside the listing, until the first insert's ``target`` phase takes it.
        self._ahead: ReadAhead | None = None

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        begun = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + (time.monotonic() - begun) * 1000

    def kill(self) -> None:
        """Kill the queries the run waits for or runs now."""
        if self.inserter is not None:
            self.inserter.kill()

    # ------------------------------------------------------------------ a synchronous start
    def run(self, query_id: QueryId, first_try: int) -> LoadReport:
        """The whole load, or up to its deferral (:class:`DeferLoad`).

        :param query_id: this try's query id.
        :param first_try: the first try since the task instance was cleared (earlier ones are not attached to).
        """
        started = time.monotonic()
        request = self.request
        hook = ClickHouseHook(self.options.clickhouse_conn_id)
        # The server is read in a thread (the connection is read: the thread makes no Airflow calls, which are
        # not thread-safe on every Airflow version) while this one builds the S3 side: the aws connection and
        # its session (the secrets masker told), botocore's client, the region and the listing; the thread reads
        # the profile, then the earlier loads and the sample file's DESCRIBE beside the footer reads (S3's
        # errors still come first).
        listed: queue.Queue[Listed | None] = queue.Queue(maxsize=1)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3ch-profile")
        early_read = pool.submit(self._read_ahead, hook, listed.get, self._early_key(hook))
        pool.shutdown(wait=False)
        ledger = None
        loads: list[Loaded] = []
        try:
            try:
                with self._phase("s3"), paused_gc():
                    source = S3Source(self.options.aws_conn_id)
                    self.inserter = Inserter(hook, source.credentials(), self.log)
                    manifest = build_manifest(source.client(), request, on_listed=lambda listing: listed.put_nowait(
                        self._listed(hook, source, listing)))
            except NothingMatchedError as exc:
                if request.skip_when_empty and not request.dry_run:
                    raise NothingNew(f"{exc.args[0].split(';')[0]}: skipped (skip_when_empty=True)") from exc
                raise
            finally:
                with contextlib.suppress(queue.Full):  # the listing failed: the thread ends after the profile
                    listed.put_nowait(None)
            with self._phase("target"):
                early = early_read.result()
            if isinstance(early, BaseException):
                raise early
            self._ahead = early
            self.log.info("Manifest: %d files, %s, format %s, compression %s, bucket region %s",
                          manifest.file_count, fmt_bytes(manifest.total_bytes), manifest.format,
                          manifest.compression, manifest.region)
            self._key = self._history_key(hook, manifest.format)
            if self._learns:
                with self._phase("target"):
                    past = early.past if early.past is not None else self.inserter.queries.past_loads(self._key)
                    self._learned = learn(past, footers=bool(manifest.uncompressed_bytes))
            url = self._url(hook, source, manifest)
            if not request.skip_loaded:
                one = self._one(hook, source, manifest, url, query_id, first_try, started=started)
                if isinstance(one, LoadReport):
                    return one
                return self._complete(hook, [one], clock=_ms_since(started), columns=self._columns,
                                      objects=manifest.objects)
            # the ledger: the files no load recorded, claimed for this one, in chunks (docs/ledger.md)
            ledger = LedgerRun(hook, request, query_id, claim_timeout=self.options.claim_timeout, log=self.log)
            with self._phase("ledger"):
                chunks = ledger.prepare(manifest, url)
            if not chunks:
                return ledger.nothing_new(int((time.monotonic() - started) * 1000))
            for chunk in chunks:  # each chunk its own insert and staging table, committed in order
                with self._phase("ledger"):
                    begun = ledger.begin(chunk)
                if begun is None:
                    continue
                chunk, part, part_url = begun
                if chunk.number != WHOLE_FILE:
                    self.log.info("Chunk%s", chunk.describe().removeprefix("chunk"))
                one = self._one(hook, source, part, part_url, ledger.query_id_of(chunk), first_try, ledger=ledger,
                                chunk=chunk, started=started)
                if isinstance(one, LoadReport):  # a dry run: the first chunk's plan
                    return one.model_copy(update={"ledger": ledger.summary(), "chunks": [
                        c.describe() for c in chunks if c.number != WHOLE_FILE]})
                loads.append(one)
            if not loads:  # every file was taken by another load while this one renewed its claims
                return ledger.nothing_new(int((time.monotonic() - started) * 1000))
            return self._complete(hook, loads, clock=_ms_since(started), columns=self._columns,
                                  objects=[o for one in loads for o in one.files or []],
                                  ledger=ledger.summary(), chunked=bool(ledger.selection.chunks))
        except BaseException as exc:
            if ledger is not None:  # give the claims back when nothing of the load can still land
                ledger.abandon()
            # S3 refused the server's read: say what its credentials lack (not for the worker's own S3 calls)
            hinted = None if _workers_refusal(exc) else with_hint(exc, request.access, request.bucket)
            if hinted is not None:
                raise in_place_of(hinted, exc)  # noqa: B904 - the same error, said once, with exc's own cause
            raise
        finally:
            wait([early_read])  # the profile read ends before its client is closed
            hook.close()

    def _one(
        self, hook: ClickHouseHook, source: S3Source, manifest: Manifest, url: str, query_id: QueryId,
        first_try: int, *, ledger: LedgerRun | None = None, chunk: Chunk | None = None, started: float,
    ) -> Loaded | LoadReport:
        """One insert, the load's or one chunk's, through every phase; a dry run's report for a dry run."""
        request, inserter = self.request, self.inserter
        assert inserter is not None
        # target
        with self._phase("target"):
            ahead, self._ahead = self._ahead, None  # what was read beside the listing, for the first insert
            facts = prepare_target(hook, source.credentials(), request, manifest, url, spec=self.options.table_spec,
                                   learned=self._learned, log=self.log, profile=ahead.profile if ahead else None,
                                   described=ahead.described if ahead else None)
            self._columns = facts.columns
            profile = facts.profile
            plan = self._tagged(facts.plan, manifest, profile, "plan")
            steps = plan_steps(request.mode, profile.table, query_id.stem)
            if ledger is not None:  # only a load through a staging table
                ledger.check(steps, plan)
            rendered = render_insert(plan, source.credentials(), target=steps.staging)
        log_plan(self.log, plan, steps, rendered.redacted, profile)
        if request.dry_run:
            return dry_run_report(str(query_id), rendered.redacted, plan, steps, facts.changes,
                                  ledger.summary() if ledger is not None else None)
        distributed = plan.strategy == "distributed"
        fan_out = profile.nodes if distributed or profile.table.is_distributed else []
        # resume
        with self._phase("resume"):
            resume, mark = EarlierTries(inserter, hook, self.log, timeout=self.options.earlier_try_timeout,
                                        defers=self.options.defers).resume(query_id, first_try, fan_out, steps)
            if ledger is not None and chunk is not None:  # the ledger knows which earlier insert still counts
                decided = ledger.resume(resume, chunk)
                mark = mark if decided.action == resume.action else None
                resume = decided
        attached_to = resume.query_ids[0] if resume.action == "attach" else None
        attempts: list[dict[str, Any]] = []
        # prepare + insert
        with self._phase("insert"):
            if attached_to is None and self.options.defers:
                inserter.start_deferred(rendered, query_id, steps, profile.nodes if distributed else [], fan_out, {
                    "objects": manifest.objects, "resume_reason": resume.reason, "plan": plan,
                    "table": profile.table, "distributed": distributed, "table_changes": facts.changes,
                    "bucket": request.bucket, "started_at": time.time() - (time.monotonic() - started),
                    "phases_ms": {name: int(ms) for name, ms in self.phases.items()}})
            elif attached_to is None:
                plan, rendered, attempts = inserter.within_cap(
                    plan, rendered, query_id, profile.nodes if distributed else [], steps, request, profile.cores,
                    tag=lambda p, name: self._tagged(p, manifest, profile, name))
        # complete (this insert)
        with self._phase("complete"):
            return self._complete_insert(
                hook, Loaded(plan=plan, target=profile.table, steps=steps, table=facts.changes,
                             resume_reason=resume.reason, attached_to=attached_to,
                             sql=rendered.redacted, files=list(manifest.objects),
                             chunk=chunk.number if chunk is not None else WHOLE_FILE, memory_attempts=attempts),
                query_id=attached_to or str(query_id), fan_out=fan_out, distributed=distributed,
                inserted_now=attached_to is None, ledger=ledger, chunk=chunk, source=source,
                metrics=LoadMetrics.model_validate(mark.figures) if mark is not None else None)

    def _read_ahead(self, hook: ClickHouseHook, listed: Callable[[], Listed | None],
                    early_key: str | None) -> ReadAhead | Exception:
        """:func:`~airflow_provider_s3ch.load.target.read_ahead`, or its error, to raise once the listing's errors
        had their turn."""
        try:
            return read_ahead(hook, self.request, self.options.table_spec, listed, early_key=early_key)
        except Exception as exc:  # noqa: BLE001 - raised after the listing's own errors
            return exc

    def _listed(self, hook: ClickHouseHook, source: S3Source, manifest: Manifest) -> Listed:
        """What the read-ahead needs of the listing (worked out here: the thread makes no Airflow calls)."""
        return (manifest, self._url(hook, source, manifest), source.credentials(),
                self._history_key(hook, manifest.format) if self._learns else None)

    @property
    def _learns(self) -> bool:
        """The plan learns from earlier loads (unless the user tags the inserts with a ``log_comment``)."""
        return self.options.learn_from_history and "log_comment" not in self.request.settings

    def _history_key(self, hook: ClickHouseHook, fmt: str) -> str:
        request = self.request
        return history_key(f"{request.table.database or hook.database}.{request.table.name}", request.bucket,
                           request.key_pattern, request.format or fmt)

    def _early_key(self, hook: ClickHouseHook) -> str | None:
        """The history key before the listing, where the format is given or the glob's extension names it (the
        listing's own key decides: a different one is read again); None when the run does not learn."""
        fmt = self.request.format or detect_format(self.request.key_pattern)
        return self._history_key(hook, fmt) if self._learns and fmt is not None else None

    def _url(self, hook: ClickHouseHook, source: S3Source, manifest: Manifest) -> str:
        """The glob's URL as the server reads it."""
        return object_url(self.request.bucket, self.request.key_pattern,
                          endpoint_url=hook.s3_endpoint_url or source.endpoint_url, region=manifest.region,
                          archive_syntax=archive_path_syntax(self.request.settings))

    # ------------------------------------------------------------------ a deferred load resumes
    def complete_deferred(self, event: dict[str, Any]) -> LoadReport:
        """Finish a deferred load from what its trigger saw: the same ``complete`` as a synchronous load's;
        the load's error when it failed (its staging table dropped unless its query still runs)."""
        from airflow_provider_s3ch import errors

        status, message = event.get("status"), str(event.get("message") or f"the trigger fired {event!r}")
        if status == "timeout":
            raise LoadError(message)
        if status == "error" or not event.get("load"):
            cls = getattr(errors, str(event.get("error") or ""), None)
            raise (cls if isinstance(cls, type) and issubclass(cls, S3chError) else LoadError)(message)
        load = DeferredLoad.model_validate(event["load"])
        hook = ClickHouseHook(self.options.clickhouse_conn_id)
        self.inserter = Inserter(hook, None, self.log)
        try:
            if status != "finished":
                if status != "failed":
                    raise LoadError(message)
                error = hook.server_error(int(event.get("error_code") or 0), message)
                self.inserter.abandon_if_idle(load.steps, load.query_id, load.insert_nodes)
                raise with_hint(error, self.request.access, self.request.bucket) or error
            self.log.info("%s", message)
            self.phases.update(load.phases_ms)
            with self._phase("complete"):
                one = self._complete_insert(
                    hook, Loaded(plan=load.plan, target=load.table, steps=load.steps, table=load.table_changes,
                                 resume_reason=load.resume_reason, attached_to=None,
                                 sql=load.sql, files=load.objects),
                    query_id=load.query_id, fan_out=load.fan_out, distributed=load.distributed, inserted_now=False)
            return self._complete(hook, [one], clock=lambda: int((time.time() - load.started_at) * 1000),
                                  columns=None, objects=load.objects, rest="deferred")
        finally:
            hook.close()

    # ------------------------------------------------------------------ complete
    def _complete_insert(
        self, hook: ClickHouseHook, one: Loaded, *, query_id: str, fan_out: Sequence[ClusterNode], distributed: bool,
        inserted_now: bool, ledger: LedgerRun | None = None, chunk: Chunk | None = None,
        metrics: LoadMetrics | None = None, source: S3Source | None = None,
    ) -> Loaded:
        """One insert's end: its figures from ``system.query_log`` (or, given, from the staging table's mark),
        the staging table brought into the target (the ledger marks around it)."""
        assert self.inserter is not None
        if metrics is None:
            queries = self.inserter.queries
            entry = queries.entry(query_id, fan_out)
            metrics = load_metrics(entry, queries.secondary_queries(entry.query_id, fan_out) if fan_out else [],
                                   distributed=distributed, target_distributed=one.target.is_distributed)
        known: StagingRead | None = None
        if ledger is not None and chunk is not None:  # pending first (replace_partitions: rebuilt, docs/ledger.md)
            assert source is not None
            known = before_finalize(hook, ledger, chunk, metrics, one.steps, one.plan, query_id=ledger.query_id_of(
                chunk), inserted_now=inserted_now, source=source, credentials=source.credentials(), log=self.log)
        moved = (self._finalize(hook, one.steps, inserted_now=inserted_now, known=known, mark=FilledMark(
            stem=one.steps.stem, query_id=query_id, figures=metrics.model_dump(mode="json")))
            if one.steps.stem is not None else [])
        if ledger is not None and chunk is not None and known is not None:  # the partitions are in the target
            ledger.loaded(metrics, chunk, [pid for pid, _ in known.partitions])
        return one.done(metrics, moved, rebuilt=known.rebuilt if known is not None else None)

    def _finalize(self, hook: ClickHouseHook, steps: LoadSteps, *, inserted_now: bool, mark: FilledMark,
                  known: StagingRead | None = None) -> list[str]:
        """Bring the staging table's rows into the target, marked filled first; idempotent, so a retry can
        resume it.

        :param inserted_now: this try's own insert just filled the staging table: it exists, and moving or
            replacing partitions needs no comment (one round trip less each; ``overwrite`` reads them).
        :param known: the staging table's comment and partitions, and the rebuild table, as the ledger read them.
        """
        staging = steps.staging
        assert staging is not None
        comment = known.comment if known else "" if inserted_now and steps.finalize != "exchange" else table_comment(
            hook, staging)
        target_comment = None if steps.finalize != "exchange" else table_comment(hook, steps.target)
        finalize = finalize_statements(
            steps,
            staging_comment=comment,
            target_comment=target_comment,
            staging_partitions=known.partitions if known else partitions(hook, staging) if comment is not None else [],
            target_partitions=partitions(hook, steps.target) if steps.finalize == "exchange" else [],
            mark=mark, rebuild=known.rebuild if known else None,
        )
        run_steps(hook, finalize.steps, self.log)
        if finalize.done_before:
            self.log.info("Staging table %s is gone: an earlier try finished this load", staging)
        return finalize.partitions

    def _complete(
        self, hook: ClickHouseHook, loads: list[Loaded], *, clock: Callable[[], int], columns: list[Column] | None,
        objects: list[S3Object] | None, ledger: dict[str, Any] | None = None, chunked: bool = False,
        rest: str = "other",
    ) -> LoadReport:
        """The load's end, whatever its kind: the lineage facts, the report and its log lines.

        :param clock: the milliseconds since the try started (``wall_ms``).
        :param rest: what the time outside the measured phases is: ``other`` (clients, logging), or for a
            deferred load ``deferred`` (the triggerer followed the insert).
        """
        metrics = combine_chunks([one.metrics for one in loads if one.metrics is not None])
        moved = sorted({p for one in loads for p in one.partitions})
        with self._phase("lineage"):
            self._keep_lineage(hook, loads, metrics, moved, columns, objects)
        wall_ms = clock()
        phases = {name: int(ms) for name, ms in self.phases.items()}
        phases[rest] = max(0, wall_ms - sum(phases.values()))
        report = build_report(loads, metrics, moved, wall_ms=wall_ms, ledger=ledger, chunked=chunked,
                              phases_ms=phases)
        attached, steps = report.attached_to, loads[-1].steps
        self.log.info("%s %d rows (%s) in %d ms%s%s: %.0f rows/s, peak memory %s; %s",
                      f"Took the figures of earlier try {attached}:" if isinstance(attached, str) else "Loaded",
                      metrics.written_rows, fmt_bytes(metrics.written_bytes), metrics.duration_ms,
                      f" over {len(loads)} chunks" if len(loads) > 1 else "",
                      f" (waited {metrics.admission_wait_ms} ms for admission, ran {metrics.run_ms} ms)"
                      if metrics.admission_wait_ms else "", metrics.rows_per_second,
                      fmt_bytes(metrics.memory_usage),
                      mode_text(steps.mode, moved))
        self.log.info("Time: %d ms in all: %s", wall_ms, ", ".join(f"{name} {ms} ms" for name, ms in phases.items()))
        return report

    def _keep_lineage(self, hook: ClickHouseHook, loads: list[Loaded], metrics: LoadMetrics, moved: list[str],
                      columns: list[Column] | None, objects: list[S3Object] | None) -> None:
        """What the load's lineage and asset events say (names, the table's columns, the figures; no
        credentials): the files as listed (again, when a deferred load had too many to carry)."""
        last = loads[-1]
        try:
            if objects is None:
                objects = build_manifest(S3Source(self.options.aws_conn_id).client(), self.request).objects
            columns = columns if columns is not None else table_columns(hook, last.target)
        except Exception as exc:  # noqa: BLE001 - lineage is best effort; the load stands
            self.log.warning("Lineage: could not read the files or the columns of %s.%s: %s", last.target.database,
                             last.target.name, exc)
            if objects is None:
                return
            columns = []
        self.lineage = LoadFacts(
            bucket=self.request.bucket, objects=objects, host=hook.host, port=hook.port,
            database=last.target.database, table=last.target.name, columns=columns, query_id=metrics.query_id,
            written_rows=metrics.written_rows, written_bytes=metrics.written_bytes, read_rows=metrics.read_rows,
            read_bytes=metrics.read_bytes, mode=last.steps.mode, created=bool(loads[0].table.get("created")),
            partitions=moved, attached_to=last.attached_to, sql=last.sql,
        )

    # ------------------------------------------------------------------ the plan's tag and log
    def _tagged(self, plan: LoadPlan, manifest: Manifest, profile: ServerProfile, step: str) -> LoadPlan:
        """``plan`` with its predicted peak memory for its settings now and, unless the user set one or
        ``learn_from_history`` is off, the ``log_comment`` tag later loads learn from."""
        estimate = peak_estimate(plan, manifest, profile)
        plan = plan.model_copy(update={"predicted_peak_bytes": estimate.bytes,
                                       "predicted_peak_reason": estimate.reason})
        if not self.options.learn_from_history or "log_comment" in plan.settings.overrides:
            return plan
        facts = TagFacts(file_bytes=manifest.total_bytes, model_bytes=estimate.model_bytes,
                         cap=setting_int(plan.settings.values.get("max_memory_usage"), 0), step=step)
        values = {**plan.settings.values, "log_comment": history_tag(self._key, facts)}
        reasons = {**plan.settings.reasons, "log_comment": "tags the insert for later loads of this target and "
                   "files to learn from (learn_from_history, docs/tuning.md)"}
        return plan.model_copy(update={"settings": plan.settings.model_copy(update={"values": values,
                                                                                    "reasons": reasons})})


def _workers_refusal(exc: BaseException) -> bool:
    """Whether S3 refused the worker's own call (the listing, a HeadObject): the AWS connection's business."""
    return isinstance(exc, BucketError) and not isinstance(exc, S3AccessDeniedError)


def _ms_since(started: float) -> Callable[[], int]:
    """A clock of the milliseconds since ``started`` (``time.monotonic()``)."""
    return lambda: int((time.monotonic() - started) * 1000)

"""One load run, in the phases a reader can name and find:

``s3``       the files listed, while the server is read beside it (:class:`~.target.ReadAhead`)
``target``   the profile and plan for the target; the table created, evolved and checked (:mod:`.target`)
``ledger``   with ``skip_loaded``: the files no load recorded, claimed, in chunks (:mod:`.ledger`)
``resume``   the earlier tries looked at: wait for one that runs, attach to one that finished (:mod:`.resume`)
``insert``   the staging table made ready; the insert within the memory cap, stepping down; or started over
             HTTP, and the deferral signalled (:mod:`.insert`)
``complete`` the figures from ``system.query_log``, the staging table brought in, the ledger marks, the
             lineage facts and the typed report (:mod:`.complete`, :mod:`.report`)

A synchronous load runs :meth:`LoadRun.run`; a deferred one resumes in :meth:`LoadRun.complete_deferred`,
which enters the very same ``complete``. The run knows no Airflow: it signals a deferral (:class:`DeferLoad`)
or a skip (:class:`NothingNew`) and the operator turns them into Airflow's. What it talks to is given to it
(:class:`~.parts.RunParts`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from airflow_provider_s3ch.core.access import with_hint
from airflow_provider_s3ch.core.deferral import DeferredLoad
from airflow_provider_s3ch.core.errors import NothingMatchedError
from airflow_provider_s3ch.core.formats import detect_format
from airflow_provider_s3ch.core.history import Learned, learn
from airflow_provider_s3ch.core.ledger import Chunk
from airflow_provider_s3ch.core.ledger_rows import WHOLE_FILE
from airflow_provider_s3ch.core.lineage import LoadFacts
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, LoadRequest, Manifest
from airflow_provider_s3ch.core.plan import with_prediction
from airflow_provider_s3ch.core.recovery import QueryId, plan_steps
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.core.server_models import ServerProfile
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import render_insert
from airflow_provider_s3ch.errors import (
    BucketError,
    ClickHouseQueryError,
    LoadError,
    S3AccessDeniedError,
    S3chError,
    in_place_of,
)
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3_events import look_objects
from airflow_provider_s3ch.hooks.s3_source import S3Source, paused_gc
from airflow_provider_s3ch.load import shards
from airflow_provider_s3ch.load.complete import Inserted, LedgerChunk, lineage_facts, load_report
from airflow_provider_s3ch.load.freshness import Watch
from airflow_provider_s3ch.load.insert import Inserter, PlannedInsert
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.load.parts import RunOptions, RunParts
from airflow_provider_s3ch.load.report import Loaded, LoadEnd, LoadReport, NothingNew, dry_run_report, log_plan
from airflow_provider_s3ch.load.resume import EarlierTries
from airflow_provider_s3ch.load.target import Listed, Prefetched, ReadAhead, Target, TargetFacts


class Try(NamedTuple):
    """This try of the load, once its files are listed: its connections, its query id, the first try since
    the task instance was cleared (earlier ones are not attached to), when it started (``time.monotonic()``),
    its listing."""

    hook: ClickHouseHook
    source: S3Source
    query_id: QueryId
    first_try: int
    started: float
    listed: Listed


class Planned(NamedTuple):
    """One insert as the target phase planned it: the target's facts, the insert, its files and its chunk."""

    facts: TargetFacts
    insert: PlannedInsert
    manifest: Manifest
    chunk: Chunk | None


class LoadRun:
    """One load: ``s3`` -> ``target`` -> (``ledger``) -> ``resume`` -> ``insert`` -> ``complete``.

    :param request: the validated arguments.
    :param options: the run's options.
    :param log: the task's logger.
    :param parts: what it talks to (:meth:`RunParts.connections` of the operator's connections).
    """

    def __init__(self, request: LoadRequest, options: RunOptions, log: logging.Logger, parts: RunParts) -> None:
        self.request, self.options, self.log, self.parts = request, options, log, parts
        #: The inserts of the run (what ``on_kill`` kills); None before the first.
        self.inserter: Inserter | None = None
        #: What the load's lineage and asset events say (None: a dry run, or nothing loaded).
        self.lineage: LoadFacts | None = None
        #: Milliseconds spent in each phase of this process's part of the load (the XCom's ``phases_ms``).
        self.phases: dict[str, float] = {}
        self._learned: Learned | None = None
        self._key = ""
        #: The target's columns as the last ``target`` phase read them (None: read again for the lineage), and
        #: what was read beside the listing, until the first insert's ``target`` phase takes it.
        self._columns: list[Column] | None = None
        self._ahead: Prefetched | None = None

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
        started, hook = time.monotonic(), self.parts.clickhouse()
        target = self.parts.target(hook, self.request, self.options.table_spec, self.log)
        try:
            with ReadAhead(target, early_key=self._early_key(target)) as ahead:
                this = self._list(target, ahead, query_id, first_try, started)
                if not self.request.skip_loaded:
                    return self._whole(this, target)
                return self._with_ledger(this, target)
        except BaseException as exc:
            # S3 refused the server's read: say what its credentials lack (not for the worker's own S3 calls)
            hinted = None if _workers_refusal(exc) else with_hint(exc, self.request.access, self.request.bucket)
            if hinted is not None:
                raise in_place_of(hinted, exc)  # noqa: B904 - the same error, said once, with exc's own cause
            raise
        finally:
            hook.close()

    def _list(self, target: Target, ahead: ReadAhead, query_id: QueryId, first_try: int, started: float) -> Try:
        """The ``s3`` phase: the S3 side built and the files listed, while ``ahead`` reads the server; then
        what the earlier loads teach the plan."""
        request, hook = self.request, target.hook
        try:
            with self._phase("s3"), paused_gc():
                source = self.parts.s3()
                self.inserter = self.parts.inserter(hook, source.credentials(), self.log)
                manifest = self.parts.listing(client := source.client(), request, on_listed=lambda listing: ahead.hand(
                    self._listed(target, source, listing, client)))
        except NothingMatchedError as exc:
            if request.skip_when_empty and not request.dry_run:
                raise NothingNew(f"{exc.args[0].split(';')[0]}: skipped (skip_when_empty=True)") from exc
            raise
        finally:
            ahead.hand(None)  # the listing failed: the thread ends after the profile
        with self._phase("target"):
            self._ahead = ahead.result()
        self.log.info("Manifest: %d files, %s, format %s, compression %s, bucket region %s",
                      manifest.file_count, fmt_bytes(manifest.total_bytes), manifest.format,
                      manifest.compression, manifest.region)
        self._key = target.history_key(manifest.format)
        if self._learns:
            with self._phase("target"):
                past = self._ahead.past
                past = past if past is not None else self.inserter.queries.past_loads(self._key)
                self._learned = learn(past, footers=bool(manifest.uncompressed_bytes))
        return Try(hook, source, query_id, first_try, started, Listed(
            manifest, target.source_url(source.endpoint_url, manifest.region), source.credentials(), None))

    def _whole(self, this: Try, target: Target) -> LoadReport:
        """A load of every listed file in one insert."""
        planned = self._plan(this, target, this.listed, this.query_id)
        if self.request.dry_run:
            return self._dry_run(planned)
        one = self._insert(this, planned)
        return self._complete(this.hook, [one], LoadEnd(columns=self._columns, objects=this.listed.manifest.objects),
                              clock=_ms_since(this.started))

    def _with_ledger(self, this: Try, target: Target) -> LoadReport:
        """A ledger load: the files no load recorded, claimed for this one, in chunks, each its own insert and
        staging table, committed in order (docs/ledger.md); the claims given back when nothing of the load can
        still land."""
        hook, nodes = this.hook, []
        profile = self._ahead.profile if self._ahead is not None else None
        layout = plan_steps(self.request.mode, profile.table, this.query_id.stem, nodes=profile.nodes,
                            cluster=profile.cluster).shards if profile is not None else None
        if layout is not None:  # a Distributed target staged on every shard: the ledger on the first shard's node
            hook, nodes = shards.ledger_nodes(hook, layout, self.request.table.in_database(hook.database).database)
        ledger = self.parts.ledger(hook, self.request, this.query_id, claim_timeout=self.options.claim_timeout,
                                   heartbeat=self.options.claim_heartbeat, log=self.log)
        ledger.nodes = nodes
        bucket = self.request.bucket
        listed = self.parts.queue is None  # a run from events may not list the bucket: it looks files up one by one
        ledger.look = lambda keys: look_objects(this.source.client(), bucket, keys, may_list=listed)
        try:
            return self._chunks(this, target, ledger)
        except BaseException:
            ledger.abandon()
            raise
        finally:
            ledger.beat.stop()

    def _chunks(self, this: Try, target: Target, ledger: LedgerRun) -> LoadReport:
        with self._phase("ledger"):
            chunks = ledger.prepare(this.listed.manifest, this.listed.url)
        watch = Watch(ledger, self.parts.queue, self.log) if not self.request.dry_run else None
        loads: list[Loaded] = []
        for chunk in chunks:
            planned = self._begin(this, target, ledger, chunk)
            if planned is None:  # every file of it was taken by another load while this one renewed its claims
                continue
            if self.request.dry_run:  # the first chunk's plan
                return self._dry_run(planned, ledger).model_copy(update={"chunks": [
                    c.describe() for c in chunks if c.number != WHOLE_FILE]})
            one = self._chunk_insert(this, target, ledger, planned)
            if one is not None:  # None: every file of it was set aside
                loads.append(one)
        fresh = watch.end(this.hook, loads) if watch is not None else None
        if not loads:
            return ledger.nothing_new(_ms_since(this.started)(), fresh)
        return self._complete(this.hook, loads, LoadEnd(columns=self._columns, objects=[
            o for one in loads for o in one.files or []], ledger=ledger.summary(),
            chunked=bool(ledger.selection.chunks), freshness=fresh), clock=_ms_since(this.started))

    def _begin(self, this: Try, target: Target, ledger: LedgerRun, chunk: Chunk) -> Planned | None:
        """A chunk begun (its claims renewed when due) and planned; again while the heartbeat lapsed meanwhile."""
        while True:
            with self._phase("ledger"):
                begun = ledger.begin(chunk)
            if begun is None:
                return None
            if begun.chunk.number != WHOLE_FILE:
                self.log.info("Chunk%s", begun.chunk.describe().removeprefix("chunk"))
            planned = self._plan(this, target, this.listed._replace(manifest=begun.manifest, url=begun.url),
                                 ledger.query_id_of(begun.chunk), ledger=ledger, chunk=begun.chunk)
            if ledger.beat.fresh():
                return planned

    def _chunk_insert(self, this: Try, target: Target, ledger: LedgerRun, planned: Planned) -> Loaded | None:
        """A chunk's insert; under ``on_bad_file='set_aside'``, again without each file the server could not read
        (set aside in the ledger, :mod:`.set_aside`); None when none of its files is left."""
        while True:
            assert planned.chunk is not None
            try:
                return self._insert(this, planned, LedgerChunk(ledger, planned.chunk, this.source))
            except ClickHouseQueryError as exc:
                rest = ledger.set_aside_bad(planned.chunk, exc, str(ledger.query_id_of(planned.chunk)))
                if rest is None:
                    raise
            again = self._begin(this, target, ledger, rest) if rest.files else None
            if again is None:
                return None
            planned = again

    # ------------------------------------------------------------------ one insert
    def _plan(self, this: Try, target: Target, listed: Listed, query_id: QueryId, *, ledger: LedgerRun | None = None,
              chunk: Chunk | None = None) -> Planned:
        """The ``target`` phase of one insert: the target made ready, the plan, the mode's steps, the statement."""
        with self._phase("target"):
            ahead, self._ahead = self._ahead, None  # what was read beside the listing, for the first insert
            facts = target.prepare(listed, self._learned, ahead)
            self._columns = facts.columns
            plan = self._tag(facts.plan, listed.manifest, facts.profile, "plan")
            steps = plan_steps(self.request.mode, facts.profile.table, query_id.stem, nodes=facts.profile.nodes,
                               cluster=facts.profile.cluster, compact_parts=self.request.compact_parts)
            if ledger is not None:  # only a load through a staging table
                ledger.check(steps, plan)
            rendered = render_insert(plan, listed.credentials, target=steps.staging)
        log_plan(self.log, plan, steps, rendered.redacted, facts.profile)
        return Planned(facts, PlannedInsert(plan, rendered, steps, query_id), listed.manifest, chunk)

    def _dry_run(self, planned: Planned, ledger: LedgerRun | None = None) -> LoadReport:
        plan, rendered, steps, query_id = planned.insert
        return dry_run_report(str(query_id), rendered.redacted, plan, steps, planned.facts.changes,
                              ledger.summary() if ledger is not None else None)

    def _insert(self, this: Try, planned: Planned, ledger: LedgerChunk | None = None) -> Loaded:
        """One insert, the load's or one chunk's: ``resume``, ``insert`` (or its deferral), ``complete``."""
        request, inserter, profile = self.request, self.inserter, planned.facts.profile
        assert inserter is not None
        plan, rendered, steps, query_id = planned.insert
        distributed = plan.strategy == "distributed"
        fan_out, insert_nodes = profile.nodes if distributed or profile.table.is_distributed else [], (
            profile.nodes if distributed else [])
        with self._phase("resume"):
            resume, mark = EarlierTries(inserter, this.hook, self.log, timeout=self.options.earlier_try_timeout,
                                        defers=self.options.defers).resume(query_id, this.first_try, fan_out, steps)
            if ledger is not None:  # the ledger knows which earlier insert still counts
                decided = ledger.ledger.resume(resume, ledger.chunk)
                mark = mark if decided.action == resume.action else None
                resume = decided
        attached_to = resume.query_ids[0] if resume.action == "attach" else None
        attempts: list[dict[str, Any]] = []
        with self._phase("insert"):
            if attached_to is None and self.options.defers:
                inserter.start_deferred(rendered, query_id, DeferredLoad.carry(
                    objects=planned.manifest.objects, sql=rendered.redacted, query_id=str(query_id), steps=steps,
                    insert_nodes=list(insert_nodes), fan_out=list(fan_out), resume_reason=resume.reason, plan=plan,
                    table=profile.table, distributed=distributed, table_changes=planned.facts.changes,
                    bucket=request.bucket, started_at=time.time() - (time.monotonic() - this.started),
                    phases_ms={name: int(ms) for name, ms in self.phases.items()}))
            elif attached_to is None:
                plan, rendered, attempts = inserter.within_cap(
                    planned.insert, insert_nodes, cores=profile.cores, user=request.settings,
                    tag=lambda p, name: self._tag(p, planned.manifest, profile, name))
        with self._phase("complete"):
            return self.parts.completion(this.hook, inserter.queries, self.log).insert(
                Loaded(plan=plan, target=profile.table, steps=steps, table_changes=planned.facts.changes,
                       resume_reason=resume.reason, attached_to=attached_to, sql=rendered.redacted,
                       files=list(planned.manifest.objects),
                       chunk=planned.chunk.number if planned.chunk is not None else WHOLE_FILE,
                       memory_attempts=attempts),
                Inserted(attached_to or str(query_id), fan_out, distributed, inserted_now=attached_to is None),
                ledger=ledger, metrics=LoadMetrics.model_validate(mark.figures) if mark is not None else None)

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
        hook = self.parts.clickhouse()
        self.inserter = self.parts.inserter(hook, None, self.log)
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
                one = self.parts.completion(hook, self.inserter.queries, self.log).insert(
                    Loaded(plan=load.plan, target=load.table, steps=load.steps, table_changes=load.table_changes,
                           resume_reason=load.resume_reason, attached_to=None, sql=load.sql, files=load.objects),
                    Inserted(load.query_id, load.fan_out, load.distributed, inserted_now=False))
            return self._complete(hook, [one], LoadEnd(columns=None, objects=load.objects, rest="deferred"),
                                  clock=lambda: int((time.time() - load.started_at) * 1000))
        finally:
            hook.close()

    # ------------------------------------------------------------------ the load's end
    def _complete(self, hook: ClickHouseHook, loads: list[Loaded], end: LoadEnd, *,
                  clock: Callable[[], int]) -> LoadReport:
        """The load's end, whatever its kind: the lineage facts, the report and its log lines.

        :param clock: the milliseconds since the try started (``wall_ms``).
        """
        with self._phase("lineage"):
            self.lineage = lineage_facts(hook, self.request, loads, end, self._relist, self.log)
        return load_report(loads, end, wall_ms=clock(), phases_ms=self.phases, log=self.log)

    # ------------------------------------------------------------------ what the phases share
    def _relist(self) -> Manifest:
        return self.parts.listing(self.parts.s3().client(), self.request)

    def _listed(self, target: Target, source: S3Source, manifest: Manifest, client: Any) -> Listed:
        """What the read-ahead needs of the listing (worked out here: the thread makes no Airflow calls)."""
        return Listed(manifest, target.source_url(source.endpoint_url, manifest.region), source.credentials(),
                      target.history_key(manifest.format) if self._learns else None, client)

    @property
    def _learns(self) -> bool:
        """The plan learns from earlier loads (unless the user tags the inserts with a ``log_comment``)."""
        return self.options.learn_from_history and "log_comment" not in self.request.settings

    def _early_key(self, target: Target) -> str | None:
        """The history key before the listing, where the format is given or the glob's extension names it (the
        listing's own key decides: a different one is read again); None when the run does not learn."""
        fmt = self.request.format or detect_format(self.request.key_pattern)
        return target.history_key(fmt) if self._learns and fmt is not None else None

    def _tag(self, plan: LoadPlan, manifest: Manifest, profile: ServerProfile, step: str) -> LoadPlan:
        """``plan`` with its predicted peak and (``learn_from_history``) the history's ``log_comment`` tag."""
        return with_prediction(plan, manifest, profile, step=step,
                               tag=self._key if self.options.learn_from_history else None)


def _workers_refusal(exc: BaseException) -> bool:
    """Whether S3 refused the worker's own call (the listing, a HeadObject): the AWS connection's business."""
    return isinstance(exc, BucketError) and not isinstance(exc, S3AccessDeniedError)


def _ms_since(started: float) -> Callable[[], int]:
    """A clock of the milliseconds since ``started`` (``time.monotonic()``)."""
    return lambda: int((time.monotonic() - started) * 1000)

"""The ``complete`` phase: an insert's figures from ``system.query_log`` (or its staging table's mark), the
staging table brought into the target with the ledger's marks around it; then the load's end, whatever its
kind: the lineage facts, the typed report and its log lines (:mod:`.report`).

Which statements finalize a load is :mod:`airflow_provider_s3ch.core.staging`'s; this phase reads the facts
they need and runs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from airflow_provider_s3ch.core.ledger import Chunk
from airflow_provider_s3ch.core.lineage import LoadFacts
from airflow_provider_s3ch.core.marks import FilledMark
from airflow_provider_s3ch.core.metrics import combine_chunks, load_metrics
from airflow_provider_s3ch.core.models import LoadMetrics, LoadRequest, Manifest, TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps, is_marker
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import render_set_comment
from airflow_provider_s3ch.core.staging import (
    Statement,
    finalize_statements,
    leftover_drops,
    mode_text,
    publish_views,
)
from airflow_provider_s3ch.core.view_replay import (
    affected_comment,
    affected_sql,
    copy_rows,
    feed_sql,
    raw_rows,
    read_affected,
    truncate_sql,
    view_rows,
    writers_of,
)
from airflow_provider_s3ch.core.views import copies, drop_views_sql
from airflow_provider_s3ch.errors import LoadError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.query_log import QueryLog
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.hooks.server import partitions, staged_figures, table_columns, table_comment
from airflow_provider_s3ch.load import shards
from airflow_provider_s3ch.load.insert import run_statements
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.load.rebuild import StagingRead, before_finalize
from airflow_provider_s3ch.load.report import Loaded, LoadEnd, LoadReport, build_report
from airflow_provider_s3ch.load.statements import not_moved_yet, views_left


class Inserted(NamedTuple):
    """Where an insert's figures are: its query id, the nodes it wrote on, and how it ran.

    :param inserted_now: this try's own insert just filled the staging table (it exists; moving or replacing
        partitions needs no comment); False when an earlier try's insert is brought in.
    """

    query_id: str
    fan_out: Sequence[ClusterNode]
    distributed: bool
    inserted_now: bool


class LedgerChunk(NamedTuple):
    """A ledger load's chunk: the ledger run, the chunk, and the S3 connection a rebuild reads with."""

    ledger: LedgerRun
    chunk: Chunk
    source: S3Source


class Completion:
    """The ``complete`` phase of one run.

    :param hook: the ClickHouse connection.
    :param queries: the query log the figures are read from.
    :param log: the task's logger.
    """

    def __init__(self, hook: ClickHouseHook, queries: QueryLog, log: logging.Logger) -> None:
        self.hook, self.queries, self.log = hook, queries, log

    def insert(self, one: Loaded, inserted: Inserted, *, ledger: LedgerChunk | None = None,
               metrics: LoadMetrics | None = None) -> Loaded:
        """One insert's end: its figures from ``system.query_log`` (or, given, from the staging table's mark),
        the staging table brought into the target (the ledger's marks around it)."""
        if metrics is None:
            queries, fan_out = self.queries, inserted.fan_out
            try:
                entry = queries.entry(inserted.query_id, fan_out)
            except LoadError:
                if inserted.inserted_now or ledger is None:
                    raise
                metrics = self._unlogged(one, inserted.query_id)
            else:
                metrics = load_metrics(entry, queries.secondary_queries(entry.query_id, fan_out) if fan_out else [],
                                       distributed=inserted.distributed, target_distributed=one.target.is_distributed)
                if one.steps.views and one.steps.staging is not None:
                    metrics = self._without_views(one.steps.staging, metrics)
        known: StagingRead | None = None
        if ledger is not None:  # pending first (replace_partitions: rebuilt, docs/ledger.md)
            known = before_finalize(ledger.ledger, ledger.chunk, metrics, one, inserted_now=inserted.inserted_now,
                                    source=ledger.source)
        moved = (self.finalize(one.steps, inserted_now=inserted.inserted_now, known=known, mark=FilledMark(
            stem=one.steps.stem, query_id=inserted.query_id, figures=metrics.model_dump(mode="json")))
            if one.steps.stem is not None else [])
        published = time.monotonic()  # the rows are visible in the target
        if ledger is not None and known is not None:  # the partitions are in the target
            ledger.ledger.loaded(metrics, ledger.chunk, [pid for pid, _ in known.partitions])
        return one.done(metrics, moved, rebuilt=known.rebuilt if known is not None else None, published=published)

    def _without_views(self, staging: TableRef, metrics: LoadMetrics) -> LoadMetrics:
        """The insert's figures less the rows its views wrote (``system.query_log`` counts those too): the staging
        table's, read before anything moves (an earlier try's staging table that is gone keeps the log's)."""
        rows, size = staged_figures(self.hook, staging)
        return metrics.model_copy(update={"written_rows": rows, "written_bytes": size}) if rows else metrics

    def _unlogged(self, one: Loaded, query_id: str) -> LoadMetrics:
        """The figures of an earlier try's insert that the ledger says finished, that ``system.query_log`` lost (a
        restarted server) and whose staging tables carry no mark yet (none published): their parts' rows."""
        steps, hook = one.steps, self.hook
        tables = ([(steps.shards.local_staging, client) for _, client in hook.node_clients(steps.shards.nodes)]
                  if steps.shards is not None else [(steps.staging, None)])
        figures = [staged_figures(hook, table, client=client) for table, client in tables if table is not None]
        self.log.warning("Insert %s is not in system.query_log any more (a restarted server): its figures are its "
                         "staging tables' rows", query_id)
        return LoadMetrics(query_id=query_id, written_rows=sum(r for r, _ in figures),
                           written_bytes=sum(b for _, b in figures), read_rows=0, read_bytes=0, duration_ms=0,
                           memory_usage=0)

    def finalize(self, steps: LoadSteps, *, inserted_now: bool, mark: FilledMark,
                 known: StagingRead | None = None) -> list[str]:
        """Bring the staging table's rows into the target, marked filled first; idempotent, so a retry can
        resume it.

        :param inserted_now: this try's own insert just filled the staging table: it exists, and moving or
            replacing partitions needs no comment (one round trip less each; ``overwrite`` reads them).
        :param known: the staging table's comment and partitions, and the rebuild table, as the ledger read them.
        """
        hook, staging = self.hook, steps.staging
        assert staging is not None
        if steps.shards is not None:
            return shards.finalize(hook, steps, mark, self.log, inserted_now=inserted_now, read=shards.LedgerRead(
                known.sources, known.standing) if known is not None else None)
        comment = known.comment if known else "" if inserted_now and steps.finalize != "exchange" else table_comment(
            hook, staging)
        target_comment = None if steps.finalize != "exchange" else table_comment(hook, steps.target)
        parts = known.partitions if known else partitions(hook, staging) if comment is not None else []
        swapped = steps.finalize == "exchange" and not is_marker(comment, steps.marker or "")
        if steps.views and comment is not None and not swapped:
            # marked, the twins dropped: nothing more is fed (an overwrite's swap not made yet)
            comment = self._views_ready(steps, comment, mark, [pid for pid, _ in parts], inserted_now=inserted_now)
        if steps.finalize == "move" and not inserted_now:  # a retry: what a move cut short by a crash left
            parts = not_moved_yet(hook, (staging, steps.target), list(parts), self.log)
        finalize = finalize_statements(
            steps,
            staging_comment=comment,
            target_comment=target_comment,
            staging_partitions=parts,
            target_partitions=partitions(hook, steps.target) if steps.finalize == "exchange" else [],
            mark=mark, rebuild=known.rebuild if known else None,
        )
        if steps.views and comment is not None:
            # The views' copies move on a connection of their own while the staging table's partitions move; the
            # staging table is dropped last, once every copy is gone (a retry that finds it resumes the rest).
            with ThreadPoolExecutor(1, thread_name_prefix="s3ch-views") as pool:
                publishing = pool.submit(self._publish_views, steps, inserted_now=inserted_now)
                run_statements(hook, finalize.steps[:-1], self.log)
            publishing.result()
            run_statements(hook, finalize.steps[-1:], self.log)
            if not inserted_now:  # a view dropped since the dead try: its twin and copy are no view's now
                self._drop_leftovers(staging)
        else:
            run_statements(hook, finalize.steps, self.log)
        if finalize.done_before:
            self.log.info("Staging table %s is gone: an earlier try finished this load", staging)
        return finalize.partitions

    def _views_ready(self, steps: LoadSteps, comment: str, mark: FilledMark, replaced: list[str], *,
                     inserted_now: bool) -> str:
        """Before anything moves: under the replace modes, the views recomputed into their copies and the
        partitions each replaces written on it; the staging table marked filled (unless it is), the views' twins
        dropped (nothing more is fed). The staging table's comment after the mark."""
        assert steps.staging is not None
        marked = FilledMark.read(comment, mark.stem) is not None
        if not marked and steps.finalize != "move":
            self._recompute(steps, replaced, inserted_now=inserted_now)
        marking = [] if marked else [render_set_comment(steps.staging, mark.comment())]
        run_statements(self.hook, [Statement(sql, "") for sql in [*marking, *drop_views_sql(steps.views, steps.feed)]],
                       self.log)
        return comment if marked else mark.comment()

    def _recompute(self, steps: LoadSteps, replaced: list[str], *, inserted_now: bool) -> None:
        """The replace modes (:mod:`airflow_provider_s3ch.core.view_replay`): ``replace_partitions`` feeds the
        table as it will be through the twins (a retry empties the copies first); then each copy is told the
        partitions of its view's target it replaces, computed down the chains (``overwrite``: all of them)."""
        hook, views, staging, feed = self.hook, steps.views, steps.staging, steps.feed
        assert staging is not None
        if feed is not None:
            run_statements(hook, [Statement(sql, "") for sql in [
                *([] if inserted_now else truncate_sql(views)), *feed_sql(steps.target, staging, replaced)]],
                self.log)
        sources = {feed.name: raw_rows(steps.target, staging, replaced)} if feed is not None else {}
        comments: list[tuple[TableRef, list[str]]] = []
        for writers in writers_of(views):
            one = writers[0]
            if not one.moves:  # a Null link: what its view makes of the changed rows, for the views reading it
                sources[one.staging.name] = view_rows(one, sources) if feed is not None else ""
                continue
            if feed is None:  # overwrite: the view's target becomes its copy
                ids = sorted({pid for pid, _ in [*partitions(hook, one.target), *partitions(hook, one.staging)]})
            else:
                ids = [str(pid) for (pid,) in hook.execute(affected_sql(writers, sources))]
                sources[one.staging.name] = copy_rows(one, ids)
            comments.append((one.staging, ids))
            self.log.info("View target %s: partition ids %s recomputed for %s", one.target, ", ".join(ids) or "none",
                          steps.mode)
        run_statements(hook, [Statement(render_set_comment(copy, affected_comment(ids)), "") for copy, ids in comments],
                       self.log)

    def _drop_leftovers(self, staging: TableRef) -> None:
        """What is left of an earlier try's views' staging once this load's own is gone: the twins and copies of
        views that no longer read the target (a retry plans from the views there are now)."""
        run_statements(self.hook, leftover_drops(staging, views_left(self.hook, staging),
                                                 "the staging of a view that is gone"), self.log)

    def _publish_views(self, steps: LoadSteps, *, inserted_now: bool) -> None:
        """The views' staging copies into the views' targets, each dropped after its moves (or replaces); a retry
        moves only what a dead try had not moved. On a connection of its own (it runs beside the staging table's
        moves)."""
        hook = self.hook
        client = hook.client_for(hook.host, hook.port, fresh=True)
        try:
            parts: dict[str, list[tuple[str, str]]] = {}
            affected: dict[str, list[str]] | None = None if steps.finalize == "move" else {}
            for one in copies(steps.views):
                found = partitions(hook, one.staging, client=client) if one.moves else []
                if affected is not None:
                    ids = read_affected(table_comment(hook, one.staging, client=client)) if one.moves else None
                    if ids is not None:
                        affected[one.staging.name] = ids
                    parts[one.staging.name] = found
                    continue
                parts[one.staging.name] = found if inserted_now else not_moved_yet(
                    hook, (one.staging, one.target), found, self.log, client=client)
            run_statements(hook, publish_views(steps.views, parts, affected), self.log, client=client)
        finally:
            client.disconnect()


def lineage_facts(hook: ClickHouseHook, request: LoadRequest, loads: list[Loaded], end: LoadEnd,
                  listing: Callable[[], Manifest], log: logging.Logger) -> LoadFacts | None:
    """What the load's lineage and asset events say (names, the table's columns, the figures; no
    credentials): the files as listed (by ``listing`` again, when a deferred load had too many to carry); None
    when they cannot be read."""
    last, objects, columns = loads[-1], end.objects, end.columns
    metrics = combine_chunks([one.metrics for one in loads if one.metrics is not None])
    try:
        if objects is None:
            objects = listing().objects
        columns = columns if columns is not None else table_columns(hook, last.target)
    except Exception as exc:  # noqa: BLE001 - lineage is best effort; the load stands
        log.warning("Lineage: could not read the files or the columns of %s.%s: %s", last.target.database,
                    last.target.name, exc)
        if objects is None:
            return None
        columns = []
    return LoadFacts(
        bucket=request.bucket, objects=objects, host=hook.host, port=hook.port,
        database=last.target.database, table=last.target.name, columns=columns, query_id=metrics.query_id,
        written_rows=metrics.written_rows, written_bytes=metrics.written_bytes, read_rows=metrics.read_rows,
        read_bytes=metrics.read_bytes, mode=last.steps.mode, created=bool(loads[0].table_changes.get("created")),
        partitions=sorted({p for one in loads for p in one.partitions}), attached_to=last.attached_to, sql=last.sql,
    )


def load_report(loads: list[Loaded], end: LoadEnd, *, wall_ms: int, phases_ms: dict[str, float],
                log: logging.Logger) -> LoadReport:
    """The load's report, and its log lines: the rows, the speed and the peak; where the time went."""
    metrics = combine_chunks([one.metrics for one in loads if one.metrics is not None])
    moved = sorted({p for one in loads for p in one.partitions})
    phases = {name: int(ms) for name, ms in phases_ms.items()}
    phases[end.rest] = max(0, wall_ms - sum(phases.values()))
    report = build_report(loads, metrics, moved, end, wall_ms=wall_ms, phases_ms=phases)
    attached, steps = report.attached_to, loads[-1].steps
    log.info("%s %d rows (%s) in %d ms%s%s: %.0f rows/s, peak memory %s; %s",
             f"Took the figures of earlier try {attached}:" if isinstance(attached, str) else "Loaded",
             metrics.written_rows, fmt_bytes(metrics.written_bytes), metrics.duration_ms,
             f" over {len(loads)} chunks" if len(loads) > 1 else "",
             f" (waited {metrics.admission_wait_ms} ms for admission, ran {metrics.run_ms} ms)"
             if metrics.admission_wait_ms else "", metrics.rows_per_second,
             fmt_bytes(metrics.memory_usage),
             mode_text(steps.mode, moved))
    log.info("Time: %d ms in all: %s", wall_ms, ", ".join(f"{name} {ms} ms" for name, ms in phases.items()))
    return report

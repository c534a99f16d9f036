"""The file ledger on the server: one load's reads and writes of ``_s3ch_ledger`` (docs/ledger.md).

:mod:`airflow_provider_s3ch.core.ledger` decides which files a load takes,
:mod:`airflow_provider_s3ch.core.ledger_rows` what a row means and :mod:`airflow_provider_s3ch.core.ledger_sql`
how the table is read and written; this module reads the ledger and what the server says of the loads it
names (their staging tables, their running queries), writes the states, and hands the load run the files
its insert reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_s3ch.core import ledger_reads as reads
from airflow_provider_s3ch.core.freshness import Freshness, Standing, standing
from airflow_provider_s3ch.core.glob import archive_path_syntax, key_url
from airflow_provider_s3ch.core.ledger import (
    DEFAULT_CLAIM_HEARTBEAT,
    DEFAULT_CLAIM_TIMEOUT,
    Chunk,
    ChunkStart,
    Selection,
    assign_chunks,
    chunks_of,
    confirm,
    resume_with_ledger,
    select_files,
)
from airflow_provider_s3ch.core.ledger_rebuild import EarlierLoads, EarlierRow
from airflow_provider_s3ch.core.ledger_request import check_steps, ledger_ref, target_name
from airflow_provider_s3ch.core.ledger_rows import WHOLE_FILE, LedgerRow, LoadActivity, State, activity, unit_id
from airflow_provider_s3ch.core.ledger_sql import (
    FILES_TABLE,
    READ_FIELDS,
    REBUILD_FIELDS,
    WRITE_SETTINGS,
    key_table,
    render_read,
    render_read_partitions,
    render_running_loads,
    render_staging_tables,
    render_write,
    state_rows,
)
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId, Resume
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook, Client
from airflow_provider_s3ch.load.heartbeat import Heartbeat
from airflow_provider_s3ch.load.ledger_table import LedgerTable
from airflow_provider_s3ch.load.ledger_versions import LooksAgain
from airflow_provider_s3ch.load.report import LoadReport, NothingNew, nothing_new_report
from airflow_provider_s3ch.load.set_aside import SetsAside


class LedgerRun(LooksAgain, SetsAside):
    """One load's use of the ledger: select and claim its files, then record ``pending`` before the staging
    table's partitions move and ``loaded`` after; give the claims back when the load fails having left
    nothing behind.

    :param hook: the ClickHouse connection (the ledger lives on its node; on a cluster, the first shard's).
    :param request: the load's request (``skip_loaded``).
    :param query_id: this try's query id; its stem is the load's id in the ledger.
    :param claim_timeout: seconds a claim stays live at most without a query or a staging table of its load.
    :param heartbeat: seconds between the heartbeats of the load while it holds claims.
    :param log: the task's logger.
    """

    def __init__(
        self, hook: ClickHouseHook, request: LoadRequest, query_id: QueryId, *,
        claim_timeout: float = DEFAULT_CLAIM_TIMEOUT, heartbeat: float = DEFAULT_CLAIM_HEARTBEAT,
        log: logging.Logger | None = None,
    ) -> None:
        self.hook, self.request, self.query_id = hook, request, query_id
        #: On a cluster, (address, client, database) of each node whose staging tables (in that database) and
        #: running queries say whether a load is in flight (docs/distributed.md); set by the load run.
        self.nodes: list[tuple[str, Client, str]] = []
        self.own = query_id.stem
        self.claim_timeout = float(claim_timeout)
        self.log = log or logging.getLogger(__name__)
        self.ledger = ledger_ref(request, hook.database)
        self.target = target_name(request, hook.database)
        self.database = request.table.in_database(hook.database).database
        self.bucket = request.bucket
        #: The load's heartbeat, while it holds claims (the run stops it when the load ends).
        self.beat = Heartbeat(hook, self.ledger, self.own, heartbeat, self.log)
        self.selection = Selection()
        self.files: list[S3Object] = []
        self.chunks: list[Chunk] = []
        self.lost: list[S3Object] = []
        self._manifest: Manifest | None = None
        #: The URL of the whole glob.
        self.url = ""
        #: When this load's claims were written or last renewed (``time.monotonic()``).
        self._claimed_at = time.monotonic()
        self.recovered: list[LedgerRow] = []
        #: This load wrote or holds claims (released again when it fails having left nothing behind).
        self.holding = False
        self.table = LedgerTable(hook, self.ledger, self.log)
        #: The partition ids this load's rows record, by key (a retry whose staging table is gone keeps them).
        self._recorded: dict[str, tuple[str, ...]] = {}
        self.look, self.gone, self.overwritten = None, [], []
        self.set_aside, self.set_aside_before = [], []

    # ------------------------------------------------------------------ the table
    def exists(self) -> bool:
        return self.table.exists()

    def create(self) -> None:
        self.table.create()

    # ------------------------------------------------------------------ reads
    def read(self, keys: Iterable[str]) -> list[LedgerRow]:
        """The latest version of the target's rows for ``keys`` in the bucket, and of this load's rows."""
        data = self.hook.execute(render_read(self.ledger, FILES_TABLE, partitions=self.table.has_partitions),
                                 {"t": self.target, "b": self.bucket, "own": self.own}, external_tables=key_table(keys))
        return [LedgerRow.model_validate(dict(zip(READ_FIELDS, row, strict=True))) for row in data]

    def earlier(self, partitions: Sequence[str]) -> EarlierLoads:
        """What the target's other loads recorded in ``partitions`` (or in none, or of this load's keys), for
        :mod:`~airflow_provider_s3ch.load.rebuild`."""
        data = self.hook.execute(  # with this load's keys: a reloaded file's old versions, wherever they wrote
            render_read_partitions(self.ledger, FILES_TABLE), {"t": self.target, "p": list(partitions)},
            external_tables=key_table(o.key for o in self.files))
        rows = [EarlierRow.model_validate({**dict(zip(REBUILD_FIELDS, r, strict=True)), "unit": unit_id(r[4], r[3])})
                for r in data]
        own = [r for r in rows if r.load_id == self.own]
        others = [r for r in rows if r.load_id != self.own]
        pending = [r for r in others if r.state == "pending"]
        in_flight = self.facts(pending).staging if pending else frozenset()
        return EarlierLoads(others, in_flight, min((r.block for r in own if r.state == "pending"), default=0))

    def listed(self) -> list[S3Object]:
        """The whole listing's objects (what the glob matched), less those gone from S3 since."""
        if self._manifest is None:
            return []
        gone = set(self.gone)
        return [o for o in self._manifest.objects if o.key not in gone]

    def facts(self, rows: Sequence[LedgerRow | EarlierRow]) -> LoadActivity:
        """Which staging tables exist (of the load or of its chunks) and whose query runs, for this load and
        the loads with open rows."""
        ids = sorted({r.load_id for r in rows if r.state in ("claimed", "pending")} | {self.own})
        sql, params = render_staging_tables(self.ledger if self.table.has_heartbeats else None)
        seen = self.hook.execute(sql, {**params, "d": self.database, "ids": tuple(ids)})
        running = self.hook.execute(render_running_loads())
        sql, params = render_staging_tables()  # on a cluster: every shard's staging tables, every node's queries
        for _, client, database in self.nodes:
            seen += self.hook.execute(sql, {**params, "d": database, "ids": tuple(ids)}, client=client)
            running += self.hook.execute(render_running_loads(), client=client)
        return activity((str(n) for what, n, _, _ in seen if what == "staging"), (str(q) for (q,) in running), ids,
                        ((str(n), float(age), float(w)) for what, n, age, w in seen if what == "heartbeat"))

    # ------------------------------------------------------------------ writes
    def write(self, files: Sequence[S3Object | LedgerRow], state: State, *, query_id: str,
              rows: int | None = None, partitions: Sequence[str] | None = None) -> None:
        """Write ``state`` for ``files`` (this load's rows, each listed file in its chunk); a ledger row's claim
        time is kept."""
        if not files:
            return
        objects = [f for f in files if isinstance(f, S3Object)]
        ledger_rows = [f for f in files if isinstance(f, LedgerRow)]
        for group, with_claimed_at in ((objects, False), (ledger_rows, True)):
            if group:
                self.hook.execute(
                    render_write(self.ledger, with_claimed_at=with_claimed_at),
                    state_rows(self.target, self.bucket, group, load_id=self.own, query_id=query_id, state=state,
                               rows=rows, chunk_of=self.selection.chunk_of, partitions=partitions),
                    settings=WRITE_SETTINGS,
                )

    def _write_rows(self, rows: Sequence[LedgerRow], state: State) -> None:
        """Write ``state`` over ledger rows of any load (each keeps its load, chunk, query id and claim time)."""
        lines = [line for r in rows for line in state_rows(self.target, self.bucket, [r], load_id=r.load_id,
                                                            query_id=r.query_id, state=state)]
        if lines:
            self.hook.execute(render_write(self.ledger, with_claimed_at=True), lines, settings=WRITE_SETTINGS)

    def _record_replaced(self, rows: Sequence[LedgerRow]) -> None:
        """Loaded versions a reload replaced: their rows left the target with it, so they are ``released``."""
        self._write_rows(rows, "released")
        if rows:
            self.log.info("Ledger: %d loaded version(s) replaced by a reload recorded as released: %s", len(rows),
                          ", ".join(f"{r.key}@{r.etag}" for r in rows[:5]))

    def _record_committed(self, rows: Sequence[LedgerRow]) -> None:
        """``pending`` rows whose staging table is gone: the partitions moved, so they are ``loaded``."""
        self._write_rows(rows, "loaded")
        if rows:
            self.recovered.extend(rows)
            self.log.info("Ledger: %d file(s) of earlier loads were committed (pending, staging table gone): "
                          "recorded as loaded: %s", len(rows), ", ".join(r.key for r in rows[:5]))

    # ------------------------------------------------------------------ the operator's steps
    def prepare(self, manifest: Manifest, url: str) -> list[Chunk]:
        """Select this load's files and claim them (a dry run reads only), split into chunks when the request
        says so (a retry keeps the chunks its rows name): the chunks to load in order, none when there is no
        new file. :meth:`begin` gives each chunk's manifest and URL.

        :param manifest: the listing's manifest.
        :param url: the URL of the whole glob (:func:`~airflow_provider_s3ch.core.glob.object_url`).
        """
        dry_run = self.request.dry_run
        if dry_run:
            present = self.exists()
        else:
            self.create()
            present = True
        self.gone = list(manifest.gone)
        if manifest.gone:  # deleted since their events: nothing to read, nothing recorded loaded
            missing = set(manifest.gone)
            manifest = manifest.model_copy(update={"objects": [o for o in manifest.objects if o.key not in missing]})
        manifest = self._without_set_aside(manifest) if present else manifest
        rows = self.read(o.key for o in manifest.objects) if present else []
        self._recorded = {r.key: r.partitions for r in rows if r.load_id == self.own and r.partitions}
        facts = self.facts(rows) if present else LoadActivity()
        sel = select_files(
            manifest.objects, rows, facts, own=self.own, on_changed=self.request.on_changed,
            claim_timeout=self.claim_timeout, fmt=manifest.format, compression=manifest.compression,
        )
        sel = assign_chunks(sel, max_files=self.request.max_files_per_load, max_bytes=self.request.max_bytes_per_load)
        if sel.retry and rows:  # the claims' age: the renewal before a chunk counts from the oldest one kept
            ages = [r.age_s for r in rows if r.load_id == self.own and r.state == "claimed"]
            self._claimed_at = time.monotonic() - max(ages, default=0.0)
        self.selection, files = sel, list(sel.files)
        self._manifest, self.url = manifest, url
        archive_syntax = archive_path_syntax(self.request.settings)
        if files:  # a key the insert cannot name fails the load before anything is claimed
            reads.key_list_pattern([o.key for o in files], self.request.key_pattern, archive_syntax=archive_syntax)
        if not dry_run:
            self._record_committed(sel.committed)
            self._record_replaced(sel.superseded)
            self.write(sel.release, "released", query_id=str(self.query_id))
            if files:  # alive before the claims: a load that dies after them leaves a heartbeat that ages
                self.beat.start()
            if sel.claim:
                self.write(sel.claim, "claimed", query_id=str(self.query_id))
                self._claimed_at = time.monotonic()
            # Files of a chunk whose staging table exists are this load's already (its earlier try may have
            # read them); the others hold only if no other load got them first.
            unsure = [o for o in files if unit_id(self.own, sel.chunk_of.get(o.key, WHOLE_FILE)) not in facts.staging]
            if files:
                self.holding = True
            if unsure:
                if sel.claim:
                    rows = self.read(o.key for o in unsure)
                    facts = self.facts(rows)
                kept, self.lost = confirm(unsure, rows, facts, own=self.own, claim_timeout=self.claim_timeout)
                gone = {o.key for o in self.lost}
                files = [o for o in files if o.key not in gone]
            if self.lost:
                self.write(self.lost, "released", query_id=str(self.query_id))
        self.files = files
        self.chunks = chunks_of(sel.model_copy(update={"files": files}))
        self._log()
        return list(self.chunks)

    def begin(self, chunk: Chunk) -> ChunkStart | None:
        """Before a chunk's insert: the chunk (claims renewed when they are half their timeout old, the files
        another load took meanwhile left out), its manifest and its URL (its keys as one ``{a,b,…}`` list);
        None when no file of it is left.

        :param chunk: one of :meth:`prepare`'s chunks.
        """
        if not self.request.dry_run and (time.monotonic() - self._claimed_at > self.claim_timeout / 2
                                         or not self.beat.fresh()):
            self._renew(chunk)
            chunk = next((c for c in self.chunks if c.number == chunk.number), Chunk(number=chunk.number))
        if self._looks_again(chunk):
            chunk = self._as_now(chunk)
        if not chunk.files or self._manifest is None:
            return None
        body, pattern = reads.key_list_pattern([o.key for o in chunk.files], self.request.key_pattern,
                                         archive_syntax=archive_path_syntax(self.request.settings))
        return ChunkStart(chunk, reads.narrow_manifest(self._manifest, chunk.files, pattern),
                          key_url(self.url, self.request.key_pattern, body))

    def _drop(self, files: Sequence[S3Object]) -> None:
        """Release ``files`` and take them out of the load's files and chunks."""
        if not files:
            return
        self.write(files, "released", query_id=str(self.query_id))
        dropped = {o.key for o in files}
        self.files = [o for o in self.files if o.key not in dropped]
        self.chunks = [c.model_copy(update={"files": [o for o in c.files if o.key not in dropped]})
                       for c in self.chunks]

    def _renew(self, current: Chunk) -> None:
        """Claim again the files of the chunks not started yet (this one unless its insert finished), so that
        no other load takes them as stale while this load works through its chunks; keep those still ours."""
        later = [c for c in self.chunks if c.number > current.number or (
            c.number == current.number and current.number not in self.selection.finished_inserts)]
        files = [o for c in later for o in c.files]
        sent = self._claimed_at = time.monotonic()  # the claims' time: when their write started
        self.beat.renewed(sent)  # the claims kept are as good as a beat (none: the staging table holds them)
        if not files:
            return
        self.write(files, "claimed", query_id=str(self.query_id))
        rows = self.read(o.key for o in files)
        kept, lost = confirm(files, rows, self.facts(rows), own=self.own, claim_timeout=self.claim_timeout)
        if lost:
            self._drop(lost)
            self.lost.extend(lost)
            self.log.warning("Ledger: %d file(s) of later chunks were taken by another load while this one ran "
                             "(its claims went stale): left to it: %s", len(lost), ", ".join(o.key for o in lost[:5]))
        self.log.info("Ledger: renewed the claims on %d file(s) of the chunks to come", len(files) - len(lost))

    def query_id_of(self, chunk: Chunk) -> QueryId:
        """The query id of this try's insert of ``chunk``: the load's, or the chunk's unit id as its stem."""
        return QueryId(stem=unit_id(self.own, chunk.number), try_number=self.query_id.try_number)

    def check(self, steps: LoadSteps, plan: LoadPlan) -> None:
        """Refuse a load that does not go through a staging table (its claims are released by :meth:`abandon`)."""
        check_steps(steps, strategy=plan.strategy)

    def resume(self, resume: Resume, chunk: Chunk) -> Resume:
        """What this try does about an earlier one, the ledger's word over the query log's
        (:func:`~airflow_provider_s3ch.core.ledger.resume_with_ledger`)."""
        decided = resume_with_ledger(resume, self.selection, chunk.number)
        if decided != resume:
            self.log.info("Ledger: %s", decided.reason)
        return decided

    def pending(self, metrics: LoadMetrics, chunk: Chunk, partitions: Sequence[str]) -> None:
        """Before the staging table's partitions move: the chunk's files are ``pending`` under the insert that
        read them, with the partition ids it wrote (none given: a retry whose staging table is gone keeps the
        recorded ones)."""
        self.write(chunk.files, "pending", query_id=metrics.query_id, partitions=self._partitions(chunk, partitions),
                   rows=metrics.written_rows if len(chunk.files) == 1 else None)

    def loaded(self, metrics: LoadMetrics, chunk: Chunk, partitions: Sequence[str]) -> None:
        """After the staging table was dropped: the chunk's files are ``loaded``."""
        self.write(chunk.files, "loaded", query_id=metrics.query_id, partitions=self._partitions(chunk, partitions),
                   rows=metrics.written_rows if len(chunk.files) == 1 else None)
        keys = {o.key for o in chunk.files}
        self._record_replaced([r for r in self.selection.replaces if r.key in keys])
        if chunk.number == self.chunks[-1].number:
            self.holding = False
        self.log.info("Ledger %s: recorded %d file(s) as loaded into %s", self.ledger, len(chunk.files), self.target)

    def _partitions(self, chunk: Chunk, partitions: Sequence[str]) -> list[str]:
        if partitions or not chunk.files:
            return list(partitions)
        return list(self._recorded.get(chunk.files[0].key, ()))

    def give_up(self) -> None:
        """A load refused after its insert: its files are ``released`` (before its staging table is dropped,
        so that no row reads as committed)."""
        self.write(self.files, "released", query_id=str(self.query_id))
        self.holding = False

    def abandon(self) -> None:
        """After a failure: give back this load's claims when nothing of it can still land (no staging table,
        no query of it running, of any chunk); a ``pending`` row is never given back (its partitions may have
        moved)."""
        if not self.holding:
            return
        try:
            rows = [r for r in self.read(()) if r.load_id == self.own and r.state == "claimed"]
            facts = self.facts(rows)
            if facts.busy(self.own):
                self.log.info("Ledger: keeping the claims of %s for its retry (its staging table or query is there)",
                              self.own)
                return
            self.write(rows, "released", query_id=str(self.query_id))
            self.holding = False
            if rows:
                self.log.info("Ledger: the load left nothing behind: released its claims on %d file(s)", len(rows))
        except Exception as exc:  # noqa: BLE001 - the load's own error goes on; the claims expire
            self.log.warning("Ledger: could not release the claims of %s (they expire after %.0f s): %s",
                             self.own, self.claim_timeout, exc)

    # ------------------------------------------------------------------ output
    def summary(self) -> dict[str, Any]:
        """The XCom's ``ledger`` entry."""
        return reads.summary(self.ledger, self.selection.model_copy(update={"files": self.files}), load_id=self.own,
                       lost=self.lost, committed=self.recovered, claim_timeout=self.claim_timeout, gone=self.gone,
                       overwritten=self.overwritten, set_aside=self.set_aside, set_aside_before=self.set_aside_before)

    def standing(self) -> Standing:
        """What the ledger says of the listed files now (the run's freshness)."""
        return standing(self.listed(), self.selection, self.lost)

    def nothing_new(self, wall_ms: int, freshness: Freshness | None = None) -> LoadReport:
        """The report of a run without a new file: zero rows; the skip signal under ``skip_when_empty``."""
        report = nothing_new_report(self.target, self.request.mode, wall_ms, self.summary(),
                                    dry_run=self.request.dry_run, freshness=freshness)
        if self.request.skip_when_empty and not self.request.dry_run:
            raise NothingNew(f"no new file for {self.target} (skip_when_empty=True)", report)
        self.log.info("No new file for %s: nothing to load", self.target)
        return report

    def _log(self) -> None:
        self.log.info("Ledger %s: %s", self.ledger, reads.summary_line(self.summary()))
        if warning := reads.changed_warning(self.selection):
            self.log.warning("Ledger: %s", warning)


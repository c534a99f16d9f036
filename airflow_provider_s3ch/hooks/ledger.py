"""The file ledger on the server: one load's reads and writes of ``_s3ch_ledger`` (docs/ledger.md).

:mod:`airflow_provider_s3ch.core.ledger` decides which files a load takes and what a row means; this
module reads the ledger and what the server says of the loads it names (their staging tables, their
running queries), writes the states, and hands the operator the files its insert reads.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.glob import archive_path_syntax, key_url
from airflow_provider_s3ch.core.ledger import (
    DEFAULT_CLAIM_TIMEOUT,
    READ_FIELDS,
    LedgerRow,
    LoadFacts,
    Selection,
    State,
    check_steps,
    confirm,
    key_list_pattern,
    ledger_engine_problem,
    ledger_ref,
    narrow_manifest,
    render_create_ledger,
    render_read,
    render_write,
    select_files,
    staging_name,
    state_rows,
    summary,
    target_name,
)
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId, Resume
from airflow_provider_s3ch.errors import PlanError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

#: The external table of keys a ledger read sends with its query.
FILES_TABLE = "_s3ch_files"

#: Settings of the ledger's writes: every state row is stored and visible when the INSERT returns.
WRITE_SETTINGS = {"insert_deduplicate": 0, "async_insert": 0}

_LEDGER_TABLE_SQL = "SELECT engine, engine_full FROM system.tables WHERE database = %(d)s AND name = %(t)s"


class LedgerRun:
    """One load's use of the ledger: select and claim its files, then record ``pending`` before the staging
    table's partitions move and ``loaded`` after; give the claims back when the load fails having left
    nothing behind.

    :param hook: the ClickHouse connection (the ledger lives on its node).
    :param request: the load's request (``skip_loaded``).
    :param query_id: this try's query id; its stem is the load's id in the ledger.
    :param claim_timeout: seconds a claim stays live without a query or a staging table of its load.
    :param log: the task's logger.
    """

    def __init__(
        self, hook: ClickHouseHook, request: LoadRequest, query_id: QueryId, *,
        claim_timeout: float = DEFAULT_CLAIM_TIMEOUT, log: logging.Logger | None = None,
    ) -> None:
        self.hook, self.request, self.query_id = hook, request, query_id
        self.own = query_id.stem
        self.claim_timeout = float(claim_timeout)
        self.log = log or logging.getLogger(__name__)
        self.ledger = ledger_ref(request, hook.database)
        self.target = target_name(request, hook.database)
        self.database = request.table.database or hook.database
        self.bucket = request.bucket
        self.selection = Selection()
        self.files: list[S3Object] = []
        self.lost: list[S3Object] = []
        self.recovered: list[LedgerRow] = []
        #: This load wrote or holds claims (released again when it fails having left nothing behind).
        self.holding = False

    # ------------------------------------------------------------------ the table
    def exists(self) -> bool:
        """Whether the ledger table exists; :class:`PlanError` when a table of its name cannot be the ledger."""
        rows = self.hook.execute(_LEDGER_TABLE_SQL, {"d": self.ledger.database, "t": self.ledger.name})
        if not rows:
            return False
        problem = ledger_engine_problem(str(rows[0][0]), str(rows[0][1]))
        if problem:
            raise PlanError(
                f"table {self.ledger} cannot be the file ledger: {problem}; drop it (or give ledger_table another "
                "name) and the load creates it"
            )
        return True

    def create(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` of the ledger, then the check that the table is one."""
        if not self.exists():
            self.hook.execute(render_create_ledger(self.ledger))
            self.log.info("Created the file ledger %s", self.ledger)
            self.exists()

    # ------------------------------------------------------------------ reads
    def read(self, keys: Iterable[str]) -> list[LedgerRow]:
        """The latest version of the target's rows for ``keys`` in the bucket, and of this load's rows."""
        data = self.hook.execute(
            render_read(self.ledger, FILES_TABLE),
            {"t": self.target, "b": self.bucket, "own": self.own},
            external_tables=[{"name": FILES_TABLE, "structure": [("key", "String")],
                              "data": [{"key": k} for k in dict.fromkeys(keys)]}],
        )
        return [LedgerRow.model_validate(dict(zip(READ_FIELDS, row, strict=True))) for row in data]

    def facts(self, rows: Sequence[LedgerRow]) -> LoadFacts:
        """Whose staging table exists and whose query runs, for this load and the loads with open rows."""
        ids = sorted({r.load_id for r in rows if r.state in ("claimed", "pending")} | {self.own})
        staged = self.hook.execute(
            "SELECT name FROM system.tables WHERE database = %(d)s AND name IN %(n)s",
            {"d": self.database, "n": tuple(staging_name(i) for i in ids)},
        )
        running = self.hook.execute("SELECT query_id FROM system.processes WHERE startsWith(query_id, 's3ch-')")
        stems = set()
        for (text,) in running:
            try:
                stems.add(QueryId.parse(str(text)).stem)
            except InvalidRequestError:  # another query id that starts with s3ch-
                continue
        by_name = {staging_name(i): i for i in ids}
        return LoadFacts(
            staging=frozenset(by_name[str(n)] for (n,) in staged if str(n) in by_name),
            running=frozenset(stems & set(ids)),
        )

    # ------------------------------------------------------------------ writes
    def write(self, files: Sequence[S3Object | LedgerRow], state: State, *, query_id: str,
              rows: int | None = None) -> None:
        """Write ``state`` for ``files`` (this load's rows); a ledger row's claim time is kept."""
        if not files:
            return
        objects = [f for f in files if isinstance(f, S3Object)]
        ledger_rows = [f for f in files if isinstance(f, LedgerRow)]
        for group, with_claimed_at in ((objects, False), (ledger_rows, True)):
            if group:
                self.hook.execute(
                    render_write(self.ledger, with_claimed_at=with_claimed_at),
                    state_rows(self.target, self.bucket, group, load_id=self.own, query_id=query_id, state=state,
                               rows=rows),
                    settings=WRITE_SETTINGS,
                )

    def _record_committed(self, rows: Sequence[LedgerRow]) -> None:
        """``pending`` rows whose staging table is gone: the partitions moved, so they are ``loaded``."""
        for row in rows:
            self.hook.execute(
                render_write(self.ledger, with_claimed_at=True),
                state_rows(self.target, self.bucket, [row], load_id=row.load_id, query_id=row.query_id,
                           state="loaded"),
                settings=WRITE_SETTINGS,
            )
        if rows:
            self.recovered.extend(rows)
            self.log.info("Ledger: %d file(s) of earlier loads were committed (pending, staging table gone): "
                          "recorded as loaded: %s", len(rows), ", ".join(r.key for r in rows[:5]))

    # ------------------------------------------------------------------ the operator's steps
    def prepare(self, manifest: Manifest, url: str) -> tuple[Manifest, str] | None:
        """Select this load's files and claim them (a dry run reads only): the manifest of the files the insert
        reads and its URL (the keys as one ``{a,b,…}`` list); None when there is no new file.

        :param manifest: the listing's manifest.
        :param url: the URL of the whole glob (:func:`~airflow_provider_s3ch.core.glob.object_url`).
        """
        dry_run = self.request.dry_run
        if dry_run:
            present = self.exists()
        else:
            self.create()
            present = True
        rows = self.read(o.key for o in manifest.objects) if present else []
        facts = self.facts(rows) if present else LoadFacts()
        sel = select_files(
            manifest.objects, rows, facts, own=self.own, on_changed=self.request.on_changed,
            claim_timeout=self.claim_timeout, fmt=manifest.format, compression=manifest.compression,
        )
        self.selection, files = sel, list(sel.files)
        archive_syntax = archive_path_syntax(self.request.settings)
        if files:  # a key the insert cannot name fails the load before anything is claimed
            key_list_pattern([o.key for o in files], self.request.key_pattern, archive_syntax=archive_syntax)
        if not dry_run:
            self._record_committed(sel.committed)
            self.write(sel.release, "released", query_id=str(self.query_id))
            if sel.claim:
                self.write(sel.claim, "claimed", query_id=str(self.query_id))
                self.holding = True
                after = self.read(o.key for o in sel.claim)
                files, self.lost = confirm(sel.claim, after, self.facts(after), own=self.own,
                                           claim_timeout=self.claim_timeout)
            elif sel.retry and files:
                self.holding = True
                if self.own not in facts.staging:  # the earlier try may have died before it confirmed its claims
                    files, self.lost = confirm(files, rows, facts, own=self.own, claim_timeout=self.claim_timeout)
            if self.lost:
                self.write(self.lost, "released", query_id=str(self.query_id))
        self.files = files
        self._log()
        if not files:
            return None
        body, pattern = key_list_pattern([o.key for o in files], self.request.key_pattern,
                                         archive_syntax=archive_syntax)
        return narrow_manifest(manifest, files, pattern), key_url(url, self.request.key_pattern, body)

    def check(self, steps: LoadSteps, plan: LoadPlan) -> None:
        """Refuse a load that does not go through a staging table (its claims are released by :meth:`abandon`)."""
        check_steps(steps, strategy=plan.strategy)

    def attach_to(self, resume: Resume) -> str | None:
        """The insert to attach to when the ledger knows it finished and the query log did not say so: this
        load's ``pending`` rows while its staging table still holds them (a cleared task instance, or a log
        that lost the entry). Loading afresh would drop the staging table after some partitions moved."""
        if resume.action == "load" and self.selection.finished_insert:
            self.log.info("Ledger: insert %s finished and its staging table still holds the files: finishing it",
                          self.selection.finished_insert)
            return self.selection.finished_insert
        return None

    def pending(self, metrics: LoadMetrics) -> None:
        """Before the staging table's partitions move: the files are ``pending`` under the insert that read them."""
        self.write(self.files, "pending", query_id=metrics.query_id, rows=self._rows(metrics))

    def loaded(self, metrics: LoadMetrics) -> None:
        """After the staging table was dropped: the files are ``loaded``."""
        self.write(self.files, "loaded", query_id=metrics.query_id, rows=self._rows(metrics))
        self.holding = False
        self.log.info("Ledger %s: recorded %d file(s) as loaded into %s", self.ledger, len(self.files), self.target)

    def _rows(self, metrics: LoadMetrics) -> int | None:
        return metrics.written_rows if len(self.files) == 1 else None

    def abandon(self) -> None:
        """After a failure: give back this load's claims when nothing of it can still land (no staging table,
        no query of it running); a ``pending`` row is never given back (its partitions may have moved)."""
        if not self.holding:
            return
        try:
            rows = [r for r in self.read(()) if r.load_id == self.own and r.state == "claimed"]
            facts = self.facts(rows)
            if self.own in facts.staging or self.own in facts.running:
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
        return summary(self.ledger, self.selection.model_copy(update={"files": self.files}), load_id=self.own,
                       lost=self.lost, committed=self.recovered, claim_timeout=self.claim_timeout)

    def nothing_new(self, wall_ms: int) -> dict[str, Any]:
        """The result of a run without a new file: zero rows; Airflow's skip under ``skip_when_empty``."""
        result: dict[str, Any] = {
            "query_id": None, "table": self.target, "dry_run": self.request.dry_run, "files": 0, "bytes": 0,
            "written_rows": 0, "written_bytes": 0, "read_rows": 0, "read_bytes": 0, "duration_ms": 0,
            "wall_ms": wall_ms, "mode": self.request.mode, "attached_to": None, "partitions": [], "warnings": [],
            "ledger": self.summary(),
        }
        if self.request.skip_when_empty and not self.request.dry_run:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"no new file for {self.target} (skip_when_empty=True)")
        self.log.info("No new file for %s: nothing to load", self.target)
        return result

    def _log(self) -> None:
        s = self.summary()
        self.log.info(
            "Ledger %s: %d new, %d reloaded; skipped %d loaded, %d held by another load, %d changed; %d recovered%s",
            self.ledger, s["new"], s["reloaded"], s["skipped_loaded"], s["skipped_claimed"], s["skipped_changed"],
            s["recovered"], " (a retry: the files its earlier try held)" if s["retry"] else "",
        )

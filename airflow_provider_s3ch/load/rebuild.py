"""``replace_partitions`` with the ledger, partition-safe: the partitions the new files share with earlier
files are rebuilt from all of them before they replace the target's (docs/ledger.md,
:mod:`airflow_provider_s3ch.core.ledger_rebuild`).

After the new files' insert: the ledger's rows of the touched partitions are read, the earlier files
checked in S3 (the listing, else a HeadObject each), then a second staging table (the staging table's
name and ``r``) is filled from the earlier files and given the new files' partitions; the finalize
replaces each touched partition from it. Everything before the finalize is done again from scratch by a
retry (the staging table is left as the insert filled it), so the rebuild is idempotent like the moves.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple, Protocol

from airflow_provider_s3ch.core.glob import archive_path_syntax, key_url
from airflow_provider_s3ch.core.ledger import Chunk
from airflow_provider_s3ch.core.ledger_reads import key_list_pattern
from airflow_provider_s3ch.core.ledger_rebuild import (
    EarlierRow,
    Rebuild,
    RebuildRefused,
    RebuiltPartition,
    candidates,
    conflicts,
    plan_rebuild,
    rebuilt_partitions,
    touched,
)
from airflow_provider_s3ch.core.models import LoadMetrics, LoadPlan, S3Credentials, S3Object, TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId
from airflow_provider_s3ch.core.sql import (
    render_attach_partition,
    render_create_staging,
    render_drop_table,
    render_insert,
)
from airflow_provider_s3ch.core.staging import RebuildSource, rebuild_table
from airflow_provider_s3ch.errors import LoadError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3 import head_objects
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.hooks.server import partitions, table_comment
from airflow_provider_s3ch.load import shards
from airflow_provider_s3ch.load.ledger import LedgerRun


class Planned(Protocol):
    """What the rebuild reads of an insert: its plan and the mode's steps."""

    @property
    def plan(self) -> LoadPlan: ...

    @property
    def steps(self) -> LoadSteps: ...


class StagingRead(NamedTuple):
    """What the ledger read of an insert's staging table before its finalize."""

    #: The staging table's comment (None: gone, an earlier try finished).
    comment: str | None
    #: (partition_id, partition) of the partitions it holds.
    partitions: list[tuple[str, str]]
    #: The rebuild table to replace from (None: the staging table alone).
    rebuild: RebuildSource | None = None
    #: ``replace_partitions``: each partition replaced and the files it was rebuilt from (None: another mode).
    rebuilt: list[RebuiltPartition] | None = None
    #: On a Distributed table: each shard's rebuild table to replace from, by node (None: no rebuild).
    sources: dict[str, RebuildSource] | None = None
    #: On a Distributed table: where each shard stood when read (its staging table's comment and partitions).
    standing: list[shards.Standing] | None = None


class PartitionRebuild:
    """One insert's rebuild of its partitions.

    :param hook: the ClickHouse connection.
    :param ledger: the load's ledger run (its rows, its listing, its URL).
    :param source: the S3 connection (a HeadObject for earlier files the listing does not hold).
    :param credentials: what the earlier files' insert carries.
    :param log: the task's logger.
    """

    def __init__(self, hook: ClickHouseHook, ledger: LedgerRun, source: S3Source,
                 credentials: S3Credentials | None, log: logging.Logger) -> None:
        self.hook, self.ledger, self.source, self.credentials, self.log = hook, ledger, source, credentials, log
        self.rows: list[EarlierRow] = []
        self.in_flight: frozenset[str] = frozenset()

    def plan(self, staged: Sequence[str]) -> Rebuild:
        """The earlier files to read again for the partitions ``staged`` (the staging table's ids).

        :raises RebuildRefused: an earlier file of those partitions cannot be read again as it was loaded.
        """
        ledger = self.ledger
        rows, in_flight, _ = ledger.earlier(staged)
        keys = {o.key for o in ledger.files}
        every = touched(rows, staged, bucket=ledger.bucket, keys=keys, in_flight=in_flight)
        if set(every) - set(staged):  # a reloaded file's old version wrote other partitions: their files too
            rows, in_flight, _ = ledger.earlier(every)
        self.rows, self.in_flight = rows, in_flight
        wanted = candidates(rows, staged, bucket=ledger.bucket, keys=keys, in_flight=in_flight)
        listed: dict[str, S3Object | None] = {o.key: o for o in ledger.listed() if o.key in set(wanted)}
        missing = [k for k in wanted if k not in listed]
        if missing:  # keys outside this run's glob (another month's run): one HeadObject each
            listed.update(head_objects(self.source.client(), ledger.bucket, missing))
        rebuild = plan_rebuild(staged, rows, bucket=ledger.bucket, keys=keys, in_flight=in_flight, listed=listed)
        if rebuild.needed:
            self.log.info("Ledger: partition(s) %s hold rows of %d file(s) loaded earlier: rebuilding them with those "
                          "files%s (%d HeadObject call(s))", ", ".join(rebuild.partitions), len(rebuild.files),
                          f"; {', '.join(rebuild.extra)} held the old version of a reloaded file" if rebuild.extra
                          else "", len(missing))
        return rebuild

    def report(self, rebuild: Rebuild, present: Sequence[str]) -> list[RebuiltPartition]:
        """Each partition replaced and the files it was rebuilt from, also in the task's log."""
        out = rebuilt_partitions(rebuild, self.rows, present, in_flight=self.in_flight,
                                 new_keys=[o.key for o in self.ledger.files])
        for one in out:
            more = " …" if one.earlier_count > len(one.earlier_files) else ""
            self.log.info("Ledger: partition %s %s from %d earlier file(s)%s and this load's %s", one.partition_id,
                          "dropped: no row left" if one.dropped else "replaced", one.earlier_count,
                          f" ({', '.join(one.earlier_files)}{more})" if one.earlier_files else "",
                          ", ".join(one.new_files) or "no file")
        return out

    def yield_to_earlier(self, rebuild: Rebuild) -> None:
        """After this load's ``pending`` rows: another load that is bringing rows into the same partitions and
        recorded them first goes first; this try fails (retryable), its staging table kept for the retry."""
        ledger = self.ledger
        rows, in_flight, own_block = ledger.earlier(rebuild.partitions)
        first = conflicts(rows, rebuild.partitions, in_flight=in_flight, before=own_block)
        if first:
            raise LoadError(
                f"load {first[0].load_id} is bringing rows into partition(s) "
                f"{', '.join(sorted(set(first[0].partitions) & set(rebuild.partitions)))} of {ledger.target} now "
                "(with mode='replace_partitions'); this try leaves its staging table to its retry, which rebuilds "
                "the partitions with that load's files"
            )

    def build(self, rebuild: Rebuild, plan: LoadPlan, steps: LoadSteps, query_id: QueryId) -> RebuildSource:
        """Fill the rebuild table: the earlier files, then the new files' partitions attached from the staging
        table; an earlier try's leftover is dropped first. On an error the rebuild table is dropped."""
        staging = steps.staging
        assert staging is not None
        table = rebuild_table(staging)
        try:
            self.hook.execute(render_drop_table(table))
            self.hook.execute(render_create_staging(table, steps.target, wide_part_bytes=steps.compact_parts))
            self.fill(rebuild, plan, query_id, table)
            for pid in rebuild.partitions:
                self.hook.execute(render_attach_partition(table, staging, pid))
            present = [(pid, value) for pid, value in partitions(self.hook, table) if pid in set(rebuild.partitions)]
        except BaseException:
            self.drop(table)
            raise
        ids = {pid for pid, _ in present}
        self.log.info("Rebuilt partition(s) %s in %s from %d earlier file(s) and the new ones",
                      ", ".join(v for _, v in present) or "(none)", table, len(rebuild.files))
        return RebuildSource(table=table, present=present, drop=[p for p in rebuild.partitions if p not in ids])

    def fill(self, rebuild: Rebuild, plan: LoadPlan, query_id: QueryId, table: TableRef) -> None:
        """The earlier files inserted into ``table`` (the rebuild table, or a Distributed one over the shards')."""
        if rebuild.files:
            request = self.ledger.request
            body = key_list_pattern([o.key for o in rebuild.files], request.key_pattern,
                                    archive_syntax=archive_path_syntax(request.settings))[0]
            url = key_url(self.ledger.url, request.key_pattern, body)
            rendered = render_insert(plan.model_copy(update={"source_url": url}), self.credentials, target=table)
            self.hook.run_insert(rendered.sql, query_id=f"s3ch.rebuild-{query_id}", settings=rendered.settings)

    def refuse(self, steps: LoadSteps, error: RebuildRefused) -> None:
        """A rebuild that cannot be made: the files given up and the staging tables dropped, the target as it
        was; the refusal raised."""
        staging = steps.staging
        assert staging is not None
        self.ledger.give_up()
        if steps.shards is not None:  # every shard's staging and rebuild tables
            shards.drop_rebuild(self.hook, steps, self.log)
            shards.abandon(self.hook, steps, self.log)
            raise error
        self.drop(rebuild_table(staging))
        self.drop(staging)
        raise error

    def drop(self, table: TableRef) -> None:
        try:
            self.hook.execute(render_drop_table(table))
        except Exception as exc:  # noqa: BLE001 - best effort; the load's own error goes on
            self.log.warning("Could not drop %s: %s", table, exc)



def before_finalize(ledger: LedgerRun, chunk: Chunk, metrics: LoadMetrics, planned: Planned, *, inserted_now: bool,
                    source: S3Source) -> StagingRead:
    """A ledger load between its insert and its finalize: the chunk's files ``pending`` with the partitions
    the staging table holds; for ``replace_partitions`` first the rebuild's plan (a refusal leaves the target
    and the server as they were), then a yield to a load that recorded the same partitions first, then the
    rebuild table.

    :param planned: the insert's plan and steps.
    :return: the staging table's comment and partitions, the rebuild table and what was rebuilt.
    """
    hook, steps, plan, query_id = ledger.hook, planned.steps, planned.plan, ledger.query_id_of(chunk)
    staging = steps.staging
    assert staging is not None
    standing = None
    if steps.shards is not None:  # staged on every shard (append: no rebuild)
        comment, parts, standing = shards.staged(hook, steps)
        comment = "" if inserted_now else comment
    else:
        comment = "" if inserted_now else table_comment(hook, staging)
        parts = partitions(hook, staging) if comment is not None else []
    ids = [pid for pid, _ in parts]
    if steps.finalize != "replace" or comment is None:
        ledger.pending(metrics, chunk, ids)
        return StagingRead(comment, parts, standing=standing)
    runner = PartitionRebuild(hook, ledger, source, source.credentials(), ledger.log)
    try:
        rebuild = runner.plan(ids)
    except RebuildRefused as exc:
        runner.refuse(steps, exc)
    ledger.pending(metrics, chunk, ids)
    runner.yield_to_earlier(rebuild)
    if steps.shards is not None:  # a rebuild table on every shard, filled once (docs/distributed.md)
        sources = shards.rebuild(hook, steps, rebuild.partitions, lambda table: runner.fill(
            rebuild, plan, query_id, table), ledger.log) if rebuild.needed else None
        present = sorted({pid for one in sources.values() for pid, _ in one.present}) if sources else ids
        return StagingRead(comment, parts, None, runner.report(rebuild, present), sources, standing)
    source_table = runner.build(rebuild, plan, steps, query_id) if rebuild.needed else None
    present = [pid for pid, _ in source_table.present] if source_table is not None else ids
    return StagingRead(comment, parts, source_table, runner.report(rebuild, present))

"""A load staged on every shard of a Distributed table, carried out node by node: the staging tables made
ready, dropped after a failure, their marks read by a retry, and the publish (marked everywhere first, then
each shard's partitions brought into its local table). The rules and the names are
:mod:`airflow_provider_s3ch.core.shards`'s; each shard's statements are the one-node ones of
:mod:`airflow_provider_s3ch.core.staging`, run on that shard's node.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from airflow_provider_s3ch.core.marks import FilledMark
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId, is_marker
from airflow_provider_s3ch.core.shards import Shards, render_create_distributed_staging
from airflow_provider_s3ch.core.sql import (
    render_attach_partition,
    render_create_staging,
    render_drop_table,
    render_set_comment,
)
from airflow_provider_s3ch.core.staging import (
    RebuildSource,
    Statement,
    abandon_statements,
    finalize_statements,
    prepare_statements,
    rebuild_table,
)
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.server import partitions, table_comment
from airflow_provider_s3ch.load.statements import not_moved_yet, run_statements

if TYPE_CHECKING:
    from airflow_provider_s3ch.hooks.clickhouse import Client


class Shard(NamedTuple):
    """One shard's node: its address, a client on it, and whether it is the connection's own node (the
    Distributed staging table's)."""

    address: str
    client: Client
    initiator: bool = False


def shard_clients(hook: ClickHouseHook, shards: Shards) -> list[Shard]:
    """A client on one node of each shard."""
    return [Shard(address, client, node.is_local) for (address, client), node in zip(
        hook.node_clients(shards.nodes), shards.nodes, strict=True)]


def _initiator_is_a_shard(shards: list[Shard]) -> bool:
    return sum(s.initiator for s in shards) == 1


T = TypeVar("T")


def on_each(shards: list[Shard], work: Callable[[Shard], T]) -> list[T]:
    """``work`` on every shard at once (each on its own node's client), the results in the shards' order; the
    first shard's error once every shard is done (none is left half way by another's error)."""
    if len(shards) <= 1:
        return [work(shard) for shard in shards]
    with ThreadPoolExecutor(len(shards), thread_name_prefix="s3ch-shard") as pool:
        futures = [pool.submit(work, shard) for shard in shards]
    return [future.result() for future in futures]


def _shards(steps: LoadSteps) -> Shards:
    assert steps.shards is not None and steps.staging is not None
    return steps.shards


def prepare(hook: ClickHouseHook, steps: LoadSteps, query_id: QueryId, log: logging.Logger) -> None:
    """Every shard's staging table made ready (an earlier try's leftover dropped), then the Distributed staging
    table over them on the connection's node."""
    shards, on_shard = _shards(steps), steps.on_shard()
    staging = steps.staging
    assert staging is not None
    distributed = [Statement(render_drop_table(staging), "")] if query_id.try_number > 1 else []
    distributed.append(Statement(render_create_distributed_staging(
        staging, steps.target, shards.cluster, shards.local_staging, shards.sharding_key),
        f"Created staging table {staging}, Distributed over {shards.local_staging} on {len(shards.nodes)} shards"))
    clients = shard_clients(hook, shards)
    alongside = _initiator_is_a_shard(clients)  # on the initiator's own turn (its client is the connection's)

    def ready(shard: Shard) -> None:
        comment = table_comment(hook, shards.local_staging, client=shard.client) if query_id.try_number > 1 else None
        swapped = comment is not None and steps.finalize == "exchange"
        run_statements(hook, prepare_statements(
            on_shard, staging_exists=comment is not None, staging_comment=comment,
            target_comment=table_comment(hook, shards.local_target, client=shard.client) if swapped else None),
            log, client=shard.client, node=shard.address)
        if alongside and shard.initiator:  # a Distributed table needs no shard's table to be created
            run_statements(hook, distributed, log)

    on_each(clients, ready)
    if not alongside:
        run_statements(hook, distributed, log)


def abandon(hook: ClickHouseHook, steps: LoadSteps, log: logging.Logger) -> None:
    """After a failed insert that no longer runs: every shard's staging table dropped, and the Distributed one
    (best effort on each: a node that is down keeps its table for the next try, which drops it)."""
    assert steps.staging is not None
    _drop_everywhere(hook, steps, abandon_statements(steps.on_shard()), steps.staging, log,
                     f"staging table {_shards(steps).local_staging}")


def _drop_everywhere(hook: ClickHouseHook, steps: LoadSteps, local: list[Statement], distributed: TableRef,
                     log: logging.Logger, what: str) -> None:
    """``local`` (drops) run on every shard, best effort on each (the load's own error goes on), then the
    Distributed table ``distributed`` dropped; ``what`` names the shards' table in the warning."""

    def drop(shard: Shard) -> None:
        try:
            run_statements(hook, local, log, client=shard.client, node=shard.address)
        except Exception as exc:  # noqa: BLE001 - the load's own error goes on
            log.warning("On %s, could not drop %s: %s", shard.address, what, exc)

    on_each(shard_clients(hook, _shards(steps)), drop)
    run_statements(hook, [Statement(render_drop_table(distributed), "")], log)


def durable_mark(hook: ClickHouseHook, steps: LoadSteps) -> FilledMark | None:
    """The mark a finished insert left on any shard's staging table (on its local table, after an ``overwrite``
    swap there): it is written on every shard before any publishes, so one is enough."""
    shards, stem = _shards(steps), steps.stem or ""
    for shard in shard_clients(hook, shards):
        mark = FilledMark.read(table_comment(hook, shards.local_staging, client=shard.client), stem)
        if mark is None and steps.finalize == "exchange":
            mark = FilledMark.read(table_comment(hook, shards.local_target, client=shard.client), stem)
        if mark is not None:
            return mark
    return None


class Standing(NamedTuple):
    """Where one shard stands before the publish: its staging table's comment (None: gone, published) and
    partitions; its local table's comment (``overwrite``)."""

    shard: Shard
    comment: str | None
    partitions: list[tuple[str, str]]
    target_comment: str | None


def _every_partition(standing: Sequence[Standing], stem: str) -> list[tuple[str, str]]:
    """Every partition of the load: a mark's, once one was written (some shards may have published since), else
    those of every shard's staging table."""
    marks = [m for s in standing for m in (FilledMark.read(s.comment, stem), FilledMark.read(s.target_comment, stem))
             if m is not None and m.partitions is not None]
    return list(marks[0].partitions or []) if marks else sorted({p for s in standing for p in s.partitions})


class LedgerRead(NamedTuple):
    """What a ledger load read and made before its publish: each shard's rebuild table to replace from, by node
    (``replace_partitions``, :func:`rebuild`; None: none), and where each shard stood (:func:`staged`)."""

    rebuilt: dict[str, RebuildSource] | None
    standing: list[Standing] | None


def finalize(hook: ClickHouseHook, steps: LoadSteps, mark: FilledMark, log: logging.Logger, *,
             inserted_now: bool = False, read: LedgerRead | None = None) -> list[str]:
    """Publish a finished insert on every shard; idempotent, so a retry resumes it.

    First every shard's staging table still there is marked filled, the mark naming every partition of the
    load (from the marks when an earlier try wrote them: some shards may have published since); then each shard
    publishes its own (``replace``: the load's partitions it holds none of are dropped there), after the
    Distributed staging table is dropped.

    :param inserted_now: this try's own insert just filled the staging tables: they exist, unmarked (no comment
        to read; ``overwrite`` reads them).
    :param read: what the ledger read just before: the rebuild tables, and where each shard stands (not read
        again here); None: read here.
    :return: the partitions the load brought in (on any shard).
    """
    shards, on_shard = _shards(steps), steps.on_shard()

    def look(shard: Shard) -> Standing:
        fresh = inserted_now and steps.finalize != "exchange"
        comment = "" if fresh else table_comment(hook, shards.local_staging, client=shard.client)
        parts = partitions(hook, shards.local_staging, client=shard.client) if comment is not None else []
        target_comment = (table_comment(hook, shards.local_target, client=shard.client)
                          if steps.finalize == "exchange" else None)
        return Standing(shard, comment, parts, target_comment)

    clients = shard_clients(hook, shards)
    alongside = _initiator_is_a_shard(clients)
    rebuilt = read.rebuilt if read is not None else None
    standing = read.standing if read is not None and read.standing is not None else on_each(clients, look)
    every = _every_partition(standing, mark.stem)
    mark = mark.model_copy(update={"partitions": every})

    # The Distributed staging table served the insert: it goes before any shard publishes, so that the last
    # statement of a load is a shard's own (its staging table, marked, is then the witness a retry reads).
    staging = steps.staging
    assert staging is not None
    drop_distributed = [Statement(render_drop_table(staging), "")]

    def marked(one: Standing) -> str | None:
        """The shard's staging table marked filled, unless it carries the mark (or, swapped, is the old table)."""
        unswapped = steps.finalize != "exchange" or is_marker(one.comment, steps.marker or "")
        comment = one.comment
        if comment is not None and unswapped and FilledMark.read(comment, mark.stem) is None:
            run_statements(hook, [Statement(render_set_comment(shards.local_staging, mark.comment()), "")], log,
                           client=one.shard.client, node=one.shard.address)
            comment = mark.comment()
        if alongside and one.shard.initiator:
            run_statements(hook, drop_distributed, log)
        return comment

    comments = on_each(standing, marked)  # marked everywhere before any shard publishes
    if not alongside:
        run_statements(hook, drop_distributed, log)

    def publish(one: Standing, comment: str | None) -> bool:
        held = {pid for pid, _ in one.partitions}
        parts = one.partitions
        if steps.finalize == "move" and not inserted_now:  # a retry: what a move cut short by a crash left
            parts = not_moved_yet(hook, (shards.local_staging, shards.local_target), parts, log,
                                  client=one.shard.client, node=one.shard.address)
        plan = finalize_statements(
            on_shard, staging_comment=comment, target_comment=one.target_comment, staging_partitions=parts,
            target_partitions=partitions(hook, shards.local_target, client=one.shard.client)
            if steps.finalize == "exchange" else [],
            mark=mark, drop=[pid for pid, _ in every if pid not in held] if comment is not None else [],
            rebuild=rebuilt.get(one.shard.address) if rebuilt is not None else None)
        run_statements(hook, plan.steps, log, client=one.shard.client, node=one.shard.address)
        return plan.done_before

    done = sum(on_each([one._replace(comment=c) for one, c in zip(standing, comments, strict=True)],
                       lambda one: publish(one, one.comment)))
    if done:
        log.info("%d of %d shards had published this load already (an earlier try): finished the others", done,
                 len(standing))
    return [value for _, value in every]


def ledger_nodes(hook: ClickHouseHook, shards: Shards, database: str
                 ) -> tuple[ClickHouseHook, list[tuple[str, Client, str]]]:
    """Where a ledger load into a Distributed table keeps its ledger, and where it looks for loads in flight.

    The ledger is on the first shard's node (lowest ``shard_num``), whichever node the connection names, so that
    every load of the target sees the same claims; a load is in flight while its staging table is on any shard,
    or the Distributed one on the connection's node, or its query runs on any node (docs/distributed.md).

    :param database: the Distributed target's database (where the Distributed staging table is).
    :return: the connection pointed at the ledger's node; (address, client, database) of each node to read.
    """
    first = shards.nodes[0]
    ledger = copy.copy(hook)  # the same credentials and cached clients, on the first shard's node
    ledger.host, ledger.port, ledger.address = first.host, first.port, first.address
    nodes = [(address, client, shards.local_staging.database or database)
             for address, client in hook.node_clients(shards.nodes)]
    if hook.address != first.address:
        nodes.append((hook.address, hook.client(), database))
    return ledger, nodes


def staged(hook: ClickHouseHook, steps: LoadSteps) -> tuple[str | None, list[tuple[str, str]], list[Standing]]:
    """What a ledger load records before the publish: a staging table's comment on some shard (None: no shard
    keeps one, every shard published) and every partition of the load (:func:`_every_partition`); and where each
    shard stands, for :func:`finalize` (which then reads nothing again)."""
    shards = _shards(steps)

    def look(shard: Shard) -> Standing:
        comment = table_comment(hook, shards.local_staging, client=shard.client)
        parts = partitions(hook, shards.local_staging, client=shard.client) if comment is not None else []
        return Standing(shard, comment, parts, None)

    standing = on_each(shard_clients(hook, shards), look)
    seen = [one for one in standing if one.comment is not None]
    if not seen:
        return None, [], standing
    return seen[0].comment, _every_partition(seen, steps.stem or ""), standing


def rebuild(hook: ClickHouseHook, steps: LoadSteps, touched: list[str], fill: Callable[[TableRef], None],
            log: logging.Logger) -> dict[str, RebuildSource]:
    """``replace_partitions`` with the ledger on a Distributed table: a rebuild table on every shard (``AS`` its
    local table) filled once, by ``fill`` (the earlier files' insert) through a Distributed rebuild table over
    them, and given each shard's new partitions from its staging table; what each shard replaces from, by node.

    Filled once: the earlier files' rows spread over the shards as the sharding key (``rand()``) puts them, and a
    second fill would put them elsewhere. So once the publish began (a shard's staging table marked, or gone:
    every shard is marked before any publishes), the rebuild tables left are replaced from as they are, and a
    shard whose rebuild table is gone has replaced its partitions already. Before that, a retry fills them anew.

    :param touched: the partition ids the rebuild replaces (the new files' and the earlier files' that share them).
    :param fill: inserts the earlier files into the given (Distributed) table.
    """
    shards, stem = _shards(steps), steps.stem or ""
    local, distributed = rebuild_table(shards.local_staging), rebuild_table(steps.staging or shards.local_staging)
    clients = shard_clients(hook, shards)
    seen = on_each(clients, lambda s: table_comment(hook, shards.local_staging, client=s.client))
    began = any(c is None or FilledMark.read(c, stem) is not None for c in seen)
    if not began:
        try:
            on_each(clients, lambda s: run_statements(hook, [Statement(render_drop_table(local), ""), Statement(
                render_create_staging(local, shards.local_target), "")], log, client=s.client, node=s.address))
            run_statements(hook, [Statement(render_drop_table(distributed), ""), Statement(
                render_create_distributed_staging(distributed, steps.target, shards.cluster, local,
                                                  shards.sharding_key), "")], log)
            fill(distributed)
            run_statements(hook, [Statement(render_drop_table(distributed), "")], log)

            def attach(shard: Shard) -> None:
                own = [pid for pid, _ in partitions(hook, shards.local_staging, client=shard.client)]
                run_statements(hook, [Statement(render_attach_partition(local, shards.local_staging, pid), "")
                                      for pid in own if pid in touched], log, client=shard.client, node=shard.address)

            on_each(clients, attach)
        except BaseException:
            drop_rebuild(hook, steps, log)
            raise

    def source(shard: Shard) -> RebuildSource:
        exists = table_comment(hook, local, client=shard.client) is not None
        present = [(pid, value) for pid, value in partitions(hook, local, client=shard.client)
                   if pid in touched] if exists else []
        held = {pid for pid, _ in present}
        return RebuildSource(table=local, present=present, drop=[p for p in touched if p not in held] if exists else [])

    sources = on_each(clients, source)
    log.info("Rebuilt partition(s) %s on %d shards", ", ".join(touched), len(clients))
    return {shard.address: one for shard, one in zip(clients, sources, strict=True)}


def drop_rebuild(hook: ClickHouseHook, steps: LoadSteps, log: logging.Logger) -> None:
    """Every shard's rebuild table dropped, and the Distributed one (best effort)."""
    local = rebuild_table(_shards(steps).local_staging)
    _drop_everywhere(hook, steps, [Statement(render_drop_table(local), "")],
                     rebuild_table(steps.staging or _shards(steps).local_staging), log, str(local))

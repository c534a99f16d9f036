"""Running the statements the core decided, on the connection's node or on another node of the cluster."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.sql import parseable
from airflow_provider_s3ch.core.staging import Statement, view_leftovers_sql
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.server import moved_already

if TYPE_CHECKING:
    from airflow_provider_s3ch.hooks.clickhouse import Client


def run_statements(hook: ClickHouseHook, steps: list[Statement], log: logging.Logger, *, client: Client | None = None,
                   node: str = "") -> None:
    """Run the statements the core decided, in order, logging each one's note. Each is sent with the parser's
    limits it needs (a staging table's mark carries the insert's settings, a long ``log_comment`` included).

    :param client: run them on this node's client (``node``, named in the notes) instead of the connection's.
    """
    for step in steps:
        hook.execute(step.sql, settings=parseable({}, len(step.sql.encode()) + 1), client=client)
        if step.note:
            log.info("%s%s", f"On {node}: " if node else "", step.note)


def not_moved_yet(hook: ClickHouseHook, tables: tuple[TableRef, TableRef], parts: list[tuple[str, str]],
                  log: logging.Logger, *, client: Client | None = None, node: str = "") -> list[tuple[str, str]]:
    """An append's retry: the staging table's partitions less those the target holds already. A ``MOVE
    PARTITION`` that a crash of the server cut short can leave a moved part in both tables (the target took it,
    the staging table had not let it go yet); its UUID, which the move keeps, says so, and moving it again would
    double its rows. Those partitions are left in the staging table, which is dropped.

    :param tables: the staging table and the table its partitions move to.
    """
    if not parts:
        return parts
    staging, target = tables
    already = moved_already(hook, staging, target, client=client)
    if already:
        log.warning("%sPartition(s) %s of %s are in %s already (a move cut short by a crash of the server): not "
                    "moved again", f"On {node}: " if node else "", ", ".join(sorted(already)), staging, target)
    return [p for p in parts if p[0] not in already]


def views_left(hook: ClickHouseHook, staging: TableRef) -> list[TableRef]:
    """The views' staging twins, feed table and copies of ``staging`` that exist (an earlier try's)."""
    return [TableRef(database=staging.database, name=str(r[0])) for r in hook.execute(*view_leftovers_sql(staging))]

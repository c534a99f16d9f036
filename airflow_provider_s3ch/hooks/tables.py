"""Running the table DDL the core decides (:mod:`airflow_provider_s3ch.core.tables`) on the right nodes."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from clickhouse_driver import errors as ch_errors

from airflow_provider_s3ch.core.models import ClusterNode
from airflow_provider_s3ch.core.tables import KEEPER_PROBE, Ddl
from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

#: ``TABLE_ALREADY_EXISTS``: another creator won the race; ``CREATE … IF NOT EXISTS`` may still say so.
TABLE_ALREADY_EXISTS = 57

_EXISTS_SQL = "SELECT count() FROM system.tables WHERE database = %(d)s AND name = %(t)s"


def has_keeper(hook: ClickHouseHook) -> bool:
    """Whether the server has a Keeper (``ON CLUSTER`` DDL needs one); False when it cannot tell."""
    try:
        rows = hook.execute(KEEPER_PROBE)
    except S3chError:
        return False
    return bool(rows and int(rows[0][0]) > 0)


def run_ddl(hook: ClickHouseHook, statements: Sequence[Ddl], nodes: Sequence[ClusterNode], log: logging.Logger) -> None:
    """Run each statement where it belongs: on the hook's node, or on every node of ``nodes``.

    An ALTER (``Ddl.alters``) skips a node without its table; a ``CREATE … IF NOT EXISTS`` that lost a
    race to another creator is fine.
    """
    for ddl in statements:
        if ddl.on == "every_node" and nodes:
            for _, client in hook.node_clients(nodes):
                _run_one(hook, ddl, client.execute)
        else:
            _run_one(hook, ddl, hook.client().execute)
        if ddl.note:
            log.info("%s", ddl.note)


def _run_one(hook: ClickHouseHook, ddl: Ddl, execute: Callable[..., Any]) -> None:
    try:
        if ddl.alters is not None:
            table = ddl.alters
            if not execute(_EXISTS_SQL, {"d": table.database or hook.database, "t": table.name})[0][0]:
                return
        execute(ddl.sql)
    except ch_errors.ServerException as exc:
        if exc.code == TABLE_ALREADY_EXISTS and ddl.sql.startswith("CREATE TABLE IF NOT EXISTS"):
            return
        raise hook.translate_error(exc) from exc
    except Exception as exc:
        raise hook.translate_error(exc) from exc

"""Running the statements the core decided, on the connection's node or on another node of the cluster."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_provider_s3ch.core.sql import parseable
from airflow_provider_s3ch.core.staging import Statement
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

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

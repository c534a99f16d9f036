"""The file ledger's table on the server: whether it exists and can be the ledger, created where missing, and
brought up to date (the ``partitions`` column, the heartbeat table) where an older version made it."""

from __future__ import annotations

import logging

from airflow_provider_s3ch.core.ledger_sql import (
    ledger_engine_problem,
    render_add_partitions,
    render_create_heartbeats,
    render_create_ledger,
    render_create_set_aside,
    render_ledger_table,
)
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.errors import PlanError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook


class LedgerTable:
    """The ledger table ``ledger`` on ``hook``'s node."""

    def __init__(self, hook: ClickHouseHook, ledger: TableRef, log: logging.Logger) -> None:
        self.hook, self.ledger, self.log = hook, ledger, log
        #: The table has the ``partitions`` column, its heartbeat table exists (a ledger from before either gets
        #: it on a load).
        self.has_partitions = self.has_heartbeats = True
        #: Its table of files set aside exists (made when a load first sets a file aside).
        self.has_set_aside = False

    def exists(self) -> bool:
        """Whether the ledger table exists; :class:`PlanError` when a table of its name cannot be the ledger."""
        rows = self.hook.execute(*render_ledger_table(self.ledger))
        if not rows:
            return False
        self.has_partitions, self.has_heartbeats, self.has_set_aside = (bool(v) for v in rows[0][2:5])
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
        elif not self.has_partitions:  # a ledger from before partitions were kept: its rows mean "any partition"
            self.hook.execute(render_add_partitions(self.ledger))
            self.has_partitions = True
            self.log.info("File ledger %s: added the partitions column", self.ledger)
        if not self.has_heartbeats:  # a new ledger, or one from before heartbeats were written
            self.hook.execute(render_create_heartbeats(self.ledger))
            self.has_heartbeats = True

    def create_set_aside(self) -> None:
        """The table of files set aside, where missing."""
        if not self.has_set_aside:
            self.hook.execute(render_create_set_aside(self.ledger))
            self.has_set_aside = True

"""A ledger run's freshness (docs/lag.md): what it found not loaded at its start, when each chunk's rows became
visible, what it left; the figures (:mod:`airflow_provider_s3ch.core.freshness`) in the report, in one log line
and in Airflow's metrics (:mod:`airflow_provider_s3ch.hooks.stats`).

"Visible" is the server's clock: the moment each chunk was published is taken on the worker's monotonic clock,
and one read of the server's clock after the last publish places them all on the server's time line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Literal

from airflow_provider_s3ch.core.freshness import SERVER_NOW_SQL, Freshness, QueueDepth, freshness, summary_line
from airflow_provider_s3ch.hooks import stats
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.load.report import Loaded


class Watch:
    """One ledger run's freshness, from the ledger's selection to the run's end.

    :param ledger: the run's ledger, its files selected (:meth:`LedgerRun.prepare`).
    :param queue: the triggering events (None: not given).
    :param log: the task's logger.
    :param emit: where the figures go beside the log (Airflow's metrics).
    """

    def __init__(self, ledger: LedgerRun, queue: QueueDepth | None, log: logging.Logger,
                 emit: Callable[[Freshness, logging.Logger], None] = stats.emit) -> None:
        self.ledger, self.queue, self.log, self.emit = ledger, queue, log, emit
        self.started_at, self.started = datetime.now(UTC), time.monotonic()
        self.unloaded = ledger.standing().unloaded

    def end(self, hook: ClickHouseHook, loads: Sequence[Loaded]) -> Freshness:
        """The figures at the run's end (its log line and metrics sent): ``loads`` are its inserts, each with
        the moment it was published."""
        published = [(one, one.published) for one in loads if one.published is not None]
        clock: Literal["server", "worker"] = "worker"
        ended_mono, ended = time.monotonic(), datetime.now(UTC)
        if published:
            try:
                ((micros,),) = hook.execute(SERVER_NOW_SQL)
                ended, clock = datetime.fromtimestamp(int(micros) / 1e6, UTC), "server"
            except Exception as exc:  # noqa: BLE001 - the figures fall back on the worker's clock
                self.log.warning("Freshness: could not read the server's clock (the worker's is used): %s", exc)

        def at(mono: float) -> datetime:
            return ended - timedelta(seconds=ended_mono - mono)

        visible = {o.key: at(moment) for one, moment in published for o in one.files or []}
        now = self.ledger.standing()  # files taken from the run while it ran are held by another load
        figures = freshness(self.unloaded, visible, held=now.held, changed=now.changed, ended=ended, queue=self.queue,
                            started=at(self.started) if clock == "server" else self.started_at, clock=clock)
        self.log.info("Freshness: %s", summary_line(figures))
        self.emit(figures, self.log)
        return figures

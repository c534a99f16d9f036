"""The resume phase: what a try does about the earlier tries of its task instance (load, wait, or attach to a
finished insert), from ``system.query_log`` and the mark a finished insert leaves on its staging table."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from airflow_provider_s3ch.core.deferral import SETTLE_SECONDS
from airflow_provider_s3ch.core.marks import FilledMark
from airflow_provider_s3ch.core.recovery import LoadSteps, QueryId, Resume, decide_resume
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.server import table_comment
from airflow_provider_s3ch.load import shards
from airflow_provider_s3ch.load.insert import Inserter, Running
from airflow_provider_s3ch.load.report import DeferLoad


class EarlierTries:
    """The earlier tries of a load, as the server knows them.

    :param inserter: the run's inserter (its query log, and the queries it waits for).
    :param hook: the ClickHouse connection.
    :param log: the task's logger.
    :param timeout: how long to wait for an earlier try that still runs (``earlier_try_timeout``).
    :param defers: a deferrable load hands the wait to the triggerer (:class:`~.report.DeferLoad`).
    """

    def __init__(self, inserter: Inserter, hook: ClickHouseHook, log: logging.Logger, *, timeout: float,
                 defers: bool) -> None:
        self.inserter, self.hook, self.log, self.timeout, self.defers = inserter, hook, log, timeout, defers

    def resume(self, query_id: QueryId, first_try: int, nodes: Sequence[ClusterNode],
               steps: LoadSteps) -> tuple[Resume, FilledMark | None]:
        """Find the earlier tries' queries; wait for running ones; decide load or attach: to a finished try in
        ``system.query_log``, else to one whose mark the staging table carries (with the mark, whose figures
        stand in for the log's). Try 1 has no earlier try (a cleared task instance goes on with the next try
        number): nothing to read."""
        inserter, timeout = self.inserter, self.timeout
        if query_id.try_number <= 1:
            resume = Resume(action="load", reason="the first try: no earlier try of this task instance ran a load")
            self.log.info("Try %d: %s", query_id.try_number, resume.reason)
            return resume, None
        while True:
            resume = decide_resume(inserter.queries.earlier_tries(query_id, nodes), query_id.try_number, first_try)
            if resume.action != "wait":
                mark = self.durable_mark(steps, query_id, first_try) if resume.action == "load" else None
                if mark is not None:
                    resume = Resume(action="attach", query_ids=[mark.query_id], reason=(
                        f"earlier try {mark.query_id} filled the staging table (its mark on the server says so; "
                        "system.query_log no longer lists it): bringing its rows in, not inserting again"))
                self.log.info("Try %d: %s", query_id.try_number, resume.reason)
                return resume, mark
            self.log.info("%s: waiting for it (up to %.0f s)", resume.reason, timeout)
            if self.defers:  # the triggerer waits; the task then looks again
                raise DeferLoad(kind="wait", query_ids=list(resume.query_ids),
                                nodes=[n.model_dump(mode="json") for n in nodes], deadline=time.time() + timeout)
            inserter.running = Running(list(resume.query_ids), nodes)
            try:
                inserter.queries.wait_for_queries(resume.query_ids, nodes, timeout=timeout, log=self.log)
            finally:
                inserter.running = None
            # A query that just left system.processes may reach system.query_log a moment later.
            for waited in resume.query_ids:
                try:
                    inserter.queries.entry(waited, nodes, wait=SETTLE_SECONDS)
                except Exception as exc:  # noqa: BLE001 - failed or missing: the next look decides
                    self.log.info("Earlier try %s: %s", waited, exc)

    def durable_mark(self, steps: LoadSteps, query_id: QueryId, first_try: int) -> FilledMark | None:
        """A retry's second witness: the mark an earlier try of this series left on its staging table (on the
        target, after an ``overwrite`` swap) once its insert finished."""
        if steps.staging is None:
            return None
        if steps.shards is not None:  # on any shard's staging table, else in any shard's log of statements
            ours = [m for m in [shards.durable_mark(self.hook, steps)] if m is not None] or \
                self.inserter.queries.logged_marks(steps.stem or "", steps.shards.nodes)
            return next((m for m in ours if first_try <= m.try_number < query_id.try_number), None)
        mark = FilledMark.read(table_comment(self.hook, steps.staging), steps.stem or "")
        if mark is None and steps.finalize == "exchange":
            mark = FilledMark.read(table_comment(self.hook, steps.target), steps.stem or "")
        if mark is None or not first_try <= mark.try_number < query_id.try_number:
            return None
        return mark

"""LoadTrigger: a deferred :class:`~airflow_provider_s3ch.operators.s3_to_clickhouse.S3ToClickHouseOperator`
in Airflow's triggerer.

The task started its ``INSERT … SELECT`` over ClickHouse's HTTP interface (the server runs it whether or
not the client stays) and deferred. The trigger looks at the query by its id on every node
(:meth:`airflow_provider_s3ch.hooks.query_log.QueryLog.look`: ``system.processes``, then
``system.query_log``), logs the rows read and written so far, and fires once the query ended;
:func:`airflow_provider_s3ch.core.deferral.judge` says what each look means. It also waits for an earlier
try's query that still runs, for a retry. The reads are clickhouse-driver's, blocking: they run in a thread
(:func:`asyncio.to_thread`) so that the triggerer's event loop goes on serving other triggers.

When a user clears the deferred task or marks it failed or successful, Airflow's triggerer calls
:meth:`LoadTrigger.on_kill`, which kills the queries on every node; a triggerer restart does not (the
trigger resumes in the next triggerer, and the query runs on).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_s3ch.core.deferral import SETTLE_SECONDS, Judgement, WaitKind, judge
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.errors import ClickHouseUnavailableError, S3chError, provider_errors
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.query_log import QueryLog, kill_query

#: How long the server may not answer before the trigger gives up (the task's retries then apply: a
#: retry finds the load still running and waits for it, or takes its figures).
UNREACHABLE_SECONDS = 120.0

#: The trigger logs the load's progress at its first look, then at most once a minute.
PROGRESS_LOG_SECONDS = 60.0


class LoadTrigger(BaseTrigger):
    """Look at a load's query (or at earlier tries' queries) every ``poll_interval`` seconds until it ends.

    Fires once: ``{"status": <verdict>, "kind", "query_ids", "message", "read_rows", "written_rows",
    "error_code", "load"}``, the verdict one of ``finished``, ``failed``, ``missing`` (a load), ``ended``,
    ``timeout`` (earlier tries), or ``error`` when the server could not be read (``error`` names the
    provider's error class).

    :param clickhouse_conn_id: the ``clickhouse_native`` (or ``clickhouse``) connection.
    :param query_ids: the load's query id (``kind="insert"``), or the earlier tries' (``kind="wait"``).
    :param nodes: the cluster's nodes the queries run on (as ``ClusterNode`` dicts); none for the
        connection's node only.
    :param kind: ``insert`` (the load's own query) or ``wait`` (earlier tries a retry waits for).
    :param poll_interval: seconds between two looks.
    :param deadline: when a wait gives up (seconds since the epoch); None for never.
    :param load: what the task needs when it resumes (JSON-safe, no secret): handed back in the event.
    """

    def __init__(
        self,
        *,
        clickhouse_conn_id: str,
        query_ids: list[str],
        nodes: list[dict[str, Any]] | None = None,
        kind: WaitKind = "insert",
        poll_interval: float = 10.0,
        deadline: float | None = None,
        load: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.clickhouse_conn_id = clickhouse_conn_id
        self.query_ids = list(query_ids)
        self.nodes = [ClusterNode.model_validate(n).model_dump(mode="json") for n in nodes or []]
        self.kind: WaitKind = kind
        self.poll_interval = float(poll_interval)
        self.deadline = deadline
        self.load = load
        self._hook: ClickHouseHook | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "clickhouse_conn_id": self.clickhouse_conn_id,
                "query_ids": self.query_ids,
                "nodes": self.nodes,
                "kind": self.kind,
                "poll_interval": self.poll_interval,
                "deadline": self.deadline,
                "load": self.load,
            },
        )

    def _cluster_nodes(self) -> list[ClusterNode]:
        return [ClusterNode.model_validate(n) for n in self.nodes]

    def _look(self, absent_for: float) -> Judgement:
        """One look, in a worker thread (the hook reads the connection there, not on the event loop)."""
        with provider_errors():
            if self._hook is None:
                self._hook = ClickHouseHook(self.clickhouse_conn_id)
            look = QueryLog(self._hook).look(self.query_ids, self._cluster_nodes(), logged=self.kind == "insert")
        state = judge(look, kind=self.kind, query_ids=self.query_ids, absent_for=absent_for, settle=SETTLE_SECONDS,
                      now=time.time(), deadline=self.deadline)
        if state.verdict == "missing":  # name where it looked, as a synchronous load's errors do
            where = ", ".join(n.address for n in self._cluster_nodes()) or self._hook.address
            state = state.model_copy(update={"message": f"{state.message}; looked on {where} through connection "
                                                        f"{self.clickhouse_conn_id!r}"})
        return state

    def _event(self, status: str, message: str, **figures: Any) -> TriggerEvent:
        return TriggerEvent({"status": status, "kind": self.kind, "query_ids": self.query_ids, "message": message,
                             "read_rows": figures.get("read_rows", 0), "written_rows": figures.get("written_rows", 0),
                             "error_code": figures.get("error_code", 0), "error": figures.get("error"),
                             "load": self.load})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        seen = time.monotonic()
        unreachable_since: float | None = None
        logged: float | None = None
        looks = 0
        while True:
            try:
                state = await asyncio.to_thread(self._look, time.monotonic() - seen)
            except ClickHouseUnavailableError as exc:
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since >= UNREACHABLE_SECONDS:
                    yield self._event("error", str(exc), error=type(exc).__name__)
                    return
                self.log.warning("%s; looking again in %g s", exc, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
                continue
            except S3chError as exc:
                yield self._event("error", str(exc), error=type(exc).__name__)
                return
            unreachable_since = None
            looks += 1
            if state.done:
                self.log.info("%s (after %d look(s) from the triggerer)", state.message, looks)
                yield self._event(state.verdict, state.message, read_rows=state.read_rows,
                                  written_rows=state.written_rows, error_code=state.error_code)
                return
            now = time.monotonic()
            if not state.absent:
                seen = now
            if logged is None or now - logged >= PROGRESS_LOG_SECONDS:
                logged = now
                self.log.info("%s; looking every %g s", state.message, self.poll_interval)
            await asyncio.sleep(self.poll_interval)

    def _kill(self) -> None:
        hook = ClickHouseHook(self.clickhouse_conn_id)
        try:
            for query_id in self.query_ids:
                self.log.info("Killing query %s on %s", query_id,
                              ", ".join(n.address for n in self._cluster_nodes()) or hook.address)
                kill_query(hook, query_id, self._cluster_nodes())
        finally:
            hook.close()

    async def on_kill(self) -> None:
        """The user cleared the deferred task or marked it failed or successful: kill the queries on every
        node (``KILL QUERY … ASYNC``, the load's and its secondary queries)."""
        await asyncio.to_thread(self._kill)

    async def cleanup(self) -> None:
        """Close the trigger's connections (the query itself runs on: a triggerer restart resumes the wait)."""
        if self._hook is not None:
            hook, self._hook = self._hook, None
            await asyncio.to_thread(hook.close)

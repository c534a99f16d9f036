"""Query control: what the server knows of the load's queries (``system.processes`` and ``system.query_log``
on each node), and killing them.

Typed reads for the recovery state machine (earlier tries of a query id stem), for the metrics (the load's
entry and its secondary inserts), for the triggerer's looks and for learning from past loads; one polling
helper (tenacity) for every wait, one function to flush the logs, one to kill.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from airflow_provider_s3ch.core.deferral import LoggedQuery, Look, RunningQuery
from airflow_provider_s3ch.core.history import PastLoad, parse_tag
from airflow_provider_s3ch.core.marks import FilledMark, mark_needle
from airflow_provider_s3ch.core.metrics import QueryLogRow
from airflow_provider_s3ch.core.recovery import EarlierTry, QueryId
from airflow_provider_s3ch.core.server_models import ClusterNode
from airflow_provider_s3ch.core.server_sql import (
    render_entry,
    render_is_listed,
    render_kill_query,
    render_last_entry,
    render_logged_marks,
    render_logged_tries,
    render_past_loads,
    render_running_queries,
    render_running_tries,
    render_secondary_queries,
)
from airflow_provider_s3ch.core.sql import render_flush_logs
from airflow_provider_s3ch.errors import ClickHouseQueryError, LoadError, S3chError

if TYPE_CHECKING:
    from clickhouse_driver import Client

    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

_log = logging.getLogger(__name__)

#: What an older server is sent (:func:`flush_logs`).
FLUSH_ALL_LOGS = render_flush_logs(None)


def flush_logs(hook: ClickHouseHook, nodes: Sequence[ClusterNode] = (), *, client: Client | None = None) -> None:
    """``SYSTEM FLUSH LOGS`` on ``client``, else on each node (the connection's node when there are none), so
    that ``system.query_log`` holds every query that ended: of that log alone where the server's version flushes
    one log by name (:func:`~airflow_provider_s3ch.core.sql.render_flush_logs`), and of every log where the
    server refuses the name."""
    for one in [client] if client is not None else [c for _, c in hook.node_clients(nodes)]:
        sql = render_flush_logs(_version(one))
        if sql != FLUSH_ALL_LOGS:
            try:
                hook.execute(sql, client=one)
                continue
            except ClickHouseQueryError as exc:
                _log.info("%s: %s; flushing every log", sql, exc)
        hook.execute(FLUSH_ALL_LOGS, client=one)


def _version(client: Client) -> tuple[int, int] | None:
    """The server's (major, minor) version from the client's handshake (connecting it first, as the statement would);
    None when it cannot connect (the statement then says why)."""
    connection = client.connection
    if not connection.connected:
        try:
            connection.connect()  # the handshake alone (force_connect would mark a query as running)
        except Exception:  # noqa: BLE001 - the flush that follows raises the provider's error
            return None
    info = connection.server_info
    return (int(info.version_major), int(info.version_minor)) if info is not None else None


def is_listed(hook: ClickHouseHook, query_id: str) -> bool:
    """Whether the connection's node lists ``query_id`` in ``system.processes`` (it admitted and runs it)."""
    return bool(hook.execute(*render_is_listed(query_id))[0][0])


def kill_query(hook: ClickHouseHook, query_id: str, nodes: Sequence[ClusterNode] = ()) -> None:
    """``KILL QUERY`` a query id and its secondary queries on each node (best effort), on fresh
    connections: the cached client is busy with the load while ``on_kill`` runs in another thread."""
    statement = render_kill_query(query_id)
    for host, port in [(n.host, n.port) for n in nodes] or [(hook.host, hook.port)]:
        client = hook.client_for(host, port, fresh=True)
        try:
            client.execute(*statement)
        except Exception as exc:  # noqa: BLE001 - best effort on kill
            hook.log.warning("On %s:%s, KILL QUERY failed: %s", host, port, exc)
        finally:
            client.disconnect()


def poll(timeout: float, interval: float = 0.5, *, until: Any = bool, on_wait: Any = None) -> Retrying:
    """Call a function until ``until(result)`` holds or ``timeout`` passes; then return its last result."""
    return Retrying(
        stop=stop_after_delay(timeout), wait=wait_fixed(interval), retry=retry_if_result(lambda r: not until(r)),
        before_sleep=on_wait, retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )


class QueryLog:
    """The load's queries as the server sees them, on the hook's node or on every node of a cluster.

    :param hook: the ClickHouse connection.
    """

    def __init__(self, hook: ClickHouseHook) -> None:
        self.hook = hook

    def earlier_tries(self, query_id: QueryId, nodes: Sequence[ClusterNode] = ()) -> list[EarlierTry]:
        """Every try of ``query_id``'s stem: running (``system.processes``, itself or its secondary
        queries) or done (``system.query_log``, after flushing), on each node."""
        out: list[EarlierTry] = []
        running_sql, logged_sql = render_running_tries(query_id.pattern), render_logged_tries(query_id.pattern)
        for address, client in self.hook.node_clients(nodes):
            running = self.hook.execute(*running_sql, client=client)
            flush_logs(self.hook, client=client)
            done = self.hook.rows(QueryLogRow, *logged_sql, client=client)
            out += [EarlierTry.of(str(q), "running", None, address) for (q,) in running]
            out += [EarlierTry.of(r.query_id, "finished" if r.finished else "failed", r.error, address) for r in done]
        return out

    def logged_marks(self, stem: str, nodes: Sequence[ClusterNode]) -> list[FilledMark]:
        """The marks of ``stem``'s staging tables that ``system.query_log`` saw written, on each node that answers
        (after flushing): a mark is written only once the insert finished, so one logged anywhere says so even
        where the staging tables are gone and the initiator forgot the insert."""
        out: list[FilledMark] = []
        for address, client in self.hook.node_clients(nodes):
            try:
                flush_logs(self.hook, client=client)
                rows = self.hook.execute(*render_logged_marks(mark_needle(stem)), client=client)
            except S3chError as exc:  # a node that is down: the others' logs may say it
                _log.info("On %s, the marks logged could not be read: %s", address, exc)
                continue
            out += [m for (q,) in rows if (m := FilledMark.from_statement(str(q), stem)) is not None]
        return out

    def running_queries(self, query_ids: Sequence[str], nodes: Sequence[ClusterNode] = ()) -> list[tuple[Any, ...]]:
        """(node, query_id, elapsed, read_rows, written_rows) of each running query among ``query_ids``
        or their secondary queries, on each node."""
        statement = render_running_queries(query_ids)
        return [
            (address, *row)
            for address, client in self.hook.node_clients(nodes)
            for row in self.hook.execute(*statement, client=client)
        ]

    def wait_for_queries(
        self, query_ids: Sequence[str], nodes: Sequence[ClusterNode] = (), *, timeout: float,
        log: logging.Logger | None = None,
    ) -> None:
        """Wait until none of ``query_ids`` (nor their secondary queries) runs on any node.

        :raises LoadError: one still runs after ``timeout`` seconds (the task's retries apply).
        """

        def report(state: RetryCallState) -> None:
            if log is not None and state.attempt_number % 10 == 1 and state.outcome is not None:
                for address, query_id, elapsed, read_rows, written_rows in state.outcome.result():
                    log.info("Waiting for earlier try %s on %s: %.0f s, %d rows read, %d written",
                             query_id, address, elapsed, read_rows, written_rows)

        if poll(timeout, 1.0, until=lambda running: not running, on_wait=report)(
            self.running_queries, query_ids, nodes
        ):
            raise LoadError(
                f"earlier try {', '.join(query_ids)} still runs after {timeout:.0f} s; not starting a second "
                "load of the same files (kill it with KILL QUERY, or raise earlier_try_timeout)"
            )

    def entry(self, query_id: str, nodes: Sequence[ClusterNode] = (), *, wait: float = 10.0) -> QueryLogRow:
        """The load's finished ``system.query_log`` entry on the connection's node, after flushing logs.

        :raises LoadError: it is not there after ``wait`` seconds, or the query failed.
        """

        def read() -> list[QueryLogRow]:
            flush_logs(self.hook, nodes)
            return self.hook.rows(QueryLogRow, *render_entry(query_id), node=self.hook.address)

        entries = poll(wait)(read)
        if not entries:
            raise LoadError(f"query {query_id} is not in system.query_log; is the query_log enabled on the server?")
        if not entries[-1].finished:
            raise LoadError(f"query {query_id} failed on the server: {entries[-1].error}")
        return entries[-1]

    def secondary_queries(self, query_id: str, nodes: Sequence[ClusterNode]) -> list[QueryLogRow]:
        """The finished secondary queries of ``query_id`` on each node (logs already flushed)."""
        statement = render_secondary_queries(query_id)
        return [
            row
            for address, client in self.hook.node_clients(nodes)
            for row in self.hook.rows(QueryLogRow, *statement, client=client, node=address)
        ]

    def past_loads(self, key: str) -> list[PastLoad]:
        """The finished inserts tagged with ``key`` (:mod:`airflow_provider_s3ch.core.history`), newest first:
        at most ``HISTORY_LOADS`` of the last ``HISTORY_DAYS`` days, on the connection's node. A server whose
        ``system.query_log`` cannot be read gives none: the plan is then the planner's alone."""
        try:
            rows = self.hook.execute(*render_past_loads(key))
        except S3chError as exc:
            _log.warning("No history of earlier loads (system.query_log: %s): planning without it", exc)
            return []
        out = []
        for comment, written_bytes, written_rows, memory, duration in rows:
            facts = parse_tag(str(comment))
            if facts is not None:
                out.append(PastLoad(facts=facts, written_bytes=int(written_bytes), written_rows=int(written_rows),
                                    memory_usage=int(memory), duration_ms=int(duration)))
        return out

    # ------------------------------------------------------------------ deferrable loads
    def look(self, query_ids: Sequence[str], nodes: Sequence[ClusterNode] = (), *, logged: bool = True) -> Look:
        """One look at ``query_ids`` for the triggerer: what still runs on each node (the queries or their
        secondary queries) and, once nothing runs and ``logged``, the first query's last entry in the
        connection's node's ``system.query_log`` (logs flushed on every node first)."""
        running = [
            RunningQuery(node=address, query_id=str(q), elapsed=float(elapsed), read_rows=int(read),
                         written_rows=int(written))
            for address, q, elapsed, read, written in self.running_queries(query_ids, nodes)
        ]
        if running or not logged:
            return Look(running=running)
        flush_logs(self.hook, nodes)
        entries = self.hook.rows(LoggedQuery, *render_last_entry(query_ids[0]))
        return Look(logged=entries[0] if entries else None)

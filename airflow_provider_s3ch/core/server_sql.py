"""The statements the shells send to read what the server is and what it knows of the load's queries, and the
one that stops a load: ``system.tables``, ``system.parts``, ``system.clusters``, ``system.workloads``,
``system.processes`` and ``system.query_log`` reads, ``KILL QUERY``. Pure: each function returns the text and
its parameters; the hooks (:mod:`airflow_provider_s3ch.hooks.server`, :mod:`~airflow_provider_s3ch.hooks.query_log`,
:mod:`~airflow_provider_s3ch.hooks.clickhouse`) only run them.

The other statements live beside the rules they serve: the profile's probes in :mod:`.server`, the columns in
:mod:`.schema`, the Keeper probe and the DDL in :mod:`.tables`, the flush of the logs and the load's own
statements in :mod:`.sql`, the ledger's in :mod:`.ledger_sql`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from airflow_provider_s3ch.core.history import HISTORY_DAYS, HISTORY_LOADS, tag_prefix
from airflow_provider_s3ch.core.metrics import QUERY_LOG_COLUMNS
from airflow_provider_s3ch.core.models import TableRef


class Statement(NamedTuple):
    """A statement and its parameters (the driver substitutes them)."""

    sql: str
    params: dict[str, Any] | None = None


# ---------------------------------------------------------------------- the connection

#: What Airflow's SQL hook sends to test a connection (``DbApiHook._test_connection_sql``).
TEST_CONNECTION_SQL = "SELECT 1"

#: Who the connection is, for the connection test's message: the version, the user, the database.
WHO_AM_I_SQL = "SELECT version(), currentUser(), currentDatabase()"

# ---------------------------------------------------------------------- the server and its tables

#: The server's version, where the profile's first read did not give it.
VERSION_SQL = "SELECT version()"

#: A node's workload scheduling in one read: its workloads (name, parent, DDL) and resources (name, DDL).
WORKLOADS_SQL = (
    "SELECT (SELECT groupArray((name, parent, create_query)) FROM system.workloads), "
    "(SELECT groupArray((name, create_query)) FROM system.resources)"
)

#: The clusters the server knows (for the message when the load's is not among them).
KNOWN_CLUSTERS_SQL = "SELECT DISTINCT cluster FROM system.clusters"

#: ``TABLE_ALREADY_EXISTS``: another creator won the race; ``CREATE … IF NOT EXISTS`` may still say so.
TABLE_ALREADY_EXISTS = 57
_CREATE_IF_MISSING = "CREATE TABLE IF NOT EXISTS"


def render_cluster_nodes(cluster: str) -> Statement:
    """The cluster's replicas (the fields of :class:`~airflow_provider_s3ch.core.server_models.ClusterNode`),
    by shard and replica."""
    return Statement(
        "SELECT host_name AS host, port, shard_num, replica_num, is_local FROM system.clusters "
        "WHERE cluster = %(c)s ORDER BY shard_num, replica_num", {"c": cluster},
    )


def _table_column(column: str, database: str, name: str) -> Statement:
    return Statement(f"SELECT {column} FROM system.tables WHERE database = %(d)s AND name = %(t)s",
                     {"d": database, "t": name})


def render_table_comment(database: str, name: str) -> Statement:
    """The table's comment: no row when the table does not exist."""
    return _table_column("comment", database, name)


def render_table_engine(database: str, name: str) -> Statement:
    """The table's engine: no row when the table does not exist."""
    return _table_column("engine", database, name)


def render_table_exists(database: str, name: str) -> Statement:
    """1 when the table exists on the node, else 0."""
    return _table_column("count()", database, name)


def render_partitions(database: str, name: str) -> Statement:
    """(partition_id, partition) of the table's active parts that hold rows, by partition id."""
    return Statement(
        "SELECT partition_id, any(partition) FROM system.parts WHERE database = %(d)s AND table = %(t)s "
        "AND active AND rows > 0 GROUP BY partition_id ORDER BY partition_id",
        {"d": database, "t": name},
    )


def render_moved_already(staging: TableRef, target: TableRef) -> Statement:
    """The partition ids of ``staging`` whose parts ``target`` holds already, by part UUID, in any state (merged
    away too, while the old parts are kept): a ``MOVE PARTITION`` that the server's crash cut short can leave a
    moved part in both tables (the target took it, the staging table had not yet let it go)."""
    return Statement(
        "SELECT DISTINCT partition_id FROM system.parts WHERE database = %(sd)s AND table = %(st)s AND active "
        "AND rows > 0 AND uuid != toUUIDOrZero('') AND uuid IN (SELECT uuid FROM system.parts WHERE "
        "database = %(td)s AND table = %(tt)s)",
        {"sd": staging.database, "st": staging.name, "td": target.database, "tt": target.name})


def render_staged_figures(database: str, name: str) -> Statement:
    """The rows and uncompressed bytes of the table's active parts."""
    return Statement("SELECT sum(rows), sum(data_uncompressed_bytes) FROM system.parts WHERE database = %(d)s "
                     "AND table = %(t)s AND active", {"d": database, "t": name})


def lost_create_race(code: int | None, sql: str) -> bool:
    """Whether a DDL statement failed only because another creator made its table first: a ``CREATE TABLE IF
    NOT EXISTS`` the server still answered with ``TABLE_ALREADY_EXISTS`` (the table is there: nothing failed)."""
    return code == TABLE_ALREADY_EXISTS and sql.startswith(_CREATE_IF_MISSING)


# ---------------------------------------------------------------------- the load's queries


def _log_rows(where: str) -> str:
    """The ``system.query_log`` rows (:data:`~airflow_provider_s3ch.core.metrics.QUERY_LOG_COLUMNS`) of the
    queries ``where`` selects that ended (finished or failed), oldest first."""
    return (
        f"SELECT {', '.join(QUERY_LOG_COLUMNS)} FROM system.query_log WHERE {where} "
        "AND type != 'QueryStart' AND event_date >= yesterday() ORDER BY event_time_microseconds"
    )


def render_running_tries(pattern: str) -> Statement:
    """The query ids that run on the node and match ``pattern`` (a query id stem's regular expression), each
    itself or as the initial query of a secondary query that runs."""
    return Statement(
        "SELECT DISTINCT if(match(query_id, %(r)s), query_id, initial_query_id) FROM system.processes "
        "WHERE match(query_id, %(r)s) OR match(initial_query_id, %(r)s)", {"r": pattern},
    )


def render_logged_tries(pattern: str) -> Statement:
    """The ended initial queries whose id matches ``pattern``, as ``system.query_log`` rows."""
    return Statement(_log_rows("match(query_id, %(r)s) AND is_initial_query"), {"r": pattern})


def render_logged_marks(needle: str) -> Statement:
    """The finished ``ALTER`` statements whose text holds ``needle`` (a staging table's mark being written), as
    ``system.query_log`` keeps them."""
    return Statement(
        "SELECT query FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Alter' "
        "AND event_date >= yesterday() AND position(query, %(n)s) > 0", {"n": needle})


def render_entry(query_id: str) -> Statement:
    """The query's ended ``system.query_log`` rows."""
    return Statement(_log_rows("query_id = %(q)s"), {"q": query_id})


def render_secondary_queries(query_id: str) -> Statement:
    """The ended secondary queries of ``query_id`` (a distributed load's shares), as ``system.query_log`` rows."""
    return Statement(_log_rows("initial_query_id = %(q)s AND is_initial_query = 0"), {"q": query_id})


def render_is_listed(query_id: str) -> Statement:
    """How many of the node's running queries have ``query_id`` (1 once the server admitted it)."""
    return Statement("SELECT count() FROM system.processes WHERE query_id = %(q)s", {"q": query_id})


def render_running_queries(query_ids: Sequence[str]) -> Statement:
    """(query_id, elapsed, read_rows, written_rows) of each running query among ``query_ids`` or their
    secondary queries."""
    return Statement(
        "SELECT query_id, elapsed, read_rows, written_rows FROM system.processes "
        "WHERE query_id IN %(q)s OR initial_query_id IN %(q)s", {"q": tuple(query_ids)},
    )


def render_kill_query(query_id: str) -> Statement:
    """Stop ``query_id`` and its secondary queries, without waiting for them to end."""
    return Statement("KILL QUERY WHERE query_id = %(q)s OR initial_query_id = %(q)s ASYNC", {"q": query_id})


def render_past_loads(key: str) -> Statement:
    """The finished inserts tagged with the history ``key`` (:mod:`~airflow_provider_s3ch.core.history`), newest
    first: at most :data:`~airflow_provider_s3ch.core.history.HISTORY_LOADS` of the last
    :data:`~airflow_provider_s3ch.core.history.HISTORY_DAYS` days; their tag and figures."""
    return Statement(
        "SELECT log_comment, written_bytes, written_rows, memory_usage, query_duration_ms "
        "FROM system.query_log WHERE type = 'QueryFinish' AND is_initial_query "
        "AND event_date >= today() - %(days)s AND startsWith(log_comment, %(p)s) "
        "ORDER BY event_time_microseconds DESC LIMIT %(n)s",
        {"p": tag_prefix(key), "days": HISTORY_DAYS, "n": HISTORY_LOADS},
    )


def render_last_entry(query_id: str) -> Statement:
    """The query's newest ended ``system.query_log`` row (the fields of
    :class:`~airflow_provider_s3ch.core.deferral.LoggedQuery`): what the triggerer reads once it no longer runs."""
    return Statement(
        "SELECT query_id, toString(type) AS type, exception, exception_code, read_rows, written_rows "
        "FROM system.query_log WHERE query_id = %(q)s AND type != 'QueryStart' AND event_date >= yesterday() "
        "ORDER BY event_time_microseconds DESC LIMIT 1", {"q": query_id},
    )

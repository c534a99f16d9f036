"""What the server is: its profile (version, cores, memory), its cluster, its workloads, and the facts of
its tables (engine and keys, comment, partitions, columns, a DESCRIBE of files), and the DDL the core
decides run on the right nodes. Reads only, through :class:`~.clickhouse.ClickHouseHook`; what the facts
mean is the core's business (:mod:`airflow_provider_s3ch.core.plan`, :mod:`~airflow_provider_s3ch.core.tables`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from clickhouse_driver import errors as ch_errors

from airflow_provider_s3ch.core.errors import classify_server_error, server_text
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.schema import COLUMNS_SQL, Column
from airflow_provider_s3ch.core.server import (
    BASICS_SQL,
    CORES_PROBES,
    MEMORY_PROBES,
    SETTING_TYPES_SQL,
    TABLE_INFO_SQL,
    VIEW_ROWS_SQL,
    parse_int_setting,
    table_info,
)
from airflow_provider_s3ch.core.server_models import (
    ClusterNode,
    NodeWorkloads,
    ServerProfile,
    TableInfo,
    ViewRow,
    WorkloadEntity,
)
from airflow_provider_s3ch.core.server_sql import (
    KNOWN_CLUSTERS_SQL,
    VERSION_SQL,
    WORKLOADS_SQL,
    lost_create_race,
    render_cluster_nodes,
    render_moved_already,
    render_partitions,
    render_staged_figures,
    render_table_comment,
    render_table_exists,
)
from airflow_provider_s3ch.core.sql import RenderedSQL
from airflow_provider_s3ch.core.tables import KEEPER_PROBE, Ddl
from airflow_provider_s3ch.errors import ClickHouseUnavailableError, ClusterError, S3chError, TableError
from airflow_provider_s3ch.hooks.quiet import quiet_loggers

if TYPE_CHECKING:
    from clickhouse_driver import Client

    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook


# ---------------------------------------------------------------------- the profile
def get_profile(
    hook: ClickHouseHook, table: TableRef, cluster: str | None = None, *, missing: TableInfo | None = None,
    workload: str | None = None, settings: Sequence[str] = (),
) -> ServerProfile:
    """What the planner needs: version, cores, memory, cluster nodes, the target table, the types of the load's
    settings. Every probe
    has a fallback (deployments differ): a missing system table never fails the load.

    :param table: the target table (its database defaults to the connection's).
    :param cluster: the cluster for distributed loads (default: connection extra ``cluster``).
    :param missing: the table to plan with when the target does not exist (one the load will create);
        without it a missing target is a :class:`TableError`.
    :param workload: the load's workload (None: the connection's extra; ``""``: none): the nodes'
        workloads and resources are read only when there is one.
    :param settings: the names of the load's settings: their types are read (``system.settings``).
    """
    cluster = cluster or hook.cluster
    nodes = cluster_nodes(hook, cluster) if cluster else []
    basics = _first(hook, [(BASICS_SQL, "")], hook.client(), whole=True)[0]
    cores_value, memory, version = basics if basics else (None, None, None)
    if cores_value not in (None, "") and parse_int_setting(cores_value):
        cores = max(1, parse_int_setting(cores_value) or 1)
    else:
        cores = _cores(hook, hook.client())
    workloads = workload_nodes(hook, nodes) if (hook.workload if workload is None else workload) else []
    memory_source = MEMORY_PROBES[0][1] if memory else ""
    if not memory:
        memory, memory_source = _first(hook, MEMORY_PROBES, hook.client())
    return ServerProfile(
        version=str(version or hook.execute(VERSION_SQL)[0][0]),
        cores=cores,
        memory_bytes=int(memory or 0),
        memory_source=memory_source or "unknown",
        region=hook.region,
        cluster=cluster,
        nodes=nodes,
        node_cores=[_cores(hook, client, cores) for _, client in hook.node_clients(nodes)] if len(nodes) > 1
        else [cores],
        table=missing if missing is not None and table_comment(hook, table) is None else table_facts(hook, table),
        workload=hook.workload,
        workload_nodes=workloads,
        setting_types=setting_types(hook, settings) if settings else None,
    )


def setting_types(hook: ClickHouseHook, names: Sequence[str]) -> dict[str, str] | None:
    """The server's type of each setting in ``names`` it has (``system.settings``); None when the server does not
    show them (a missing grant): the values are then not judged before the load."""
    try:
        rows = hook.client().execute(SETTING_TYPES_SQL, {"names": tuple(names)})
    except ch_errors.ServerException as exc:
        if classify_server_error(exc.code).kind == "auth":
            raise hook.translate_error(exc) from exc
        return None
    except Exception as exc:
        raise hook.translate_error(exc) from exc
    return {str(name): str(type_name) for name, type_name in rows}


def workload_nodes(hook: ClickHouseHook, nodes: Sequence[ClusterNode] = ()) -> list[NodeWorkloads]:
    """Each node's workloads and resources (workload scheduling): the connection's node, and every node
    of the cluster; one read of ``system.workloads`` and ``system.resources`` on each. A node that cannot
    be read (a server without them, a missing grant, a node the worker cannot reach) is listed with its
    error: the plan decides what that means."""
    out = []
    if not any(n.is_local for n in nodes):
        out.append(_workloads_on(hook, hook.address, hook.client(), initiator=True, member=False))
    for node in nodes:
        client = hook.client() if node.is_local else hook.client_for(node.host, node.port)
        out.append(_workloads_on(hook, node.address, client, initiator=node.is_local, member=True))
    return out


def _workloads_on(hook: ClickHouseHook, address: str, client: Client, *, initiator: bool, member: bool
                  ) -> NodeWorkloads:
    try:
        (workloads, resources), = client.execute(WORKLOADS_SQL)
    except ch_errors.ServerException as exc:
        if classify_server_error(exc.code).kind == "auth":
            raise hook.translate_error(exc) from exc
        return NodeWorkloads(node=address, initiator=initiator, member=member, error=server_text(exc.message))
    except Exception as exc:
        translated = hook.translate_error(exc)
        if initiator or not isinstance(translated, ClickHouseUnavailableError):
            raise translated from exc
        return NodeWorkloads(node=address, initiator=initiator, member=member, error=str(translated))
    return NodeWorkloads(
        node=address, initiator=initiator, member=member,
        workloads=[WorkloadEntity(name=n, parent=p, create_query=q) for n, p, q in workloads],
        resources=[WorkloadEntity(name=n, create_query=q) for n, q in resources],
    )


def _first(hook: ClickHouseHook, probes: Sequence[tuple[str, str]], client: Client, *, whole: bool = False
           ) -> tuple[Any, str]:
    """The first value the first probe that works returns (``whole``: its first row), and its label; (None, '')
    when none works."""
    for sql, label in probes:
        try:
            rows = client.execute(sql)
        except ch_errors.ServerException as exc:
            if classify_server_error(exc.code).kind == "auth":
                raise hook.translate_error(exc) from exc
            continue  # a system table this deployment lacks: the next probe
        except Exception as exc:
            raise hook.translate_error(exc) from exc
        if rows and rows[0][0] not in (None, ""):
            return (rows[0] if whole else rows[0][0]), label
    return None, ""


def _cores(hook: ClickHouseHook, client: Client, fallback: int | None = None) -> int:
    """A node's cores; a node that does not answer counts as ``fallback`` (the initiator's) when given."""
    try:
        value, _ = _first(hook, CORES_PROBES, client)
    except ClickHouseUnavailableError:
        if fallback is None:
            raise
        return fallback
    return max(1, parse_int_setting(value) or 1)


def cluster_nodes(hook: ClickHouseHook, cluster: str) -> list[ClusterNode]:
    """The cluster's replicas from ``system.clusters``; :class:`ClusterError` when it is not there."""
    nodes = hook.rows(ClusterNode, *render_cluster_nodes(cluster))
    if not nodes:
        known = [r[0] for r in hook.execute(KNOWN_CLUSTERS_SQL)]
        raise ClusterError(
            f"cluster {cluster!r} is not in system.clusters (known: {', '.join(known) or 'none'}); "
            "fix the operator's cluster argument or the connection extra 'cluster'"
        )
    return nodes


# ---------------------------------------------------------------------- tables
def table_facts(hook: ClickHouseHook, table: TableRef) -> TableInfo:
    """The target's engine, keys, database engine, dependent views and, for a Distributed table, what it
    points at; :class:`TableError` when it does not exist."""
    database = table.database or hook.database
    rows = hook.execute(TABLE_INFO_SQL, {"d": database, "t": table.name})
    if not rows:
        raise TableError(
            f"table {database}.{table.name} does not exist on {hook.address}; "
            "create it, or pass create_table='if_missing' with order_by=… to create it from the files' columns, "
            "or fix the table argument"
        )
    info = table_info(database, table.name, *rows[0][:4])
    info.database_engine, info.dependent_views = rows[0][4] or None, list(rows[0][5])
    if info.local_database and info.local_table:
        local = hook.execute(TABLE_INFO_SQL, {"d": info.local_database, "t": info.local_table})
        info.local_engine = local[0][0] if local else None
        info.local_dependent_views = list(local[0][5]) if local else []
    if info.dependent_views:  # the views' staging needs what they read and write, down the chains
        info.view_rows = [ViewRow(*r[:3], [tuple(x) for x in r[3]], *r[4:]) for r in hook.execute(VIEW_ROWS_SQL)]
    return info


def table_comment(hook: ClickHouseHook, table: TableRef, *, client: Client | None = None) -> str | None:
    """The table's comment ('' when none); None when the table does not exist (on ``client``'s node: another
    node of the cluster)."""
    rows = hook.execute(*render_table_comment(table.database or hook.database, table.name), client=client)
    return str(rows[0][0]) if rows else None


def partitions(hook: ClickHouseHook, table: TableRef, *, client: Client | None = None) -> list[tuple[str, str]]:
    """(partition_id, partition) of the table's active parts that hold rows (a partition moved
    away leaves an empty active part behind for a while: it is no partition of the data); on ``client``'s
    node when given."""
    rows = hook.execute(*render_partitions(table.database or hook.database, table.name), client=client)
    return [(str(pid), str(value)) for pid, value in rows]


def moved_already(hook: ClickHouseHook, staging: TableRef, target: TableRef, *, client: Client | None = None
                  ) -> set[str]:
    """The partition ids of ``staging`` whose parts ``target`` holds already (a ``MOVE PARTITION`` cut short by a
    crash), on ``client``'s node when given."""
    database = hook.database
    staging, target = staging.in_database(database), target.in_database(database)
    return {str(pid) for (pid,) in hook.execute(*render_moved_already(staging, target), client=client)}


def staged_figures(hook: ClickHouseHook, table: TableRef, *, client: Client | None = None) -> tuple[int, int]:
    """(rows, uncompressed bytes) of the table's active parts, on ``client``'s node when given."""
    ((rows, size),) = hook.execute(*render_staged_figures(table.database or hook.database, table.name), client=client)
    return int(rows or 0), int(size or 0)


def table_columns(hook: ClickHouseHook, table: TableInfo) -> list[Column]:
    """The table's columns from ``system.columns``: name, type, default_kind (a Distributed table's own)."""
    return hook.rows(Column, COLUMNS_SQL, {"d": table.database, "t": table.name})


def describe(hook: ClickHouseHook, statement: RenderedSQL) -> list[Column]:
    """Run a ``DESCRIBE TABLE s3(…)``: the statement holds S3 credentials, so clickhouse-driver's logger
    is held back (nothing of it is logged)."""
    with quiet_loggers("clickhouse_driver"):
        rows = hook.execute(statement.sql, settings=statement.settings)
    return [Column(name=str(row[0]), type=str(row[1])) for row in rows]


def has_keeper(hook: ClickHouseHook) -> bool:
    """Whether the server has a Keeper (``ON CLUSTER`` DDL needs one); False when it cannot tell."""
    try:
        rows = hook.execute(KEEPER_PROBE)
    except S3chError:
        return False
    return bool(rows and int(rows[0][0]) > 0)


def run_ddl(hook: ClickHouseHook, statements: Sequence[Ddl], nodes: Sequence[ClusterNode],
            log: logging.Logger) -> None:
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
            if not execute(*render_table_exists(table.database or hook.database, table.name))[0][0]:
                return
        execute(ddl.sql)
    except ch_errors.ServerException as exc:
        if lost_create_race(exc.code, ddl.sql):
            return
        raise hook.translate_error(exc) from exc
    except Exception as exc:
        raise hook.translate_error(exc) from exc

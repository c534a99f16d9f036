"""A staged load into a Distributed table: a staging table on every shard, published shard by shard.

The target is a ``Distributed`` table over a local MergeTree table on each shard of its cluster. The load
writes into a staging twin of that pair: on every shard a local staging table ``AS`` the shard's local table,
and on the connection's node a Distributed staging table over them with the target's sharding key. The
insert into the Distributed staging table (``s3Cluster`` with ``parallel_distributed_insert_select = 2``:
each node writes its share into its own local staging table; or ``s3()`` through the Distributed staging
table in the foreground) touches no row of the target. Once it finished, each shard's staging table is
marked filled (the mark, :class:`~airflow_provider_s3ch.core.marks.FilledMark`, carries every partition
the load brought, so that a retry after some shards published still knows them), then each shard publishes
its own staging table into its local table (``MOVE PARTITION``, ``REPLACE PARTITION``, ``EXCHANGE TABLES``)
and drops it: the steps of a one-node load, on each shard (:meth:`Shards.on_shard`). A retry finds, shard
by shard, what is left (a staging table still there, marked) and finishes it; it never inserts again once
any shard carries the mark or ``system.query_log`` knows the insert finished.

Pure: the rules and names; the shell (:mod:`airflow_provider_s3ch.load.shards`) runs them on each node.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.server_models import ClusterNode, TableInfo
from airflow_provider_s3ch.core.sql import quote_literal, render_table

#: What the Distributed staging table's name adds to the local staging tables' (both may share a database).
DISTRIBUTED_SUFFIX = "_all"


class Shards(BaseModel):
    """Where a staged load into a Distributed table writes and publishes, shard by shard.

    :param cluster: the Distributed table's cluster.
    :param nodes: one node of each shard (a shard has one replica: replicated shards are not staged).
    :param local_target: the local table on every shard that the Distributed target reads.
    :param local_staging: the staging table on every shard, ``AS`` the local table.
    :param sharding_key: the target's sharding key, which the Distributed staging table keeps.
    """

    model_config = ConfigDict(frozen=True)

    cluster: str
    nodes: list[ClusterNode]
    local_target: TableRef
    local_staging: TableRef
    sharding_key: str | None = None


def stageable_shards(table: TableInfo, nodes: Sequence[ClusterNode], cluster: str | None) -> tuple[bool, str]:
    """Whether a Distributed table can take a staging table on every shard, and why (or why not).

    :param table: the Distributed target as the server describes it.
    :param nodes: the connection's cluster's nodes (``system.clusters``).
    :param cluster: the connection's cluster (the operator's ``cluster``, else the connection's extra).
    """
    name = f"{table.database}.{table.name}"
    local = f"{table.local_database}.{table.local_table}"
    if not (table.dist_cluster and table.local_database and table.local_table):
        return False, f"{name} is a Distributed table whose cluster and local table could not be read"
    if (table.local_engine or "").startswith(("Replicated", "Shared")):
        return False, (f"{name} is a Distributed table over {table.local_engine} tables (staging for replicated "
                       "tables is not supported yet: docs/distributed.md)")
    if not (table.local_engine or "").endswith("MergeTree"):
        return False, (f"{name} is a Distributed table over {local}, which is {table.local_engine or 'missing'}, "
                       "not a MergeTree: it has no partitions to move or replace")
    if cluster != table.dist_cluster or not nodes:
        return False, (f"{name} is a Distributed table on cluster {table.dist_cluster!r}, and the load knows the "
                       f"nodes of {cluster!r}: pass cluster={table.dist_cluster!r} (or set the connection's extra "
                       "'cluster') so that every shard gets its staging table")
    replicas = sorted({n.shard_num for n in nodes if n.replica_num > 1})
    if replicas:
        return False, (f"{name} is a Distributed table whose shards have several replicas (shard "
                       f"{', '.join(map(str, replicas))}): staging for replicated shards is not supported yet")
    return True, f"{name} is a Distributed table over MergeTree tables {local} on {len(nodes)} shards"


def shards_of(table: TableInfo, nodes: Sequence[ClusterNode], staging_name: str) -> Shards:
    """The staging layout of a stageable Distributed ``table`` (:func:`stageable_shards`).

    :param staging_name: the local staging tables' name (``_s3ch_stage_<stem>``), in the local table's database.
    """
    assert table.dist_cluster and table.local_database and table.local_table
    return Shards(
        cluster=table.dist_cluster, nodes=sorted(nodes, key=lambda n: (n.shard_num, n.replica_num)),
        local_target=TableRef(database=table.local_database, name=table.local_table),
        local_staging=TableRef(database=table.local_database, name=staging_name),
        sharding_key=table.sharding_key or None,
    )


def render_create_distributed_staging(staging: TableRef, target: TableRef, cluster: str, local: TableRef,
                                      sharding_key: str | None) -> str:
    """``CREATE TABLE staging AS target ENGINE = Distributed(cluster, db, local[, key])``: a Distributed table of
    the target's columns over the shards' local staging tables, sharded as the target.

    :param staging: the Distributed staging table.
    :param target: the Distributed target whose columns it copies.
    :param cluster: the target's cluster.
    :param local: the local staging table on every shard.
    :param sharding_key: the target's sharding key as the server shows it (None: none).
    """
    args = [quote_literal(cluster), quote_literal(local.database or ""), quote_literal(local.name)]
    if sharding_key:
        args.append(sharding_key)
    return f"CREATE TABLE {render_table(staging)} AS {render_table(target)} ENGINE = Distributed({', '.join(args)})"

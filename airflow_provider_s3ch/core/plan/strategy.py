"""Single node or ``s3Cluster`` with ``parallel_distributed_insert_select = 2``, and why."""

from __future__ import annotations

from typing import NamedTuple

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.models import LoadRequest, Manifest
from airflow_provider_s3ch.core.server_models import ServerProfile, TableInfo


class StrategyChoice(NamedTuple):
    """The chosen strategy and why."""

    name: str
    reason: str



def choose_strategy(request: LoadRequest, manifest: Manifest, profile: ServerProfile) -> StrategyChoice:
    """Single node or ``s3Cluster`` with ``parallel_distributed_insert_select = 2``.

    :param request: the request (its ``strategy``: auto, single or distributed).
    :param manifest: the objects (their count).
    :param profile: the server (cluster, nodes, target table).
    :return: the strategy and why.
    :raises PlanError: ``strategy="distributed"`` but the cluster or the table cannot take it.
    """
    possible, why = distributed_possible(profile)
    files, nodes = manifest.file_count, profile.node_count
    if request.strategy == "single":
        return StrategyChoice("single", "strategy='single' requested")
    if request.strategy == "distributed":
        if not possible:
            raise PlanError(
                f"strategy='distributed' cannot run: {why}; use strategy='auto' or 'single', "
                "or target a Distributed table over a MergeTree table (or a Replicated/Shared MergeTree "
                "table) on a cluster of several nodes"
            )
        return StrategyChoice("distributed", f"strategy='distributed' requested; {why}")
    if not possible:
        return StrategyChoice("single", f"single node: {why}")
    if files <= nodes:
        return StrategyChoice(
            "single",
            f"{files} file{'s' if files != 1 else ''} for {nodes} nodes: s3Cluster splits work per file, "
            "so more files than nodes are needed",
        )
    return StrategyChoice("distributed", f"{files} files for {nodes} nodes on cluster '{profile.cluster}'; {why}")


def distributed_possible(profile: ServerProfile) -> tuple[bool, str]:
    """Whether the cluster and the target table can take a parallel distributed insert.

    ``parallel_distributed_insert_select = 2`` needs a Distributed target over a
    MergeTree-family table on the same cluster, or a Replicated*/Shared* MergeTree target
    (then each node inserts into its own replica). Plain MergeTree cannot.

    :param profile: the server.
    :return: (possible, why) -- why explains either way.
    """
    if not profile.cluster:
        return False, "no cluster is configured"
    if profile.node_count <= 1:
        return False, f"cluster '{profile.cluster}' has {profile.node_count} node"
    return _table_can_take_parallel_insert(profile.table, profile.cluster)


def _table_can_take_parallel_insert(table: TableInfo, cluster: str) -> tuple[bool, str]:
    name = f"{table.database}.{table.name}"
    if table.is_distributed:
        local = table.local_engine or ""
        if not local.endswith("MergeTree"):
            engine = f"engine {local}" if local else "an unknown engine"
            return False, f"Distributed table {name} points at a table with {engine}, not a MergeTree"
        if table.dist_cluster and table.dist_cluster != cluster:
            return False, (
                f"Distributed table {name} is on cluster '{table.dist_cluster}', not '{cluster}': "
                "the parallel insert needs the same cluster"
            )
        return True, f"Distributed table {name} over {local} takes a parallel distributed insert"
    if table.is_replicated and table.engine.endswith("MergeTree"):
        return True, f"{table.engine} table {name}: each node inserts into its own replica"
    return False, (
        f"table {name} is {table.engine}, not Distributed or Replicated/Shared MergeTree: "
        "parallel_distributed_insert_select needs a Distributed target or replicated storage"
    )

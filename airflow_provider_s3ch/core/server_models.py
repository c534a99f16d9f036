"""Pydantic models of the ClickHouse side as the planner sees it: the server's profile, its cluster's
nodes, the target table, each node's workload scheduling.

Plain data, as :mod:`airflow_provider_s3ch.core.models`: no I/O, no Airflow; the hooks fill them from the
server's system tables.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from pydantic import BaseModel, Field, SerializerFunctionWrapHandler, model_serializer


class ClusterNode(BaseModel):
    """One replica of a cluster, as ``system.clusters`` lists it."""

    host: str
    port: int
    shard_num: int = 1
    replica_num: int = 1
    #: The connection's own node (``system.clusters.is_local`` as the connection's node sees it).
    is_local: bool = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class ViewRow(NamedTuple):
    """One table as ``system.tables`` describes it for the views' staging
    (:data:`airflow_provider_s3ch.core.server.VIEW_ROWS_SQL`): the tables that read it (``dependents``); a
    materialized view's ``CREATE`` and query."""

    database: str
    name: str
    engine: str
    dependents: list[tuple[str, str]]
    create: str
    select: str
    uuid: str
    #: The table's partition key ('' for none).
    partition_key: str = ""
    #: Whether the table deletes rows by a TTL.
    ttl: bool = False


class TableInfo(BaseModel):
    """The target table as the server describes it."""

    database: str
    name: str
    engine: str
    partition_key: str = ""
    sorting_key: str = ""
    # Distributed tables: what they point at.
    dist_cluster: str | None = None
    local_database: str | None = None
    local_table: str | None = None
    sharding_key: str | None = None
    local_engine: str | None = None
    #: The database's engine (``Atomic``, ``Replicated``, ``Ordinary``...); None when unknown.
    database_engine: str | None = None
    #: Materialized views (and other dependents) that read from the table, ``db.name``.
    dependent_views: list[str] = Field(default_factory=list)
    #: A Distributed table: the materialized views that read from its local table (on the connection's node).
    local_dependent_views: list[str] = Field(default_factory=list)
    #: False for a table the load will create (``create_table='if_missing'``): planned, not yet there.
    exists: bool = True
    #: The server's tables as the views' staging reads them; read only when views read the target.
    view_rows: list[ViewRow] = Field(default_factory=list)
    #: ``min_bytes_for_wide_part`` where the table's definition sets it; None: the server's default.
    wide_part_bytes: int | None = None

    @model_serializer(mode="wrap")
    def _without_view_rows(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A target without views, and without its own ``min_bytes_for_wide_part``, serializes as before (XComs,
        deferred payloads)."""
        out = handler(self)
        if not self.view_rows:
            out.pop("view_rows", None)
        if self.wide_part_bytes is None:
            out.pop("wide_part_bytes", None)
        return out

    @property
    def is_distributed(self) -> bool:
        return self.engine == "Distributed"

    @property
    def is_replicated(self) -> bool:
        engine = self.local_engine or self.engine
        return engine.startswith(("Replicated", "Shared"))


class WorkloadEntity(BaseModel):
    """A workload or a resource of the server's workload scheduling (``system.workloads``, ``system.resources``)."""

    name: str
    parent: str = ""
    create_query: str = ""


class NodeWorkloads(BaseModel):
    """One node's workload scheduling, as its ``system.workloads`` and ``system.resources`` list it."""

    node: str
    #: The connection's node: the load's own query runs (and reserves memory) there.
    initiator: bool = False
    #: A node of the cluster: a distributed load's secondary queries run (and reserve memory) there.
    member: bool = False
    #: None when the node's tables could not be read (``error`` says why).
    workloads: list[WorkloadEntity] | None = None
    resources: list[WorkloadEntity] | None = None
    error: str = ""


class ServerProfile(BaseModel):
    """What the planner needs to know about the ClickHouse side."""

    version: str
    cores: int = Field(ge=1)
    memory_bytes: int = Field(ge=0, description="memory the server may use; 0 when unknown")
    memory_source: str = "unknown"
    region: str | None = None
    cluster: str | None = None
    nodes: list[ClusterNode] = Field(default_factory=list)
    node_cores: list[int] = Field(default_factory=list)
    table: TableInfo
    #: The connection's extra ``workload``: the workload of loads that name none.
    workload: str | None = None
    #: Each node's workload scheduling (the connection's node first when it is not in the cluster).
    workload_nodes: list[NodeWorkloads] = Field(default_factory=list)
    #: The server's type (``system.settings``) of each of the load's settings it has; None when not read (no
    #: settings, or a server that does not show them).
    setting_types: dict[str, str] | None = None

    @property
    def node_count(self) -> int:
        return max(1, len(self.nodes))

"""Tables from the files: the target created from the server's schema inference, and evolved under a
contract. Pure.

**Creating** (``create_table="if_missing"``). The columns come from the engine, not from a reader of
ours: ``DESCRIBE TABLE s3(<the load's glob>)`` with ``schema_inference_mode = 'union'`` (every file's
columns, united), run by the shell. :func:`created_columns` applies the nullability policy:

- **key columns** (those ``order_by``, ``partition_by`` and ``primary_key`` name) lose ``Nullable``:
  a MergeTree sorting key cannot be nullable (``allow_nullable_key`` is off by default); a NULL in
  such a column loads as the type's default (``input_format_null_as_default``);
- **every other column** keeps the type the server inferred (``Nullable(…)`` by default; the
  ``schema_inference_make_columns_nullable`` setting in ``settings`` changes that) and is declared
  with a default (``DEFAULT NULL``, or the type's default value for types that cannot be
  ``Nullable``, such as ``Array``): a file without the column loads NULL there, which is what the
  union of files means.

The statements are ``CREATE TABLE IF NOT EXISTS``: two creators at once end with one table, and a
table that exists (with whatever structure) is never replaced. A Distributed target (a
``strategy="distributed"`` load) is a local table ``<name>_local`` on every node and a
``Distributed`` table over them, ``ON CLUSTER`` where the cluster has Keeper, node by node where it
has none.

**Evolving** (``on_schema_change``) when the files' columns differ from the target's:
``"fail"`` (the default) is the schema check's error; ``"add_columns"`` adds the columns the files
have and the target lacks (:func:`evolve`: the inferred type, with a default so that old rows read
NULL), on a Distributed target to every node's local table and to the Distributed table;
``"ignore_extra"`` loads the target's columns only. A column is never dropped and a type never
changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError, SchemaError
from airflow_provider_s3ch.core.formats import NAMELESS_FORMATS
from airflow_provider_s3ch.core.models import CreateTable, SchemaChange, TableRef
from airflow_provider_s3ch.core.schema import Column, path_columns
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sql import quote_identifier, quote_literal, render_settings, render_table

#: Where the local table's name goes on a Distributed target: ``<name>_local``.
LOCAL_SUFFIX = "_local"

#: The Distributed table's sharding key when the operator creates one.
DEFAULT_SHARDING_KEY = "rand()"

#: Whether the cluster has Keeper (``ON CLUSTER`` DDL needs it); the table is missing without one.
KEEPER_PROBE = "SELECT count() FROM system.zookeeper_connection"

_ENGINE_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(\(.*\))?$", re.S)
_TOKEN_RE = re.compile(
    r"'(?:[^'\\]|\\.)*'"  # a string literal: no identifiers inside
    r"|`((?:[^`\\]|\\.)*)`"  # a backtick-quoted identifier
    r"|\"((?:[^\"\\]|\\.)*)\""  # a double-quoted identifier
    r"|([A-Za-z_][A-Za-z0-9_]*)(\s*\()?"  # a bare identifier, or a function's name when a '(' follows
    r"|\d[\w.]*",  # a number
    re.S,
)
_NULLABLE_RE = re.compile(r"^Nullable\((.*)\)$", re.S)
_LOW_CARDINALITY_RE = re.compile(r"^LowCardinality\((.*)\)$", re.S)

__all__ = ["CreateTable", "SchemaChange"]  # re-exported: the contract's words live in models


class TableSpec(BaseModel):
    """How to create the target when it is missing: its keys, engine and settings."""

    order_by: str
    partition_by: str | None = None
    primary_key: str | None = None
    engine: str = "MergeTree"
    settings: dict[str, int | float | str] = Field(default_factory=dict)

    @classmethod
    def from_arguments(
        cls, *, order_by: str | Sequence[str] | None, partition_by: str | None, primary_key: str | Sequence[str] | None,
        engine: str | None, settings: dict[str, int | float | str] | None,
    ) -> TableSpec:
        """Validate the operator's arguments: ``order_by`` is required; a list of columns becomes a tuple.

        :raises InvalidRequestError: ``order_by`` missing, an empty expression, an engine outside the
            MergeTree family.
        """
        if order_by is None or (isinstance(order_by, str) and not order_by.strip()) or (
            not isinstance(order_by, str) and not list(order_by)
        ):
            raise InvalidRequestError(
                "create_table='if_missing' needs order_by: the sorting key of the table to create, a column "
                "('id'), a list of columns (['site', 'ts']) or an expression ('(site, toDate(ts))'); "
                "'tuple()' for none"
            )
        text = engine.strip() if engine else "MergeTree"
        m = _ENGINE_RE.match(text)
        if m is None or not m.group(1).endswith("MergeTree") or m.group(1).startswith("Shared"):
            raise InvalidRequestError(
                f"engine={engine!r}: the operator creates MergeTree-family tables (the staging table and the "
                "partition moves need one); give 'MergeTree', 'ReplacingMergeTree(ver)', "
                "'ReplicatedMergeTree(…)', …"
            )
        return cls(
            order_by=_expression("order_by", order_by),
            partition_by=_expression("partition_by", partition_by) if partition_by else None,
            primary_key=_expression("primary_key", primary_key) if primary_key else None,
            engine=text,
            settings=dict(settings or {}),
        )

    def key_expressions(self) -> dict[str, str]:
        """The clauses that name key columns: ``{"order_by": …, "partition_by": …, "primary_key": …}``."""
        found = {"order_by": self.order_by, "partition_by": self.partition_by, "primary_key": self.primary_key}
        return {name: text for name, text in found.items() if text}


def _expression(argument: str, value: str | Sequence[str]) -> str:
    if isinstance(value, str):
        text = value.strip()
    else:
        text = "(" + ", ".join(quote_identifier(str(v)) for v in value) + ")"
    if not text or "\0" in text:
        raise InvalidRequestError(f"{argument}={value!r} is not a ClickHouse expression")
    return text


def identifiers(expression: str) -> list[str]:
    """The column names an expression refers to (function names and string literals left out), in order.

    >>> identifiers("(site, toDate(`ts`))")
    ['site', 'ts']
    """
    names: list[str] = []
    for m in _TOKEN_RE.finditer(expression):
        quoted = m.group(1) if m.group(1) is not None else m.group(2)
        name = _unescape(quoted) if quoted is not None else None
        if name is None and m.group(3) and not m.group(4):
            name = m.group(3)
        if name is not None and name not in names:
            names.append(name)
    return names


_UNESCAPES = {"0": "\0", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_RE = re.compile(r"\\(x[0-9A-Fa-f]{2}|.)", re.S)


def _unescape(text: str) -> str:
    """A quoted identifier's name: ClickHouse's backslash escapes undone (``\\n``, ``\\xHH``, ``\\` ``...)."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code.startswith("x") and len(code) == 3:
            return chr(int(code[1:], 16))
        return _UNESCAPES.get(code, code)

    return _ESCAPE_RE.sub(one, text)


def _strip_nullable(type_name: str) -> str:
    """``Nullable(T)`` -> ``T``; ``LowCardinality(Nullable(T))`` -> ``LowCardinality(T)``."""
    text = type_name.strip()
    if m := _NULLABLE_RE.match(text):
        return m.group(1).strip()
    if m := _LOW_CARDINALITY_RE.match(text):
        inner = m.group(1).strip()
        if n := _NULLABLE_RE.match(inner):
            return f"LowCardinality({n.group(1).strip()})"
    return text


def _nullable(type_name: str) -> bool:
    text = type_name.strip()
    return bool(_NULLABLE_RE.match(text)) or (
        bool(m := _LOW_CARDINALITY_RE.match(text)) and bool(_NULLABLE_RE.match(m.group(1).strip()))
    )


def default_expression(type_name: str) -> str:
    """What an optional column's ``DEFAULT`` is: ``NULL`` for a nullable type, else the type's default value."""
    return "NULL" if _nullable(type_name) else f"defaultValueOfTypeName({quote_literal(type_name)})"


def key_columns(spec: TableSpec, inferred: Sequence[Column], *, file: str) -> list[str]:
    """The columns the keys name; :class:`SchemaError` when a key names a column the files do not have.

    :param spec: the table's keys.
    :param inferred: the files' columns.
    :param file: the files, for the message.
    """
    names = {c.name for c in inferred}
    keys: list[str] = []
    for argument, expression in spec.key_expressions().items():
        for name in identifiers(expression):
            if name not in names:
                raise SchemaError(
                    f"{argument}={expression!r} names column {name!r}, which the files {file} do not have "
                    f"(the server infers: {', '.join(c.name for c in inferred) or 'no columns'}); "
                    f"name one of those columns in {argument}"
                )
            if name not in keys:
                keys.append(name)
    return keys


def created_columns(inferred: Sequence[Column], spec: TableSpec, *, file: str) -> list[Column]:
    """The columns of the table to create from the server's inference, under the nullability policy.

    Key columns lose ``Nullable`` and are required; the others keep the inferred type and get a default
    (``default_kind='DEFAULT'``), so that a file without them loads NULL there.

    :param inferred: ``DESCRIBE s3(…)``'s columns (``schema_inference_mode='union'``).
    :param spec: the table's keys.
    :param file: the files, for messages.
    """
    if not inferred:
        raise SchemaError(f"the server infers no columns from {file}: nothing to create a table from")
    keys = set(key_columns(spec, inferred, file=file))
    return [
        Column(name=c.name, type=_strip_nullable(c.type)) if c.name in keys
        else Column(name=c.name, type=c.type, default_kind="DEFAULT")
        for c in inferred
    ]  # fmt: skip


def column_definition(column: Column) -> str:
    """```name` Type`` or ```name` Type DEFAULT …``."""
    text = f"{quote_identifier(column.name)} {column.type}"
    return f"{text} DEFAULT {default_expression(column.type)}" if column.default_kind == "DEFAULT" else text


class Ddl(BaseModel):
    """A DDL statement and where it runs: on the node the hook talks to, or on every node of the cluster."""

    sql: str
    on: Literal["initiator", "every_node"] = "initiator"
    note: str = ""
    #: An ALTER's table: a node without it is left out (a Distributed table need not be on every node).
    alters: TableRef | None = None


class Creation(BaseModel):
    """What creating the target takes: the statements, the columns it gets, the local table if any."""

    statements: list[Ddl]
    columns: list[Column]
    table: TableInfo
    how: str


def _create_sql(table: TableRef, columns: Sequence[Column], spec: TableSpec, on_cluster: str | None) -> str:
    parts = [
        f"CREATE TABLE IF NOT EXISTS {render_table(table)}"
        + (f" ON CLUSTER {quote_identifier(on_cluster)}" if on_cluster else ""),
        "(" + ", ".join(column_definition(c) for c in columns) + ")",
        f"ENGINE = {spec.engine}",
    ]
    if spec.partition_by:
        parts.append(f"PARTITION BY {spec.partition_by}")
    if spec.primary_key:
        parts.append(f"PRIMARY KEY {spec.primary_key}")
    parts.append(f"ORDER BY {spec.order_by}")
    settings = render_settings(spec.settings)
    if settings:
        parts.append(settings)
    return " ".join(parts)


def planned_table(table: TableRef, spec: TableSpec, *, distributed: bool, cluster: str | None = None) -> TableInfo:
    """The target as it will be once created (``exists=False``): what a plan is made for before it is there.

    :param table: the target (its database resolved).
    :param spec: keys and engine.
    :param distributed: a Distributed table over ``<name>_local`` tables.
    :param cluster: the cluster of a Distributed target.
    """
    engine = _ENGINE_RE.match(spec.engine).group(1)  # type: ignore[union-attr]  # validated by TableSpec
    info = TableInfo(
        database=table.database or "", name=table.name, engine=engine, partition_key=spec.partition_by or "",
        sorting_key=spec.order_by, exists=False,
    )
    if not distributed:
        return info
    return info.model_copy(update={
        "engine": "Distributed", "dist_cluster": cluster, "local_database": table.database,
        "local_table": f"{table.name}{LOCAL_SUFFIX}", "sharding_key": DEFAULT_SHARDING_KEY, "local_engine": engine,
    })  # fmt: skip


def creation(
    table: TableRef, inferred: Sequence[Column], spec: TableSpec, *, file: str, distributed: bool = False,
    cluster: str | None = None, keeper: bool = False,
) -> Creation:
    """The statements that create the target from the files' columns.

    :param table: the target (its database resolved).
    :param inferred: the files' columns as the server infers them (union of the files).
    :param spec: keys, engine, settings.
    :param file: the files, for messages.
    :param distributed: create a local table on every node and a Distributed table over them.
    :param cluster: the cluster (for a distributed target).
    :param keeper: whether the cluster has Keeper: ``ON CLUSTER`` DDL, else node by node.
    """
    columns = created_columns(inferred, spec, file=file)
    info = planned_table(table, spec, distributed=False)
    if not distributed:
        sql = _create_sql(table, columns, spec, None)
        return Creation(statements=[Ddl(sql=sql, note=f"Created table {render_table(table)} from the files' columns")],
                        columns=columns, table=info, how=f"{info.engine} table")
    if not cluster:
        raise InvalidRequestError("creating a distributed target needs a cluster: pass cluster= or set the "
                                  "connection's extra 'cluster'")
    local = TableRef(database=table.database, name=f"{table.name}{LOCAL_SUFFIX}")
    on_cluster = cluster if keeper else None
    where: Literal["initiator", "every_node"] = "initiator" if keeper else "every_node"
    dist = (
        f"CREATE TABLE IF NOT EXISTS {render_table(table)}"
        + (f" ON CLUSTER {quote_identifier(cluster)}" if keeper else "")
        + f" AS {render_table(local)} ENGINE = Distributed({quote_literal(cluster)}, "
        f"{quote_literal(table.database or '')}, {quote_literal(local.name)}, {DEFAULT_SHARDING_KEY})"
    )
    info = planned_table(table, spec, distributed=True, cluster=cluster)
    how = "ON CLUSTER (the cluster has Keeper)" if keeper else "node by node (the cluster has no Keeper)"
    return Creation(
        statements=[
            Ddl(sql=_create_sql(local, columns, spec, on_cluster), on=where,
                note=f"Created local table {render_table(local)} on every node {how}"),
            Ddl(sql=dist, on=where, note=f"Created Distributed table {render_table(table)} over {render_table(local)}"),
        ],
        columns=columns, table=info, how=f"Distributed over {info.local_engine} tables, {how}",
    )  # fmt: skip


class Evolution(BaseModel):
    """What the contract does with the files' columns against the target's."""

    policy: SchemaChange
    added: list[Column] = Field(default_factory=list)
    statements: list[Ddl] = Field(default_factory=list)

    @property
    def added_names(self) -> list[str]:
        return [c.name for c in self.added]


def evolve(
    target: TableInfo, target_columns: Sequence[Column], files: Sequence[Column], *, policy: SchemaChange, file: str,
    keeper: bool = False,
) -> Evolution:
    """The columns to add under ``on_schema_change='add_columns'``: those the files have and the target lacks.

    Path columns (``…/day=01/…``) are not added: the server fills them from the key. A column is never
    dropped, a type never changed. Other policies add nothing (the schema check decides).

    :param target: the target (a Distributed one's local table is altered too).
    :param target_columns: the target's columns.
    :param files: the files' columns (the union the server infers).
    :param policy: ``on_schema_change``.
    :param file: the files (their path columns are left out).
    :param keeper: the cluster has Keeper (``ON CLUSTER``), else every node.
    """
    if policy != "add_columns":
        return Evolution(policy=policy)
    have = {c.name for c in target_columns}
    from_path = path_columns(file)
    added = [
        Column(name=c.name, type=c.type, default_kind="DEFAULT")
        for c in files if c.name not in have and c.name not in from_path
    ]  # fmt: skip
    if not added:
        return Evolution(policy=policy)
    names = ", ".join(c.name for c in added)
    tables = [TableRef(database=target.database, name=target.name)]
    if target.is_distributed and target.local_table:
        tables.insert(0, TableRef(database=target.local_database or target.database, name=target.local_table))
    on_cluster = target.dist_cluster if (keeper and target.is_distributed and target.dist_cluster) else None
    statements = [
        Ddl(
            sql=f"ALTER TABLE {render_table(t)}"
            + (f" ON CLUSTER {quote_identifier(on_cluster)}" if on_cluster else "")
            + " "
            + ", ".join(f"ADD COLUMN IF NOT EXISTS {column_definition(c)}" for c in added),
            on="every_node" if target.is_distributed and not on_cluster else "initiator",
            alters=t,
            note=f"Added columns {names} to {render_table(t)} (on_schema_change='add_columns')",
        )
        for t in tables
    ]
    return Evolution(policy=policy, added=added, statements=statements)


def evolution_skipped(fmt: str, structure: str | None) -> str | None:
    """Why ``on_schema_change='add_columns'`` cannot add columns to this load, or None when it can: columns
    are added by name, so the files must name them (a format with names, read without a ``structure``)."""
    if structure is not None:
        return (
            "on_schema_change='add_columns' adds nothing with a structure: the insert fills the table's "
            "columns by position from it"
        )
    if fmt.lower() in NAMELESS_FORMATS:
        return f"on_schema_change='add_columns' adds nothing: format {fmt} carries no column names"
    return None


def with_added(target_columns: Sequence[Column], evolution: Evolution) -> list[Column]:
    """The target's columns once the evolution's columns are added (what a dry run checks against)."""
    return [*target_columns, *evolution.added]


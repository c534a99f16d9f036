"""Reading the server's own texts: setting values and engine clauses. Pure."""

from __future__ import annotations

import re

from airflow_provider_s3ch.core.server_models import TableInfo

_INT_SETTING_RE = re.compile(r"\s*(?:auto\()?(\d+)\)?\s*")
_DIST_ARGS_RE = re.compile(r"^Distributed\((.*)\)", re.S)


def parse_int_setting(value: object) -> int | None:
    """``'8'`` -> 8, ``'auto(8)'`` -> 8, anything else -> None."""
    m = _INT_SETTING_RE.fullmatch(str(value))
    return int(m.group(1)) if m else None


def split_args(text: str) -> list[str]:
    """Split the arguments of an engine clause on top-level commas, unquoting string literals."""
    out, buf, depth, quote = [], "", 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and i + 1 < len(text):
                buf += text[i + 1]
                i += 2
                continue
            if ch == quote:
                quote = ""
            else:
                buf += ch
        elif ch in "'`\"":
            quote = ch
        elif ch in "()":
            depth += 1 if ch == "(" else -1
            buf += ch
        elif ch == "," and depth == 0:
            out.append(buf.strip())
            buf = ""
        else:
            buf += ch
        i += 1
    if buf.strip():
        out.append(buf.strip())
    return out


#: A table's own ``min_bytes_for_wide_part`` in its ``engine_full`` (``SETTINGS …, min_bytes_for_wide_part = N``).
_WIDE_PART_RE = re.compile(r"\bmin_bytes_for_wide_part = (\d+)")


def table_info(
    database: str, name: str, engine: str, partition_key: str, sorting_key: str, engine_full: str
) -> TableInfo:
    """The target as ``system.tables`` describes it; for a Distributed table, what it points at."""
    wide = _WIDE_PART_RE.search(engine_full or "")
    info = TableInfo(
        database=database, name=name, engine=engine, partition_key=partition_key, sorting_key=sorting_key,
        wide_part_bytes=int(wide.group(1)) if wide else None,
    )
    m = _DIST_ARGS_RE.match(engine_full or "")
    if engine == "Distributed" and m:
        args = split_args(m.group(1)) + [None] * 4  # type: ignore[list-item]
        info.dist_cluster, info.local_database, info.local_table, info.sharding_key = args[:4]
    return info


#: Where deployments keep the server's memory, first that answers wins (clickhouse-local and some
#: managed services lack ``system.asynchronous_metrics``); each with the label the plan's reason shows.
MEMORY_PROBES = (
    ("SELECT toUInt64(value) FROM system.server_settings WHERE name = 'max_server_memory_usage'",
     "system.server_settings.max_server_memory_usage"),
    ("SELECT toUInt64(value) FROM system.asynchronous_metrics WHERE metric = 'OSMemoryTotal'",
     "system.asynchronous_metrics.OSMemoryTotal"),
)  # fmt: skip

#: Where deployments tell the cores a query may use (``max_threads`` is ``auto(N)`` by default).
CORES_PROBES = (
    ("SELECT value FROM system.settings WHERE name = 'max_threads'", "max_threads"),
    ("SELECT getSetting('max_threads')", "max_threads"),
    ("SELECT value FROM system.asynchronous_metrics WHERE metric = 'NumberOfCPUCores'", "NumberOfCPUCores"),
)

#: The first probe of the cores and the memory, and the version, in one round trip (the probes one by one when a
#: deployment lacks one of the tables, or gives no value).
BASICS_SQL = f"SELECT ({CORES_PROBES[0][0]}), ({MEMORY_PROBES[0][0]}), version()"

#: The server's type of each of the user's settings (by name or alias): what their values are checked against.
SETTING_TYPES_SQL = "SELECT name, type FROM system.settings WHERE name IN %(names)s"

#: The target as :func:`table_info` takes it, plus its database's engine and its dependent views.
TABLE_INFO_SQL = (
    "SELECT t.engine, t.partition_key, t.sorting_key, t.engine_full, d.engine, "
    "arrayMap((x, y) -> concat(x, '.', y), t.dependencies_database, t.dependencies_table) "
    "FROM system.tables AS t LEFT JOIN system.databases AS d ON d.name = t.database "
    "WHERE t.database = %(d)s AND t.name = %(t)s"
)

#: Every table of the server a materialized view may read or write (:class:`~.server_models.ViewRow`): read
#: only for a target that views read from.
VIEW_ROWS_SQL = (
    "SELECT database, name, engine, arrayZip(dependencies_database, dependencies_table), "
    "if(engine = 'MaterializedView', create_table_query, ''), if(engine = 'MaterializedView', as_select, ''), "
    "toString(uuid), partition_key, position(engine_full, ' TTL ') > 0 FROM system.tables "
    "WHERE database NOT IN ('system', 'INFORMATION_SCHEMA', 'information_schema')"
)

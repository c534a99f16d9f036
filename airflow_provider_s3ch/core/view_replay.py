"""The replace modes under materialized views: the views are recomputed, not left stale.

- ``overwrite``: the twins read the staging table, as under ``append``; each view's target is then made to
  hold what its view makes of the files alone: the copy's partitions replace the target's, and the target's
  partitions the copy lacks are dropped. Nothing is replayed (the insert fed the twins, as a plain insert feeds
  the views), so any view can be; only a view's target that another table's view writes too is refused.
- ``replace_partitions``: the raw table as it will be (its other partitions and the files' rows) is fed through
  the twins, by a ``Null`` feed table; in each view's target, the partitions that the replaced rows or the new
  ones reach are replaced by what the view makes of that raw table, and those it no longer reaches dropped.
  Exact when the views' targets hold what their views made of the raw table: no other writer, no
  non-deterministic call, no other table read, and no TTL on the raw table (rows it deleted fed the views).

Which partitions each view's target replaces is computed before the staging table is marked filled, and kept
on each copy's comment (:data:`AFFECTED`): a retry replaces and drops the same ones, idempotently.

Pure: the plan's twins and the server's rows in, statements and refusals out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.server_models import ViewRow
from airflow_provider_s3ch.core.sql import quote_literal, render_table
from airflow_provider_s3ch.core.views import (
    _QUALIFIED,
    StagedView,
    _code,
    _name,
    _swap,
    _target_of,
    copies,
)

#: What the feed table's name adds to the staging table's (``replace_partitions``: the raw table as it will be
#: is fed through the twins); not a hex digit, so no twin's or copy's tag ends so.
FEED_SUFFIX = "n"
#: A staging copy's comment under the replace modes: the partition ids of the view's target it replaces (those
#: the copy lacks are dropped), written before the staging table is marked filled.
AFFECTED = "s3ch-affected:"
#: Calls whose result a replay computes anew (time, randomness, the block, other tables' contents): a view
#: that makes them cannot be recomputed to what it held.
_UNSAFE_CALLS = re.compile(
    r"\b(now|now64|nowInBlock|today|yesterday|rand\w*|generateUUIDv\d|generateULID|generateSnowflakeID|"
    r"currentUser|hostName|uptime|dictGet\w*|dictHas|joinGet\w*|rowNumberInBlock|blockNumber|neighbor|"
    r"runningAccumulate|runningDifference\w*|randomString\w*|fuzzBits|file|url|s3\w*|remote\w*)\s*\(", re.I)
#: Settings of the reads below: ``*`` includes the columns a view may compute from (MATERIALIZED, ALIAS).
_ASTERISK = " SETTINGS asterisk_include_materialized_columns = 1, asterisk_include_alias_columns = 1"


def feed_table(staging: TableRef) -> TableRef:
    """The ``Null`` table the first twins read under ``replace_partitions``."""
    return staging.model_copy(update={"name": staging.name + FEED_SUFFIX})


def replay_problem(mode: str, target: TableRef, staged: Sequence[StagedView], rows: Iterable[ViewRow]) -> str | None:
    """Why the views cannot be recomputed exactly under ``mode``; None when they can."""
    by_name = {(r.database, r.name): r for r in rows}
    raw = by_name.get((target.database, target.name))
    if mode == "replace_partitions" and raw is not None and raw.ttl:
        return (f"{target} deletes rows by a TTL, and the rows it deleted fed the views' targets: recomputing "
                "their partitions from the raw table would lose them")
    names = {(v.view.database, v.view.name) for v in staged}
    for one in staged if mode == "replace_partitions" else ():  # overwrite replays nothing: the insert feeds all
        row = by_name.get((one.view.database, one.view.name))
        code = _code(row.select if row is not None else "")
        call = _UNSAFE_CALLS.search(code)
        label = f"{one.view.database}.{one.view.name}"
        if call:
            return f"materialized view {label} calls {call.group(1)}(), which a recomputation computes anew"
        reads = one.reads
        for m in re.finditer(_QUALIFIED, code):
            other = _name(m.group(0))
            if other in by_name and (reads is None or other != (reads.database, reads.name)):
                return f"materialized view {label} reads {other[0]}.{other[1]} too, whose rows a recomputation " \
                       "would not replay"
    written = {(one.target.database, one.target.name) for one in staged}
    for row in by_name.values():
        if row.engine == "MaterializedView" and (row.database, row.name) not in names and \
                _target_of(row, by_name) in written:
            return (f"materialized view {row.database}.{row.name} writes a view's target too (from another "
                    "table): a recomputation from the load's table would drop its rows")
    if mode == "replace_partitions":
        return _order_problem(staged)
    return None


def _order_problem(staged: Sequence[StagedView]) -> str | None:
    """A copy read before every view writing it is listed, or a ``Null`` link with several writers: the
    partitions a view reaches are computed in the plan's order, each from its source's."""
    last_writer = {one.staging.name: i for i, one in enumerate(staged)}
    read = {one.source.name for one in staged}
    for i, one in enumerate(staged):
        if last_writer.get(one.source.name, -1) > i:
            return f"materialized view {one.view} reads a table that views at several depths write"
        writers = sum(1 for c in staged if c.staging.name == one.staging.name)
        if not one.moves and writers > 1 and one.staging.name in read:
            return f"several views write the Null table {one.target}, which other views read"
    return None


def feed_sql(target: TableRef, staging: TableRef, replaced: Sequence[str]) -> list[str]:
    """The raw table as it will be, through the twins: the staging table's rows and the target's other
    partitions, into the feed table."""
    feed = render_table(feed_table(staging))
    where = f" WHERE _partition_id NOT IN ({_ids(replaced)})" if replaced else ""
    # the table's own rows: a block may mix as many of its partitions as it holds, whatever the insert allows
    settings = " SETTINGS max_partitions_per_insert_block = 0"
    return [f"INSERT INTO {feed} SELECT * FROM {render_table(staging)}{settings}",
            f"INSERT INTO {feed} SELECT * FROM {render_table(target)}{where}{settings}"]


def raw_rows(target: TableRef, staging: TableRef, replaced: Sequence[str]) -> str:
    """The rows a ``replace_partitions`` load changes: the target's replaced partitions and the staging table's."""
    old = f"SELECT * FROM {render_table(target)} WHERE _partition_id IN ({_ids(replaced)})" if replaced else ""
    return "(" + " UNION ALL ".join(q for q in (old, f"SELECT * FROM {render_table(staging)}") if q) + ")"


def copy_rows(one: StagedView, ids: Sequence[str]) -> str:
    """The rows of a view's target a load changes: its affected partitions, before and after."""
    if not ids:
        return f"(SELECT * FROM {render_table(one.target)} WHERE 0)"
    return (f"(SELECT * FROM {render_table(one.target)} WHERE _partition_id IN ({_ids(ids)}) UNION ALL "
            f"SELECT * FROM {render_table(one.staging)} WHERE _partition_id IN ({_ids(ids)}))")


def view_rows(one: StagedView, sources: Mapping[str, str]) -> str:
    """What a view makes of its source's changed rows (``sources``, by the twin's source's name)."""
    query = _swap(one.select, one.source, sources[one.source.name])
    assert query is not None  # the twin's query names its source once
    return f"({query})"


def partition_id_expr(key: str) -> str:
    """``partitionID(…)`` of a partition key as ``system.tables`` shows it (a tuple's elements as arguments)."""
    key = key.strip()
    if not key:
        return "'all'"
    inner = key[1:-1] if key.startswith("(") and _closes_at_end(key) else None
    return f"partitionID({inner if inner is not None and _top_level_comma(inner) else key})"


def _closes_at_end(text: str) -> bool:
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return i == len(text) - 1
    return False


def _top_level_comma(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            return True
    return False


def affected_sql(writers: Sequence[StagedView], sources: Mapping[str, str]) -> str:
    """The partition ids of a view's target that its writers reach from their sources' changed rows."""
    expr = partition_id_expr(writers[0].key)
    parts = " UNION ALL ".join(f"SELECT {expr} AS pid FROM {view_rows(w, sources)}" for w in writers)
    return f"SELECT DISTINCT pid FROM ({parts}) ORDER BY pid{_ASTERISK}"


def writers_of(staged: Sequence[StagedView]) -> list[list[StagedView]]:
    """The twins grouped by the copy they write, in the plan's order."""
    return [[w for w in staged if w.staging.name == one.staging.name] for one in copies(staged)]


def affected_comment(ids: Sequence[str]) -> str:
    """A copy's comment: the partition ids of the view's target it replaces."""
    return AFFECTED + ",".join(ids)


def read_affected(comment: str | None) -> list[str] | None:
    """The partition ids a copy's comment names; None when the copy is gone or carries none."""
    if comment is None or not comment.startswith(AFFECTED):
        return None
    return [pid for pid in comment[len(AFFECTED):].split(",") if pid]


def truncate_sql(staged: Sequence[StagedView]) -> list[str]:
    """The copies emptied (a retry feeds them again)."""
    return [f"TRUNCATE TABLE {render_table(one.staging)}" for one in copies(staged) if one.moves]


def _ids(ids: Sequence[str]) -> str:
    return ", ".join(quote_literal(pid) for pid in ids)

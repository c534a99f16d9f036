"""Materialized views under a staged load: the views that read the target (and the views that read their
targets, down the chain) are given staging twins, so that the one insert into the staging table feeds each
view once, into a staging copy of its target; the copies' partitions then move into the views' targets as
the staging table's move into the target. A failed try leaves every real table untouched; a retry resumes the
moves, and never repeats one (the parts' UUIDs, :func:`airflow_provider_s3ch.load.statements.not_moved_yet`).

Pure: the server's rows in, the plan and its statements out. The shell reads the rows
(:data:`airflow_provider_s3ch.core.server.VIEW_ROWS_SQL`) and runs the statements.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from pydantic import BaseModel

from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.server_models import ViewRow
from airflow_provider_s3ch.core.sql import render_create_staging, render_drop_table, render_table

_IDENT = r"(?:`(?:[^`\\]|\\.)*`|\"(?:[^\"\\]|\\.)*\"|[A-Za-z_][A-Za-z0-9_$]*)"
_QUALIFIED = rf"{_IDENT}\s*\.\s*{_IDENT}"
#: A string literal or a comment (skipped), or a qualified name ``db.table`` (group ``name``).
_TOKENS = re.compile(rf"'(?:[^'\\]|\\.|'')*'|--[^\n]*|/\*.*?\*/|(?P<name>{_QUALIFIED})", re.S)
_VIEW_HEAD = re.compile(rf"CREATE MATERIALIZED VIEW (?:IF NOT EXISTS )?{_QUALIFIED}\s+(?P<rest>.*)", re.S)
_TO = re.compile(rf"TO\s+(?P<db>{_IDENT})\s*\.\s*(?P<name>{_IDENT})")
_SPLIT = re.compile(rf"(?P<db>{_IDENT})\s*\.\s*(?P<name>{_IDENT})")

#: Engines a view's target may have for the load to stage it: a MergeTree table (its partitions move), or
#: ``Null`` (a link in a chain: nothing is kept, the views reading it fire).
_MOVED_ENGINES = "MergeTree"
_PASSED_ENGINES = ("Null",)
#: Hex digits of a twin's or copy's tag (:func:`_tag`).
TAG_HEX_DIGITS = 10
#: How deep a chain of views may go (a view's target read by another view...).
MAX_DEPTH = 8


def _unquote(ident: str) -> str:
    if ident[:1] in "`\"":
        return re.sub(r"\\(.)", r"\1", ident[1:-1])
    return ident


def _name(text: str) -> tuple[str, str]:
    m = _SPLIT.fullmatch(text)
    assert m is not None
    return _unquote(m.group("db")), _unquote(m.group("name"))


def _code(select: str) -> str:
    """The query with its string literals and comments blanked."""
    return _TOKENS.sub(lambda m: m.group(0) if m.group("name") is not None else " ", select)


def _swap(select: str, old: TableRef, text: str) -> str | None:
    """``select`` with its one mention of ``old`` (outside literals and comments) replaced by ``text``."""
    found = [m for m in _TOKENS.finditer(select)
             if m.group("name") is not None and _name(m.group("name")) == (old.database, old.name)]
    if len(found) != 1:
        return None
    return select[:found[0].start()] + text + select[found[0].end():]


def retarget(select: str, old: TableRef, new: TableRef) -> str | None:
    """A view's query reading ``new`` where it read ``old``; None unless the query names ``old`` exactly once
    (ClickHouse qualifies a view's tables with their database when it stores the view: ``db.table``).

    :param select: the view's query (``system.tables.as_select``).
    :param old: the table it reads.
    :param new: the table its twin reads.
    """
    return _swap(select, old, render_table(new))


class StagedView(BaseModel):
    """A view's staging twin: ``staging_view`` reads ``source`` (the staging table, or the staging copy of the
    table the view reads) with the view's query and writes ``staging``, the staging copy of the view's target
    ``target``; ``moves``: the copy's partitions move into the target (False for a ``Null`` link)."""

    view: TableRef
    staging_view: TableRef
    source: TableRef
    select: str
    target: TableRef
    staging: TableRef
    moves: bool = True
    #: The table the view reads (the load's target, or another view's target); None as before the replace modes.
    reads: TableRef | None = None
    #: The partition key of the view's target (``system.tables.partition_key``; '' for none).
    key: str = ""


class ViewsPlan(NamedTuple):
    """The twins, in order from the target down the chains; or why the views cannot be staged."""

    staged: list[StagedView]
    why_not: str | None


def _after_name(row: ViewRow) -> str:
    """What a materialized view's ``CREATE`` says after its name (``TO …``, ``REFRESH …``, its columns...)."""
    head = _VIEW_HEAD.match(row.create)
    return head.group("rest") if head else ""


def _target_of(row: ViewRow, rows: Mapping[tuple[str, str], ViewRow]) -> tuple[str, str] | None:
    """The table a materialized view writes: its ``TO`` table, or its inner table when the server names it."""
    to = _TO.match(_after_name(row))
    if to is not None:
        return _unquote(to.group("db")), _unquote(to.group("name"))
    named = [] if row.uuid.startswith("00000000-") else [f".inner_id.{row.uuid}"]
    for inner in (*named, f".inner.{row.name}"):
        if (row.database, inner) in rows:
            return row.database, inner
    return None


def _tag(database: str, name: str) -> str:
    """What a twin's or a copy's name adds to the staging table's: a digest of the table it stands for, so that
    a retry that finds an earlier try's copy knows whose it is, whatever order the server lists views in."""
    return hashlib.sha256(f"{database}.{name}".encode()).hexdigest()[:TAG_HEX_DIGITS]


def stage_views(target: TableRef, staging: TableRef, rows: Iterable[ViewRow], *, feed: TableRef | None = None
                ) -> ViewsPlan:
    """The staging twins of the views that read ``target``, and of those that read their targets, down the
    chains; or why they cannot be staged (the load is then a direct insert, or refused).

    :param target: the load's target.
    :param staging: its staging table (``<prefix><stem>``); the twins and copies are named after it, ``m<tag>``
        (views) and ``v<tag>`` (copies of their targets), in its database, the tag a digest of the view's or
        the target's name (:func:`_tag`).
    :param rows: ``system.tables``' rows of the server's views and of the tables they write.
    :param feed: the table the first twins read instead of the staging table (``replace_partitions``:
        :func:`feed_table`).
    """
    by_name = {(r.database, r.name): r for r in rows}
    copies: dict[tuple[str, str], StagedView] = {}
    staged: list[StagedView] = []
    todo: list[tuple[TableRef, TableRef, int]] = [(target, feed or staging, 0)]
    while todo:
        reads, source, depth = todo.pop(0)
        row = by_name.get((reads.database, reads.name))
        for db, name in sorted(row.dependents) if row is not None else []:
            view = by_name.get((db, name))
            label = f"{db}.{name}"
            if view is None or view.engine != "MaterializedView":
                return ViewsPlan([], f"{label} reads {reads.database}.{reads.name} and is "
                                     f"{view.engine if view else 'not described by the server'}, not a materialized "
                                     "view")
            if re.match(r"REFRESH\b", _after_name(view)):
                continue  # a refreshable view is not fed by inserts
            written = _target_of(view, by_name)
            if written is None:
                return ViewsPlan([], f"materialized view {label} keeps its rows in an inner table the server does "
                                     "not name; give the view a TO table")
            out = by_name.get(written)
            engine = out.engine if out is not None else "missing"
            into = TableRef(database=written[0], name=written[1])
            if written == (target.database, target.name) or depth + 1 > MAX_DEPTH:
                return ViewsPlan([], f"materialized view {label} writes {written[0]}.{written[1]}, which the load's "
                                     f"chain of views reaches again (or deeper than {MAX_DEPTH} views)")
            if engine.startswith(("Replicated", "Shared")) or not (
                    engine.endswith(_MOVED_ENGINES) or engine in _PASSED_ENGINES):
                return ViewsPlan([], f"materialized view {label} writes {written[0]}.{written[1]}, which is "
                                     f"{engine}: only a local MergeTree table or a Null table can take a staging copy")
            select = retarget(view.select, reads, source)
            if select is None:
                return ViewsPlan([], f"materialized view {label} names {reads.database}.{reads.name} more than "
                                     "once (a join or subquery of the table it reads): its staging twin cannot "
                                     "read the staging table alone")
            known = copies.get(written)
            copy = known.staging if known is not None else TableRef(
                database=staging.database, name=f"{staging.name}v{_tag(*written)}")
            one = StagedView(view=TableRef(database=db, name=name),
                             staging_view=TableRef(database=staging.database, name=f"{staging.name}m{_tag(db, name)}"),
                             source=source, select=select, target=into, staging=copy,
                             moves=engine.endswith(_MOVED_ENGINES), reads=reads,
                             key=out.partition_key if out is not None else "")
            staged.append(one)
            if known is None:
                copies[written] = one
                todo.append((into, copy, depth + 1))
    return ViewsPlan(staged, None)


def copies(staged: Sequence[StagedView]) -> list[StagedView]:
    """One twin per view target (several views may write one table): whose copy is made and moved."""
    seen: dict[str, StagedView] = {}
    for one in staged:
        seen.setdefault(one.staging.name, one)
    return list(seen.values())


def render_create_view(view: TableRef, into: TableRef, select: str) -> str:
    """``CREATE MATERIALIZED VIEW view TO into AS select``."""
    return f"CREATE MATERIALIZED VIEW {render_table(view)} TO {render_table(into)} AS {select}"


def prepare_view_sql(staged: Sequence[StagedView], *, moving: bool = True, feed: TableRef | None = None,
                     target: TableRef | None = None) -> list[str]:
    """The feed table (given, a ``Null`` copy of ``target``), the staging copies of the views' targets (their
    parts with UUIDs when they move, as the staging table's), then the twins that feed them."""
    tables = [render_create_staging(one.staging, one.target, part_uuids=one.moves and moving)
              for one in copies(staged)]
    if feed is not None and target is not None:
        tables.insert(0, f"CREATE TABLE {render_table(feed)} AS {render_table(target)} ENGINE = Null")
    return tables + [render_create_view(one.staging_view, one.staging, one.select) for one in staged]


def drop_views_sql(staged: Sequence[StagedView], feed: TableRef | None = None) -> list[str]:
    """The twins dropped (before anything moves: nothing more is fed), then the feed table if any."""
    return [render_drop_table(one.staging_view) for one in staged] + (
        [render_drop_table(feed)] if feed is not None else [])


def abandon_views_sql(staged: Sequence[StagedView], feed: TableRef | None = None) -> list[str]:
    """Everything the views' staging made, dropped: the twins and the feed table, then the copies."""
    return drop_views_sql(staged, feed) + [render_drop_table(one.staging) for one in copies(staged)]

"""The statements around a staged insert: the staging table made ready before it, brought into the target
after it (moved, replaced or swapped in) or dropped after a failure; idempotent, so that a retry resumes
where a dead try stopped. Pure: no I/O. Which steps a load takes is
:func:`airflow_provider_s3ch.core.recovery.plan_steps`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.marks import FilledMark
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import STAGING_MARKER, LoadSteps, is_marker
from airflow_provider_s3ch.core.sql import (
    render_create_staging,
    render_drop_table,
    render_exchange,
    render_move_partitions,
    render_replace_partitions,
    render_set_comment,
)
from airflow_provider_s3ch.core.views import StagedView, abandon_views_sql, copies, prepare_view_sql

#: Partition commands per ``ALTER`` (one round trip each; a statement well inside ``max_query_size``).
PARTITIONS_PER_ALTER = 100

# ---------------------------------------------------------------------- overwrite: where a swap stands

SwapStep = Literal["exchange", "restore_comment", "drop_staging"]


def overwrite_steps(staging_comment: str | None, target_comment: str | None, marker: str) -> list[SwapStep]:
    """What is left of an ``overwrite`` swap, from the two tables' comments.

    The staging table carries ``marker`` until ``EXCHANGE TABLES``; after it the target
    carries it and the old table (under the staging name) the target's original comment.

    :param staging_comment: the staging table's comment; None when it does not exist.
    :param target_comment: the target's comment.
    :param marker: this task instance's staging marker.
    :return: the steps still to run, in order.
    """
    restore: list[SwapStep] = ["restore_comment"] if is_marker(target_comment, marker) else []
    if staging_comment is None:
        return restore
    if is_marker(staging_comment, marker):
        return ["exchange", "restore_comment", "drop_staging"]
    return [*restore, "drop_staging"]


# ---------------------------------------------------------------------- statements around the insert


class Statement(NamedTuple):
    """One statement the shell runs, and the line it logs after it."""

    sql: str
    note: str


class FinalizePlan(BaseModel):
    """How a staged load reaches its target, from where it stands."""

    steps: list[Statement] = Field(default_factory=list)
    partitions: list[str] = Field(default_factory=list, description="the partitions the load brought in")
    done_before: bool = Field(False, description="an earlier try finished this load: nothing is left to do")


class RebuildSource(BaseModel):
    """``replace_partitions`` with the ledger: the table the touched partitions are replaced from, rebuilt from
    the new files and the earlier ones (:mod:`airflow_provider_s3ch.load.rebuild`)."""

    table: TableRef
    #: (partition_id, partition) of the touched partitions the rebuild table holds.
    present: list[tuple[str, str]] = Field(default_factory=list)
    #: Touched partition ids with no row left (a reloaded file's old version's alone): dropped in the target.
    drop: list[str] = Field(default_factory=list)


#: What the rebuild table's name adds to the staging table's (not a hex digit: no unit id ends so).
REBUILD_SUFFIX = "r"


def rebuild_table(staging: TableRef) -> TableRef:
    """The second staging table of a ``replace_partitions`` load's rebuild (``load/rebuild.py``)."""
    return staging.model_copy(update={"name": staging.name + REBUILD_SUFFIX})


def _own_comment(old_comment: str | None) -> str:
    """The comment to put back on an ``overwrite`` target: the old table's, unless that is a staging marker."""
    return "" if (old_comment or "").startswith(STAGING_MARKER) else (old_comment or "")


def prepare_statements(
    steps: LoadSteps, *, staging_exists: bool, staging_comment: str | None = None, target_comment: str | None = None,
    leftovers: Sequence[TableRef] = (),
) -> list[Statement]:
    """Drop the staging table a dead try left (no earlier try runs: checked), create it afresh (no drop when
    there is none: the first try's, or a retry's that read it is not there).

    An ``overwrite`` whose earlier try swapped the tables and died before it put the target's comment back
    left the target with the marker and the old table, under the staging name, with the target's own
    comment: that comment goes back onto the target before the old table is dropped.

    :param steps: the load's steps (with a staging table).
    :param staging_exists: whether the staging table is there now.
    :param staging_comment: its comment, when it is there (``overwrite``).
    :param target_comment: the target's comment (``overwrite``).
    :param leftovers: the views' staging twins and copies an earlier try left (:func:`view_leftovers_sql`):
        dropped first, twins before copies; the load's own are made after the staging table.
    """
    staging = _staging(steps)
    out = leftover_drops(staging, leftovers, "the views' staging left by an earlier try")
    if (steps.finalize == "exchange" and staging_exists and steps.marker is not None
            and is_marker(target_comment, steps.marker) and staging_comment is not None
            and not is_marker(staging_comment, steps.marker)):
        out.append(Statement(render_set_comment(steps.target, _own_comment(staging_comment)),
                        f"Put back the comment of {steps.target}, which an earlier try's swap left unfinished"))
    if staging_exists:  # a table of this name is only ever this task instance's (its stem)
        out.append(Statement(render_drop_table(staging), f"Dropped staging table {staging} left by an earlier try"))
    out.append(
        # append: the parts carry UUIDs, so that a retry sees which ones a MOVE cut short by a crash had moved
        Statement(render_create_staging(staging, steps.target, part_uuids=steps.finalize == "move",
                                        wide_part_bytes=steps.compact_parts),
                  f"Created staging table {staging} AS {steps.target}"))
    if steps.marker is not None:
        out.append(Statement(render_set_comment(staging, steps.marker), ""))
    if steps.views:
        out += [Statement(sql, "") for sql in prepare_view_sql(steps.views, moving=steps.finalize == "move",
                                                                feed=steps.feed, target=steps.target)]
        out[-1] = out[-1]._replace(note=f"Created the staging twins of {len(steps.views)} materialized view(s) and "
                                        "staging copies of their targets")
    return out


def leftover_drops(staging: TableRef, leftovers: Sequence[TableRef], why: str) -> list[Statement]:
    """The views' staging twins, feed table and copies of ``staging`` that ``leftovers`` names, dropped: the
    twins first (they read the others)."""
    return [Statement(render_drop_table(t), f"Dropped {t}, {why}")
            for t in sorted(leftovers, key=lambda t: not t.name.removeprefix(staging.name).startswith("m"))]


def view_leftovers_sql(staging: TableRef) -> tuple[str, dict[str, str]]:
    """The views' staging twins and copies of ``staging`` (``<staging>m<tag>``, ``<staging>v<tag>``) that
    exist."""
    return ("SELECT name FROM system.tables WHERE database = %(d)s AND startsWith(name, %(p)s) "
            "AND match(substring(name, length(%(p)s) + 1), '^([mv][0-9a-f]+|n)$')",
            {"d": staging.database or "", "p": staging.name})


def abandon_statements(steps: LoadSteps) -> list[Statement]:
    """After a failed insert that no longer runs: drop the views' staging, then the staging table; the target
    and the views' targets are untouched."""
    if steps.staging is None:
        return []
    return [Statement(sql, "") for sql in abandon_views_sql(steps.views, steps.feed)] + [
        Statement(
            render_drop_table(steps.staging),
            f"The load failed: dropped staging table {steps.staging}; {steps.target} is untouched",
        )
    ]


def finalize_statements(
    steps: LoadSteps,
    *,
    staging_comment: str | None,
    target_comment: str | None,
    staging_partitions: Sequence[tuple[str, str]],
    target_partitions: Sequence[tuple[str, str]] = (),
    mark: FilledMark | None = None,
    rebuild: RebuildSource | None = None,
    drop: Sequence[str] = (),
    drop_why: str = "none of their rows is on this shard now",
) -> FinalizePlan:
    """What brings the staging table's rows into the target; idempotent, so a retry can resume it.

    - ``move`` (append): ``MOVE PARTITION`` each of the staging table's partitions, then drop it.
    - ``replace`` (replace_partitions): ``REPLACE PARTITION`` each of them, then drop it.
    - ``exchange`` (overwrite): :func:`overwrite_steps` says what is left of the swap; the
      target's own comment is put back, and the old table dropped.

    A staging table that is gone means an earlier try finished the load.

    :param steps: the load's steps (with a staging table).
    :param staging_comment: the staging table's comment now; None when it does not exist.
    :param target_comment: the target's comment now.
    :param staging_partitions: (partition_id, partition) of the staging table's non-empty parts.
    :param target_partitions: the same for the target (overwrite, after a swap an earlier try made).
    :param mark: the finished insert's mark (:class:`FilledMark`), written onto the staging table before the
        first partition leaves it, unless it carries one already: a retry then knows the insert finished
        without ``system.query_log``.
    :param rebuild: ``replace`` from this rebuilt table instead of the staging table (dropped before it).
    :param drop: ``replace`` on a shard: the partition ids the load brought on other shards and not on this
        one, dropped here (their rows on this shard are replaced by none).
    :param drop_why: what the log line says of the dropped partitions.
    """
    staging, target = _staging(steps), steps.target
    if steps.finalize == "exchange":
        marker = steps.marker or ""
        todo = overwrite_steps(staging_comment, target_comment, marker)
        if "drop_staging" not in todo:
            restore = [Statement(render_set_comment(target, ""), "")] if "restore_comment" in todo else []
            return FinalizePlan(steps=restore, done_before=True)
        out: list[Statement] = []
        if "exchange" in todo:  # the staging table still holds the load: marked, then swapped in
            out += _marking(staging, staging_comment, mark)
            out.append(Statement(render_exchange(target, staging), f"Exchanged {target} and {staging}"))
            # The old table, now under the staging name, carries the target's comment from before the swap.
            old_comment, partitions = target_comment, staging_partitions
        else:
            old_comment, partitions = staging_comment, target_partitions
        if "restore_comment" in todo:
            out.append(Statement(render_set_comment(target, _own_comment(old_comment)), ""))
        out.append(Statement(render_drop_table(staging), ""))
        return FinalizePlan(steps=out, partitions=[value for _, value in partitions])
    if staging_comment is None:
        return FinalizePlan(done_before=True)
    if rebuild is not None and steps.finalize == "replace":
        out = _marking(staging, staging_comment, mark)
        out += [Statement(render_replace_partitions(target, rebuild.table, ids, drop), _moved("Replaced", values, drop))
                for ids, values, drop in _batches(rebuild.present, rebuild.drop)]
        out += [Statement(render_drop_table(rebuild.table), ""), Statement(render_drop_table(staging), "")]
        return FinalizePlan(steps=out, partitions=[value for _, value in rebuild.present])
    drop = list(drop) if steps.finalize == "replace" else []
    out = _marking(staging, staging_comment, mark) if staging_partitions or drop else []
    for ids, values, dropped in _batches(staging_partitions, drop):
        if steps.finalize == "move":
            out.append(Statement(render_move_partitions(staging, target, ids), _moved("Moved", values)))
        else:
            out.append(Statement(render_replace_partitions(target, staging, ids, dropped),
                                 _moved("Replaced", values, dropped, drop_why)))
    out.append(Statement(render_drop_table(staging), ""))
    return FinalizePlan(steps=out, partitions=[value for _, value in staging_partitions])


def publish_views(views: Sequence[StagedView], parts: Mapping[str, Sequence[tuple[str, str]]],
                  affected: Mapping[str, Sequence[str]] | None = None) -> list[Statement]:
    """The views' staging copies brought into the views' targets as the staging table is into the target:
    each copy's partitions still to move (``parts``, by the copy's name), then the copy dropped. Under the
    replace modes (``affected`` given, by the copy's name: the partition ids it replaces, :mod:`.view_replay`)
    the copy's partitions among them replace the target's and the others are dropped; a copy without an entry
    is gone (published by an earlier try) or a ``Null`` link: only dropped."""
    out: list[Statement] = []
    for one in copies(views):
        held = list(parts.get(one.staging.name, ())) if one.moves else []
        if affected is None:
            steps = LoadSteps(mode="append", target=one.target, staging=one.staging, finalize="move",
                              reason=f"the staging copy of the target of view {one.view}")
            plan = finalize_statements(steps, staging_comment="", target_comment=None, staging_partitions=held)
        elif one.staging.name in affected:
            ids, have = set(affected[one.staging.name]), {pid for pid, _ in held}
            steps = LoadSteps(mode="replace_partitions", target=one.target, staging=one.staging, finalize="replace",
                              reason=f"the staging copy of the target of view {one.view}")
            plan = finalize_statements(steps, staging_comment="", target_comment=None,
                                       staging_partitions=[(pid, v) for pid, v in held if pid in ids],
                                       drop=[pid for pid in affected[one.staging.name] if pid not in have],
                                       drop_why="the view makes none of their rows now")
        else:
            plan = FinalizePlan(steps=[Statement(render_drop_table(one.staging), "")])
        view = f"View {one.view.database}.{one.view.name} into {one.target}"
        out += [step._replace(note=f"{view}: {step.note[:1].lower()}{step.note[1:]}") if step.note else step
                for step in plan.steps]
    return out


def _batches(partitions: Sequence[tuple[str, str]], drop: Sequence[str] = ()
             ) -> list[tuple[list[str], list[str], list[str]]]:
    """(ids, values, ids to drop) per ``ALTER``: :data:`PARTITIONS_PER_ALTER` commands each, the drops last."""
    commands = [(pid, value, False) for pid, value in partitions] + [(pid, "", True) for pid in drop]
    out = []
    for start in range(0, len(commands), PARTITIONS_PER_ALTER):
        batch = commands[start:start + PARTITIONS_PER_ALTER]
        out.append(([pid for pid, _, d in batch if not d], [v for _, v, d in batch if not d],
                    [pid for pid, _, d in batch if d]))
    return out


#: The partition of a table without a partition key, as ``system.parts`` names it.
UNPARTITIONED = "tuple()"


def partitions_text(values: Sequence[str]) -> str:
    """The partitions a log line names: ``partitions 200807, 200808``; ``no partition key`` for the one
    partition of an unpartitioned table (``tuple()`` in ``system.parts``); ``""`` for none.

    :param values: the partitions' values as ``system.parts`` shows them.
    """
    if list(values) == [UNPARTITIONED]:
        return "no partition key"
    return f"partition{'s' if len(values) != 1 else ''} {', '.join(values)}" if values else ""


def mode_text(mode: str, values: Sequence[str]) -> str:
    """What the load's last log line says it did: ``append of partitions 200807, 200808``, ``append (no
    partition key)``, or the mode alone when no partition moved.

    :param mode: the load's mode.
    :param values: the partitions it brought into the target.
    """
    named = partitions_text(values)
    if named == "no partition key":
        return f"{mode} ({named})"
    return f"{mode} of {named}" if named else mode


def _moved(verb: str, values: Sequence[str], dropped: Sequence[str] = (), why: str = "no file holds their rows now"
           ) -> str:
    """The log line of one partition ``ALTER``."""
    named = partitions_text(values)
    line = (f"{verb} the table's rows (no partition key)" if named == "no partition key" else f"{verb} {named}"
            ) if values else ""
    gone = f"dropped partition id{'s' if len(dropped) != 1 else ''} {', '.join(dropped)}: {why}"
    return "; ".join(part for part in (line, gone if dropped else "") if part)


def _marking(staging: TableRef, staging_comment: str | None, mark: FilledMark | None) -> list[Statement]:
    """The statement that marks the staging table filled, unless there is no mark or it carries one."""
    if mark is None or FilledMark.read(staging_comment, mark.stem) is not None:
        return []
    return [Statement(render_set_comment(staging, mark.comment()), "")]


def _staging(steps: LoadSteps) -> TableRef:
    if steps.staging is None:
        raise InvalidRequestError(f"mode {steps.mode} loads straight into {steps.target}: it has no staging table")
    return steps.staging

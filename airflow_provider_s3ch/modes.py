"""Pure decisions for retry-safe loads: which steps a mode needs, and what a retry does.

Nothing here does I/O. The operator asks the server for facts (the target's engine,
its dependent views, the earlier tries' queries) and these functions decide:

- :func:`plan_steps`: load straight into the target, or into a staging table that
  is then moved (``append``), swapped in partition by partition
  (``replace_partitions``) or swapped in whole (``overwrite``).
- :func:`decide_resume`: whether an earlier try of the same task instance is still
  running (wait for it), finished (attach to it: do not insert again) or failed
  (load afresh).

Query ids are ``s3ch-<stem>-try<N>`` (see ``make_query_id``): the stem is the same
for every try of one task instance, so the staging table and the earlier tries'
queries are found from it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from airflow_provider_s3ch.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.models import Mode, TableInfo, TableRef

#: Staging tables are ``<prefix><stem>`` in the target's database.
STAGING_PREFIX = "_s3ch_stage_"

#: The comment an ``overwrite`` staging table carries until it is swapped in; after
#: ``EXCHANGE TABLES`` the target carries it, which tells a retry the swap happened.
STAGING_MARKER = "s3ch staging table of "

MODES: tuple[str, ...] = ("append", "replace_partitions", "overwrite")

#: Database engines without an atomic ``EXCHANGE TABLES``.
_NO_EXCHANGE_ENGINES = {"Ordinary", "Memory", "Lazy", "MySQL", "PostgreSQL", "SQLite"}

_QUERY_ID_RE = re.compile(r"^s3ch-(?P<stem>[0-9a-f]+)-try(?P<try>\d+)$")


def split_query_id(query_id: str) -> tuple[str, int]:
    """``"s3ch-<stem>-try3"`` → ``("<stem>", 3)``.

    :raises InvalidRequestError: not a query id the operator makes.
    """
    m = _QUERY_ID_RE.match(query_id or "")
    if not m:
        raise InvalidRequestError(f"{query_id!r} is not a query id of the form 's3ch-<hex stem>-try<N>'")
    return m.group("stem"), int(m.group("try"))


def query_id_regex(stem: str) -> str:
    """The RE2 pattern (for ``match()`` in ClickHouse) of every try's query id of one stem."""
    if not re.fullmatch(r"[0-9a-f]+", stem or ""):
        raise InvalidRequestError(f"{stem!r} is not a query id stem (hex digits)")
    return f"^s3ch-{stem}-try[0-9]+$"


def staging_table(target: TableRef | TableInfo, stem: str) -> TableRef:
    """The staging table of one task instance: ``<target db>._s3ch_stage_<stem>``."""
    database = target.database
    return TableRef(database=database, name=f"{STAGING_PREFIX}{stem}")


def staging_marker(stem: str) -> str:
    """The comment an ``overwrite`` staging table carries until the swap."""
    return f"{STAGING_MARKER}{stem}"


Finalize = Literal["none", "move", "replace", "exchange"]


class LoadSteps(BaseModel):
    """How a load reaches its target.

    ``staging`` is None for a direct insert into the target. Otherwise the insert goes
    into ``staging`` and ``finalize`` says how it reaches the target:
    ``move`` (MOVE PARTITION … TO TABLE, per partition), ``replace`` (REPLACE PARTITION
    … FROM, per partition) or ``exchange`` (EXCHANGE TABLES).
    """

    mode: Mode
    target: TableRef
    staging: TableRef | None = None
    finalize: Finalize = "none"
    reason: str
    warnings: list[str] = Field(default_factory=list)

    @property
    def insert_into(self) -> TableRef:
        """The table the ``INSERT … SELECT`` writes."""
        return self.staging or self.target

    @property
    def marker(self) -> str | None:
        """The staging table's comment for ``overwrite``; None otherwise."""
        if self.finalize != "exchange" or self.staging is None:
            return None
        return staging_marker(self.staging.name[len(STAGING_PREFIX) :])


def _stageable(table: TableInfo) -> tuple[bool, str]:
    """Whether a table can take a staging table of its own structure and its partitions."""
    name = f"{table.database}.{table.name}"
    if table.is_distributed:
        return False, f"{name} is a Distributed table (staging on every shard is not supported yet)"
    if table.is_replicated:
        return False, (
            f"{name} is {table.engine}: a copy with CREATE TABLE … AS would share its replication path "
            "(staging for replicated tables is not supported yet)"
        )
    if not table.engine.endswith("MergeTree"):
        return False, f"{name} is {table.engine}, not a MergeTree: it has no partitions to move or replace"
    return True, f"{name} is {table.engine}"


def plan_steps(
    mode: str,
    table: TableInfo,
    stem: str,
    *,
    dependent_views: Sequence[str] = (),
    database_engine: str | None = None,
) -> LoadSteps:
    """Decide how a load in ``mode`` reaches ``table``.

    - ``append``: into a staging table, then each of its partitions is moved into the
      target (``MOVE PARTITION``): a failed try never touches the target, and a retry
      that finds a finished earlier insert resumes the moves. Direct insert when the
      target cannot be staged (Distributed, Replicated, not a MergeTree) or has
      materialized views (they fire on INSERT, not on MOVE PARTITION).
    - ``replace_partitions``: into a staging table, then ``REPLACE PARTITION`` for each
      partition the staging table holds: each partition is swapped atomically; the
      target's other partitions are untouched.
    - ``overwrite``: into a staging table, then ``EXCHANGE TABLES``: the whole table is
      swapped atomically.

    :param mode: ``append``, ``replace_partitions`` or ``overwrite``.
    :param table: the target as the server describes it.
    :param stem: the task instance's query id stem (names the staging table).
    :param dependent_views: materialized views that read from the target.
    :param database_engine: the target database's engine; ``overwrite`` needs one with
        ``EXCHANGE TABLES`` (Atomic, Replicated), not ``Ordinary``.
    :raises InvalidRequestError: an unknown mode.
    :raises PlanError: a replace mode on a target that cannot be staged.
    """
    if mode not in MODES:
        raise InvalidRequestError(f"mode={mode!r} is not a load mode; give one of {', '.join(MODES)}")
    target = TableRef(database=table.database, name=table.name)
    stageable, why = _stageable(table)
    if mode == "append":
        if not stageable:
            return LoadSteps(
                mode="append",
                target=target,
                reason=f"direct insert: {why}; a failed try may leave the rows it committed",
            )
        if dependent_views:
            return LoadSteps(
                mode="append",
                target=target,
                reason=(
                    f"direct insert: materialized views read from the target ({', '.join(dependent_views)}) and fire "
                    "only on INSERT, not on MOVE PARTITION; a failed try may leave the rows it committed"
                ),
            )
        return LoadSteps(
            mode="append",
            target=target,
            staging=staging_table(table, stem),
            finalize="move",
            reason=f"staging table, then MOVE PARTITION into the target ({why})",
        )
    if not stageable:
        raise PlanError(f"mode={mode!r} cannot run: {why}; use mode='append' or target a local MergeTree table")
    warnings = []
    if dependent_views:
        warnings.append(
            f"materialized views read from {target} ({', '.join(dependent_views)}): they fire on INSERT only, "
            f"so mode={mode!r} does not feed them"
        )
    if mode == "overwrite" and database_engine in _NO_EXCHANGE_ENGINES:
        raise PlanError(
            f"mode='overwrite' cannot run: database {table.database} has engine {database_engine}, which has no "
            "atomic EXCHANGE TABLES; use an Atomic database, or mode='replace_partitions'"
        )
    if mode == "replace_partitions":
        return LoadSteps(
            mode="replace_partitions",
            target=target,
            staging=staging_table(table, stem),
            finalize="replace",
            reason="staging table, then REPLACE PARTITION for each partition it holds (atomic per partition)",
            warnings=warnings,
        )
    return LoadSteps(
        mode="overwrite",
        target=target,
        staging=staging_table(table, stem),
        finalize="exchange",
        reason="staging table, then EXCHANGE TABLES (the whole table is swapped atomically)",
        warnings=warnings,
    )


# ---------------------------------------------------------------------- retries

TryState = Literal["running", "finished", "failed"]


class EarlierTry(BaseModel):
    """What the server knows of one earlier try's load query."""

    query_id: str
    try_number: int
    state: TryState
    error: str | None = None
    node: str | None = None


class Resume(BaseModel):
    """What this try does about the earlier ones."""

    action: Literal["load", "wait", "attach"]
    query_ids: list[str] = Field(default_factory=list, description="wait: the running ones; attach: the finished one")
    reason: str


def first_try_of_series(try_number: int, max_tries: int | None, retries: int | None) -> int:
    """The first try since the task instance was last cleared (Airflow's own formula).

    Airflow sets ``max_tries = try_number + retries`` when a task instance is cleared,
    so ``max_tries - retries + 1`` is the first try of the current series. Tries before
    it belong to an earlier, deliberate run (a user cleared the task to load again):
    their queries are not attached to.

    :param try_number: this try.
    :param max_tries: the task instance's ``max_tries``, None when unknown.
    :param retries: the task's ``retries``, None when unknown.
    """
    if max_tries is None or retries is None:
        return 1
    return max(1, min(try_number, max_tries - retries + 1))


def decide_resume(tries: Sequence[EarlierTry], current_try: int, first_try: int = 1) -> Resume:
    """Decide what this try does, from what the server knows of earlier tries.

    Only tries ``first_try … current_try - 1`` count. A running one is waited for
    (its figures are then read again); else, when the latest try that ran a load
    finished, it is attached to (no second insert: its staging table holds its rows);
    else (none, or the latest failed) this try loads afresh.

    :param tries: the earlier tries' queries (any order; several entries per try allowed).
    :param current_try: this try's number.
    :param first_try: the first try of the current series (see :func:`first_try_of_series`).
    """
    relevant = [t for t in tries if first_try <= t.try_number < current_try]
    ignored = sorted({t.query_id for t in tries if t.try_number < first_try})
    note = f" (tries before {first_try} belong to a cleared run: {', '.join(ignored)})" if ignored else ""
    running = sorted({t.query_id for t in relevant if t.state == "running"})
    if running:
        return Resume(action="wait", query_ids=running, reason=f"an earlier try is still running: {', '.join(running)}")
    # The latest try that ran a load decides: the staging table holds what it wrote.
    done = sorted((t for t in relevant if t.state in ("finished", "failed")), key=lambda t: (t.try_number, t.state))
    if done and done[-1].state == "finished":
        latest = done[-1]
        return Resume(
            action="attach",
            query_ids=[latest.query_id],
            reason=(
                f"earlier try {latest.query_id} finished on the server: taking its figures, "
                f"not inserting again{note}"
            ),
        )
    if done:
        failed = sorted({t.query_id for t in done if t.state == "failed"})
        reason = f"the latest earlier try failed ({', '.join(failed)}): loading afresh{note}"
        return Resume(action="load", reason=reason)
    return Resume(action="load", reason=f"no earlier try of this task instance ran a load{note}")


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
    restore: list[SwapStep] = ["restore_comment"] if target_comment == marker else []
    if staging_comment is None:
        return restore
    if staging_comment == marker:
        return ["exchange", "restore_comment", "drop_staging"]
    return [*restore, "drop_staging"]

"""Pure decisions for retry-safe loads: which steps a mode needs, and what a retry does.

Nothing here does I/O. The operator asks the server for facts (the target's engine,
its dependent views, the earlier tries' queries) and these functions decide:

- :func:`plan_steps`: load straight into the target, or into a staging table that
  is then moved (``append``), swapped in partition by partition
  (``replace_partitions``) or swapped in whole (``overwrite``).
- :func:`decide_resume`: whether an earlier try of the same task instance is still
  running (wait for it), finished (attach to it: do not insert again) or failed
  (load afresh).

Query ids are ``s3ch-<stem>-try<N>`` (:class:`QueryId`): the stem is the same for every
try of one task instance and one load configuration, so the staging table and the
earlier tries' queries are found from it. :mod:`airflow_provider_s3ch.core.staging` says what to run
before and after the insert (``prepare_statements``, ``finalize_statements``), from facts the shell reads.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from airflow_provider_s3ch.core.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.core.models import LoadRequest, Mode, TableRef
from airflow_provider_s3ch.core.part_format import with_compact_parts
from airflow_provider_s3ch.core.server_models import ClusterNode, TableInfo
from airflow_provider_s3ch.core.shards import DISTRIBUTED_SUFFIX, Shards, shards_of, stageable_shards
from airflow_provider_s3ch.core.view_replay import feed_table, replay_problem
from airflow_provider_s3ch.core.views import StagedView, ViewsPlan, stage_views

#: Staging tables are ``<prefix><stem>`` in the target's database.
STAGING_PREFIX = "_s3ch_stage_"

#: The comment an ``overwrite`` staging table carries until it is swapped in; after
#: ``EXCHANGE TABLES`` the target carries it, which tells a retry the swap happened.
STAGING_MARKER = "s3ch staging table of "

#: What follows the marker once the insert into the staging table finished: its query id and figures
#: (:class:`~airflow_provider_s3ch.core.marks.FilledMark`).
FILLED = "; filled by "

MODES: tuple[str, ...] = get_args(Mode)

#: Database engines without an atomic ``EXCHANGE TABLES``.
_NO_EXCHANGE_ENGINES = {"Ordinary", "Memory", "Lazy", "MySQL", "PostgreSQL", "SQLite"}

#: What every query id of the provider's loads starts with (:class:`QueryId`).
QUERY_ID_PREFIX = "s3ch-"

_QUERY_ID_RE = re.compile(rf"^{QUERY_ID_PREFIX}(?P<stem>[0-9a-f]+)-try(?P<try>[0-9]+)$")

#: Hex digits of the stem: 80 bits of sha256, enough that two loads never share one.
STEM_HEX_DIGITS = 20


def load_fingerprint(request: LoadRequest) -> str:
    """What makes two runs of one task instance the same load: the rendered source, target and shape.

    A retry after the DAG was edited (another ``s3_uri``, table, mode, format, compression,
    structure or settings) is a different load: its query id stem differs, so it never
    attaches to the old load's figures or its staging table. The memory cap, the strategy and
    the cluster change how a load runs, not what it loads, and are left out.

    :param request: the validated request.
    """
    return json.dumps(
        {
            "s3_uri": request.s3_uri,
            "table": [request.table.database, request.table.name],
            "mode": request.mode,
            "format": request.format,
            "compression": request.compression,
            "structure": request.structure,
            "settings": request.settings,
        },
        sort_keys=True,
        default=str,
    )


class QueryId(BaseModel):
    """The load's query id, ``s3ch-<stem>-try<N>``: the one place that knows its format.

    The stem is the same for every try of one task instance and one load configuration
    (:func:`load_fingerprint`): a retry finds the earlier tries' queries and the staging table
    by it.
    """

    model_config = ConfigDict(frozen=True)

    stem: str
    try_number: int = Field(ge=0)

    @field_validator("stem")
    @classmethod
    def _hex(cls, v: str) -> str:
        if not re.fullmatch(r"[0-9a-f]+", v or ""):
            raise InvalidRequestError(f"{v!r} is not a query id stem (hex digits)")
        return v

    @classmethod
    def for_task(
        cls, dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int, fingerprint: str = ""
    ) -> QueryId:
        """The query id of one try of one task instance.

        :param dag_id: the DAG.
        :param task_id: the task.
        :param run_id: the DAG run.
        :param map_index: the mapped task's index, -1 when not mapped.
        :param try_number: the try.
        :param fingerprint: the load's configuration (:func:`load_fingerprint`).
        """
        text = "\x00".join((dag_id, task_id, run_id, str(map_index), fingerprint))
        return cls(stem=hashlib.sha256(text.encode()).hexdigest()[:STEM_HEX_DIGITS], try_number=try_number)

    @classmethod
    def of_task_instance(cls, ti: Any, fingerprint: str) -> QueryId:
        """:meth:`for_task` of an Airflow task instance (its ``dag_id``, ``task_id``, ``run_id``, ``map_index``
        (None or absent: not mapped) and ``try_number``)."""
        map_index = getattr(ti, "map_index", -1)
        return cls.for_task(ti.dag_id, ti.task_id, ti.run_id, -1 if map_index is None else map_index, ti.try_number,
                            fingerprint)

    @classmethod
    def parse(cls, text: str) -> QueryId:
        """``"s3ch-<stem>-try3"`` -> ``QueryId(stem, 3)``.

        :raises InvalidRequestError: not a query id the operator makes.
        """
        m = _QUERY_ID_RE.match(text or "")
        if not m:
            raise InvalidRequestError(f"{text!r} is not a query id of the form 's3ch-<hex stem>-try<N>'")
        return cls(stem=m.group("stem"), try_number=int(m.group("try")))

    def __str__(self) -> str:
        return f"{QUERY_ID_PREFIX}{self.stem}-try{self.try_number}"

    @property
    def pattern(self) -> str:
        """The RE2 pattern (for ``match()`` in ClickHouse) of every try's query id of this stem."""
        return f"^{QUERY_ID_PREFIX}{self.stem}-try[0-9]+$"


def staging_table(target: TableRef | TableInfo, stem: str) -> TableRef:
    """The staging table of one task instance: ``<target db>._s3ch_stage_<stem>``."""
    database = target.database
    return TableRef(database=database, name=f"{STAGING_PREFIX}{stem}")


def staging_marker(stem: str) -> str:
    """The comment an ``overwrite`` staging table carries until the swap."""
    return f"{STAGING_MARKER}{stem}"


def is_marker(comment: str | None, marker: str) -> bool:
    """Whether a table's comment is ``marker``, bare or with the mark of a finished insert."""
    return comment is not None and (comment == marker or comment.startswith(marker + FILLED))


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
    #: A Distributed target: ``staging`` is the Distributed staging table the insert writes, over a staging
    #: table on every shard (:mod:`airflow_provider_s3ch.core.shards`); None on one node.
    shards: Shards | None = None
    #: The staging twins of the materialized views that read the target, down the chains
    #: (:mod:`airflow_provider_s3ch.core.views`): the insert into ``staging`` feeds them once.
    views: list[StagedView] = Field(default_factory=list)
    #: ``compact_parts``: the ``min_bytes_for_wide_part`` the staging tables are created with (parts under it are
    #: written Compact); None: the target's own part format.
    compact_parts: int | None = None

    @model_serializer(mode="wrap")
    def _without_shards_on_one_node(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A one-node load's steps serialize as before shards existed, a load without views as before views
        were staged, and one without ``compact_parts`` as before it (XComs, deferred payloads)."""
        out = handler(self)
        if self.shards is None:
            out.pop("shards", None)
        if not self.views:
            out.pop("views", None)
        if self.compact_parts is None:
            out.pop("compact_parts", None)
        return out

    @property
    def insert_into(self) -> TableRef:
        """The table the ``INSERT … SELECT`` writes."""
        return self.staging or self.target

    @property
    def stem(self) -> str | None:
        """The query id stem that names the staging table; None without one."""
        if self.shards is not None:
            return self.shards.local_staging.name[len(STAGING_PREFIX):]
        return None if self.staging is None else self.staging.name[len(STAGING_PREFIX) :]

    def on_shard(self) -> LoadSteps:
        """A Distributed load's steps on each shard: the one-node steps from its local staging table into its
        local table (itself on one node)."""
        if self.shards is None:
            return self
        return self.model_copy(update={"target": self.shards.local_target, "staging": self.shards.local_staging,
                                       "shards": None})

    @property
    def feed(self) -> TableRef | None:
        """The ``Null`` table the views' first twins read (``replace_partitions`` under views); None otherwise."""
        if not self.views or self.finalize != "replace" or self.staging is None:
            return None
        return feed_table(self.staging)

    @property
    def marker(self) -> str | None:
        """The staging table's comment for ``overwrite``; None otherwise."""
        if self.finalize != "exchange" or self.stem is None:
            return None
        return staging_marker(self.stem)


#: How the replacing modes bring the staging table in, and why.
_REPLACING: dict[str, tuple[Finalize, str]] = {
    "replace_partitions": (
        "replace",
        "staging table, then REPLACE PARTITION for each partition it holds (atomic per partition)",
    ),
    "overwrite": ("exchange", "staging table, then EXCHANGE TABLES (the whole table is swapped atomically)"),
}


def _stageable(table: TableInfo, nodes: Sequence[ClusterNode], cluster: str | None) -> tuple[bool, str]:
    """Whether a table can take a staging table of its own structure and its partitions (a Distributed one: on
    every shard)."""
    name = f"{table.database}.{table.name}"
    if table.is_distributed:
        return stageable_shards(table, nodes, cluster)
    if table.is_replicated:
        return False, (
            f"{name} is {table.engine}: a copy with CREATE TABLE … AS would share its replication path "
            "(staging for replicated tables is not supported yet)"
        )
    if not table.engine.endswith("MergeTree"):
        return False, f"{name} is {table.engine}, not a MergeTree: it has no partitions to move or replace"
    return True, f"{name} is {table.engine}"


def _views_plan(table: TableInfo, dependent_views: list[str], staging: TableRef, shards: Shards | None,
                mode: str = "append") -> ViewsPlan:
    """The staging twins of the views that read the target (none without views), or why there can be none (under
    a replace mode: also why the views cannot be recomputed exactly, :mod:`.view_replay`)."""
    if not dependent_views:
        return ViewsPlan([], None)
    named = ", ".join(dependent_views)
    if shards is not None:
        return ViewsPlan([], f"materialized views read from the shards' tables ({named}); their staging on a "
                             "cluster is not built")
    if not table.view_rows:
        return ViewsPlan([], f"materialized views read from the target ({named}) and the server did not describe "
                             "them")
    target = TableRef(database=table.database, name=table.name)
    plan = stage_views(target, staging, table.view_rows,
                       feed=feed_table(staging) if mode == "replace_partitions" else None)
    if mode == "append" or plan.why_not is not None:
        return plan
    return ViewsPlan(plan.staged, replay_problem(mode, target, plan.staged, table.view_rows))


def plan_steps(mode: str, table: TableInfo, stem: str, *, nodes: Sequence[ClusterNode] = (),
               cluster: str | None = None, compact_parts: bool = False) -> LoadSteps:
    """Decide how a load in ``mode`` reaches ``table`` (:func:`_steps`); with ``compact_parts``, its staging tables
    write parts under :data:`~.part_format.COMPACT_PART_BYTES` Compact (:func:`~.part_format.with_compact_parts`)."""
    steps = _steps(mode, table, stem, nodes=nodes, cluster=cluster)
    return with_compact_parts(steps, table) if compact_parts else steps


def _steps(mode: str, table: TableInfo, stem: str, *, nodes: Sequence[ClusterNode] = (),
           cluster: str | None = None) -> LoadSteps:
    """Decide how a load in ``mode`` reaches ``table``.

    - ``append``: into a staging table, then each of its partitions is moved into the
      target (``MOVE PARTITION``): a failed try never touches the target, and a retry
      that finds a finished earlier insert resumes the moves. Direct insert when the
      target cannot be staged (Replicated, not a MergeTree). A Distributed target over MergeTree tables is
      staged on every shard (:mod:`airflow_provider_s3ch.core.shards`). Materialized views that read the target
      get staging twins (:mod:`airflow_provider_s3ch.core.views`): the insert feeds each once, into a staging
      copy of its target, whose partitions move as the staging table's; a direct insert when a view cannot be
      staged (the reason says why).
    - ``replace_partitions``: into a staging table, then ``REPLACE PARTITION`` for each
      partition the staging table holds: each partition is swapped atomically; the
      target's other partitions are untouched.
    - ``overwrite``: into a staging table, then ``EXCHANGE TABLES``: the whole table is
      swapped atomically.

    :param mode: ``append``, ``replace_partitions`` or ``overwrite``.
    :param table: the target as the server describes it; ``overwrite`` needs a database engine
        with ``EXCHANGE TABLES`` (Atomic, Replicated), not ``Ordinary``; materialized views that
        read from it fire on INSERT only.
    :param stem: the task instance's query id stem (names the staging table).
    :param nodes: the connection's cluster's nodes (a Distributed target's shards).
    :param cluster: the connection's cluster.
    :raises InvalidRequestError: an unknown mode.
    :raises PlanError: a replace mode on a target that cannot be staged, or that materialized views read.
    """
    if mode not in MODES:
        raise InvalidRequestError(f"mode={mode!r} is not a load mode; give one of {', '.join(MODES)}")
    target = TableRef(database=table.database, name=table.name)
    dependent_views, database_engine = table.dependent_views, table.database_engine
    stageable, why = _stageable(table, nodes, cluster)
    staging, shards = staging_table(table, stem), None
    if table.is_distributed and stageable:
        shards = shards_of(table, nodes, staging.name)
        staging = TableRef(database=table.database, name=f"{staging.name}{DISTRIBUTED_SUFFIX}")
        dependent_views = [*dependent_views, *table.local_dependent_views]
    if mode == "append":
        if not stageable:
            return LoadSteps(
                mode="append",
                target=target,
                reason=f"direct insert: {why}; a failed try may leave the rows it committed",
            )
        views = _views_plan(table, dependent_views, staging, shards)
        if views.why_not is not None:
            return LoadSteps(mode="append", target=target, reason=(
                f"direct insert: {views.why_not}; the views fire on INSERT only, not on MOVE PARTITION; a failed try "
                "may leave the rows it committed"))
        if views.staged:
            named = ", ".join(f"{v.view.database}.{v.view.name}" for v in views.staged)
            return LoadSteps(mode="append", target=target, staging=staging, finalize="move", views=views.staged,
                             reason=f"staging table with staging twins of the materialized views ({named}): the "
                                    "insert feeds each view once, into a staging copy of its target; then MOVE "
                                    f"PARTITION into the target and the views' targets ({why})")
        where = "staging tables on every shard, then MOVE PARTITION on each shard" if shards else (
            "staging table, then MOVE PARTITION into the target")
        return LoadSteps(mode="append", target=target, staging=staging, finalize="move", reason=f"{where} ({why})",
                         shards=shards)
    if not stageable:
        raise PlanError(f"mode={mode!r} cannot run: {why}; use mode='append' or target a local MergeTree table")
    views = _views_plan(table, dependent_views, staging, shards, mode)
    if views.why_not is not None:
        raise PlanError(
            f"mode={mode!r} cannot run: materialized views read from {target} ({', '.join(dependent_views)}) and "
            f"cannot be recomputed exactly: {views.why_not}; use mode='append' (the views are fed once), or "
            "replace the views' targets' rows yourself and load into a table without views"
        )
    warnings: list[str] = []
    if mode == "overwrite" and database_engine in _NO_EXCHANGE_ENGINES:
        raise PlanError(
            f"mode='overwrite' cannot run: database {table.database} has engine {database_engine}, which has no "
            "atomic EXCHANGE TABLES; use an Atomic database, or mode='replace_partitions'"
        )
    finalize, reason = _REPLACING[mode]
    if views.staged:
        named = ", ".join(f"{v.view.database}.{v.view.name}" for v in views.staged)
        reason += (f"; the materialized views ({named}) are recomputed through staging twins: each view's target "
                   + ("holds what its view makes of the files" if mode == "overwrite" else
                      "gets the partitions the replaced and the new rows reach, from the table as it will be"))
    if shards is not None:
        reason = f"{reason.replace('staging table', 'staging tables on every shard', 1)}, on each shard ({why})"
    return LoadSteps(
        mode=mode,
        target=target,
        staging=staging,
        finalize=finalize,
        reason=reason,
        warnings=warnings,
        shards=shards,
        views=views.staged,
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

    @classmethod
    def of(cls, query_id: str, state: TryState, error: str | None, node: str) -> EarlierTry:
        """An earlier try from a query id the server lists (try 0 when it is not one of ours)."""
        try:
            try_number = QueryId.parse(query_id).try_number
        except InvalidRequestError:
            try_number = 0
        return cls(query_id=query_id, try_number=try_number, state=state, error=error or None, node=node)


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


def _name_tries(tries: Iterable[EarlierTry]) -> str:
    """Name earlier tries' queries in a reason, short whatever their number.

    One or two are named in full; more are counted, with the first and the latest named
    (by try number): ``"12 queries, first s3ch-<stem>-try1, latest s3ch-<stem>-try12"``.

    :param tries: the tries (any order; several entries of one query count once).
    """
    ids = list(dict.fromkeys(t.query_id for t in sorted(tries, key=lambda t: (t.try_number, t.query_id))))
    if len(ids) <= 2:
        return ", ".join(ids)
    return f"{len(ids)} queries, first {ids[0]}, latest {ids[-1]}"


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
    ignored = [t for t in tries if t.try_number < first_try]
    note = f" (tries before {first_try} belong to a cleared run: {_name_tries(ignored)})" if ignored else ""
    running_tries = [t for t in relevant if t.state == "running"]
    running = sorted({t.query_id for t in running_tries})
    if running:
        return Resume(
            action="wait", query_ids=running, reason=f"an earlier try is still running: {_name_tries(running_tries)}"
        )
    # The latest try that ran a load decides: the staging table holds what it wrote.
    done = sorted((t for t in relevant if t.state in ("finished", "failed")), key=lambda t: (t.try_number, t.state))
    if done and done[-1].state == "finished":
        latest = done[-1]
        return Resume(
            action="attach",
            query_ids=[latest.query_id],
            reason=(
                f"earlier try {latest.query_id} finished on the server: taking its figures, not inserting again{note}"
            ),
        )
    if done:
        failed = [t for t in done if t.state == "failed"]
        reason = f"the latest earlier try failed ({_name_tries(failed)}): loading afresh{note}"
        return Resume(action="load", reason=reason)
    return Resume(action="load", reason=f"no earlier try of this task instance ran a load{note}")

"""Pure decisions of a deferrable load: what the task carries through the deferral, and what one look
at the server means.

A deferrable load starts its ``INSERT … SELECT`` over ClickHouse's HTTP interface, under the load's
query id, and frees its worker slot: the triggerer then looks at the query on every node
(``system.processes``, then ``system.query_log``) until it ends, and the task resumes to finish the
load. Nothing here does I/O:

- :class:`DeferredLoad`: what the resumed task needs to finish the load and report its figures,
  JSON-safe and without secrets (it travels in the trigger's keyword arguments);
- :func:`http_params`: the URL parameters of the HTTP insert (the query id, the database, the settings
  that must apply before the statement is parsed; never a credential);
- :func:`judge`: one look at the server, as ``running``, ``finished``, ``failed`` or ``missing`` for
  a load, ``running`` or ``ended`` for earlier tries a retry waits for, or ``timeout``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError, server_text
from airflow_provider_s3ch.core.models import LoadPlan, S3Object, SettingValue
from airflow_provider_s3ch.core.recovery import LoadSteps
from airflow_provider_s3ch.core.server_models import ClusterNode, TableInfo

#: What the trigger waits for: the load's own insert, or earlier tries' queries (a retry's wait).
WaitKind = Literal["insert", "wait"]

#: What one look at the server means.
Verdict = Literal["running", "finished", "failed", "missing", "ended", "timeout"]

#: Up to this many files, the deferred task carries the manifest's keys and sizes (for its lineage and
#: asset events); beyond, it lists the bucket again when it resumes. Trigger arguments are kept small.
MAX_CARRIED_OBJECTS = 100

#: The redacted statement is carried (for lineage) up to this many characters; beyond, it is left out.
MAX_CARRIED_SQL = 8_000

#: How long a load that is neither running nor in ``system.query_log`` may stay so before it counts as
#: missing: a query that just left ``system.processes`` reaches the log a moment later.
SETTLE_SECONDS = 15.0


def _url_value(value: SettingValue | bool) -> str:
    """A setting's value as a URL parameter: numbers as written, booleans as 1/0, strings raw."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequestError(f"setting value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, int | str):
        return str(value)
    raise InvalidRequestError(f"setting value {value!r} must be a number or a string, not {type(value).__name__}")


def http_params(query_id: str, database: str, settings: dict[str, SettingValue]) -> list[tuple[str, str]]:
    """The URL parameters of the HTTP insert: its query id, the default database and the settings sent
    beside the statement (those that must apply before it is parsed, and the query log's).

    The statement itself goes in the request's body, and the user and password in its headers: the URL
    holds nothing secret.

    :param query_id: the load's query id.
    :param database: the connection's default database.
    :param settings: the settings sent in the protocol (:attr:`RenderedSQL.settings`).
    :raises InvalidRequestError: a setting's name would be read as another parameter.
    """
    reserved = {"query_id", "database", "query", "user", "password", "session_id", "default_format"}
    out = [("query_id", query_id), ("database", database)]
    for name, value in settings.items():
        if name in reserved:
            raise InvalidRequestError(f"{name!r} cannot be sent as a setting of the HTTP insert")
        out.append((name, _url_value(value)))
    return out


class DeferredLoad(BaseModel):
    """What a deferred load's task needs when it resumes: the plan, the steps, where the query runs and
    what the summary reports. JSON-safe; it holds no credential (the statement only redacted)."""

    query_id: str
    resume_reason: str
    plan: LoadPlan
    steps: LoadSteps
    table: TableInfo
    insert_nodes: list[ClusterNode] = Field(default_factory=list, description="where KILL QUERY goes")
    fan_out: list[ClusterNode] = Field(default_factory=list, description="where the load's figures are read")
    distributed: bool = False
    table_changes: dict[str, Any] = Field(default_factory=dict)
    bucket: str
    objects: list[S3Object] | None = Field(None, description="the manifest's files; None when there are too many")
    sql: str | None = Field(None, description="the redacted statement; None when too long to carry")
    started_at: float = Field(description="when the try started (seconds since the epoch)")
    phases_ms: dict[str, int] = Field(default_factory=dict, description="milliseconds per phase before the deferral")

    @classmethod
    def carry(
        cls, *, objects: Sequence[S3Object], sql: str, **fields: Any
    ) -> DeferredLoad:
        """The state of a load about to defer, with the manifest and the statement only when small."""
        return cls(
            objects=list(objects) if len(objects) <= MAX_CARRIED_OBJECTS else None,
            sql=sql if len(sql) <= MAX_CARRIED_SQL else None,
            **fields,
        )


class RunningQuery(BaseModel):
    """One query (the load's or a secondary one) in a node's ``system.processes``."""

    node: str
    query_id: str
    elapsed: float = 0.0
    read_rows: int = 0
    written_rows: int = 0


class LoggedQuery(BaseModel):
    """The load's last entry in ``system.query_log`` (not ``QueryStart``)."""

    query_id: str
    type: str
    exception: str = ""
    exception_code: int = 0
    read_rows: int = 0
    written_rows: int = 0

    @property
    def error(self) -> str:
        """The exception's text without the server's stack trace."""
        return server_text(self.exception)


class Look(BaseModel):
    """What one look at the server saw: the queries still running on every node, and the load's log
    entry (a load's look only, once nothing of it runs)."""

    running: list[RunningQuery] = Field(default_factory=list)
    logged: LoggedQuery | None = None


class Judgement(BaseModel):
    """What a look means, with the figures so far and the text the trigger logs or reports."""

    verdict: Verdict
    message: str
    read_rows: int = 0
    written_rows: int = 0
    elapsed: float = 0.0
    error_code: int = 0
    absent: bool = Field(False, description="the load neither runs nor is logged (yet)")

    @property
    def done(self) -> bool:
        """Whether the wait is over (the trigger fires)."""
        return self.verdict != "running"


def judge(
    look: Look,
    *,
    kind: WaitKind,
    query_ids: Sequence[str],
    absent_for: float = 0.0,
    settle: float = SETTLE_SECONDS,
    now: float | None = None,
    deadline: float | None = None,
) -> Judgement:
    """What one look at the server means.

    A load (``kind="insert"``) runs while it, or one of its secondary queries, is in ``system.processes``
    on any node; then its ``system.query_log`` entry says ``finished`` or ``failed`` (with the server's
    code and text). Neither running nor logged, it is ``missing`` once that lasted ``settle`` seconds
    (a server restart, a log the server does not keep) and still running until then.

    Earlier tries a retry waits for (``kind="wait"``) run while any of them is in ``system.processes``;
    then the wait has ``ended`` (the task looks at them again and decides), or it times out at
    ``deadline``.

    :param look: what the server listed.
    :param kind: the load's own insert, or earlier tries.
    :param query_ids: the query ids looked at (for the messages).
    :param absent_for: seconds since the load was last seen running or logged (``insert`` only).
    :param settle: how long a load may be absent before it is missing.
    :param now: the time of the look (seconds since the epoch), for the deadline.
    :param deadline: when a wait gives up (seconds since the epoch); None for never.
    """
    names = ", ".join(query_ids)
    read = sum(q.read_rows for q in look.running)
    written = sum(q.written_rows for q in look.running)
    elapsed = max((q.elapsed for q in look.running), default=0.0)
    if look.running:
        on = sorted({q.node for q in look.running})
        message = (
            f"{names} runs: {elapsed:.0f} s, {read} rows read, {written} written so far "
            f"(on {len(on)} node{'s' if len(on) > 1 else ''})"
        )
        if kind == "wait" and deadline is not None and now is not None and now >= deadline:
            return Judgement(verdict="timeout", message=f"earlier try {message}; not starting a second load of "
                             "the same files (kill it with KILL QUERY, or raise earlier_try_timeout)",
                             read_rows=read, written_rows=written, elapsed=elapsed)
        return Judgement(verdict="running", message=message, read_rows=read, written_rows=written, elapsed=elapsed)
    if kind == "wait":
        return Judgement(verdict="ended", message=f"earlier try {names} no longer runs on any node")
    logged = look.logged
    if logged is None:
        if absent_for < settle:
            return Judgement(verdict="running", message=f"{names} no longer runs; waiting for its query_log entry",
                             absent=True)
        return Judgement(
            verdict="missing", absent=True,
            message=(
                f"{names} neither runs nor is in system.query_log after {absent_for:.0f} s (a server restart, or "
                "a query log the server does not keep); the next try looks for it again"
            ),
        )
    figures = {"read_rows": logged.read_rows, "written_rows": logged.written_rows}
    if logged.type == "QueryFinish":
        return Judgement(verdict="finished", message=f"{names} finished: {logged.written_rows} rows written",
                         **figures)
    return Judgement(
        verdict="failed", message=f"{names} failed on the server: {logged.error}", error_code=logged.exception_code,
        **figures,
    )

"""A ledger row and what it means now: the states, the unit ids of a load's inserts, what the server says
of the loads the rows name. Pure: no I/O. The protocol is :mod:`airflow_provider_s3ch.core.ledger`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import S3Object
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, STEM_HEX_DIGITS, QueryId

#: The chunk of a load that is not split (chunked loads number their chunks from 1).
WHOLE_FILE = 0

#: Hex digits of the chunk number in a chunk's unit id (up to 16,777,215 chunks).
CHUNK_HEX_DIGITS = 6

State = Literal["claimed", "pending", "loaded", "released"]
STATES: tuple[State, ...] = ("claimed", "pending", "loaded", "released")

#: What a row means now, from its state and what the server says of its load (:func:`row_status`).
Status = Literal["loaded", "committed", "in_flight", "live", "stale", "released"]


def unit_id(load_id: str, chunk: int = WHOLE_FILE) -> str:
    """The id of one insert of a load: the load's id, or for a chunk the load's id and the chunk's number in
    hex. It is the stem of the insert's query id and names its staging table.

    :param load_id: the load (its query id stem, hex).
    :param chunk: the chunk, :data:`WHOLE_FILE` for a load that is not split.
    """
    return load_id if chunk == WHOLE_FILE else f"{load_id}{chunk:0{CHUNK_HEX_DIGITS}x}"


def load_of(unit: str) -> str:
    """The load a unit id (:func:`unit_id`) belongs to: its query id stem's first digits."""
    return unit[:STEM_HEX_DIGITS]


def staging_name(load_id: str, chunk: int = WHOLE_FILE) -> str:
    """The staging table of a load or of one of its chunks (in the target's database)."""
    return f"{STAGING_PREFIX}{unit_id(load_id, chunk)}"


# ---------------------------------------------------------------------- rows and what they mean


class LedgerRow(BaseModel):
    """The latest version of one ledger row (one file version, chunk and load), as
    :func:`~airflow_provider_s3ch.core.ledger_sql.render_read` reads it."""

    model_config = ConfigDict(frozen=True)

    key: str
    etag: str
    chunk: int = WHOLE_FILE
    load_id: str
    query_id: str = ""
    state: State
    size: int = 0
    last_modified: datetime | None = None
    rows: int | None = None
    claimed_at: datetime | None = None
    #: Seconds since the claim, by the server's clock.
    age_s: float = 0.0
    #: ``_block_number`` of the row's latest version: the order in which claims became visible.
    block: int = 0
    version: int = 0
    #: ``pending`` and ``loaded``: the partition ids the file's insert wrote (empty: not recorded).
    partitions: tuple[str, ...] = ()

    @property
    def file(self) -> FileVersion:
        return FileVersion(self.key, self.etag)

    @property
    def unit(self) -> str:
        """The insert that reads the row's file: the load, or its chunk (:func:`unit_id`)."""
        return unit_id(self.load_id, self.chunk)


class FileVersion(NamedTuple):
    """One version of one file: what the ledger records once per load."""

    key: str
    etag: str


def version_of(obj: S3Object) -> FileVersion:
    """The file's version as the listing gives it (its ETag; ``""`` when S3 gave none)."""
    return FileVersion(obj.key, obj.etag or "")


class Heartbeat(NamedTuple):
    """A load's last heartbeat, as the server read it: seconds since it was written (by the server's clock), and
    the seconds it vouches for the load's claims (the writer's window)."""

    age_s: float
    window_s: float


class LoadActivity(BaseModel):
    """What the server says of the loads the rows name: which units' staging tables exist (:func:`unit_id`),
    which loads run a query (of any of their chunks), and the last heartbeat of each load that wrote one."""

    staging: frozenset[str] = frozenset()
    running: frozenset[str] = frozenset()
    heartbeats: dict[str, Heartbeat] = Field(default_factory=dict)

    def busy(self, load_id: str) -> bool:
        """Whether a load runs a query or has a staging table, of any chunk."""
        return load_id in self.running or any(u.startswith(load_id) for u in self.staging)


def activity(staging_tables: Iterable[str], running: Iterable[str], loads: Collection[str],
             heartbeats: Iterable[tuple[str, float, float]] = ()) -> LoadActivity:
    """The server's facts about ``loads``, from the staging tables' names, the running queries' ids and the
    heartbeats (load id, age, window) it listed (other loads' and other queries' left out)."""
    units = {name[len(STAGING_PREFIX):] for name in staging_tables}
    busy = set()
    for text in running:
        try:
            busy.add(load_of(QueryId.parse(text).stem))
        except InvalidRequestError:  # another query id with the same prefix
            continue
    return LoadActivity(staging=frozenset(u for u in units if load_of(u) in loads),
                        running=frozenset(busy & set(loads)),
                        heartbeats={load: Heartbeat(age, window) for load, age, window in heartbeats if load in loads})


def row_status(row: LedgerRow, facts: LoadActivity, *, own: str, claim_timeout: float) -> Status:
    """What a row means now.

    - ``loaded``: the file version is in the target; ``released``: the load gave it up.
    - ``pending``: ``in_flight`` while the load's staging table exists (its retry finishes it);
      ``committed`` once it is gone (the staging table is dropped only after its last partition moved).
    - ``claimed``: ``live`` while the load runs a query or has a staging table; otherwise while the claim is
      younger than ``claim_timeout`` and, for a load that writes heartbeats, its last sign of life (the
      claim or its last heartbeat, whichever is younger) is younger than the heartbeat's window; then
      ``stale``. A load that never wrote a heartbeat (a ledger written by an older version) is held by
      ``claim_timeout`` alone. The load's own claims count for half of either limit.

    :param row: the row.
    :param facts: the server's facts about the loads.
    :param own: this load's id.
    :param claim_timeout: seconds a claim stays live at most without a query or a staging table.
    """
    if row.state in ("loaded", "released"):
        return row.state
    if row.state == "pending":
        return "in_flight" if row.unit in facts.staging else "committed"
    if facts.busy(row.load_id):
        return "live"
    share = 0.5 if row.load_id == own else 1.0
    if row.age_s >= claim_timeout * share:
        return "stale"
    beat = facts.heartbeats.get(row.load_id)
    if beat is None:
        return "live"
    return "live" if min(row.age_s, beat.age_s) < beat.window_s * share else "stale"

"""The file ledger: which files a target holds, and which files a load may take. Pure: no I/O.

With ``skip_loaded=True`` a load reads only the files that the target's ledger (a ClickHouse table,
``<target database>._s3ch_ledger`` by default) does not record as loaded, and records them there. The
ledger has one row per file version (key and ETag), chunk and load; a row's latest version
(``ReplacingMergeTree(version)``) is its state:

``claimed``
    the load means to read the file (written before its insert);
``pending``
    the load's insert finished into its staging table, and the table's partitions are about to move
    into the target (written before the first move);
``loaded``
    the staging table's partitions are in the target (written after the staging table is dropped);
``released``
    the load gave the file up: it lost the claim to another load, or it failed and left nothing behind.

The staging table (``_s3ch_stage_<load id>``) is the truth for what a row does not say yet. It is
dropped only once every partition moved, so a ``pending`` row whose staging table is gone was
committed (:func:`row_status` says ``committed``: whoever sees it records ``loaded``); one whose
staging table is there is still being finished, by the load's retry.

**Chunks** (``max_files_per_load`` / ``max_bytes_per_load``): a load splits its files into consecutive
chunks, numbered from 1 in its ``claimed`` rows. Each chunk is a load of its own for the states above:
its insert's query id and its staging table carry the chunk's unit id (:func:`unit_id`), so a
``pending`` row is judged by its own chunk's staging table. A retry reads the rows it holds and loads
the chunks that are not committed yet, in order: chunk 8 after a death in chunk 8, whatever step it
died at. A load's claims are live while any of its chunks runs or has a staging table.

Two loads that want the same file both write a ``claimed`` row; each then reads the ledger again and
keeps the files where its claim is the earliest live one (:func:`confirm`). "Earliest" is the row's
``_block_number``: ClickHouse numbers a MergeTree table's inserts when it commits them, in the order in
which they become visible, so a load that does not see another's claim when it reads again holds the
smaller number, and the other load sees its claim and gives the file up.

A claim is live while its load runs a query, while its staging table exists, or for ``claim_timeout``
seconds after it was written (the time between the claim and the insert: planning, the schema check).
After that, a claim whose load runs nothing and left no staging table is ``stale``: another load may
take the file. The load itself keeps using its claims only for half that time; after it, a retry
claims afresh, so that a load never inserts a file that another load could already take as stale.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.core.glob import split_archive
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object, TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, STEM_HEX_DIGITS, LoadSteps
from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.core.sql import quote_identifier, render_table

#: The ledger's name in the target's database unless ``ledger_table`` names another.
LEDGER_NAME = "_s3ch_ledger"

#: How long a claim stays live without a query or a staging table of its load (seconds).
DEFAULT_CLAIM_TIMEOUT = 3600.0

#: How many keys each list in the XCom's ``ledger`` entry shows (the counts are always whole).
KEYS_SHOWN = 20

#: The chunk of a load that is not split (chunked loads number their chunks from 1).
WHOLE_FILE = 0

#: Hex digits of the chunk number in a chunk's unit id (up to 16,777,215 chunks).
CHUNK_HEX_DIGITS = 6

State = Literal["claimed", "pending", "loaded", "released"]
STATES: tuple[State, ...] = ("claimed", "pending", "loaded", "released")

#: What a row means now, from its state and what the server says of its load (:func:`row_status`).
Status = Literal["loaded", "committed", "in_flight", "live", "stale", "released"]

#: Characters a key may not hold to be named in a ``{a,b,c}`` list: ClickHouse splits the list at ``,``,
#: reads ``{`` and ``}`` as another group and ``*`` and ``?`` as wildcards (after percent-decoding the
#: URL, so encoding them does not help), and cuts a path-style URL at a line break.
UNNAMEABLE = frozenset("{},*?\n\r")


class ChangedFilesError(PlanError):
    """Files whose ETag differs from the version the ledger records as loaded (``on_changed='fail'``)."""


# ---------------------------------------------------------------------- the request


def check_request(request: LoadRequest) -> None:
    """Refuse the ledger arguments that cannot work together, before anything is listed or loaded.

    - ``skip_loaded`` with ``mode='overwrite'``: the load would replace the table with the new files alone.
    - ``on_changed='reload'`` with ``mode='append'``: the changed file's old rows would stay beside the new
      ones; ``replace_partitions`` replaces them when the file holds whole partitions.

    :raises InvalidRequestError: a combination that cannot work, or a malformed ``ledger_table``.
    """
    if not request.skip_loaded:
        if request.chunked:
            raise InvalidRequestError(
                "max_files_per_load / max_bytes_per_load need skip_loaded=True: the file ledger records which "
                "chunks are committed, so that a retry resumes at the next one; set skip_loaded=True"
            )
        return
    if request.mode == "overwrite":
        raise InvalidRequestError(
            "skip_loaded=True cannot run with mode='overwrite': the new files alone would replace the whole "
            "table; use mode='append' (or 'replace_partitions'), or load every file without skip_loaded"
        )
    if request.chunked and request.mode != "append":
        raise InvalidRequestError(
            f"max_files_per_load / max_bytes_per_load cannot run with mode={request.mode!r}: a later chunk would "
            "replace the partitions an earlier chunk wrote; use mode='append', or load without chunks"
        )
    if request.on_changed == "reload" and request.mode == "append":
        raise InvalidRequestError(
            "on_changed='reload' cannot run with mode='append': a changed file's old rows would stay in the "
            "table beside its new ones; use mode='replace_partitions' (each file holding whole partitions, whose "
            "rows the reload replaces) or on_changed='skip' / 'fail'"
        )
    ledger_ref(request, "default")


def ledger_ref(request: LoadRequest, default_database: str) -> TableRef:
    """The ledger table: ``ledger_table`` (in the target's database when it names no database), else
    ``<target database>._s3ch_ledger``.

    :param request: the request.
    :param default_database: the connection's database, for a target that names none.
    """
    database = request.table.database or default_database
    if request.ledger_table is None or not request.ledger_table.strip():
        return TableRef(database=database, name=LEDGER_NAME)
    ref = TableRef.parse(request.ledger_table)
    return ref if ref.database else TableRef(database=database, name=ref.name)


def target_name(request: LoadRequest, default_database: str) -> str:
    """The ledger's ``table`` column for the target: ``database.name``."""
    return f"{request.table.database or default_database}.{request.table.name}"


def check_steps(steps: LoadSteps, *, strategy: str) -> None:
    """Refuse a load the ledger cannot make exactly-once: one that does not go through a staging table.

    :raises PlanError: a Distributed target, a distributed insert, or a direct insert (a target that is
        not a local MergeTree table, or one that materialized views read from).
    """
    if strategy == "distributed":
        raise PlanError(
            "skip_loaded=True cannot run a distributed insert (s3Cluster) yet: the ledger records a load through "
            "a staging table on one node; use strategy='single'"
        )
    if steps.staging is None:
        raise PlanError(
            f"skip_loaded=True needs a staging table, and {steps.target} takes a direct insert ({steps.reason}); "
            "load into a local MergeTree table without materialized views, or load without skip_loaded"
        )


# ---------------------------------------------------------------------- the table


def render_create_ledger(ledger: TableRef) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the ledger: a ``ReplacingMergeTree(version)`` with persisted block
    numbers (the claims' order, see :func:`confirm`).

    :param ledger: the ledger table.
    """
    return f"""CREATE TABLE IF NOT EXISTS {render_table(ledger)}
(
    `table` String COMMENT 'the target, database.name',
    `bucket` String COMMENT 'the S3 bucket',
    `key` String COMMENT 'the object key',
    `etag` String COMMENT 'the ETag from the listing, without quotes: another ETag is another version',
    `size` UInt64 COMMENT 'bytes, from the listing',
    `last_modified` Nullable(DateTime64(3, 'UTC')) COMMENT 'from the listing',
    `chunk` UInt32 DEFAULT 0 COMMENT 'the load''s chunk the file was in (1, 2, ...); 0: a load not split',
    `load_id` String COMMENT 'the load: its query id stem, the same for every try of one task instance',
    `query_id` String COMMENT 'the try that wrote the row; pending and loaded: the insert that read the file',
    `state` Enum8('claimed' = 1, 'pending' = 2, 'loaded' = 3, 'released' = 4),
    `rows` Nullable(UInt64) COMMENT 'rows the file gave, where known',
    `claimed_at` DateTime64(6, 'UTC') DEFAULT now64(6) COMMENT 'when the load claimed the file',
    `updated_at` DateTime64(6, 'UTC') DEFAULT now64(6) COMMENT 'when this state was written',
    `version` UInt64 DEFAULT toUnixTimestamp64Nano(now64(9)) COMMENT 'the latest version of a row is its state'
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (`table`, `bucket`, `key`, `etag`, `chunk`, `load_id`)
SETTINGS enable_block_number_column = 1
COMMENT 's3ch file ledger: one row per file version, chunk and load (docs/ledger.md)'"""


def ledger_engine_problem(engine: str, engine_full: str) -> str | None:
    """Why an existing table cannot be the ledger, or None when it can.

    :param engine: ``system.tables.engine``.
    :param engine_full: ``system.tables.engine_full``.
    """
    if engine != "ReplacingMergeTree":
        return f"its engine is {engine}, not ReplacingMergeTree"
    if "enable_block_number_column = 1" not in engine_full:
        return "it lacks SETTINGS enable_block_number_column = 1 (the order of claims)"
    return None


#: The columns a state row is written with (``claimed_at`` too for a state after a claim).
WRITE_COLUMNS = ("table", "bucket", "key", "etag", "size", "last_modified", "chunk", "load_id", "query_id", "state",
                 "rows")


def render_write(ledger: TableRef, *, with_claimed_at: bool) -> str:
    """``INSERT INTO ledger (…) VALUES`` for the driver's rows; ``claimed_at`` is the server's now unless given.

    :param ledger: the ledger table.
    :param with_claimed_at: the rows carry ``claimed_at`` (a state after the claim keeps the claim's time).
    """
    columns = [*WRITE_COLUMNS, "claimed_at"] if with_claimed_at else list(WRITE_COLUMNS)
    return f"INSERT INTO {render_table(ledger)} ({', '.join(quote_identifier(c) for c in columns)}) VALUES"


def render_read(ledger: TableRef, files_table: str) -> str:
    """The latest version of every row of the target and bucket whose key is in the external table
    ``files_table`` (one ``key String`` column), or whose load is ``%(own)s``; with the claim's age by the
    server's clock and the latest version's block number (the columns of :data:`READ_FIELDS`). Parameters:
    ``t``, ``b``, ``own``.

    :param ledger: the ledger table.
    :param files_table: the name of the external table of keys sent with the query.
    """
    return (
        "SELECT key, etag, chunk, load_id, argMax(query_id, version), toString(argMax(state, version)), "
        "argMax(size, version), argMax(last_modified, version), argMax(rows, version), "
        "argMax(claimed_at, version), dateDiff('microsecond', argMax(claimed_at, version), now64(6)) / 1e6, "
        "argMax(_block_number, version), max(version) "
        f"FROM {render_table(ledger)} "
        f"WHERE `table` = %(t)s AND bucket = %(b)s AND (key IN (SELECT key FROM {quote_identifier(files_table)}) "
        "OR load_id = %(own)s) "
        "GROUP BY key, etag, chunk, load_id"
    )


#: The fields of :class:`LedgerRow`, in the order :func:`render_read` selects them.
READ_FIELDS = ("key", "etag", "chunk", "load_id", "query_id", "state", "size", "last_modified", "rows", "claimed_at",
               "age_s", "block", "version")


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
    """The latest version of one ledger row (one file version, chunk and load), as :func:`render_read` reads it."""

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


class LoadFacts(BaseModel):
    """What the server says of the loads the rows name: which units' staging tables exist (:func:`unit_id`),
    which loads run a query (of any of their chunks)."""

    staging: frozenset[str] = frozenset()
    running: frozenset[str] = frozenset()

    def busy(self, load_id: str) -> bool:
        """Whether a load runs a query or has a staging table, of any chunk."""
        return load_id in self.running or any(u.startswith(load_id) for u in self.staging)


def row_status(row: LedgerRow, facts: LoadFacts, *, own: str, claim_timeout: float) -> Status:
    """What a row means now.

    - ``loaded``: the file version is in the target; ``released``: the load gave it up.
    - ``pending``: ``in_flight`` while the load's staging table exists (its retry finishes it);
      ``committed`` once it is gone (the staging table is dropped only after its last partition moved).
    - ``claimed``: ``live`` while the load runs a query or has a staging table, or until the claim is
      ``claim_timeout`` seconds old (half of it for the load's own claims); then ``stale``.

    :param row: the row.
    :param facts: the server's facts about the loads.
    :param own: this load's id.
    :param claim_timeout: seconds a claim stays live on its own.
    """
    if row.state in ("loaded", "released"):
        return row.state
    if row.state == "pending":
        return "in_flight" if row.unit in facts.staging else "committed"
    if facts.busy(row.load_id):
        return "live"
    limit = claim_timeout / 2 if row.load_id == own else claim_timeout
    return "live" if row.age_s < limit else "stale"


# ---------------------------------------------------------------------- which files a load takes


class Selection(BaseModel):
    """Which listed files this load reads, and what the ledger says of the others."""

    #: The files this load reads (or, for a retry, read): claimed in :attr:`claim` or held already.
    files: list[S3Object] = Field(default_factory=list)
    #: The files to write ``claimed`` rows for (a first try, or a retry whose claims went stale).
    claim: list[S3Object] = Field(default_factory=list)
    #: A retry of a load that holds files already: it reads exactly those (no new files).
    retry: bool = False
    #: Keys of :attr:`files` that are new versions of a file loaded before (``on_changed='reload'``).
    reloaded: list[str] = Field(default_factory=list)
    #: Keys left out: loaded already (same ETag).
    skipped_loaded: list[str] = Field(default_factory=list)
    #: Keys left out: another load holds them (claimed, or loading).
    skipped_claimed: list[str] = Field(default_factory=list)
    #: Keys left out: another ETag was loaded (``on_changed='skip'``).
    skipped_changed: list[str] = Field(default_factory=list)
    #: ``pending`` rows whose staging table is gone: committed, to be recorded ``loaded``.
    committed: list[LedgerRow] = Field(default_factory=list)
    #: This load's rows it gives up (stale claims it does not take again, files gone from S3).
    release: list[LedgerRow] = Field(default_factory=list)
    #: Per chunk whose staging table still holds its files and whose rows are ``pending``: the query id of
    #: the insert that finished into it (an earlier try's).
    finished_inserts: dict[int, str] = Field(default_factory=dict)
    #: The chunk each file of :attr:`files` is in (its row's for a retry; :data:`WHOLE_FILE` unless chunked).
    chunk_of: dict[str, int] = Field(default_factory=dict)
    #: The load's chunks in all, committed ones included (0: not chunked).
    chunks: int = 0

    @property
    def new(self) -> list[str]:
        """Keys of :attr:`files` read for the first time."""
        reloaded = set(self.reloaded)
        return [o.key for o in self.files if o.key not in reloaded]


def _by_file(rows: Iterable[LedgerRow]) -> dict[FileVersion, list[LedgerRow]]:
    out: dict[FileVersion, list[LedgerRow]] = defaultdict(list)
    for row in rows:
        out[row.file].append(row)
    return out


def _unique(objects: Iterable[S3Object]) -> list[S3Object]:
    """One object per key (a ``{a,a}`` glob lists a key twice; the ledger loads it once)."""
    return list({o.key: o for o in objects}.values())


def select_files(
    objects: Sequence[S3Object],
    rows: Sequence[LedgerRow],
    facts: LoadFacts,
    *,
    own: str,
    on_changed: str = "fail",
    claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
    fmt: str | None = None,
    compression: str | None = None,
) -> Selection:
    """Decide which of the listed files this load reads.

    A **retry** (this load has rows that are not released and not stale) reads what it held, nothing new:
    its ``claimed`` and ``pending`` files that are still listed with the same ETag, or all of them while its
    chunk's staging table exists (the earlier try may have read them already); files gone from the listing
    are released when there is no staging table. Its ``loaded`` and committed files are done. Its stale
    claims are claimed again when no other load holds the file. Each file stays in the chunk its row names.

    Otherwise each listed file version is, in this order: ``loaded`` (a row of any load is loaded or
    committed: left out), held by another load (an ``in_flight`` or ``live`` row: left out, the next run
    sees it again), a changed file (another ETag of the key is loaded: ``on_changed``), or new. New and
    reloaded files are claimed; :func:`confirm` decides which claims hold.

    :param objects: the listing.
    :param rows: the ledger's rows for the listed keys and this load's rows (latest versions).
    :param facts: whose staging table exists and whose query runs.
    :param own: this load's id (its query id stem).
    :param on_changed: ``reload``, ``skip`` or ``fail``.
    :param claim_timeout: seconds a claim stays live without a query or a staging table.
    :param fmt: the manifest's format (for files a retry takes from the ledger, gone from the listing).
    :param compression: the manifest's compression (likewise).
    :raises ChangedFilesError: changed files under ``on_changed='fail'``.
    """
    listed = _unique(objects)
    status = {id(r): row_status(r, facts, own=own, claim_timeout=claim_timeout) for r in rows}
    committed = [r for r in rows if status[id(r)] == "committed"]
    done = {r.file for r in rows if status[id(r)] in ("loaded", "committed")}
    loaded_keys = {r.key for r in rows if status[id(r)] in ("loaded", "committed")}
    mine = [r for r in rows if r.load_id == own and status[id(r)] not in ("released", "stale")]
    stale_mine = [r for r in rows if r.load_id == own and status[id(r)] == "stale"]
    released_mine = [r for r in rows if r.load_id == own and status[id(r)] == "released"]

    if mine:
        return _retry(listed, rows, mine, stale_mine, released_mine, status, done, loaded_keys, committed, facts,
                      own, fmt, compression)

    by_file = _by_file(r for r in rows if r.load_id != own)
    sel = Selection(committed=committed)
    changed_fail: list[str] = []
    for obj in listed:
        version = version_of(obj)
        others = [status[id(r)] for r in by_file.get(version, [])]
        if version in done:
            sel.skipped_loaded.append(obj.key)
        elif any(s in ("in_flight", "live") for s in others):
            sel.skipped_claimed.append(obj.key)
        elif obj.key in loaded_keys:
            if on_changed == "fail":
                changed_fail.append(obj.key)
            elif on_changed == "skip":
                sel.skipped_changed.append(obj.key)
            else:
                sel.files.append(obj)
                sel.reloaded.append(obj.key)
        else:
            sel.files.append(obj)
    if changed_fail:
        shown = ", ".join(changed_fail[:KEYS_SHOWN]) + (f" and {len(changed_fail) - KEYS_SHOWN} more"
                                                        if len(changed_fail) > KEYS_SHOWN else "")
        raise ChangedFilesError(
            f"{len(changed_fail)} file(s) changed since they were loaded (another ETag than the loaded version): "
            f"{shown}; set on_changed='reload' (with mode='replace_partitions') to load them again, or "
            "on_changed='skip' to leave them out"
        )
    sel.claim = list(sel.files)
    sel.chunk_of = {o.key: WHOLE_FILE for o in sel.files}
    sel.release = list(stale_mine)  # written before the new claims: a file claimed again gets a newer row
    return sel


def _retry(
    listed: list[S3Object], rows: Sequence[LedgerRow], mine: list[LedgerRow], stale_mine: list[LedgerRow],
    released_mine: list[LedgerRow], status: Mapping[int, Status], done: set[FileVersion], loaded_keys: set[str],
    committed: list[LedgerRow],
    facts: LoadFacts, own: str, fmt: str | None, compression: str | None,
) -> Selection:
    """The selection of a load that holds files already (see :func:`select_files`): the files of its chunks
    that are not committed, each in the chunk its row names. Its stale claims, and the claims an earlier try
    gave back when it failed, are claimed again (in their chunks) where no other load holds the file: the
    retry of a chunked load goes on with the chunks after the one that failed."""
    listing = {version_of(o): o for o in listed}
    held = [r for r in mine if status[id(r)] in ("in_flight", "live")]
    others = _by_file(r for r in rows if r.load_id != own)
    taken = {v for v, rs in others.items() if any(status[id(r)] in ("in_flight", "live") for r in rs)}
    files: list[S3Object] = []
    chunk_of: dict[str, int] = {}
    release: list[LedgerRow] = []
    claim: list[S3Object] = []
    for row in held:
        obj = listing.get(row.file)
        if obj is None and row.unit in facts.staging:
            obj = S3Object(key=row.key, size=row.size, etag=row.etag or None, last_modified=row.last_modified,
                           format=fmt, compression=compression)
        if obj is None:
            release.append(row)  # gone from S3 (or rewritten) before this load read it
        else:
            files.append(obj)
            chunk_of[obj.key] = row.chunk
    stale = {id(r) for r in stale_mine}
    for row in [*stale_mine, *released_mine]:
        obj = listing.get(row.file)
        if obj is None or row.file in done or row.file in taken or obj.key in chunk_of:
            if id(row) in stale:
                release.append(row)
        else:  # a stale claim no other load took: this load claims it again, in the same chunk
            files.append(obj)
            claim.append(obj)
            chunk_of[obj.key] = row.chunk
    reloaded = [o.key for o in files if o.key in loaded_keys and version_of(o) not in done]
    return Selection(
        files=files, retry=True, reloaded=reloaded, committed=committed, release=release, claim=claim,
        chunk_of=chunk_of, chunks=max((r.chunk for r in [*mine, *stale_mine]), default=WHOLE_FILE),
        skipped_loaded=[o.key for o in listed if version_of(o) in done],
        finished_inserts={r.chunk: r.query_id for r in held if r.state == "pending" and r.unit in facts.staging},
    )


def split_chunks(files: Sequence[S3Object], *, max_files: int | None, max_bytes: int | None) -> list[list[S3Object]]:
    """Consecutive chunks of ``files`` in key order: at most ``max_files`` files and ``max_bytes`` bytes each
    (a file larger than ``max_bytes`` is a chunk alone). One chunk when neither limit is given.

    :param files: the files a load reads.
    :param max_files: the most files in a chunk.
    :param max_bytes: the most bytes (as listed) in a chunk.
    """
    ordered = sorted(files, key=lambda o: o.key)
    if max_files is None and max_bytes is None:
        return [ordered] if ordered else []
    chunks: list[list[S3Object]] = []
    current: list[S3Object] = []
    size = 0
    for obj in ordered:
        full = (max_files is not None and len(current) >= max_files) or (
            max_bytes is not None and current and size + obj.size > max_bytes)
        if full:
            chunks.append(current)
            current, size = [], 0
        current.append(obj)
        size += obj.size
    if current:
        chunks.append(current)
    return chunks


def assign_chunks(sel: Selection, *, max_files: int | None, max_bytes: int | None) -> Selection:
    """A first try's selection with its files split into chunks numbered from 1 (:func:`split_chunks`); the
    selection as it is for a retry (its rows name their chunks) or when neither limit is given.

    :param sel: the selection.
    :param max_files: ``max_files_per_load``.
    :param max_bytes: ``max_bytes_per_load``.
    """
    if sel.retry or (max_files is None and max_bytes is None):
        return sel
    chunks = split_chunks(sel.files, max_files=max_files, max_bytes=max_bytes)
    chunk_of = {o.key: n for n, chunk in enumerate(chunks, start=1) for o in chunk}
    return sel.model_copy(update={"chunk_of": chunk_of, "chunks": len(chunks)})


class Chunk(BaseModel):
    """One insert of a load: a chunk's files (or all of them, :data:`WHOLE_FILE`)."""

    model_config = ConfigDict(frozen=True)

    number: int = WHOLE_FILE
    #: The load's chunks in all (0: not chunked).
    total: int = 0
    files: list[S3Object] = Field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.files)

    def describe(self) -> str:
        """``"chunk 8/20: 100 files, 1.2 GiB"``."""
        what = f"{len(self.files)} file{'s' if len(self.files) != 1 else ''}, {fmt_bytes(self.bytes)}"
        return what if self.number == WHOLE_FILE else f"chunk {self.number}/{self.total}: {what}"


def chunks_of(sel: Selection) -> list[Chunk]:
    """The selection's files as the chunks they load in, in chunk order."""
    return [Chunk(number=n, total=sel.chunks, files=files) for n, files in group_chunks(sel.files, sel.chunk_of)]


def group_chunks(files: Sequence[S3Object], chunk_of: Mapping[str, int]) -> list[tuple[int, list[S3Object]]]:
    """The files by chunk, in chunk order: ``[(chunk, files), …]``."""
    out: dict[int, list[S3Object]] = defaultdict(list)
    for obj in files:
        out[chunk_of.get(obj.key, WHOLE_FILE)].append(obj)
    return sorted(out.items())


def confirm(
    objects: Sequence[S3Object], rows: Sequence[LedgerRow], facts: LoadFacts, *, own: str,
    claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
) -> tuple[list[S3Object], list[S3Object]]:
    """Which of this load's claims hold, read after writing them: (kept, lost).

    A file is this load's when its own row is ``claimed`` or ``pending``, no other load's row is
    ``loaded``, committed or ``in_flight``, and no other load's ``live`` claim has a smaller block number.
    Every load that reads the ledger after writing its claims decides the same for a file: a claim with a
    smaller block number was visible before its own.

    :param objects: the files this load claimed.
    :param rows: the ledger's rows for them, read after the claims (latest versions).
    :param facts: whose staging table exists and whose query runs.
    :param own: this load's id.
    :param claim_timeout: seconds a claim stays live without a query or a staging table.
    """
    by_file = _by_file(rows)
    kept: list[S3Object] = []
    lost: list[S3Object] = []
    for obj in objects:
        version = version_of(obj)
        candidates = by_file.get(version, [])
        me = next((r for r in candidates if r.load_id == own and r.state in ("claimed", "pending")), None)
        if me is None:
            lost.append(obj)
            continue
        beaten = False
        for other in candidates:
            if other.load_id == own:
                continue
            s = row_status(other, facts, own=own, claim_timeout=claim_timeout)
            if s in ("loaded", "committed", "in_flight") or (s == "live" and other.block < me.block):
                beaten = True
                break
        (lost if beaten else kept).append(obj)
    return kept, lost


# ---------------------------------------------------------------------- what the insert reads


def key_list_pattern(keys: Sequence[str], pattern: str, *, archive_syntax: bool = True) -> tuple[str, str]:
    """The key pattern under which ClickHouse reads exactly ``keys``: one key as it is, several as one
    ``{k1,k2,…}`` group, which ClickHouse expands into direct reads without listing; for an archive glob
    (``a/*.zip :: *.csv``) the group of archives with the same member pattern.

    :param keys: the keys (non-empty).
    :param pattern: the load's own key pattern (its archive member pattern is kept).
    :param archive_syntax: ``allow_archive_path_syntax``.
    :return: the keys' part (what replaces the archive glob, see
        :func:`~airflow_provider_s3ch.core.glob.key_url`) and the whole pattern.
    :raises InvalidRequestError: a key that cannot be named in such a list (:data:`UNNAMEABLE`, or ``::``
        where it would read as an archive path).
    """
    if not keys:
        raise InvalidRequestError("no keys to read")
    member = split_archive(pattern, archive_syntax)[1]
    bad = [k for k in keys if any(c in UNNAMEABLE for c in k) or (archive_syntax and "::" in k)]
    if bad:
        listed = ", ".join(repr(k) for k in bad[:KEYS_SHOWN])
        raise InvalidRequestError(
            f"skip_loaded=True reads the new files by name, and ClickHouse cannot name {len(bad)} of them in a "
            f"key list (a key holding ',', '{{', '}}', '*', '?', '::' or a line break): {listed}; rename them, "
            "narrow s3_uri to leave them out, or load without skip_loaded"
        )
    body = keys[0] if len(keys) == 1 else "{" + ",".join(keys) + "}"
    return body, body if member is None else f"{body} :: {member}"


def narrow_manifest(manifest: Manifest, files: Sequence[S3Object], pattern: str) -> Manifest:
    """The manifest of the files this load reads, under the key-list ``pattern`` its URL is made from;
    the Parquet footers' uncompressed estimate scaled to the files' share of the bytes.

    :param manifest: the whole listing's manifest.
    :param files: the files this load reads.
    :param pattern: their key-list pattern (:func:`key_list_pattern`).
    """
    total = manifest.total_bytes
    part = sum(o.size for o in files)
    uncompressed = manifest.uncompressed_bytes
    if uncompressed is not None:
        uncompressed = uncompressed * part // total if total else uncompressed
    return manifest.model_copy(
        update={"objects": sorted(files, key=lambda o: o.key), "pattern": pattern, "uncompressed_bytes": uncompressed}
    )


# ---------------------------------------------------------------------- writes and the summary


def state_rows(
    target: str, bucket: str, files: Iterable[S3Object | LedgerRow], *, load_id: str, query_id: str, state: State,
    rows: int | None = None, chunk_of: Mapping[str, int] | None = None,
) -> list[tuple[object, ...]]:
    """The driver's rows for :func:`render_write`: one per file, in ``state``; ``claimed_at`` appended
    (from the ledger row) when ``files`` are rows.

    :param target: the target, ``database.name``.
    :param bucket: the bucket.
    :param files: the listing's objects (a claim) or ledger rows (a later state of them).
    :param load_id: the load the rows belong to.
    :param query_id: the try that writes them, or the insert that read the files.
    :param state: the state to write.
    :param rows: rows the file gave, where known.
    :param chunk_of: the chunk of each object's key (:data:`WHOLE_FILE` for a key it does not name).
    """
    out: list[tuple[object, ...]] = []
    chunk_of = chunk_of or {}
    for f in files:
        if isinstance(f, LedgerRow):
            out.append((target, bucket, f.key, f.etag, f.size, f.last_modified, f.chunk, load_id, query_id, state,
                        rows if rows is not None else f.rows, f.claimed_at))
        else:
            out.append((target, bucket, f.key, f.etag or "", f.size, f.last_modified,
                        chunk_of.get(f.key, WHOLE_FILE), load_id, query_id, state, rows))
    return out


def shown(keys: Sequence[str]) -> list[str]:
    """The first :data:`KEYS_SHOWN` keys."""
    return list(keys[:KEYS_SHOWN])


def summary(
    ledger: TableRef, selection: Selection, *, load_id: str, lost: Sequence[S3Object] = (),
    committed: Sequence[LedgerRow] = (), claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
) -> dict[str, object]:
    """The XCom's ``ledger`` entry: counts of every outcome, and the first keys of each (JSON-safe).

    :param ledger: the ledger table.
    :param selection: the selection, its ``files`` the ones this load reads.
    :param load_id: this load's id.
    :param lost: files this load claimed and another load holds (they count as ``skipped_claimed``).
    :param committed: rows recorded ``loaded`` on this look (``pending`` rows whose staging table was gone).
    :param claim_timeout: the claim timeout in force.
    """
    claimed = [*selection.skipped_claimed, *(o.key for o in lost)]
    recovered = [r.key for r in committed]
    return {
        "table": str(ledger),
        "load_id": load_id,
        "retry": selection.retry,
        "new": len(selection.new),
        "reloaded": len(selection.reloaded),
        "skipped": len(selection.skipped_loaded) + len(claimed) + len(selection.skipped_changed),
        "skipped_loaded": len(selection.skipped_loaded),
        "skipped_claimed": len(claimed),
        "skipped_changed": len(selection.skipped_changed),
        "recovered": len(recovered),
        "new_keys": shown(selection.new),
        "reloaded_keys": shown(selection.reloaded),
        "skipped_loaded_keys": shown(selection.skipped_loaded),
        "skipped_claimed_keys": shown(claimed),
        "skipped_changed_keys": shown(selection.skipped_changed),
        "recovered_keys": shown(recovered),
        "keys_shown": KEYS_SHOWN,
        "claim_timeout": claim_timeout,
        "chunks": selection.chunks,
    }

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
committed (:func:`~airflow_provider_s3ch.core.ledger_rows.row_status` says ``committed``: whoever sees it
records ``loaded``); one whose staging table is there is still being finished, by the load's retry.

**Chunks** (``max_files_per_load`` / ``max_bytes_per_load``): a load splits its files into consecutive
chunks, numbered from 1 in its ``claimed`` rows. Each chunk is a load of its own for the states above:
its insert's query id and its staging table carry the chunk's unit id
(:func:`~airflow_provider_s3ch.core.ledger_rows.unit_id`), so a ``pending`` row is judged by its own chunk's
staging table. A retry reads the rows it holds and loads the chunks that are not committed yet, in order:
chunk 8 after a death in chunk 8, whatever step it died at. A load's claims are live while any of its
chunks runs or has a staging table.

Two loads that want the same file both write a ``claimed`` row; each then reads the ledger again and
keeps the files where its claim is the earliest live one (:func:`confirm`). "Earliest" is the row's
``_block_number``: ClickHouse numbers a MergeTree table's inserts when it commits them, in the order in
which they become visible, so a load that does not see another's claim when it reads again holds the
smaller number, and the other load sees its claim and gives the file up.

A claim is live while its load runs a query or its staging table exists. Between the claim and the insert
(planning, the schema check), between chunks and while it publishes, a load proves it is alive: it writes a
heartbeat (a row of the ledger's heartbeat table, ``<ledger>_heartbeat``, stamped by the server's clock)
before its claims and then every ``claim_heartbeat`` seconds; a beat vouches for the load's claims for
:data:`HEARTBEAT_WINDOW_BEATS` intervals (its window, stored with it). A claim whose load runs nothing, has
no staging table and whose last sign of life (the claim itself or the last beat) is older than the window
is ``stale``: another load may take the file, seconds after its load died. ``claim_timeout`` bounds a claim
in any case, and alone holds the claims of a load that writes no heartbeat (an older version's). The load
itself counts on half of either limit: when its beats lapsed for half the window (a stall, a slow server),
or its claims are half ``claim_timeout`` old, it claims its files again and keeps only those no other load
took before it inserts them, so that it never inserts a file another load could already take as stale.

This module selects and claims the files and cuts them into chunks; what the insert reads and what the load
reports of the ledger are :mod:`airflow_provider_s3ch.core.ledger_reads`'s. A row and
what it means are :mod:`airflow_provider_s3ch.core.ledger_rows`'s, the table's SQL
:mod:`airflow_provider_s3ch.core.ledger_sql`'s, the checks of the ledger's arguments
:mod:`airflow_provider_s3ch.core.ledger_request`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.ledger_rows import (
    WHOLE_FILE,
    FileVersion,
    LedgerRow,
    LoadActivity,
    Status,
    row_status,
    version_of,
)
from airflow_provider_s3ch.core.models import Manifest, S3Object
from airflow_provider_s3ch.core.recovery import Resume
from airflow_provider_s3ch.core.sizes import fmt_bytes

#: How long a claim stays live at most without a query or a staging table of its load (seconds).
DEFAULT_CLAIM_TIMEOUT = 3600.0

#: Seconds between two heartbeats of a load that holds claims (``claim_heartbeat``): one small insert per
#: load every few seconds costs the server little, and a dead load's claims are free after a few of them.
DEFAULT_CLAIM_HEARTBEAT = 5.0

#: A heartbeat vouches for its load's claims this many intervals (its window): a slow server or a pause of
#: the worker may delay a beat or two without the claims going stale; the load itself counts on half of it.
HEARTBEAT_WINDOW_BEATS = 4

#: How many keys each list in the XCom's ``ledger`` entry shows (the counts are always whole).
KEYS_SHOWN = 20

#: Characters a key may not hold to be named in a ``{a,b,c}`` list: ClickHouse splits the list at ``,``,
#: reads ``{`` and ``}`` as another group and ``*`` and ``?`` as wildcards (after percent-decoding the
#: URL, so encoding them does not help), and cuts a path-style URL at a line break.
UNNAMEABLE = frozenset("{},*?\n\r")


class ChangedFilesError(PlanError):
    """Files whose ETag differs from the version the ledger records as loaded (``on_changed='fail'``)."""


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
    #: ``loaded`` (or committed) rows of a key that a newer one replaced (a reload): to be recorded ``released``.
    superseded: list[LedgerRow] = Field(default_factory=list)
    #: The loaded rows of the :attr:`reloaded` keys: recorded ``released`` once the new version is loaded.
    replaces: list[LedgerRow] = Field(default_factory=list)
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


def loaded_versions(rows: Sequence[LedgerRow], status: Mapping[int, Status]) -> tuple[dict[str, LedgerRow],
                                                                                      list[LedgerRow]]:
    """Per key, the version in the target: the newest row (by its ``version``) that is ``loaded`` or
    committed; and the other such rows, which a reload replaced (their rows left the target with it).

    A key put back to an earlier version is a changed file, not a loaded one: the target holds the version
    the newest row names.

    :param rows: the ledger rows (latest versions).
    :param status: each row's status (:func:`~airflow_provider_s3ch.core.ledger_rows.row_status`), by ``id``.
    """
    current: dict[str, LedgerRow] = {}
    for row in sorted((r for r in rows if status[id(r)] in ("loaded", "committed")), key=lambda r: r.version):
        current[row.key] = row
    newest = {id(r) for r in current.values()}
    return current, [r for r in rows if status[id(r)] in ("loaded", "committed") and id(r) not in newest]


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
    facts: LoadActivity,
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
    current, superseded = loaded_versions(rows, status)
    committed = [r for r in rows if status[id(r)] == "committed" and id(r) not in {id(x) for x in superseded}]
    done = {r.file for r in current.values()}
    loaded_keys = set(current)
    mine = [r for r in rows if r.load_id == own and status[id(r)] not in ("released", "stale")]
    stale_mine = [r for r in rows if r.load_id == own and status[id(r)] == "stale"]
    released_mine = [r for r in rows if r.load_id == own and status[id(r)] == "released"]

    if mine:
        sel = _retry(listed, rows, mine, stale_mine, released_mine, status, done, loaded_keys, committed, facts,
                     own, fmt, compression)
        return sel.model_copy(update={"superseded": superseded, "replaces": [current[k] for k in sel.reloaded]})

    by_file = _by_file(r for r in rows if r.load_id != own)
    sel = Selection(committed=committed, superseded=superseded)
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
    sel.replaces = [current[k] for k in sel.reloaded]
    sel.chunk_of = {o.key: WHOLE_FILE for o in sel.files}
    sel.release = list(stale_mine)  # written before the new claims: a file claimed again gets a newer row
    return sel


def _retry(
    listed: list[S3Object], rows: Sequence[LedgerRow], mine: list[LedgerRow], stale_mine: list[LedgerRow],
    released_mine: list[LedgerRow], status: Mapping[int, Status], done: set[FileVersion], loaded_keys: set[str],
    committed: list[LedgerRow],
    facts: LoadActivity, own: str, fmt: str | None, compression: str | None,
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


def resume_with_ledger(resume: Resume, sel: Selection, chunk: int) -> Resume:
    """What a ledger load's try does about an earlier one, as the ledger knows it better than the query log:

    - the earlier try gave its files up (its rows ``released``: a refusal, or a failure that left nothing
      behind), so this try claimed them afresh (not a retry): its insert is not attached to, even when the
      query log says it finished (the staging table may be gone, or hold other files): the files load afresh;
    - the chunk's ``pending`` rows name an insert whose staging table still holds the files and the query log
      does not say so (a cleared task instance, or a log that lost the entry): it is attached to. Loading
      afresh would drop the staging table after some partitions moved.

    :param resume: what the query log says (:func:`~airflow_provider_s3ch.core.recovery.decide_resume`).
    :param sel: the load's selection.
    :param chunk: the chunk's number.
    """
    if resume.action == "attach" and not sel.retry:
        return Resume(action="load", reason=(
            f"earlier try {resume.query_ids[0]} finished an insert, but the ledger says that try gave its files up "
            "(released): loading them afresh"))
    finished = sel.finished_inserts.get(chunk)
    if resume.action == "load" and finished:
        return Resume(action="attach", query_ids=[finished], reason=f"{resume.reason}; the ledger says insert "
                      f"{finished} finished and its staging table holds the files: finishing it")
    return resume


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


class ChunkStart(NamedTuple):
    """A chunk about to be inserted: the chunk as it stands now, its manifest and the URL of its keys."""

    chunk: Chunk
    manifest: Manifest
    url: str


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
    objects: Sequence[S3Object], rows: Sequence[LedgerRow], facts: LoadActivity, *, own: str,
    claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
) -> tuple[list[S3Object], list[S3Object]]:
    """Which of this load's claims hold, read after writing them: (kept, lost).

    A file is this load's when its own row is ``claimed`` or ``pending``, no other load's row is
    ``loaded`` or committed (the key's newest such row: an older one was replaced by a reload) or
    ``in_flight``, and no other load's ``live`` claim has a smaller block number.
    Every load that reads the ledger after writing its claims decides the same for a file: a claim with a
    smaller block number was visible before its own.

    :param objects: the files this load claimed.
    :param rows: the ledger's rows for them, read after the claims (latest versions).
    :param facts: whose staging table exists and whose query runs.
    :param own: this load's id.
    :param claim_timeout: seconds a claim stays live without a query or a staging table.
    """
    by_file = _by_file(rows)
    current, _ = loaded_versions(rows, {id(r): row_status(r, facts, own=own, claim_timeout=claim_timeout)
                                        for r in rows})
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
            if s in ("loaded", "committed") and current.get(obj.key) is not other:
                continue  # an earlier load of these bytes, replaced since (the key was put back)
            if s in ("loaded", "committed", "in_flight") or (s == "live" and other.block < me.block):
                beaten = True
                break
        (lost if beaten else kept).append(obj)
    return kept, lost

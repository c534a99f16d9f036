"""The ledger table's SQL: its ``CREATE``, the read of its rows and the write of a state, and the rows that
write takes. Pure: no I/O. The rows and what they mean are :mod:`airflow_provider_s3ch.core.ledger_rows`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_s3ch.core.ledger_rows import WHOLE_FILE, LedgerRow, State
from airflow_provider_s3ch.core.models import S3Object, TableRef
from airflow_provider_s3ch.core.recovery import QUERY_ID_PREFIX, STAGING_PREFIX, STEM_HEX_DIGITS
from airflow_provider_s3ch.core.sql import quote_identifier, render_table

# ---------------------------------------------------------------------- the table


def render_create_ledger(ledger: TableRef) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the ledger: a ``ReplacingMergeTree(version)`` with persisted block
    numbers (the claims' order, see :func:`~airflow_provider_s3ch.core.ledger.confirm`).

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
    `partitions` Array(String) DEFAULT [] COMMENT 'pending and loaded: the partition ids its insert wrote',
    `claimed_at` DateTime64(6, 'UTC') DEFAULT now64(6) COMMENT 'when the load claimed the file',
    `updated_at` DateTime64(6, 'UTC') DEFAULT now64(6) COMMENT 'when this state was written',
    `version` UInt64 DEFAULT toUnixTimestamp64Nano(now64(9)) COMMENT 'the latest version of a row is its state'
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (`table`, `bucket`, `key`, `etag`, `chunk`, `load_id`)
SETTINGS enable_block_number_column = 1
COMMENT 's3ch file ledger: one row per file version, chunk and load (docs/ledger.md)'"""


#: The heartbeat table's name: the ledger's and this suffix, in the ledger's database.
HEARTBEAT_SUFFIX = "_heartbeat"

#: Days a heartbeat row is kept after its last beat (a load's claims older than that are judged by
#: ``claim_timeout`` alone, as a load's that wrote none).
HEARTBEAT_TTL_DAYS = 1


def heartbeat_ref(ledger: TableRef) -> TableRef:
    """The ledger's heartbeat table: one row per load, the latest beat its state."""
    return TableRef(database=ledger.database, name=f"{ledger.name}{HEARTBEAT_SUFFIX}")


def render_create_heartbeats(ledger: TableRef) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the ledger's heartbeat table (:func:`heartbeat_ref`): a load that holds
    claims writes its row every few seconds, the server's clock stamping it.

    :param ledger: the ledger table.
    """
    return f"""CREATE TABLE IF NOT EXISTS {render_table(heartbeat_ref(ledger))}
(
    `load_id` String COMMENT 'the load that holds claims in the ledger',
    `window_s` Float64 COMMENT 'seconds this beat vouches for the load''s claims',
    `beat_at` DateTime64(6, 'UTC') DEFAULT now64(6) COMMENT 'when the server stored the beat'
)
ENGINE = ReplacingMergeTree(beat_at)
ORDER BY `load_id`
TTL toDateTime(beat_at) + INTERVAL {HEARTBEAT_TTL_DAYS} DAY
COMMENT 's3ch ledger heartbeats: a load is alive while its beat is younger than its window (docs/ledger.md)'"""


def render_write_heartbeat(ledger: TableRef) -> str:
    """``INSERT INTO`` the heartbeat table ``(load_id, window_s) VALUES``; the server stamps ``beat_at``."""
    return f"INSERT INTO {render_table(heartbeat_ref(ledger))} (`load_id`, `window_s`) VALUES"


#: The column a ledger created before partitions were kept gets (its rows read as "any partition").
PARTITIONS_COLUMN = "partitions"

#: The external table of keys a ledger read sends with its query.
FILES_TABLE = "_s3ch_files"


def key_table(keys: Iterable[str]) -> list[dict[str, Any]]:
    """The external table of keys a ledger read sends with its query (:data:`FILES_TABLE`), each key once."""
    return [{"name": FILES_TABLE, "structure": [("key", "String")], "data": [{"key": k} for k in dict.fromkeys(keys)]}]


def render_add_partitions(ledger: TableRef) -> str:
    """``ALTER TABLE … ADD COLUMN IF NOT EXISTS partitions``: a ledger from before partitions were kept."""
    return (f"ALTER TABLE {render_table(ledger)} ADD COLUMN IF NOT EXISTS `partitions` Array(String) DEFAULT [] "
            "COMMENT 'pending and loaded: the partition ids its insert wrote' AFTER `rows`")


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


def render_ledger_table(ledger: TableRef) -> tuple[str, dict[str, object]]:
    """What an existing ledger table is: its engine, its engine clause (:func:`ledger_engine_problem` takes both),
    whether it has the :data:`PARTITIONS_COLUMN`, whether its heartbeat table exists and whether its table of files
    set aside exists (1 or 0 each); no row when the table does not exist. The statement and its parameters.

    :param ledger: the ledger table (its database named).
    """
    return (
        "SELECT engine, engine_full, (SELECT count() FROM system.columns WHERE database = %(d)s AND table = %(t)s "
        f"AND name = '{PARTITIONS_COLUMN}'), (SELECT count() FROM system.tables WHERE database = %(d)s "
        "AND name = %(h)s), (SELECT count() FROM system.tables WHERE database = %(d)s AND name = %(s)s) "
        "FROM system.tables WHERE database = %(d)s AND name = %(t)s",
        {"d": ledger.database, "t": ledger.name, "h": heartbeat_ref(ledger).name, "s": set_aside_ref(ledger).name},
    )


# ---------------------------------------------------------------------- files set aside

#: The table of files set aside (``on_bad_file='set_aside'``): the ledger's name and this suffix, in its database.
SET_ASIDE_SUFFIX = "_set_aside"

#: The most characters of a file's error kept in the table.
SET_ASIDE_ERROR_CHARS = 2000


def set_aside_ref(ledger: TableRef) -> TableRef:
    """The ledger's table of files set aside: one row per file version a load could not read as data."""
    return TableRef(database=ledger.database, name=f"{ledger.name}{SET_ASIDE_SUFFIX}")


def render_create_set_aside(ledger: TableRef) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the table of files set aside; a row deleted from it is loaded again."""
    return f"""CREATE TABLE IF NOT EXISTS {render_table(set_aside_ref(ledger))}
(
    `table` String COMMENT 'the target, database.name',
    `bucket` String,
    `key` String,
    `etag` String COMMENT 'the version set aside: another ETag (the file put again) is loaded',
    `size` UInt64,
    `load_id` String COMMENT 'the load that set it aside',
    `query_id` String COMMENT 'the insert that failed on it',
    `error` String COMMENT 'what the server said of the file (without its rows)',
    `set_aside_at` DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree(set_aside_at)
ORDER BY (`table`, `bucket`, `key`, `etag`)
COMMENT 's3ch files set aside: versions the server could not read as data; delete a row to load it again'"""


def render_read_set_aside(ledger: TableRef, files_table: str) -> str:
    """The versions of the target and bucket set aside, of the keys in the external table ``files_table``: key,
    ETag and the error. Parameters: ``t``, ``b``."""
    return (
        f"SELECT key, etag, argMax(error, set_aside_at) FROM {render_table(set_aside_ref(ledger))} "
        f"WHERE `table` = %(t)s AND bucket = %(b)s AND key IN (SELECT key FROM {quote_identifier(files_table)}) "
        "GROUP BY key, etag"
    )


def render_write_set_aside(ledger: TableRef) -> str:
    """``INSERT`` of one file set aside (the driver's rows: table, bucket, key, etag, size, load_id, query_id,
    error)."""
    return (f"INSERT INTO {render_table(set_aside_ref(ledger))} "
            "(`table`, bucket, key, etag, size, load_id, query_id, error) VALUES")


#: Settings of the ledger's writes: every state row is stored and visible when the INSERT returns.
WRITE_SETTINGS = {"insert_deduplicate": 0, "async_insert": 0}

#: The columns a state row is written with (``claimed_at`` too for a state after a claim).
WRITE_COLUMNS = ("table", "bucket", "key", "etag", "size", "last_modified", "chunk", "load_id", "query_id", "state",
                 "rows", "partitions")


def render_write(ledger: TableRef, *, with_claimed_at: bool) -> str:
    """``INSERT INTO ledger (…) VALUES`` for the driver's rows; ``claimed_at`` is the server's now unless given.

    :param ledger: the ledger table.
    :param with_claimed_at: the rows carry ``claimed_at`` (a state after the claim keeps the claim's time).
    """
    columns = [*WRITE_COLUMNS, "claimed_at"] if with_claimed_at else list(WRITE_COLUMNS)
    return f"INSERT INTO {render_table(ledger)} ({', '.join(quote_identifier(c) for c in columns)}) VALUES"


def render_read(ledger: TableRef, files_table: str, *, partitions: bool = True) -> str:
    """The latest version of every row of the target and bucket whose key is in the external table
    ``files_table`` (one ``key String`` column), or whose load is ``%(own)s``; with the claim's age by the
    server's clock and the latest version's block number (the columns of :data:`READ_FIELDS`). Parameters:
    ``t``, ``b``, ``own``.

    :param ledger: the ledger table.
    :param files_table: the name of the external table of keys sent with the query.
    :param partitions: the table has the ``partitions`` column (a ledger from before it reads none).
    """
    return (
        "SELECT key, etag, chunk, load_id, argMax(query_id, version), toString(argMax(state, version)), "
        "argMax(size, version), argMax(last_modified, version), argMax(rows, version), "
        "argMax(claimed_at, version), dateDiff('microsecond', argMax(claimed_at, version), now64(6)) / 1e6, "
        "argMax(_block_number, version), max(version), "
        f"{'argMax(partitions, version)' if partitions else 'CAST([] AS Array(String))'} "
        f"FROM {render_table(ledger)} "
        f"WHERE `table` = %(t)s AND bucket = %(b)s AND (key IN (SELECT key FROM {quote_identifier(files_table)}) "
        "OR load_id = %(own)s) "
        "GROUP BY key, etag, chunk, load_id"
    )


#: The fields of :class:`LedgerRow`, in the order :func:`render_read` selects them.
READ_FIELDS = ("key", "etag", "chunk", "load_id", "query_id", "state", "size", "last_modified", "rows", "claimed_at",
               "age_s", "block", "version", "partitions")


def render_read_partitions(ledger: TableRef, files_table: str) -> str:
    """The latest version of every ``loaded`` or ``pending`` row of the target's loads, in any bucket,
    recorded in one of the partitions ``%(p)s`` or with none recorded, or of a key in the external table
    ``files_table`` (this load's files: a reloaded file's earlier versions, wherever they wrote), this load's
    own included (the fields of :class:`~airflow_provider_s3ch.core.ledger_rebuild.EarlierRow`,
    :data:`REBUILD_FIELDS`). Parameters: ``t``, ``p``.

    :param ledger: the ledger table.
    """
    return (
        "SELECT bucket, key, etag, chunk, load_id, toString(argMax(state, version)) AS s, "
        "argMax(partitions, version) AS ps, max(version), argMax(_block_number, version) "
        f"FROM {render_table(ledger)} WHERE `table` = %(t)s "
        "GROUP BY bucket, key, etag, chunk, load_id "
        "HAVING s IN ('loaded', 'pending') AND (empty(ps) OR hasAny(ps, %(p)s) OR "
        f"key IN (SELECT key FROM {quote_identifier(files_table)}))"
    )


#: The columns :func:`render_read_partitions` selects (``chunk`` and ``load_id`` make the row's unit).
REBUILD_FIELDS = ("bucket", "key", "etag", "chunk", "load_id", "state", "partitions", "version", "block")


def state_rows(
    target: str, bucket: str, files: Iterable[S3Object | LedgerRow], *, load_id: str, query_id: str, state: State,
    rows: int | None = None, chunk_of: Mapping[str, int] | None = None, partitions: Sequence[str] | None = None,
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
    :param partitions: the partition ids the files' insert wrote (None: a row's recorded ones, or none).
    """
    out: list[tuple[object, ...]] = []
    chunk_of = chunk_of or {}
    for f in files:
        if isinstance(f, LedgerRow):
            out.append((target, bucket, f.key, f.etag, f.size, f.last_modified, f.chunk, load_id, query_id, state,
                        rows if rows is not None else f.rows,
                        list(partitions if partitions is not None else f.partitions), f.claimed_at))
        else:
            out.append((target, bucket, f.key, f.etag or "", f.size, f.last_modified,
                        chunk_of.get(f.key, WHOLE_FILE), load_id, query_id, state, rows, list(partitions or ())))
    return out


# ---------------------------------------------------------------------- what the server says of the loads


def render_staging_tables(ledger: TableRef | None = None) -> tuple[str, dict[str, object]]:
    """The staging tables (of a load or of one of its chunks) of the loads ``%(ids)s`` in database ``%(d)s``,
    and with ``ledger`` the last heartbeat of each of those loads that wrote one, in one read: rows of
    (what, name, age in seconds by the server's clock, window), ``what`` ``'staging'`` (a table's name) or
    ``'heartbeat'`` (a load's id). The statement and its fixed parameters; the caller adds ``d`` and ``ids``.

    :param ledger: the ledger table, whose heartbeat table exists (None: none is read).
    """
    sql = ("SELECT 'staging', name, toFloat64(0), toFloat64(0) FROM system.tables WHERE database = %(d)s "
           "AND startsWith(name, %(p)s) AND substring(name, %(at)s, %(n)s) IN %(ids)s")
    if ledger is not None:
        sql += (" UNION ALL SELECT 'heartbeat', load_id, dateDiff('microsecond', max(beat_at), now64(6)) / 1e6, "
                f"argMax(window_s, beat_at) FROM {render_table(heartbeat_ref(ledger))} WHERE load_id IN %(ids)s "
                "GROUP BY load_id")
    return sql, {"p": STAGING_PREFIX, "at": len(STAGING_PREFIX) + 1, "n": STEM_HEX_DIGITS}


def render_running_loads() -> str:
    """The query ids of the provider's loads running on the node (:data:`QUERY_ID_PREFIX`)."""
    return f"SELECT query_id FROM system.processes WHERE startsWith(query_id, '{QUERY_ID_PREFIX}')"

"""Pure SQL rendering: quoting, the SETTINGS clause and the load's INSERT.

Every identifier and literal the provider sends to ClickHouse goes through this module.
ClickHouse treats a backslash as an escape character inside backtick-quoted identifiers
*and* inside single-quoted string literals (``\\n``, ``\\t``, ``\\xHH``, ``\\'``...), so
both quoting functions escape the backslash first, then the quote character, then
control characters.

:func:`render_insert` returns the SQL to run and a redacted copy to log: the secret
access key and the session token never appear in the redacted text.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import (
    QUERY_LOG_SETTINGS,
    SETTING_NAME_RE,
    LoadPlan,
    S3Credentials,
    SettingValue,
    TableRef,
)

#: What replaces the secret access key and the session token in the redacted SQL.
REDACTED = "[redacted]"

#: How many leading characters of the access key id the redacted SQL keeps (AWS key ids
#: are 20 characters; the first four only tell the key type, e.g. ``AKIA`` or ``ASIA``).
KEY_ID_VISIBLE_CHARS = 4

#: Key ids shorter than this are not shown at all in the redacted SQL.
KEY_ID_MIN_LENGTH_TO_SHOW = 12

#: ``structure`` placed before ``compression_method`` when only compression is given: the
#: positional form of ``s3``/``s3Cluster`` needs a structure there, and ``'auto'`` infers it.
AUTO_STRUCTURE = "auto"

#: How :func:`quote_literal` writes the characters it escapes (read back by
#: :func:`~airflow_provider_s3ch.core.marks.unquote_literal`).
ESCAPES = {
    "\\": "\\\\",
    "\0": "\\0",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


#: ClickHouse's default ``max_query_size``. A statement longer than the limit fails to parse,
#: and the server then logs its raw text in ``system.query_log``: credentials included. A parsed
#: statement is logged with the ``s3()`` credentials masked.
DEFAULT_MAX_QUERY_SIZE = 262_144

#: The other settings that decide whether the statement parses, and ClickHouse's defaults: a user's
#: value below the default (or another dialect) is raised to it, so the statement always parses.
PARSER_FLOORS: dict[str, int] = {"max_parser_depth": 1000, "max_parser_backtracks": 1_000_000}


def parseable(settings: dict[str, SettingValue], statement_bytes: int) -> dict[str, SettingValue]:
    """``settings`` with those that govern parsing set so that a statement of ``statement_bytes`` parses.

    ``max_query_size`` is set (whatever the server's profile says) and raised to the statement's length
    when the statement is longer than the default (a huge ``structure`` or glob); ``max_parser_depth``
    and ``max_parser_backtracks`` are kept at least at ClickHouse's defaults; ``dialect`` stays
    ``clickhouse``.
    """
    floors = {"max_query_size": max(statement_bytes, DEFAULT_MAX_QUERY_SIZE), **PARSER_FLOORS}
    for name, floor in floors.items():
        value = settings.get(name)
        if value is not None and not (isinstance(value, int) and value >= floor):
            settings[name] = floor
    settings.setdefault("max_query_size", max(statement_bytes, DEFAULT_MAX_QUERY_SIZE))
    if "dialect" in settings:
        settings["dialect"] = "clickhouse"
    return settings


class RenderedSQL(BaseModel):
    """A statement to execute, the settings sent beside it in the protocol, and a redacted copy for logs.

    The protocol's settings apply before the statement is parsed, so they keep it parseable whatever
    its length (a statement that does not parse is logged raw, credentials included). ``sql`` is kept
    out of ``repr()`` and ``str()`` so that logging the object by mistake shows only the redacted text.
    """

    model_config = ConfigDict(frozen=True)

    sql: str = Field(repr=False)
    settings: dict[str, SettingValue] = Field(default_factory=dict)
    redacted: str


def _escape(value: str, quote: str) -> str:
    out: list[str] = []
    for ch in value:
        if ch in ESCAPES:
            out.append(ESCAPES[ch])
        elif ch == quote:
            out.append("\\" + quote)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def quote_identifier(name: str) -> str:
    """Quote a ClickHouse identifier with backticks.

    Backslash becomes ``\\\\``, backtick ``\\```, control characters ``\\n``, ``\\xHH``....

    :param name: the identifier, unquoted.
    :return: the quoted identifier.
    :raises InvalidRequestError: the name is empty or holds a NUL character.
    """
    if not isinstance(name, str) or not name:
        raise InvalidRequestError(f"{name!r} is not an identifier: give a non-empty name")
    if "\0" in name:
        raise InvalidRequestError(f"identifier {name!r} holds a NUL character; ClickHouse names cannot")
    return "`" + _escape(name, "`") + "`"


def quote_literal(value: str) -> str:
    """Quote a ClickHouse string literal with single quotes.

    Backslash becomes ``\\\\``, quote ``\\'``, NUL ``\\0``, other control characters
    ``\\n``, ``\\t``, ``\\xHH``....

    :param value: the string.
    :return: the quoted literal.
    """
    if not isinstance(value, str):
        raise InvalidRequestError(f"{value!r} is not a string")
    return "'" + _escape(value, "'") + "'"


def quote_bytes(value: bytes) -> str:
    """Quote bytes as a ClickHouse string literal: printable ASCII as itself (backslash and quote escaped), any
    other byte as a hexadecimal escape."""
    return "'" + "".join(
        "\\" + chr(b) if b in (0x27, 0x5C) else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in value
    ) + "'"


def render_table(table: TableRef) -> str:
    """Render ```db`.`t``` or ```t```.

    :param table: the table.
    """
    if table.database:
        return f"{quote_identifier(table.database)}.{quote_identifier(table.name)}"
    return quote_identifier(table.name)


def render_setting_value(value: SettingValue | bool) -> str:
    """Render a setting's value: numbers bare, strings quoted, booleans as 1/0.

    :param value: an int, a finite float, a bool or a string.
    :raises InvalidRequestError: the value is another type or a non-finite float.
    """
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequestError(f"setting value {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        return quote_literal(value)
    raise InvalidRequestError(f"setting value {value!r} must be a number or a string, not {type(value).__name__}")


def render_settings(values: dict[str, SettingValue]) -> str:
    """Render ``SETTINGS a = 1, b = 'x'``, or ``""`` when there are none.

    :param values: setting names and values, in order.
    :raises InvalidRequestError: a name is not a ClickHouse setting name.
    """
    parts = []
    for name, value in values.items():
        if not isinstance(name, str) or not SETTING_NAME_RE.match(name):
            raise InvalidRequestError(f"{name!r} is not a ClickHouse setting name")
        parts.append(f"{name} = {render_setting_value(value)}")
    return "SETTINGS " + ", ".join(parts) if parts else ""


def _source_args(plan: LoadPlan) -> list[str]:
    """The arguments after the credentials: format[, structure][, compression]."""
    args = [quote_literal(plan.format)]
    if plan.structure is not None or plan.compression is not None:
        args.append(quote_literal(plan.structure if plan.structure is not None else AUTO_STRUCTURE))
    if plan.compression is not None:
        args.append(quote_literal(plan.compression))
    return args


def _redact_key_id(key_id: str) -> str:
    if len(key_id) >= KEY_ID_MIN_LENGTH_TO_SHOW:
        return quote_literal(key_id[:KEY_ID_VISIBLE_CHARS] + "…")
    return quote_literal("[key id]")


def _credential_args(credentials: S3Credentials | None, *, redact: bool) -> list[str]:
    if credentials is None:
        return ["NOSIGN"]
    key_id = credentials.access_key_id.get_secret_value()
    secret = credentials.secret_access_key.get_secret_value()
    token = credentials.session_token.get_secret_value() if credentials.session_token is not None else None
    if redact:
        args = [_redact_key_id(key_id), quote_literal(REDACTED)]
        if token is not None:
            args.append(quote_literal(REDACTED))
        return args
    args = [quote_literal(key_id), quote_literal(secret)]
    if token is not None:
        args.append(quote_literal(token))
    return args


def render_source(plan: LoadPlan, credentials: S3Credentials | None, *, redact: bool = False) -> str:
    """Render ``s3(url, creds, format[, structure][, compression])`` or ``s3Cluster(cluster, ...)``.

    Positional form, per ClickHouse's docs:
    ``s3(url [, NOSIGN | access_key_id, secret_access_key [, session_token]] [, format] [, structure]
    [, compression_method])``; ``s3Cluster`` takes the cluster name first. Without
    credentials the ``NOSIGN`` keyword makes ClickHouse send unsigned requests (rather than
    falling back to the server's own credentials). The plan's ``access``
    (:class:`~airflow_provider_s3ch.core.access.S3Access`) may keep the keys on the server: no keys
    (``server``, with ``extra_credentials(role_arn = …)`` for a role), or
    ``s3(collection, url = …, format = …)`` (``named_collection``).

    :param plan: the plan (URL, format, structure, compression, strategy, cluster).
    :param credentials: the keys ClickHouse reads the bucket with, or None for NOSIGN.
    :param redact: replace the secret and the token by ``'[redacted]'``, shorten the key id.
    """
    access = plan.access
    if access is not None and access.mode == "named_collection":  # the keys stay in the server's collection
        options = {"url": plan.source_url, "format": plan.format, "structure": plan.structure,
                   "compression_method": plan.compression}
        args = [quote_identifier(access.named_collection or ""),
                *(f"{name} = {quote_literal(value)}" for name, value in options.items() if value is not None)]
    else:
        keys = [] if access is not None and access.mode == "server" else _credential_args(credentials, redact=redact)
        args = [quote_literal(plan.source_url), *keys, *_source_args(plan)]
        if access is not None and access.role_arn:
            args.append(f"extra_credentials(role_arn = {quote_literal(access.role_arn)})")
    if plan.strategy == "distributed":
        if not plan.cluster:
            raise InvalidRequestError("a distributed plan needs a cluster name for s3Cluster")
        return f"s3Cluster({', '.join([quote_literal(plan.cluster), *args])})"
    return f"s3({', '.join(args)})"


def render_describe(
    plan: LoadPlan, credentials: S3Credentials | None, *, url: str, structure: bool,
    settings: dict[str, SettingValue] | None = None,
) -> RenderedSQL:
    """Render ``DESCRIBE TABLE s3(url, creds, format[, structure][, compression])`` over one file.

    The server answers with its schema inference over the file (``structure=False``) or with its
    own parse of the plan's ``structure`` (``structure=True``; no file is read then). Always
    ``s3()``, also for a distributed plan: one file is described by the node the hook talks to.

    :param plan: the plan (format, structure, compression).
    :param credentials: the S3 keys, or None for an unsigned (``NOSIGN``) read.
    :param url: the file's URL.
    :param structure: describe the plan's ``structure`` instead of inferring the file's columns.
    :param settings: settings sent with it (the user's: schema inference settings apply to it too).
    :return: the SQL, its settings, and a redacted copy without the secret key or the session token.
    """
    one_file = plan.model_copy(
        update={"source_url": url, "strategy": "single", "structure": plan.structure if structure else None}
    )

    def statement(redact: bool) -> str:
        return f"DESCRIBE TABLE {render_source(one_file, credentials, redact=redact)}"

    return rendered(statement, settings, credentials)


def rendered(statement: Callable[[bool], str], settings: dict[str, SettingValue] | None,
             credentials: S3Credentials | None) -> RenderedSQL:
    """A statement that carries S3 credentials, with its settings and a redacted copy for logs.

    :param statement: the SQL, with the keys (``False``) or redacted (``True``).
    """
    sql = statement(False)
    values = parseable(dict(settings or {}), len(sql.encode()) + 1)
    clause = render_settings(values)
    return RenderedSQL(sql=sql, settings=values,
                       redacted=scrub(f"{statement(True)} {clause}" if clause else statement(True), credentials))


def render_describe_schema(schema: bytes, fmt: str, *, name: str,
                           settings: dict[str, SettingValue] | None = None) -> RenderedSQL:
    """Render ``DESCRIBE TABLE format(<fmt>, '<schema>')``: the server's schema inference over a file of the
    sample's footer alone (:func:`~airflow_provider_s3ch.core.parquet_footer.schema_file`), the answer the
    file's own ``DESCRIBE`` gives (the engine reads a Parquet file's columns from its metadata) with no read of
    S3 and no credentials. The redacted copy names the file, not the bytes.

    :param schema: the schema file's bytes.
    :param fmt: the format (Parquet).
    :param name: the file's ``s3://`` name, for the redacted copy.
    :param settings: settings sent with it (the user's: schema inference settings apply to it too).
    """
    head = f"DESCRIBE TABLE format({quote_identifier(fmt)}, "
    sql = head + quote_bytes(schema) + ")"
    values = parseable(dict(settings or {}), len(sql.encode()) + 1)
    clause = render_settings(values)
    shown = f"{head}<the schema in the footer of {name}, {len(schema)} bytes>)"
    return RenderedSQL(sql=sql, settings=values, redacted=f"{shown} {clause}" if clause else shown)


def render_insert(plan: LoadPlan, credentials: S3Credentials | None, *, target: TableRef | None = None) -> RenderedSQL:
    """Render ``INSERT INTO <table> SELECT * FROM s3(...) SETTINGS ...``, what to send beside it, and a
    redacted copy.

    Settings in the statement's ``SETTINGS`` clause apply once it has parsed (and the server records
    each of them in ``system.query_log``); what decides whether it parses travels in the protocol: a
    ``max_query_size`` that holds the statement when it is longer than the default (a huge ``structure``,
    glob or setting value), see :func:`parseable`.

    :param plan: the plan.
    :param credentials: the S3 keys, or None for an unsigned (``NOSIGN``) read.
    :param target: insert into this table instead of ``plan.table`` (e.g. a staging table).
    :return: the SQL, the settings to send beside it, and a redacted copy without the secret key or
        the session token.
    """
    table = render_table(target or plan.table)
    settings = render_settings(plan.settings.values)

    def statement(redact: bool) -> str:
        source = render_source(plan, credentials, redact=redact)
        return f"INSERT INTO {table} SELECT * FROM {source}{' ' + settings if settings else ''}"

    sql = statement(False)
    sent = parseable(dict(QUERY_LOG_SETTINGS), len(sql.encode()) + 1)
    return RenderedSQL(sql=sql, settings=sent, redacted=scrub(statement(True), credentials))


def scrub(text: str, credentials: S3Credentials | None) -> str:
    """Remove any remaining occurrence of the secret or the token (raw or escaped) from ``text``.

    The redacted SQL never renders them; this guards against a secret that also appears
    elsewhere in the statement (in the URL, a setting, a table name).

    :param text: the redacted SQL.
    :param credentials: the keys whose secrets must not appear.
    """
    if credentials is None:
        return text
    for secret in credentials.secrets():
        if not secret:
            continue
        for form in {secret, _escape(secret, "'"), _escape(secret, "`")}:
            if form and form not in REDACTED:
                text = text.replace(form, REDACTED)
    return text


# ---------------------------------------------------------------------- staging and partitions
# Statements for the staging table that retry-safe modes load into (see staging.py).


def render_create_staging(staging: TableRef, target: TableRef, *, part_uuids: bool = False,
                          wide_part_bytes: int | None = None) -> str:
    """``CREATE TABLE staging AS target``: same columns, engine, partition key, ORDER BY, settings.

    :param staging: the staging table.
    :param target: the table whose structure it copies.
    :param part_uuids: every part gets a UUID (``assign_part_uuids``), which ``MOVE PARTITION`` keeps.
    :param wide_part_bytes: its ``min_bytes_for_wide_part`` (``compact_parts``); None: the target's.
    """
    settings = [*(["assign_part_uuids = 1"] if part_uuids else []),
                *([f"min_bytes_for_wide_part = {int(wide_part_bytes)}"] if wide_part_bytes is not None else [])]
    return f"CREATE TABLE {render_table(staging)} AS {render_table(target)}" + (
        f" SETTINGS {', '.join(settings)}" if settings else "")


def render_drop_table(table: TableRef) -> str:
    """``DROP TABLE IF EXISTS t SYNC``.

    :param table: the table.
    """
    return f"DROP TABLE IF EXISTS {render_table(table)} SYNC"


def render_set_comment(table: TableRef, comment: str) -> str:
    """``ALTER TABLE t MODIFY COMMENT '...'``.

    :param table: the table.
    :param comment: the new comment.
    """
    return f"ALTER TABLE {render_table(table)} MODIFY COMMENT {quote_literal(comment)}"


def render_move_partitions(staging: TableRef, target: TableRef, partition_ids: Sequence[str]) -> str:
    """``ALTER TABLE staging MOVE PARTITION ID 'p' TO TABLE target[, MOVE PARTITION ID 'q' TO TABLE target…]``:
    one round trip; the server applies the commands in order, each atomic for its partition (a partition the
    staging table no longer has is a no-op: a retry repeats the statement).

    :param staging: the table the partitions leave.
    :param target: the table they join.
    :param partition_ids: the partitions' ids (``system.parts.partition_id``), at least one.
    """
    into = render_table(target)
    return f"ALTER TABLE {render_table(staging)} " + ", ".join(
        f"MOVE PARTITION ID {quote_literal(pid)} TO TABLE {into}" for pid in partition_ids)


def render_replace_partitions(target: TableRef, staging: TableRef, partition_ids: Sequence[str],
                              drop: Sequence[str] = ()) -> str:
    """``ALTER TABLE target REPLACE PARTITION ID 'p' FROM staging[, …][, DROP PARTITION ID 'q'…]``: one round
    trip; each command atomic for its partition, idempotent (the staging table keeps its copy).

    :param target: the table whose partitions are replaced.
    :param staging: the table holding the new partitions.
    :param partition_ids: the partitions' ids (``system.parts.partition_id``).
    :param drop: partition ids dropped from the target after them (no row of them is left).
    """
    source = render_table(staging)
    return f"ALTER TABLE {render_table(target)} " + ", ".join(
        [f"REPLACE PARTITION ID {quote_literal(pid)} FROM {source}" for pid in partition_ids]
        + [f"DROP PARTITION ID {quote_literal(pid)}" for pid in drop])


def render_attach_partition(table: TableRef, source: TableRef, partition_id: str) -> str:
    """``ALTER TABLE table ATTACH PARTITION ID 'p' FROM source``: adds the source's copy of the partition."""
    return (
        f"ALTER TABLE {render_table(table)} ATTACH PARTITION ID {quote_literal(partition_id)} "
        f"FROM {render_table(source)}"
    )


def render_drop_partition(table: TableRef, partition_id: str) -> str:
    """``ALTER TABLE table DROP PARTITION ID 'p'`` (a partition with no part: nothing to do)."""
    return f"ALTER TABLE {render_table(table)} DROP PARTITION ID {quote_literal(partition_id)}"


def render_exchange(a: TableRef, b: TableRef) -> str:
    """``EXCHANGE TABLES a AND b``: atomic swap of two tables' names (Atomic databases).

    :param a: one table.
    :param b: the other.
    """
    return f"EXCHANGE TABLES {render_table(a)} AND {render_table(b)}"


#: The first ClickHouse release taken to flush one system log by name (``SYSTEM FLUSH LOGS query_log``,
#: ClickHouse#76132, merged in February 2025): an older server is sent the plain statement, which flushes every log.
FLUSH_ONE_LOG_SINCE = (25, 4)


def render_flush_logs(version: tuple[int, int] | None) -> str:
    """``SYSTEM FLUSH LOGS`` of ``system.query_log`` alone, the one log the load reads, on a server that flushes
    one log by name; else of every log (each written as a part: ClickHouse#67472 counted 20 on one server, where
    the flush took almost a minute).

    :param version: the server's (major, minor) version; None when not known (every log).
    """
    if version is not None and version >= FLUSH_ONE_LOG_SINCE:
        return "SYSTEM FLUSH LOGS query_log"
    return "SYSTEM FLUSH LOGS"

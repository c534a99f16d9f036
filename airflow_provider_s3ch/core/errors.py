"""The pure core's errors, and the table that classifies ClickHouse's error codes.

The core raises these plain exceptions; the shells turn them into the provider's Airflow
errors (:mod:`airflow_provider_s3ch.errors`), whose classes subclass these, so
``except InvalidRequestError`` from either module catches both.

Every class here is terminal: retrying the same inputs gives the same answer.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

from airflow_provider_s3ch.core.rows_out import named_file, quotes_data, without_rows


class CoreError(Exception):
    """A problem the core found in its inputs: retrying will not help; the message says what to fix."""


class InvalidRequestError(CoreError):
    """An argument of the operator is malformed."""


class NoObjectsError(CoreError):
    """The glob matched no object."""


class NothingMatchedError(NoObjectsError):
    """Not one object matches the glob: the files may not have arrived (``skip_when_empty`` skips the task)."""


class FormatError(CoreError):
    """The files' format or compression is unknown or mixed."""


class TableError(CoreError):
    """The target table is missing or cannot take the load."""


class RegionMismatchError(CoreError):
    """The bucket is in another region than the ClickHouse server (policy ``fail``)."""


class PlanError(CoreError):
    """The load cannot be planned with the given inputs (e.g. a memory cap too small)."""


class SchemaError(CoreError):
    """The files' columns do not match the target's (missing, extra or incompatible columns)."""


class S3AccessDeniedError(CoreError):
    """S3 refused the server's read of the files (403, access denied): the credentials it read with may not
    read the bucket; a retry is refused the same way."""


# ---------------------------------------------------------------------- server error codes

Kind = Literal["auth", "unknown_table", "s3_refused", "terminal", "transient"]


class ServerErrorClass(NamedTuple):
    """How the provider treats one ClickHouse error code."""

    kind: Kind
    hint: str


#: ClickHouse error codes (``src/Common/ErrorCodes.cpp``) and what they mean for a load.
#: Terminal: the same statement on the same data fails again, so retrying burns the retries.
#: Transient: the server or the network was busy or away; a retry may succeed.
#: A code not listed is transient: an unknown failure gets the task's retries.
SERVER_ERRORS: dict[int, ServerErrorClass] = {
    # the connection's credentials
    192: ServerErrorClass("auth", "unknown user"),
    516: ServerErrorClass("auth", "wrong password"),
    # the target
    60: ServerErrorClass("unknown_table", "unknown table"),
    81: ServerErrorClass("unknown_table", "unknown database"),
    # the connection points at another protocol's port (HTTP's 8123/8443 instead of the native 9000/9440)
    102: ServerErrorClass("terminal", "an answer that is not the native protocol's: is the port HTTP's?"),
    # the statement or the data: the same load fails the same way again
    6: ServerErrorClass("terminal", "a value cannot be parsed from text"),
    16: ServerErrorClass("terminal", "the table has no such column"),
    26: ServerErrorClass("terminal", "a quoted value cannot be parsed"),
    27: ServerErrorClass("terminal", "a value cannot be parsed as the column's type"),
    32: ServerErrorClass("terminal", "the file ended in the middle of a value"),
    33: ServerErrorClass("terminal", "a value cannot be read from the file"),
    36: ServerErrorClass("terminal", "a bad argument"),
    38: ServerErrorClass("terminal", "a date cannot be parsed"),
    41: ServerErrorClass("terminal", "a date-time cannot be parsed"),
    43: ServerErrorClass("terminal", "an illegal type of argument"),
    44: ServerErrorClass("terminal", "an illegal column"),
    47: ServerErrorClass("terminal", "an unknown identifier (column)"),
    48: ServerErrorClass("terminal", "the server does not implement that (e.g. an unknown compression method)"),
    49: ServerErrorClass("terminal", "a logical error in the server"),
    53: ServerErrorClass("terminal", "a type mismatch"),
    62: ServerErrorClass("terminal", "a syntax error"),
    69: ServerErrorClass("terminal", "an argument out of bound"),
    70: ServerErrorClass("terminal", "a value cannot be converted to the column's type"),
    72: ServerErrorClass("terminal", "a number cannot be parsed"),
    73: ServerErrorClass("terminal", "an unknown format"),
    107: ServerErrorClass("terminal", "a file does not exist"),
    115: ServerErrorClass("terminal", "an unknown setting"),
    117: ServerErrorClass("terminal", "incorrect data in the file"),
    164: ServerErrorClass("terminal", "the user is read-only"),
    170: ServerErrorClass("terminal", "an unknown cluster"),
    318: ServerErrorClass("terminal", "a bad setting value"),
    349: ServerErrorClass("terminal", "NULL in a non-Nullable column"),
    354: ServerErrorClass("terminal", "a file cannot be decompressed (truncated, or not of its compression)"),
    377: ServerErrorClass("terminal", "the server does not support that"),
    386: ServerErrorClass("terminal", "no common type for the values"),
    457: ServerErrorClass("terminal", "a setting value is out of range or of the wrong type"),
    497: ServerErrorClass("terminal", "not enough privileges"),
    636: ServerErrorClass("terminal", "the format of the files cannot be told"),
    # a setting's value that its type does not take (names of an enumeration the provider cannot judge)
    19: ServerErrorClass("terminal", "a setting takes one character"),
    145: ServerErrorClass("terminal", "a setting's value is not an overflow mode"),
    212: ServerErrorClass("terminal", "a setting's value is not a load balancing mode"),
    213: ServerErrorClass("terminal", "a setting's value is not a totals mode"),
    283: ServerErrorClass("terminal", "a setting's value is not a distributed product mode"),
    418: ServerErrorClass("terminal", "a setting's value is not a join kind or algorithm"),
    467: ServerErrorClass("terminal", "a setting's value is not a boolean (0, 1, true, false)"),
    557: ServerErrorClass("terminal", "a setting's value is not a union mode"),
    # workload scheduling (docs/many-loads.md)
    673: ServerErrorClass(
        "terminal",
        "the query may not use its workload (RESOURCE_ACCESS_DENIED: a workload the server does not know, under "
        "throw_on_unknown_workload, or no grant)",
    ),
    674: ServerErrorClass("terminal", "the server knows no such workload or resource (RESOURCE_NOT_FOUND): create it"),
    776: ServerErrorClass(
        "terminal",
        "the load's memory reservation (reserve_memory, the per-node memory_cap) is above its workload's max_memory "
        "(RESOURCE_LIMIT_EXCEEDED): the server refuses it at once, every time; lower memory_cap or raise the "
        "workload's max_memory",
    ),
    # the server, the network or the load on the server
    159: ServerErrorClass("transient", "the query timed out"),
    202: ServerErrorClass("transient", "too many simultaneous queries"),
    203: ServerErrorClass("transient", "no free connection"),
    209: ServerErrorClass("transient", "a socket timed out"),
    210: ServerErrorClass("transient", "the network failed"),
    236: ServerErrorClass("transient", "the query was aborted (its client went away)"),
    241: ServerErrorClass("transient", "the server ran out of memory"),
    242: ServerErrorClass("transient", "the table is read-only for now"),
    252: ServerErrorClass("transient", "too many parts: the server throttles inserts until merges catch up"),
    394: ServerErrorClass("transient", "the query was cancelled"),
    499: ServerErrorClass("transient", "S3 failed the request (throttling, a server error, or the object changed)"),
    425: ServerErrorClass("transient", "a system error"),
    999: ServerErrorClass("transient", "Keeper failed"),
    777: ServerErrorClass("transient", "workload scheduling killed the query's memory reservation to free memory"),
    1019: ServerErrorClass(
        "transient",
        "the workload had no free query slot within workload_admission_timeout_ms (QUERY_SLOT_ACQUISITION_TIMEOUT)",
    ),
    1020: ServerErrorClass(
        "transient",
        "the workload had no room for the load's memory reservation within workload_admission_timeout_ms "
        "(MEMORY_RESERVATION_ACQUISITION_TIMEOUT)",
    ),
}

#: The codes of a file's data the server cannot read (parse, decompress, the format's structure): with the file it
#: names (``in file/uri``), such an error is the file's own, and ``on_bad_file='set_aside'`` sets the file aside.
DATA_ERROR_CODES = frozenset({6, 26, 27, 32, 33, 38, 41, 70, 72, 117, 349, 354})

#: ``MEMORY_LIMIT_EXCEEDED`` (241) covers two cases the message tells apart. The query's own
#: limit (``max_memory_usage``, the task's ``memory_cap``) is hit again by the same load with
#: the same cap: terminal, raise the cap. The server's total limit depends on what else runs:
#: transient, a retry may find the memory free.
MEMORY_LIMIT_EXCEEDED = 241
_QUERY_MEMORY_MARKERS = ("(for query)", "max_memory_usage", "Query memory limit exceeded")


def is_query_memory_limit(code: int | None, message: str = "") -> bool:
    """Whether an error is the query's own memory limit (``max_memory_usage``), not the server's.

    ClickHouse words it ``Memory limit (for query) exceeded`` up to 25.x and ``Query memory limit
    exceeded`` from 26.x (the local 26.9 engine).
    """
    return code == MEMORY_LIMIT_EXCEEDED and any(m in message for m in _QUERY_MEMORY_MARKERS)


#: ``S3_ERROR`` (499): every failure of the server's S3 requests. Most are transient (throttling, 5xx, an object
#: that changed); one that says S3 refused the credentials is not (:func:`is_s3_refusal`).
S3_ERROR = 499
#: What the server's message says when S3 refused its request: the HTTP status it quotes, or S3's error code.
#: ``Failed to get object info: No response body.. HTTP response code: 403``, ``Access Denied: while reading key``,
#: ``Could not list objects in bucket 'b' with prefix 'p', S3 exception: `AccessDenied` ``.
_S3_REFUSED = re.compile(
    r"HTTP response code: 40[13]\b|\bAccessDenied\b|\bAccess Denied\b|\bForbidden\b|\bInvalidAccessKeyId\b|"
    r"\bSignatureDoesNotMatch\b|\bAllAccessDisabled\b|\bAccountProblem\b|\bInvalidClientTokenId\b",
    re.IGNORECASE,
)
#: What keeps an S3 error transient even beside a refusal's words: throttling, S3's own failures, and expired
#: temporary credentials (a retry takes fresh ones from the connection).
_S3_TRANSIENT = re.compile(
    r"HTTP response code: (?:5\d\d|429)\b|\bSlowDown\b|Throttl|\bServiceUnavailable\b|\bInternalError\b|"
    r"\bExpiredToken\b|\bTokenRefreshRequired\b|\bRequestTimeTooSkewed\b",
    re.IGNORECASE,
)


#: What the server's message says when a file it was to read is not in S3 (deleted after the run looked at it).
_S3_MISSING = re.compile(r"HTTP response code: 404\b|\bNoSuchKey\b", re.IGNORECASE)


def is_s3_missing(code: int | None, message: str) -> bool:
    """Whether a server error is S3 answering 404 for a file the load names: it was deleted between the run's look
    at S3 (its listing, or the HeadObject of an event's file) and the insert's read.

    :param code: the server's error code (``S3_ERROR``, 499).
    :param message: the server's message.
    """
    return code == S3_ERROR and bool(_S3_MISSING.search(message)) and not _S3_TRANSIENT.search(message)


def is_s3_refusal(code: int | None, message: str) -> bool:
    """Whether a server error is S3 refusing the server's request (403 / access denied, unknown keys, a bad
    signature), not throttling or a failure of S3's own (those a retry may pass).

    :param code: the server's error code (``S3_ERROR``, 499).
    :param message: the server's message.
    """
    return code == S3_ERROR and bool(_S3_REFUSED.search(message)) and not _S3_TRANSIENT.search(message)


#: ``TOO_MANY_PARTS`` (252) also names an insert block that touches more partitions than
#: ``max_partitions_per_insert_block`` (100) allows: the same files make the same blocks, so a retry fails alike.
TOO_MANY_PARTS = 252
_TOO_MANY_PARTITIONS = "Too many partitions for single INSERT block"


def is_too_many_partitions(code: int | None, message: str) -> bool:
    """Whether a server error is an insert block over ``max_partitions_per_insert_block``, not parts throttling."""
    return code == TOO_MANY_PARTS and _TOO_MANY_PARTITIONS.lower() in message.lower()


def classify_server_error(code: int | None, message: str = "") -> ServerErrorClass:
    """How to treat a ClickHouse error with this code and message.

    :param code: the server's error code, None for an error without one.
    :param message: the server's message (tells the two memory limits apart, and S3's refusal from its
        other failures).
    :return: the kind (auth, unknown_table, s3_refused, terminal, transient) and a hint for the message.
    """
    if is_s3_refusal(code, message):
        return ServerErrorClass(
            "s3_refused", "S3 refused the server's read: access denied; a retry is refused the same way")
    if is_s3_missing(code, message):
        return ServerErrorClass(
            "transient", "a file was deleted from S3 after the run looked at it (its listing, or the file's "
            "HeadObject in a run from events): the retry looks again and loads the other files without it")
    if is_query_memory_limit(code, message):
        return ServerErrorClass(
            "terminal", "the load hit its own memory limit (max_memory_usage): raise memory_cap or lower the threads"
        )
    if is_too_many_partitions(code, message):
        return ServerErrorClass(
            "terminal",
            "an insert block holds rows of more partitions than max_partitions_per_insert_block (100) allows: the "
            "files mix many partitions; set max_partitions_per_insert_block in settings (0: no limit) or use a "
            "coarser partition key; a retry of the same files fails alike",
        )
    if code is None:
        return ServerErrorClass("transient", "no error code")
    return SERVER_ERRORS.get(code, ServerErrorClass("transient", f"error code {code} is not classified"))


def bad_file(code: int | None, message: str) -> str | None:
    """The file (``bucket/key``) a server error says it could not read as data, or None: an error of another
    kind, or one that names no file.

    :param code: the server's error code.
    :param message: the server's message.
    """
    if code not in DATA_ERROR_CODES:
        return None
    return named_file(message)


def server_text(text: object) -> str:
    """A server error's text without the stack trace the server appends to it, and without the rows of the
    file a parse error quotes (:mod:`~airflow_provider_s3ch.core.rows_out`): the one place that cleans it."""
    cleaned = str(text).split("Stack trace:")[0].strip()
    return without_rows(cleaned)[0] if quotes_data(cleaned) else cleaned

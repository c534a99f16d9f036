"""Parse errors without the file's rows: what the server said, where, and how to see the rows yourself.

A ClickHouse parse error carries the data it failed on: the text after ``before:``, the value it could not
read and a dump of the last rows, column by column (``parsed text: "…"``). Those rows are the user's data;
in an Airflow log they are a privacy risk and noise. :func:`without_rows` rebuilds such a message from its
parts that hold no data (the server's reason, the row number, the column's name and type, the key being
read, the file) and nothing else: a part of the message it does not know never reaches the log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The server's signs of a message that quotes the file's data.
#: (Not "(at row N)" alone: other errors, a memory limit hit while parsing, name the row without its data.)
_DATA_SIGNS = re.compile(
    r"\nRow \d+:|parsed text:|before: '|is not like \w+|Cannot parse \w+ here: \S|Cannot parse string '"
)
_REASON = re.compile(r"(?:DB::)?Exception:\s*([A-Za-z][A-Za-z ,-]*?)(?::|$|\.)", re.M)
_ROW = re.compile(r"\(at row (\d+)\)")
_KEY = re.compile(r"\(while reading the value of key ([A-Za-z0-9_.$-]+)\)")
_COLUMN = re.compile(r"^Column (\d+),\s+name: (.+?),\s+type: (.+?),\s+(?:parsed text: .*)?ERROR", re.M)
_FILE = re.compile(r"\(in file/uri ([^)\s]+)\)")
#: The file a server error was reading, whatever its key holds (spaces, parentheses): up to the ``): `` that
#: follows it.
_NAMED_FILE = re.compile(r"\(in file/uri (.+?)\)(?:: |$)", re.M)
#: Parquet and other typed readers: ``Cannot parse string '<value>' as UInt64 … column: n:``.
_STRING_AS = re.compile(r"Cannot parse string '(?:[^'\\]|\\.)*' as ([\w(), ]+?)(?::|$)", re.M)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'")
_PLAIN_COLUMN = re.compile(r"\bcolumn: ([A-Za-z0-9_.$-]+):")
_NAME = re.compile(r"\(([A-Z][A-Z_]+)\) \(version")
#: The longest reason kept: the first words of the server's message, before any data.
_MAX_REASON = 80


@dataclass(frozen=True)
class ParsePoint:
    """Where a parse error happened, as far as the server said: for the way to see the rows."""

    file: str | None
    row: int | None


def quotes_data(text: str) -> bool:
    """Whether a server message quotes the data it failed on."""
    return bool(_DATA_SIGNS.search(text))


def without_rows(text: str) -> tuple[str, ParsePoint]:
    """A parse error's message rebuilt from its data-free parts.

    :param text: the server's message, stack trace already cut.
    :return: the message (reason, row, column, key, file and the server's error name) and the point it names.
    """
    reason_match, string_as = _REASON.search(text), _STRING_AS.search(text)
    reason = reason_match.group(1).strip() if reason_match else "the data cannot be parsed"
    if string_as:
        reason = f"Cannot parse a string as {string_as.group(1)}"
    if len(reason) > _MAX_REASON:
        reason = "the data cannot be parsed"
    row, key, file, name = _ROW.search(text), _KEY.search(text), _FILE.search(text), _NAME.search(text)
    column = ([None, *_COLUMN.finditer(text)])[-1]  # the dump's last ERROR column is the one that failed
    where = []
    if row:
        where.append(f"at row {row.group(1)}")
    if column:
        where.append(f"column {column.group(1)} {column.group(2)!r} of type {column.group(3)}")
    elif plain := _PLAIN_COLUMN.search(_QUOTED.sub("''", text)):  # outside the quoted values
        where.append(f"column {plain.group(1)!r}")
    if key:
        where.append(f"reading the value of key {key.group(1)!r}")
    message = reason + (f" ({', '.join(where)})" if where else "")
    if name:
        message += f" ({name.group(1)})"
    if file:
        message += f" in file {file.group(1)}"
    if "more columns than expected" in text:
        message += "; the file seems to have more columns than expected, or an unquoted value with a comma"
    message += "; the rows the server quoted are left out of this message"
    return message, ParsePoint(file=file.group(1) if file else None, row=int(row.group(1)) if row else None)


def named_file(text: str) -> str | None:
    """The file (``bucket/key``) a server error names as the one it was reading (``(in file/uri …)``), or None."""
    found = _NAMED_FILE.search(text)
    return found.group(1) if found else None


def data_fix(text: str, endpoint_url: str | None) -> str:
    """The fix for a terminal error: for one that quotes the file's data, how to see the rows.

    :param text: the server's message.
    :param endpoint_url: the S3 endpoint as ClickHouse reaches it; None on AWS.
    """
    if not quotes_data(text):
        return "fix the statement or the data"
    _, point = without_rows(text.split("Stack trace:")[0])
    return f"fix the data; {see_rows(point, endpoint_url)}"


def see_rows(point: ParsePoint, endpoint_url: str | None) -> str:
    """How to see the rows a parse error left out: a query to run with one's own S3 credentials.

    :param point: the file and row the server named.
    :param endpoint_url: the S3 endpoint as ClickHouse reaches it; None on AWS.
    """
    if not point.file or "/" not in point.file:
        return "to see the rows, read the file with SELECT * FROM s3('<file URL>', 'LineAsString')"
    bucket, key = point.file.split("/", 1)
    url = f"{endpoint_url.rstrip('/')}/{point.file}" if endpoint_url else f"https://{bucket}.s3.amazonaws.com/{key}"
    url = url.replace("\\", "\\\\").replace("'", "\\'")
    window = f" LIMIT 3 OFFSET {max(point.row - 1, 0)}" if point.row else " LIMIT 10"
    return (f"to see the rows, run SELECT * FROM s3('{url}', 'LineAsString'){window} "
            "(with the bucket's credentials; a header line counts as a line)")

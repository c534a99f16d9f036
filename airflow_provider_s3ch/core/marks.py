"""The mark a finished insert leaves on its staging table (its comment): what it says, how it is written and
read back, from the table or from the statement a node's ``system.query_log`` kept. A retry reads it where the
log no longer knows the try. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.recovery import FILLED, QUERY_ID_PREFIX, QueryId, staging_marker
from airflow_provider_s3ch.core.sql import ESCAPES

_FILLED_RE = re.compile(
    r"^s3ch staging table of (?P<stem>[0-9a-f]+); filled by (?P<query_id>\S+): (?P<figures>\{.*\})$", re.DOTALL)


#: What precedes the comment in the statement that writes a mark (:func:`~.sql.render_set_comment`).
_MODIFY_COMMENT = "MODIFY COMMENT "

def mark_needle(stem: str) -> str:
    """What every statement that writes a mark of ``stem`` contains (the log's ``query`` text)."""
    return f"{staging_marker(stem)}{FILLED}{QUERY_ID_PREFIX}{stem}-try"


#: The key of the mark's JSON that carries :attr:`FilledMark.partitions` (beside the insert's figures).
_PARTITIONS_KEY = "s3ch_partitions"

#: The longest setting value a staging table's mark keeps whole (a long ``log_comment``, a ``structure``).
MARK_SETTING_CHARS = 1024


def _shortened(value: Any) -> Any:
    text = value if isinstance(value, str) else None
    if text is None or len(text) <= MARK_SETTING_CHARS:
        return value
    return f"{text[:MARK_SETTING_CHARS]}... ({len(text)} characters)"


class FilledMark(BaseModel):
    """The durable witness that an insert into a staging table finished: the staging table's comment (the
    target's, after an ``overwrite`` swap), written after the insert and before any partition moves. A retry
    reads it where ``system.query_log`` no longer knows the try (a restarted server, another replica, the
    log's TTL): it resumes the moves instead of loading again, and reports the figures kept here."""

    stem: str
    query_id: str
    figures: dict[str, Any]
    #: A load staged on every shard: (partition_id, partition) of every partition the load brought, on any
    #: shard (a ``replace_partitions`` retry after some shards published still replaces them all).
    partitions: list[tuple[str, str]] | None = None

    def comment(self) -> str:
        """The comment that carries this mark; a setting longer than :data:`MARK_SETTING_CHARS` shortened (a
        comment is table metadata, which the server keeps within ``max_query_size``: it refuses a longer one)."""
        figures = dict(self.figures)
        if isinstance(figures.get("settings"), dict):
            figures["settings"] = {name: _shortened(value) for name, value in figures["settings"].items()}
        if self.partitions is not None:
            figures[_PARTITIONS_KEY] = [list(p) for p in self.partitions]
        return f"{staging_marker(self.stem)}{FILLED}{self.query_id}: {json.dumps(figures, sort_keys=True)}"

    @classmethod
    def from_statement(cls, statement: str, stem: str) -> FilledMark | None:
        """The mark an ``ALTER TABLE … MODIFY COMMENT '…'`` statement wrote, as a node's ``system.query_log``
        keeps it; None when it wrote no mark of ``stem``."""
        at = statement.find(_MODIFY_COMMENT)
        literal = unquote_literal(statement[at + len(_MODIFY_COMMENT):].lstrip()) if at >= 0 else None
        return cls.read(literal[0], stem) if literal is not None else None

    @property
    def try_number(self) -> int:
        try:
            return QueryId.parse(self.query_id).try_number
        except InvalidRequestError:
            return 0

    @classmethod
    def read(cls, comment: str | None, stem: str) -> FilledMark | None:
        """The mark in ``comment`` when it is one of ``stem``'s; None otherwise."""
        m = _FILLED_RE.match(comment or "")
        if not m or m.group("stem") != stem:
            return None
        try:
            figures = json.loads(m.group("figures"))
        except ValueError:
            return None
        if not isinstance(figures, dict):
            return None
        listed = figures.pop(_PARTITIONS_KEY, None)
        partitions = [(str(p[0]), str(p[1])) for p in listed if len(p) == 2] if isinstance(listed, list) else None
        return cls(stem=stem, query_id=m.group("query_id"), figures=figures, partitions=partitions)


def unquote_literal(text: str) -> tuple[str, int] | None:
    """The string a single-quoted literal at the start of ``text`` stands for (the inverse of
    :func:`quote_literal`), and the length of the literal; None when ``text`` does not start with a whole one."""
    unescape = {v[1]: k for k, v in ESCAPES.items()}
    if not text.startswith("'"):
        return None
    out, i = [], 1
    while i < len(text):
        ch = text[i]
        if ch == "'":
            return "".join(out), i + 1
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x" and i + 3 < len(text):
                out.append(chr(int(text[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append(unescape.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return None

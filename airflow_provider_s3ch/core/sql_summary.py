"""How a statement is shown where it is not run: an INFO log line (:func:`sql_summary`) and a lineage facet
(:func:`shorten`). Both take the redacted copy (:class:`~airflow_provider_s3ch.core.sql.RenderedSQL`)."""

from __future__ import annotations

import re

#: How much of a statement a log line or a lineage facet shows (a key list of 800 files is ~340 KB).
SHOWN_SQL_CHARS = 4000


def shorten(text: str, limit: int = SHOWN_SQL_CHARS) -> str:
    """``text`` up to ``limit`` characters, the rest counted: ``… [12,345 more characters]``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


#: A key list in a URL longer than this is shown as its first keys and a count.
_SHOWN_KEYS = 3
_KEY_LIST = re.compile(r"\{([^{}']*,[^{}']*)\}")


def sql_summary(sql: str) -> str:
    """The statement for an INFO log line: a long key list cut to its first keys and a count, and the trailing
    ``SETTINGS`` clause (each setting is logged on its own line) left out; the whole statement is logged at DEBUG.
    """
    def keys(match: re.Match[str]) -> str:
        listed = match.group(1).split(",")
        if len(listed) <= _SHOWN_KEYS:
            return match.group(0)
        return "{" + ",".join(listed[:_SHOWN_KEYS]) + f",… {len(listed) - _SHOWN_KEYS} more keys}}"

    head = sql.rpartition(" SETTINGS ")[0]
    top_level = head and re.sub(r"\\.", "", head).count("'") % 2 == 0  # not inside a quoted string
    text = f"{head} SETTINGS … (the settings above)" if top_level else sql
    return shorten(_KEY_LIST.sub(keys, text))

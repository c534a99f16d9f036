"""Learning from past loads: each insert is tagged, and the next load of the same target and files reads the tags.

Every insert carries ``log_comment = 's3ch/1 <key> {json}'`` (:func:`tag`). ``<key>`` is the same for
loads of one target table from one bucket and glob in one format (:func:`history_key`): the same task,
run after run. The JSON holds what ``system.query_log`` does not: the files' bytes as listed, the
prediction's model bytes (:mod:`airflow_provider_s3ch.core.plan.memory`, before any scale), the memory
cap, and the step down (:mod:`airflow_provider_s3ch.core.plan.shrink`) the insert ran with.

:func:`learn` turns the finished inserts of the last :data:`HISTORY_DAYS` days with that key
(:class:`PastLoad`, newest first, at most :data:`HISTORY_LOADS`) into what the plan may change:

- ``expansion``: in-table bytes written per byte of file, the median over the past loads, for formats
  without footers (where the plan otherwise assumes a fixed factor, e.g. 4x for gzip'd text);
- ``memory_scale``: measured / predicted peak memory, the median, within [0.5, 2]: the prediction is
  multiplied by it. Loads whose prediction reached the cap are left out (the server stops a load at the cap,
  so their peak says nothing of the model);
- ``start_step``: the step down the newest past load finished with, when it needed one and ran at the same
  memory cap: the next load starts there instead of failing into it again.

All of it is optional: with no past load, the plan is the planner's alone.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

#: The tag's prefix and version.
TAG_PREFIX = "s3ch/1"

#: How far back (days of ``system.query_log``) and how many past loads a plan reads.
HISTORY_DAYS = 30
HISTORY_LOADS = 10

#: ``memory_scale`` stays within these bounds.
SCALE_BOUNDS = (0.5, 2.0)


def history_key(table: str, bucket: str, pattern: str, fmt: str) -> str:
    """The key of one target table loaded from one bucket and glob in one format (16 hex digits)."""
    return hashlib.sha1(f"{table}\n{bucket}\n{pattern}\n{fmt}".encode()).hexdigest()[:16]


class TagFacts(BaseModel):
    """What the tag carries besides the key."""

    model_config = ConfigDict(frozen=True)

    #: The files' bytes as listed.
    file_bytes: int
    #: The memory model's bytes (unscaled, unbounded by the cap); 0 when none.
    model_bytes: int = 0
    #: ``max_memory_usage`` of the insert.
    cap: int = 0
    #: The step down the insert ran with (``plan`` for the first plan).
    step: str = "plan"


def tag(key: str, facts: TagFacts) -> str:
    """The insert's ``log_comment``."""
    return f"{TAG_PREFIX} {key} {json.dumps(facts.model_dump(), separators=(',', ':'), sort_keys=True)}"


def tag_prefix(key: str) -> str:
    """What every tag of ``key`` starts with (for ``startsWith(log_comment, ...)``)."""
    return f"{TAG_PREFIX} {key} "


def parse_tag(text: str) -> TagFacts | None:
    """The facts of a tag, or None when it is not one."""
    parts = text.split(" ", 2)
    if len(parts) != 3 or parts[0] != TAG_PREFIX:
        return None
    try:
        return TagFacts.model_validate(json.loads(parts[2]))
    except (ValueError, ValidationError):
        return None


class PastLoad(BaseModel):
    """One finished insert of the same key, from ``system.query_log``."""

    model_config = ConfigDict(frozen=True)

    facts: TagFacts
    written_bytes: int
    written_rows: int
    memory_usage: int
    duration_ms: int


class Learned(BaseModel):
    """What the past loads say, and what the plan changes with it."""

    model_config = ConfigDict(frozen=True)

    loads: int = 0
    expansion: float | None = None
    memory_scale: float | None = None
    start_step: str | None = None
    #: The memory cap of the load ``start_step`` comes from.
    start_cap: int | None = None
    #: One line per change, for the log, the plan and the XCom.
    changes: list[str] = []

    def for_cap(self, cap: int) -> Learned:
        """What applies to a load at memory cap ``cap``: ``start_step`` only where the caps are the same."""
        if self.start_step is None or self.start_cap == cap:
            return self
        return self.model_copy(update={"start_step": None, "start_cap": None,
                                       "changes": [c for c in self.changes if not c.startswith("starts from step")]})

    def summary(self) -> dict[str, Any]:
        return self.model_dump()


def learn(past: list[PastLoad], *, footers: bool) -> Learned:
    """What the plan takes from ``past`` (newest first); ``start_step`` applies only at the same memory cap
    (:meth:`Learned.for_cap`).

    :param footers: the files have Parquet footers (their uncompressed size is known: no expansion needed).
    """
    if not past:
        return Learned()
    changes: list[str] = []
    expansion = None
    if not footers:
        ratios = [p.written_bytes / p.facts.file_bytes for p in past if p.facts.file_bytes > 0 and p.written_bytes > 0]
        if ratios:
            expansion = round(statistics.median(ratios), 3)
            changes.append(f"uncompressed size: {expansion:.2f} x the files' bytes, the median of {len(ratios)} "
                           "earlier load(s) (instead of the format's fixed factor)")
    scale = None
    fitted = [p.memory_usage / p.facts.model_bytes for p in past
              if p.facts.model_bytes > 0 and p.memory_usage > 0
              and (not p.facts.cap or p.facts.model_bytes < p.facts.cap)]
    if fitted:
        scale = round(min(max(statistics.median(fitted), SCALE_BOUNDS[0]), SCALE_BOUNDS[1]), 3)
        changes.append(f"predicted peak memory x {scale:.2f}: measured / predicted, the median of {len(fitted)} "
                       "earlier load(s)")
    start = start_cap = None
    if past[0].facts.step != "plan":
        start, start_cap = past[0].facts.step, past[0].facts.cap
        changes.append(f"starts from step {start!r}: the last load, at the same memory cap, hit the limit with the "
                       f"first plan and finished with {start!r}")
    return Learned(loads=len(past), expansion=expansion, memory_scale=scale, start_step=start, start_cap=start_cap,
                   changes=changes)

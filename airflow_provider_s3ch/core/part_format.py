"""Compact staging parts (``compact_parts=True``, docs/tuning.md#compact-parts): the staging table writes its parts
under :data:`COMPACT_PART_BYTES` in ClickHouse's Compact format (one data file a part instead of two files a column).

An insert that cuts its blocks into many partitions writes many small parts; Wide parts cost two files a column
each, Compact ones a single file. The parts reach the target as they were written and stay Compact there until a
merge rewrites them under the target's own ``min_bytes_for_wide_part``: the option is off by default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_provider_s3ch.core.recovery import LoadSteps
    from airflow_provider_s3ch.core.server_models import TableInfo

#: ``compact_parts``: the staging table's ``min_bytes_for_wide_part``: parts under 64 MiB are written Compact (one
#: data file a part instead of two files a column), the size the ladder measured (docs/benchmarks.md).
COMPACT_PART_BYTES = 64 * 1024 * 1024


def with_compact_parts(steps: LoadSteps, table: TableInfo) -> LoadSteps:
    """The steps with their staging tables writing parts under :data:`COMPACT_PART_BYTES` Compact, unless the
    table's own ``min_bytes_for_wide_part`` is at least that (its own part format is kept); a direct insert has no
    staging table: a warning says the option did nothing."""
    if steps.staging is None:
        return steps.model_copy(update={"warnings": [*steps.warnings, (
            "compact_parts=True has no effect: the load inserts into the target directly, whose parts follow its "
            "own min_bytes_for_wide_part")]})
    if (table.wide_part_bytes or 0) >= COMPACT_PART_BYTES:
        return steps.model_copy(update={"reason": f"{steps.reason}; compact_parts: the table's own "
                                                  f"min_bytes_for_wide_part ({table.wide_part_bytes}) is kept"})
    return steps.model_copy(update={"compact_parts": COMPACT_PART_BYTES, "reason": (
        f"{steps.reason}; staging parts under 64 MiB written Compact (compact_parts=True: min_bytes_for_wide_part "
        f"= {COMPACT_PART_BYTES} on the staging table; they stay Compact in the target until merges rewrite them)")})

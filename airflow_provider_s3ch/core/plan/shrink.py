"""Smaller plans for a load that hit its own memory limit: the steps the operator takes inside the task.

A load that fails with ClickHouse's query memory limit (error 241, ``max_memory_usage``: the task's
``memory_cap``) leaves its target untouched when it went through a staging table. The operator then
drops the staging table and runs the insert again with the next step below, each step holding less
in memory than the one before, while ``max_memory_usage`` stays the cap: the server never lets the
load use more, whatever the step.

1. ``halve``: half the insert and reading threads, a quarter of the insert block, at most 4 delayed
   write streams, ClickHouse's default 10 MiB download buffer, one parsing thread.
2. ``one_thread``: one insert thread, one reading thread and one download thread; a sixteenth of the
   first plan's block; one delayed stream; Parquet read in blocks of at most 8,192 rows and 4 MiB.
3. ``smallest``: as ``one_thread`` with the smallest block the planner allows (1 MiB), 1 MiB download
   buffers and Parquet blocks of at most 1,024 rows.

The insert block weighs most: on the sample posts at one thread, a 16 MiB block peaked at 272 MiB and
a 4 MiB block at 92 MiB, while the Parquet reader's block rows and the download buffer moved the peak
by less than 15 %. Smaller blocks make more parts (10 for 16 MiB, 21 for 1 MiB on 52 MB of Parquet),
which background merges fold; the steps trade them for fitting the cap.

Where a value is already below a step's, it stays. Settings the user set (``settings=``) are kept as
they are. Measured on the local stack (tests/integration/test_memory_replan.py): 200,000 posts in two Parquet files
of one row group each failed at a 384 MiB cap with the first plan (it would use 384-412 MiB) and loaded
with ``halve`` (peak 277-354 MiB); at 96 to 256 MiB it loaded with ``one_thread`` (peak 92 MiB); at
64 MiB, the least cap the planner takes, no step fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from airflow_provider_s3ch.core.models import InsertSettings, SettingValue
from airflow_provider_s3ch.core.plan.settings import MIN_BLOCK_BYTES
from airflow_provider_s3ch.core.setting_types import setting_int
from airflow_provider_s3ch.core.sizes import MiB, fmt_bytes

StepName = Literal["halve", "one_thread", "smallest"]

#: The steps, in order.
STEPS: tuple[StepName, ...] = ("halve", "one_thread", "smallest")

#: ClickHouse's default ``max_download_buffer_size``.
DEFAULT_DOWNLOAD_BUFFER_BYTES = 10 * MiB


class StepDown(BaseModel):
    """One step down: the settings it lowers (at most these values) and why."""

    model_config = ConfigDict(frozen=True)

    name: StepName
    #: Settings set to at most this value.
    ceilings: dict[str, int]
    #: The first plan's block divided by this.
    block_divisor: int
    #: The first plan's threads divided by this (at least 1).
    thread_divisor: int
    reason: str


_STEPS: dict[StepName, StepDown] = {
    "halve": StepDown(
        name="halve",
        ceilings={"max_insert_delayed_streams_for_parallel_write": 4,
                  "max_download_buffer_size": DEFAULT_DOWNLOAD_BUFFER_BYTES, "max_parsing_threads": 1},
        block_divisor=4, thread_divisor=2,
        reason="half the threads, a quarter of the block, fewer delayed write streams, one parsing thread, 10 MiB "
               "download buffers",
    ),
    "one_thread": StepDown(
        name="one_thread",
        ceilings={"max_insert_delayed_streams_for_parallel_write": 1,
                  "max_download_buffer_size": DEFAULT_DOWNLOAD_BUFFER_BYTES, "max_parsing_threads": 1,
                  "max_download_threads": 1, "input_format_parquet_max_block_size": 8192,
                  "input_format_parquet_prefer_block_bytes": 4 * MiB},
        block_divisor=16, thread_divisor=1 << 30,
        reason="one insert, reading, parsing and download thread, a sixteenth of the block, one delayed write "
               "stream, Parquet read in blocks of at most 8,192 rows",
    ),
    "smallest": StepDown(
        name="smallest",
        ceilings={"max_insert_delayed_streams_for_parallel_write": 1, "max_download_buffer_size": 1 * MiB,
                  "max_parsing_threads": 1, "max_download_threads": 1, "input_format_parquet_max_block_size": 1024,
                  "input_format_parquet_prefer_block_bytes": 1 * MiB},
        block_divisor=1 << 30, thread_divisor=1 << 30,
        reason="the smallest plan: one thread everywhere, 1 MiB blocks and download buffers, Parquet blocks of at "
               "most 1,024 rows",
    ),
}

#: Settings that bound the threads of a step (the insert threads, and the reading threads with them).
THREAD_SETTINGS = ("max_insert_threads", "max_threads")


def step(name: StepName) -> StepDown:
    """The step of this name."""
    return _STEPS[name]


def smaller(first: InsertSettings, name: StepName, *, cores: int, user: Mapping[str, SettingValue]) -> InsertSettings:
    """The first plan's settings lowered to step ``name``: every setting the step bounds at most the step's
    value, each with the step's reason; ``max_memory_usage`` (the cap) and the user's settings unchanged.

    :param first: the first plan's settings (the step is taken from them, not from the previous step).
    :param name: the step.
    :param cores: the node's cores (ClickHouse's default ``max_threads``).
    :param user: the request's settings: kept as they are.
    """
    s = _STEPS[name]
    values = dict(first.values)
    reasons = dict(first.reasons)
    why = f"after the memory limit, step {name!r}: {s.reason}"

    def lower(setting: str, ceiling: int, default: int | None = None) -> None:
        if setting in user:
            return
        current = values.get(setting, default)
        if current is None or not isinstance(current, int) or isinstance(current, bool) or current > ceiling:
            old = values.get(setting, "unset")
            values[setting] = ceiling
            reasons[setting] = f"{ceiling} (was {old}): {why}"

    threads = setting_int(values.get("max_insert_threads"), cores) or cores
    lower("max_insert_threads", max(1, threads // s.thread_divisor))
    lower("max_threads", max(1, threads // s.thread_divisor), default=cores)
    block = setting_int(values.get("min_insert_block_size_bytes"), 0)
    if block:
        target = max(MIN_BLOCK_BYTES, block // s.block_divisor)
        if "min_insert_block_size_bytes" not in user and target < block:
            values["min_insert_block_size_bytes"] = target
            reasons["min_insert_block_size_bytes"] = f"{fmt_bytes(target)} (was {fmt_bytes(block)}): {why}"
    for setting, ceiling in s.ceilings.items():
        lower(setting, ceiling)
    return InsertSettings(values=values, reasons=reasons, overrides=first.overrides)


def changed(before: InsertSettings, after: InsertSettings) -> dict[str, SettingValue]:
    """The settings ``after`` sets otherwise than ``before`` (the values ``after`` has); not the ``log_comment``
    tag, which names the step (core/history.py)."""
    return {k: v for k, v in after.values.items() if before.values.get(k) != v and k != "log_comment"}

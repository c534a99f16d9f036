"""What the README and the docs say is what the code does: the README's first example parses as written on the
installed Airflow (CI runs the suite on the oldest and the newest supported; `tests/dags/test_readme_dag.py` runs
it through `airflow dags test`), and each figure they quote that the code defines is read from the code here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from airflow_provider_s3ch.core.deferral import MAX_CARRIED_OBJECTS, MAX_CARRIED_SQL, SETTLE_SECONDS
from airflow_provider_s3ch.core.history import HISTORY_DAYS, HISTORY_LOADS, SCALE_BOUNDS
from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT, KEYS_SHOWN
from airflow_provider_s3ch.core.ledger_rebuild import NAMED_IN_REPORT
from airflow_provider_s3ch.core.ledger_rows import CHUNK_HEX_DIGITS
from airflow_provider_s3ch.core.lineage import MAX_INPUT_DATASETS
from airflow_provider_s3ch.core.manifest import FOOTER_SAMPLE
from airflow_provider_s3ch.core.plan.budget import DEFAULT_MEMORY_SHARE, FALLBACK_BUDGET_BYTES, MIN_BUDGET_BYTES
from airflow_provider_s3ch.core.plan.memory import (
    PEAK_BAND,
    PEAK_BASE_BYTES,
    PEAK_BASE_FLOOR_BYTES,
    PEAK_BLOCK_FACTOR,
    PEAK_DATA_FACTOR,
    PEAK_FIT_MARGIN,
    PEAK_ROW_GROUP_FACTOR,
    PEAK_S3_STREAM_BYTES,
    PEAK_S3_STREAM_FILES,
    PEAK_TEXT_READ_BYTES,
    PEAK_TEXT_READ_FACTOR,
    PEAK_THREAD_BYTES,
)
from airflow_provider_s3ch.core.plan.settings import (
    BLOCK_MEMORY_FACTOR,
    COMPRESSED_EXPANSION,
    LARGE_DOWNLOAD_BUFFER_BYTES,
    LATENT_READING_THREADS,
    LATENT_REQUEST_MS,
    LOW_MEMORY_BYTES,
    LOW_MEMORY_DELAYED_STREAMS,
    MIN_BLOCK_BYTES,
    MIN_BLOCKS_PER_THREAD,
    MIN_DATA_BLOCK_BYTES,
    MIN_INSERT_THREADS,
    PLAIN_EXPANSION,
    ROW_GROUP_MEMORY_FACTOR,
    SELF_COMPRESSED_EXPANSION,
    SMALL_FILE_BYTES,
)
from airflow_provider_s3ch.core.plan.shrink import DEFAULT_DOWNLOAD_BUFFER_BYTES, step
from airflow_provider_s3ch.core.schema import HEADER_SAMPLE_ROWS
from airflow_provider_s3ch.core.sizes import MAX_SIZE, fmt_bytes
from airflow_provider_s3ch.core.staging import PARTITIONS_PER_ALTER
from airflow_provider_s3ch.hooks.clickhouse import DEFAULT_PORT, DEFAULT_SECURE_PORT, HTTP_PORTS
from airflow_provider_s3ch.hooks.http_insert import CONFIRM_WAIT
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor
from airflow_provider_s3ch.triggers.load import UNREACHABLE_SECONDS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEFAULTS = {
    name: p.default for name, p in inspect.signature(S3ToClickHouseOperator.__init__).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h"


def _thousands(n: int) -> str:
    return f"{n:,}"


def test_the_first_example_builds_its_dag_as_written() -> None:
    code = re.search(r"```python\n(.*?)```", README, re.DOTALL).group(1)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    op = scope["load"]
    assert op.dag.dag_id == "posts_monthly" and [t.task_id for t in op.dag.tasks] == ["load_posts"]
    assert op.table == "analytics.posts" and op.s3_uri.startswith("s3://my-bucket/posts/by_month/")


def _operator_table() -> dict[str, str]:
    """The README's operator reference: each argument named in a row's first cell, with the row's default cell."""
    section = README.split("## Operator reference", 1)[1].split("\n\n**Return value", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 3:
            for name in re.findall(r"`(\w+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_the_operator_reference_gives_the_signatures_defaults() -> None:
    rows = _operator_table()
    checked = 0
    for name, default in DEFAULTS.items():
        if name == "deferrable" or default is None or name not in rows:
            continue  # deferrable: Airflow's config decides; None: the cell says what "none" means there
        cell = rows[name]
        shown = {f"`{default}`", f"`{default!r}`"} | ({f"{default:g} s"} if isinstance(default, float) else set())
        assert any(s in cell for s in shown), (name, default, cell)
        checked += 1
    assert checked >= 15, rows
    assert f"`{DEFAULTS['earlier_try_timeout']}` (seconds: {_hours(DEFAULTS['earlier_try_timeout'])})" in README
    assert f"`{DEFAULTS['claim_timeout']}` (seconds: {_hours(DEFAULTS['claim_timeout'])})" in README
    assert DEFAULTS["claim_timeout"] == DEFAULT_CLAIM_TIMEOUT


_HALVE, _ONE, _SMALLEST = step("halve"), step("one_thread"), step("smallest")
_SHARE = "half" if DEFAULT_MEMORY_SHARE == 0.5 else f"{DEFAULT_MEMORY_SHARE:g} of"

#: (document, phrase built from the code's constants): the figure as the document quotes it.
FIGURES: list[tuple[str, str]] = [
    # README: connections, the operator, the tuning rules
    ("README.md", f"port {DEFAULT_PORT} ({DEFAULT_SECURE_PORT} with `secure`)"),
    ("README.md", f"default {HTTP_PORTS[0]}, {HTTP_PORTS[1]} with `secure`"),
    ("README.md", f"`memory_cap` (T) | {_SHARE} the server's memory"),
    ("README.md", f"reads {HEADER_SAMPLE_ROWS} rows, not the server's"),
    ("README.md", f"above {(MAX_SIZE + 1) // 2**60} EiB"),
    ("README.md", f"at least {MIN_INSERT_THREADS} where there are 2 cores"),
    ("README.md", f"~{ROW_GROUP_MEMORY_FACTOR}× its uncompressed size"),
    ("README.md", f"else {_SHARE} the server's memory"),
    ("README.md", f"`budget / ({BLOCK_MEMORY_FACTOR} × threads)`"),
    ("README.md", f"max({fmt_bytes(MIN_DATA_BLOCK_BYTES)}, uncompressed / (threads × {MIN_BLOCKS_PER_THREAD}))"),
    ("README.md", f"the {FOOTER_SAMPLE} largest files"),
    ("README.md", f"that block × {PEAK_FIT_MARGIN:g} is over the budget"),
    ("README.md", f"{LATENT_READING_THREADS} reading streams (at most the files)"),
    ("README.md", f"took ≥ {LATENT_REQUEST_MS:g} ms"),
    ("README.md", f"{fmt_bytes(LARGE_DOWNLOAD_BUFFER_BYTES)} when there are at least as many files as threads and "
                  f"files are ≤ {fmt_bytes(SMALL_FILE_BYTES)}"),
    ("README.md", f"left at {fmt_bytes(DEFAULT_DOWNLOAD_BUFFER_BYTES)} for few large files"),
    ("README.md", f"lowered to {LOW_MEMORY_DELAYED_STREAMS} when the per-node budget is under "
                  f"{fmt_bytes(LOW_MEMORY_BYTES)}"),
    ("README.md", f"A memory cap under {fmt_bytes(MIN_BUDGET_BYTES)} (per node) is refused"),
    # deferrable loads
    ("docs/deferrable.md", f"`earlier_try_timeout` ({_hours(DEFAULTS['earlier_try_timeout'])} by default)"),
    ("docs/deferrable.md", f"up to {_thousands(MAX_CARRIED_SQL)}\ncharacters"),
    ("docs/deferrable.md", f"(up to {MAX_CARRIED_OBJECTS} files;"),
    ("docs/deferrable.md", f"for {SETTLE_SECONDS:g} s (a server restart"),
    ("docs/deferrable.md", f"did not answer for {UNREACHABLE_SECONDS / 60:g} minutes"),
    ("docs/deferrable.md", "It logs the wait every "
                           f"{CONFIRM_WAIT.log_every:g} s."),
    ("docs/deferrable.md", f"{HTTP_PORTS[0]}, or {HTTP_PORTS[1]} with the extra `secure`"),
    # retries, the ledger, lineage, connections
    ("docs/retries-and-modes.md", f"`earlier_try_timeout`, {_hours(DEFAULTS['earlier_try_timeout'])} by default"),
    ("docs/deferrable.md", f"poll_interval={DEFAULTS['poll_interval']},"),
    ("docs/ledger.md", f"({_hours(DEFAULT_CLAIM_TIMEOUT)}) after the claim"),
    ("docs/ledger.md", f"`claim_timeout` seconds (default {DEFAULT_CLAIM_TIMEOUT:g})"),
    ("docs/ledger.md", f"`s3ch-<load_id><chunk, {CHUNK_HEX_DIGITS} hex digits>-try<N>`"),
    ("docs/ledger.md", f"(the first {NAMED_IN_REPORT};"),
    ("docs/ledger.md", f"this insert's files (the\nfirst {NAMED_IN_REPORT})"),
    ("docs/ledger.md", f"each `*_keys` list shows the first {KEYS_SHOWN} keys"),
    ("docs/tables-from-files.md", f"| `create_table` | `{DEFAULTS['create_table']}` |"),
    ("docs/reference/sensor.md",
     f"`min_files` (default {inspect.signature(S3GlobSensor.__init__).parameters['min_files'].default})"),
    ("docs/lineage-and-assets.md", f"up to\n{MAX_INPUT_DATASETS} files. Beyond {MAX_INPUT_DATASETS}, the files"),
    ("docs/lineage-and-assets.md", f"up to {MAX_INPUT_DATASETS} directories;"),
    ("docs/retries-and-modes.md", f"(up to {PARTITIONS_PER_ALTER} a statement)"),
    ("docs/connections.md", f"port: {DEFAULT_PORT}, {DEFAULT_SECURE_PORT} with `secure`"),
    # tuning
    ("docs/tuning.md", f"`max(1, min(cores, {MIN_INSERT_THREADS}), cores // 2)`"),
    ("docs/tuning.md", f"≈ {ROW_GROUP_MEMORY_FACTOR}× the largest\n  uncompressed row group"),
    ("docs/tuning.md", f"`DEFAULT_MEMORY_SHARE` ({DEFAULT_MEMORY_SHARE:g})"),
    ("docs/tuning.md", f"a {fmt_bytes(FALLBACK_BUDGET_BYTES)} fallback with a warning"),
    ("docs/tuning.md", f"the footers of the {FOOTER_SAMPLE} largest files"),
    ("docs/tuning.md", f"Parquet/ORC {SELF_COMPRESSED_EXPANSION['parquet']:g}, "
                       f"Avro {SELF_COMPRESSED_EXPANSION['avro']:g}, "
                       f"compressed text {COMPRESSED_EXPANSION:g}, plain text {PLAIN_EXPANSION:g})"),
    ("docs/tuning.md", f"`max({fmt_bytes(MIN_DATA_BLOCK_BYTES)}, estimate / (threads × {MIN_BLOCKS_PER_THREAD}))`"),
    ("docs/tuning.md", f"× {PEAK_FIT_MARGIN:g}\n  (`PEAK_FIT_MARGIN`)"),
    ("docs/tuning.md", f"even a {fmt_bytes(MIN_BLOCK_BYTES)} block would not fit"),
    ("docs/tuning.md", f"A per-node budget under {fmt_bytes(MIN_BUDGET_BYTES)}, or a block under "
                       f"{fmt_bytes(MIN_BLOCK_BYTES)}, is refused"),
    ("docs/tuning.md", f"≤ {_HALVE.ceilings['max_insert_delayed_streams_for_parallel_write']} delayed write streams, "
                       f"{fmt_bytes(_HALVE.ceilings['max_download_buffer_size'])} download buffers"),
    ("docs/tuning.md", "Parquet read in blocks of ≤ "
                       f"{_thousands(_ONE.ceilings['input_format_parquet_max_block_size'])} "
                       f"rows and ≤ {fmt_bytes(_ONE.ceilings['input_format_parquet_prefer_block_bytes'])}"),
    ("docs/tuning.md", f"with {fmt_bytes(_SMALLEST.ceilings['max_download_buffer_size'])} blocks and download buffers "
                       "and Parquet blocks of ≤ "
                       f"{_thousands(_SMALLEST.ceilings['input_format_parquet_max_block_size'])} rows"),
    ("docs/tuning.md", f"the last {HISTORY_LOADS} finished inserts with that key ({HISTORY_DAYS} days of"),
    ("docs/tuning.md", f"kept within {SCALE_BOUNDS[0]:g}-{SCALE_BOUNDS[1]:g}"),
    ("docs/tuning.md", f"| {fmt_bytes(PEAK_BASE_BYTES)}; for less data, {fmt_bytes(PEAK_BASE_FLOOR_BYTES)} and "
                       "the data |"),
    ("docs/tuning.md", f"| {PEAK_BLOCK_FACTOR} × the insert block + {fmt_bytes(PEAK_THREAD_BYTES)}; all together at "
                       f"most {PEAK_DATA_FACTOR:g} × the data |"),
    ("docs/tuning.md", f"| {PEAK_ROW_GROUP_FACTOR:g} × the largest row group (footers) |"),
    ("docs/tuning.md", f"| {PEAK_TEXT_READ_FACTOR:g} × its share of a file, up to {fmt_bytes(PEAK_TEXT_READ_BYTES)};"),
    ("docs/tuning.md", f"less up to {fmt_bytes(PEAK_S3_STREAM_BYTES)} (in proportion to its files per stream, all of "
                       f"it from {PEAK_S3_STREAM_FILES} on)"),
    ("docs/tuning.md", f"at the band's low end (× {PEAK_BAND[0]:g})"),
    ("docs/tuning.md", f"When the quickest took {LATENT_REQUEST_MS:g} ms or more"),
    ("docs/tuning.md", f"`max_threads` to {LATENT_READING_THREADS} (or the cores, if more)"),
    ("docs/tuning.md", f"largest row group (× {ROW_GROUP_MEMORY_FACTOR})"),
    ("docs/tuning.md", f"files ≤ {fmt_bytes(SMALL_FILE_BYTES)}, the planner\nsets the guide's "
                       f"{fmt_bytes(LARGE_DOWNLOAD_BUFFER_BYTES)} (`{LARGE_DOWNLOAD_BUFFER_BYTES}`)"),
    ("docs/tuning.md", f"it keeps ClickHouse's {fmt_bytes(DEFAULT_DOWNLOAD_BUFFER_BYTES)} so that"),
    ("docs/tuning.md", f"Below {fmt_bytes(LOW_MEMORY_BYTES)}\nper node, "
                       f"`max_insert_delayed_streams_for_parallel_write` is lowered to {LOW_MEMORY_DELAYED_STREAMS}"),
]


@pytest.mark.parametrize(("document", "phrase"), FIGURES, ids=[f"{d}: {p[:50]}" for d, p in FIGURES])
def test_each_figure_quoted_is_the_codes(document: str, phrase: str) -> None:
    assert phrase in (ROOT / document).read_text(), f"{document} does not say {phrase!r}"


def test_the_peak_band_is_quoted_with_its_high_end_read_from_the_low() -> None:
    """The band's width the tuning page gives (`the model's peak 1-1.49 × the cap`) is the reciprocal of its low
    end: a load is within the band when the cap lies between the prediction × the low end and the prediction."""
    assert f"1-{1 / PEAK_BAND[0]:.2f} × the cap" in (ROOT / "docs/tuning.md").read_text()


def test_the_manual_runs_page_shows_the_examples_own_run_month() -> None:
    """docs/retries-and-modes.md quotes the backfill example's macro: its lines are the example's, in order."""
    page = (ROOT / "docs/retries-and-modes.md").read_text()
    quoted = re.search(r"```python\n(def run_month\(dag_run\).*?)\n\n", page, re.DOTALL)
    assert quoted is not None, "docs/retries-and-modes.md no longer quotes run_month"
    body = [line.strip() for line in quoted.group(1).splitlines()[1:] if line.strip()]
    example = [line.strip() for line in (ROOT / "example_dags/example_backfill.py").read_text().splitlines()]
    start = example.index(body[0])
    assert example[start:start + len(body)] == body
    assert "the last month that ended before the trigger |" in page

"""The load's predicted peak memory: what one node's insert will hold at its busiest, from what the plan knows.

The model (per node; the terms add up, then two bounds apply):

- a base of :data:`PEAK_BASE_BYTES` (the query's pipeline, buffers, the schema, the S3 client), for a
  load of less data :data:`PEAK_BASE_FLOOR_BYTES` and the data (its buffers hold no more than the files);
- per insert thread that has data to write (at most the reading streams): :data:`PEAK_BLOCK_FACTOR`
  copies of its insert block (the guide's "about three copies: built, sorted, compressed") and
  :data:`PEAK_THREAD_BYTES` of write buffers for the part it writes; all threads together at most
  :data:`PEAK_DATA_FACTOR` x the data (a block bigger than the whole load holds the load, not a block);
- per reading stream (``max_threads``, at most the file count): for Parquet,
  :data:`PEAK_ROW_GROUP_FACTOR` x the largest row group (footers), beside the bounded writing (a stream
  holds a row group's compressed chunks and pages as well as its rows); for other formats
  :data:`PEAK_TEXT_READ_FACTOR` x its share of a file, up to :data:`PEAK_TEXT_READ_BYTES`, within the
  bound by the data (a text stream holds the rows its file decompresses to, the rows the blocks are built
  from: the writing is bounded by :data:`PEAK_DATA_FACTOR` x the data less the text streams);
- read from local files (``file()``, the benchmark's control loads; ``source="file"``), a stream over many
  files holds up to :data:`PEAK_S3_STREAM_BYTES` less than from S3 (in proportion to its files, full from
  :data:`PEAK_S3_STREAM_FILES` on), taken off the writing before its bound by the data;
- the whole bounded by ``max_memory_usage``: the server stops the query there, so a prediction that
  reaches the cap even at the band's low end (:data:`PEAK_BAND`) means the load will likely stop, and one
  within the band of the cap that it may.

The plan uses the model too (:func:`fit_block`): where the guide's block would bring the prediction within
:data:`PEAK_FIT_MARGIN` of the budget, the plan takes the largest block whose prediction stays under it.

The constants are fitted on the benchmark's 90 loads from S3 on a 2-core server (4 datasets, Parquet and
gzip'd CSV, 3 to 400 files, 1-4 insert threads, 5 MiB to 3.2 GiB blocks, memory caps from 256 MiB; make bench,
docs/tuning.md); the bound by the data (:data:`PEAK_DATA_FACTOR`, the text streams within it) on those and on
the end-to-end loads on 16 cores (8 insert threads over 10 gzip'd CSV and 20 Parquet files): measured /
predicted on every recorded load from S3 (2 and 16 cores, the 3.3 GB grid and caps of make bench-large) fell
within :data:`PEAK_BAND`. ``scale`` and ``expansion``
come from the same target's earlier loads (:mod:`airflow_provider_s3ch.core.history`), when there are any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from airflow_provider_s3ch.core.models import InsertSettings, Manifest, SettingValue
from airflow_provider_s3ch.core.plan.settings import (
    BLOCK_MEMORY_FACTOR,
    DEFAULT_BLOCK_BYTES,
    MIN_BLOCK_BYTES,
    data_estimate,
)
from airflow_provider_s3ch.core.setting_types import setting_int
from airflow_provider_s3ch.core.sizes import MiB, fmt_bytes

#: What a load holds whatever its data: the query's pipeline, buffers, the S3 client.
PEAK_BASE_BYTES = 100 * MiB

#: What the smallest load holds (4.5-4.8 MiB measured for CSV files of 2.5-310 KB on the local node): a load
#: of less data than :data:`PEAK_BASE_BYTES` has this and its data as its base.
PEAK_BASE_FLOOR_BYTES = 8 * MiB

#: Copies of an insert block per insert thread (the guide's divisor).
PEAK_BLOCK_FACTOR = BLOCK_MEMORY_FACTOR

#: Write buffers of the part an insert thread writes (one per column and file, compressed).
PEAK_THREAD_BYTES = 60 * MiB

#: Memory of one Parquet reading stream per byte of the largest uncompressed row group.
PEAK_ROW_GROUP_FACTOR = 1.5

#: Memory of one reading stream of a text format per byte of its share of a file (decompressed), and the
#: share counted at most.
PEAK_TEXT_READ_FACTOR = 0.5
PEAK_TEXT_READ_BYTES = 64 * MiB

#: What a reading stream over many files holds from S3 beyond what it holds from local files (``file()``), and
#: the files per stream from which it holds all of it (fewer: in proportion). The constants above are fitted on
#: loads from S3, which hold it; measured on the bench's 400 x 260 KB Parquet and 200 x 470 KB CSV.gz files
#: (64 MiB blocks, 1, 2 and 4 threads): 87-98 MiB less per stream from ``file()``, about none with blocks
#: bounded by the data, and with 2 or 3 files per stream.
PEAK_S3_STREAM_BYTES = 96 * MiB
PEAK_S3_STREAM_FILES = 50

#: The insert threads never hold more than this many copies of the load's whole data: a thread whose share of the
#: data is smaller than its block holds its share (built, sorted, compressed), not a block. For a text format the
#: reading streams count within it: what a stream holds is its file's rows decompressed, the same rows the blocks
#: are built from (a Parquet stream's row group term stays beside it: the row group's compressed chunks and pages).
#: 2.4 on the 2-core loads alone; on 16 cores, 8 insert threads over 10 gzip'd CSV files (~358 MiB estimated,
#: 64 MiB blocks) peaked at 629-1,201 MiB, which 2.4 x the data with the 10 streams on top (1,137 MiB predicted)
#: put down to 0.55: within the bound and at 2.3 they are at 0.68-1.30 (923 MiB predicted; at 2.4, 958 MiB, the
#: lowest at 0.66), 20 Parquet files (16 streams of 14 MiB row groups on top, 1,062 MiB) at 0.71-1.25.
PEAK_DATA_FACTOR = 2.3

#: Measured / predicted on the benchmark's loads from S3 (make bench, make bench-large, docs/tuning.md): 0.82-1.37
#: on 2 cores, 0.68-1.30 on 16.
PEAK_BAND = (0.67, 1.4)

#: A plan's block keeps its predicted peak x this under ``max_memory_usage`` (:func:`fit_block`). At 3.3 GB of
#: Parquet (make bench-large) the guide's 2 x 341 MiB under a 2 GiB cap (predicted 2.29 GiB) stopped at the cap;
#: fitted with x 1.1, the loads under 2 and 4 GiB peaked at 0.92-1.01 of their prediction, and the one under
#: 1 GiB at 1.08 in one run and above 1.1 in the next (it stopped at the cap and stepped down).
PEAK_FIT_MARGIN = 1.2


class PeakEstimate(BaseModel):
    """The predicted peak memory of one node's insert, its terms and why."""

    model_config = ConfigDict(frozen=True)

    bytes: int
    reason: str
    #: The model's bytes before ``scale`` and the cap (what a later load compares its peak with).
    model_bytes: int
    #: The terms before the bounds (bytes): base, blocks, reading.
    terms: dict[str, int]
    #: True when the prediction reaches ``max_memory_usage`` even at the band's low end: the load will likely
    #: stop there.
    at_cap: bool = False


def _int(value: SettingValue | None, default: int) -> int:
    number = setting_int(value, default)
    return number if number > 0 else default


def predict_peak(
    values: Mapping[str, SettingValue], manifest: Manifest, *, cores: int, fmt: str, compression: str | None,
    nodes: int = 1, scale: float = 1.0, expansion: float | None = None, source: Literal["s3", "file"] = "s3",
) -> PeakEstimate:
    """The predicted peak memory of one node's insert with these settings.

    :param values: the insert's settings (ClickHouse's defaults for those missing).
    :param manifest: the files (sizes, row groups, uncompressed size).
    :param cores: one node's cores (ClickHouse's default ``max_threads`` and ``max_insert_threads``).
    :param nodes: nodes sharing the files.
    :param scale: measured / predicted on earlier loads of the same target (1: none).
    :param expansion: learned uncompressed bytes per file byte (formats without footers).
    :param source: ``s3`` (every load the operator runs), or ``file`` for local files read with ``file()``.
    """
    files = max(1, -(-manifest.file_count // max(1, nodes)))
    data, data_text = data_estimate(manifest, fmt, compression, expansion=expansion)
    data //= max(1, nodes)
    readers = min(_int(values.get("max_threads"), cores), files)
    writers = min(_int(values.get("max_insert_threads"), cores), readers)
    block = _int(values.get("min_insert_block_size_bytes"), DEFAULT_BLOCK_BYTES)
    per_block = int(PEAK_BLOCK_FACTOR * writers * block) + writers * PEAK_THREAD_BYTES
    per_stream = files / readers
    local = 0
    if source == "file":  # no S3 reader: a stream over many files holds less
        local = int(readers * PEAK_S3_STREAM_BYTES * min(1.0, per_stream / PEAK_S3_STREAM_FILES))
        per_block = max(0, per_block - local)
    bound = int(PEAK_DATA_FACTOR * data)
    if manifest.max_row_group_bytes:
        reading = int(readers * PEAK_ROW_GROUP_FACTOR * manifest.max_row_group_bytes)
        reading_text = (f"{readers} reading x {PEAK_ROW_GROUP_FACTOR:g} x the largest row group "
                        f"{fmt_bytes(manifest.max_row_group_bytes)}")
        bounded = "the writing"
    else:
        share = min(data // files, PEAK_TEXT_READ_BYTES)
        reading = int(readers * PEAK_TEXT_READ_FACTOR * share)
        reading_text = f"{readers} reading x {PEAK_TEXT_READ_FACTOR:g} x {fmt_bytes(share)} of a file"
        bound = max(0, bound - reading)  # the streams' rows are the data too: they count within the bound
        bounded = "the writing and the reading"
    blocks = min(per_block, bound)
    base = min(PEAK_BASE_BYTES, PEAK_BASE_FLOOR_BYTES + data)
    model = base + blocks + reading
    predicted = int(model * scale)
    small = "" if base == PEAK_BASE_BYTES else f" (a small load: {fmt_bytes(PEAK_BASE_FLOOR_BYTES)} and the data)"
    reason = (
        f"{fmt_bytes(base)} base{small} + "
        f"{writers} writing x ({PEAK_BLOCK_FACTOR} x {fmt_bytes(block)} block + "
        f"{fmt_bytes(PEAK_THREAD_BYTES)})"
        + (f" less {fmt_bytes(local)} read from local files ({per_stream:g} files per stream)" if local else "")
        + f" + {reading_text}"
    )
    if blocks < per_block:
        reason += f"; {bounded} bounded by {PEAK_DATA_FACTOR:g} x the data ({data_text})"
    if scale != 1.0:
        reason += f", x {scale:.2f} (measured / predicted on earlier loads of this target)"
    cap = _int(values.get("max_memory_usage"), 0)
    at_cap = bool(cap) and predicted * PEAK_BAND[0] >= cap
    if at_cap:  # even the model's low end: the server stops the query at the cap
        reason += (f": reaches max_memory_usage {fmt_bytes(cap)} even at the model's low end "
                   f"(x {PEAK_BAND[0]:g}), where the server stops the query")
        predicted = cap
    elif cap and predicted >= cap:  # within the model's band of the cap: it may fit or not
        reason += (f": {fmt_bytes(predicted)}, at most max_memory_usage {fmt_bytes(cap)}: within the model's "
                   f"band ({PEAK_BAND[0]:g}-{PEAK_BAND[1]:g}) of the cap, the load may stay under it or stop there")
        predicted = cap
    return PeakEstimate(bytes=predicted, reason=reason, model_bytes=model,
                        terms={"base": base, "blocks": blocks, "reading": reading}, at_cap=at_cap)


def fit_block(
    settings: InsertSettings, manifest: Manifest, *, cores: int, fmt: str, compression: str | None,
    nodes: int = 1, scale: float = 1.0, expansion: float | None = None,
) -> InsertSettings:
    """``settings`` with the largest ``min_insert_block_size_bytes`` whose predicted peak x :data:`PEAK_FIT_MARGIN`
    stays under ``max_memory_usage``, where the planned block's does not; ``settings`` as they are when the block
    fits, the user set it, or no block fits (the plan's warning and the steps down inside the task then apply).

    Under a tight cap the guide's formula (budget / 3 / threads) leaves no room for the reading streams, the
    write buffers and the base: under ``memory_cap="2GiB"`` at 3.3 GB of Parquet its 2 x 341 MiB blocks (predicted
    2.3 GiB) stopped at the cap, and the step down then loaded with 1 x 85 MiB in 75.5 s, where 2 x 256 MiB
    (1.79 GiB peak) took 48 s (docs/benchmarks.md).
    """
    values = settings.values
    cap = _int(values.get("max_memory_usage"), 0)
    planned = _int(values.get("min_insert_block_size_bytes"), DEFAULT_BLOCK_BYTES)
    if not cap or "min_insert_block_size_bytes" in settings.overrides:
        return settings

    def with_margin(block: int) -> float:
        estimate = predict_peak({**values, "min_insert_block_size_bytes": block}, manifest, cores=cores, fmt=fmt,
                                compression=compression, nodes=nodes, scale=scale, expansion=expansion)
        return estimate.model_bytes * scale * PEAK_FIT_MARGIN

    planned_high = with_margin(planned)
    if planned_high <= cap or with_margin(MIN_BLOCK_BYTES) > cap:
        return settings
    # whole MiB: the smallest fits, the planned block does not, and the prediction grows with the block
    low, high = MIN_BLOCK_BYTES // MiB, -(-planned // MiB)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if with_margin(middle * MiB) <= cap else (low, middle)
    block = low * MiB
    reason = (
        f"{fmt_bytes(block)}, fitted to the budget: with {fmt_bytes(planned)} the predicted peak would be "
        f"{fmt_bytes(int(planned_high / PEAK_FIT_MARGIN))} against max_memory_usage {fmt_bytes(cap)}, "
        f"so the block is the largest whose "
        f"predicted peak x {PEAK_FIT_MARGIN:g} stays under it (docs/tuning.md); "
        f"before fitting: {settings.reasons.get('min_insert_block_size_bytes', '')}"
    )
    return settings.model_copy(update={
        "values": {**values, "min_insert_block_size_bytes": block},
        "reasons": {**settings.reasons, "min_insert_block_size_bytes": reason},
    })

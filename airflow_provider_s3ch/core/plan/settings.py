"""The insert settings, each with its reason: the guide's rules, the benchmark's, the user's overrides."""

from __future__ import annotations

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.formats import is_compressed
from airflow_provider_s3ch.core.models import InsertSettings, LoadRequest, Manifest, SettingValue
from airflow_provider_s3ch.core.plan.budget import Budget
from airflow_provider_s3ch.core.plan.measured import LADDER_POINT, LARGE_POINT, SMALL_LADDER_POINT, SMALL_TEXT_POINT
from airflow_provider_s3ch.core.plan.partition_spans import PartitionFigures, partition_figures
from airflow_provider_s3ch.core.plan.workload import chosen_workload
from airflow_provider_s3ch.core.server_models import ServerProfile
from airflow_provider_s3ch.core.sizes import GiB, MiB, fmt_bytes

#: Below this block size a load is refused: thousands of tiny parts would bury the
#: server in merges.
MIN_BLOCK_BYTES = 1 * MiB

#: ClickHouse's default ``min_insert_block_size_bytes`` (with ``min_insert_block_size_rows``
#: ~1M rows, whichever comes first).
DEFAULT_BLOCK_BYTES = 256 * MiB

#: The data-based cap never goes below this (only the memory formula may): smaller blocks
#: make more parts per partition and more merges. In the benchmark (2 cores, 100-650 MB
#: uncompressed per load, 2 threads) 64 MiB blocks were faster than 256 MiB in 10 of 12 loads and
#: within 4 % in the other 2, with less memory; 1 GiB blocks were slower in 12 of 12
#: (docs/benchmarks.md).
MIN_DATA_BLOCK_BYTES = 64 * MiB

#: A block past ClickHouse's :data:`DEFAULT_BLOCK_BYTES` only where, at 256 MiB, the insert would write at least this
#: many parts into each partition it touches, each under :data:`SMALL_PART_BYTES`. ClickHouse merges small parts
#: right away, beside the insert: on 2 cores, 1 GiB blocks loaded 1.70x as fast as 256 MiB where the 256 MiB block
#: wrote 9 parts of ~3 MiB a partition (0.8 GB, every file across 96 months) and 1.6-1.9x where it wrote ~8 of
#: ~11 MiB (3.3 GB, each file 24 of 96 months); they bought nothing (0.81-1.01x) at 1.2-3.0 parts a partition (the
#: size ladder into 12 and 120 partitions, 0.8 GB of the 24-month files), nor where the parts were 256 MiB (the
#: ladder into one partition, 0.92x). The line sits between 3 and 8 (docs/benchmarks.md). Where every file spans
#: all 96 months at 3.3 GB (~33 parts of ~2.7 MiB a partition at 256 MiB, still ~9 at 1 GiB) neither block matched
#: ClickHouse's defaults: 1 GiB loaded at 0.94-1.07x their speed for 3.6x their memory, 256 MiB with the plan's
#: other settings at 0.71-1.02x, and the defaults themselves moved by 37 % between rounds there; the rule keeps
#: 1 GiB, and its memory there is a known miss (docs/benchmarks.md).
MANY_PARTS_PER_PARTITION = 6

#: See :data:`MANY_PARTS_PER_PARTITION`: parts this large are left for later merges.
SMALL_PART_BYTES = 64 * MiB

#: The block where many small parts would be written: the size measured (1 GiB blocks, above), never more than a
#: thread's share of the data, under the guide's memory formula.
LARGE_BLOCK_BYTES = 1 * GiB

#: Beyond this much uncompressed data a node, where partitions are few or not known, the guide's rule stands: the
#: data-sized block under its memory formula, as the guide's example (24 GB of Parquet, 32 GiB, 8 cores: a 2.67 GiB
#: block). 256 MiB blocks would write at least 128 parts into a partition, and ClickHouse's part limits
#: (``parts_to_delay_insert``, 1000 active parts a partition) come near. Not measured here: the largest loads
#: measured were 9.7 GiB a node, where blocks past 256 MiB bought nothing into 12 and 120 partitions.
GUIDE_FROM_BYTES = 32 * GiB

#: The data-based cap aims at this many blocks per insert thread at least, so that
#: reading and writing overlap. One huge block per thread measured 2-3x slower than the
#: defaults on 123 MB of Parquet: the thread reads everything, then writes everything.
MIN_BLOCKS_PER_THREAD = 4

#: The guide's divisor: a block is built, sorted and compressed, so about three copies of
#: it live in memory per insert thread.
BLOCK_MEMORY_FACTOR = 3

#: Insert threads never go below this (or the core count, if smaller). The guide's "half the
#: cores" gives 1 thread on a 2-core server, where ClickHouse's own default (``max_insert_threads``
#: = the cores here) uses 2; with the same 64 MiB blocks, one thread was slower than two in 11
#: of 12 benchmark loads (4 datasets x 3 runs, up to 2.4x; docs/benchmarks.md). From 4 cores up,
#: half the cores is at least this anyway.
MIN_INSERT_THREADS = 2

#: Peak memory of one reading thread per byte of the largest uncompressed Parquet row group:
#: the compressed chunk, its decompressed pages, the decoded columns and the insert block built
#: from them. Measured 5.5-6.5x at 1 thread on 204-225 MiB row groups, and a 1 GiB cap failed
#: with 204 MiB row groups (docs/benchmarks.md).
ROW_GROUP_MEMORY_FACTOR = 6

#: Uncompressed in-memory size / file size for formats that compress internally,
#: whatever the outer compression says. Rough, from typical datasets; tune from benchmarks.
SELF_COMPRESSED_EXPANSION: dict[str, float] = {"parquet": 3.0, "orc": 3.0, "avro": 2.0}

#: Expansion of other formats (text, Native, RowBinary, Arrow...) stored uncompressed.
PLAIN_EXPANSION = 1.0

#: Expansion of other formats stored with an outer compression (gzip, zstd, lz4, xz...).
COMPRESSED_EXPANSION = 4.0

#: The guide's ``max_download_buffer_size`` (50 MiB) for files one thread should read whole.
LARGE_DOWNLOAD_BUFFER_BYTES = 52_428_800

#: The 50 MiB buffer is used only when the median file is at most this big; bigger files
#: are better read in parallel ranges with ClickHouse's default 10 MiB buffer.
SMALL_FILE_BYTES = 100 * MiB

#: Formats that keep ClickHouse's 10 MiB download buffer whatever their files: on the size ladder (1 GB in 20
#: files of ~46 MiB, 8 rounds each paired with the defaults of its round) the guide's 50 MiB made Parquet loads
#: slower in 7 of 8 rounds at each of 1/12/120 partitions (median 1.05-1.08x the defaults' time; the plan's other
#: settings with the 10 MiB buffer: 1.00-1.01x), while on gzip'd CSV it made them faster in all 24 rounds
#: (0.84-0.89x; bench/results/ladder/ladder_1gb_paired.json).
#: A Parquet reader fetches its column chunks by range itself; files over 2 x 10 MiB are then also fetched in
#: parallel ranges, which the 50 MiB buffer turns off for files under 100 MiB.
DEFAULT_BUFFER_FORMATS = frozenset({"parquet"})

#: From this S3 request latency (ms: the quickest of the listing's calls: location, list pages, footer reads)
#: on, a Parquet load reads with :data:`LATENT_READING_THREADS` streams: each stream waits on S3 most of the
#: time. In-region S3 answers a small request in 10-50 ms; a local S3 in 1-10 ms (up to ~18 ms on a starved
#: CPU, where the plan may then read with 8 streams: straight from a local S3 they cost 0-8 % in the
#: benchmark, and in its latest grid nothing: 1.42 s against 1.44 s). At 25 ms the benchmark's 20 ms proxy
#: stayed under the threshold and its insert was only 1.2x the defaults' (1.7x at 50 ms, with 8 streams).
#: Through a proxy adding 30 ms per request (80 MB/s per connection), 8 reading threads took the insert
#: of 20 Parquet files from 0.80 to 0.60-0.67 of ClickHouse's defaults; on gzip'd CSV no gain either way
#: (docs/benchmarks.md).
LATENT_REQUEST_MS = 15.0
LATENT_READING_THREADS = 8

#: Under this per-node budget, ``max_insert_delayed_streams_for_parallel_write`` is lowered.
LOW_MEMORY_BYTES = 2 * GiB

#: The lowered ``max_insert_delayed_streams_for_parallel_write`` (ClickHouse's default for
#: S3-backed storage is about 100 streams, each holding a write buffer).
LOW_MEMORY_DELAYED_STREAMS = 8


def insert_threads(cores: int) -> int:
    """``max_insert_threads``: the guide's half of the cores, but at least :data:`MIN_INSERT_THREADS`.

    :param cores: the cores of one node.
    :return: ``max(min(cores, MIN_INSERT_THREADS), cores // 2)``: 1 core -> 1, 2-5 -> 2, 8 -> 4, 64 -> 32.
    """
    return max(1, min(cores, MIN_INSERT_THREADS), cores // 2)


def row_group_threads(budget: int, threads: int, max_row_group_bytes: int | None) -> int:
    """How many insert threads the budget can feed when each reads a row group of the given size.

    :param budget: per-node memory budget.
    :param threads: the threads chosen so far.
    :param max_row_group_bytes: the largest uncompressed row group (Parquet footers), or None.
    :return: ``threads`` lowered so that ``threads x ROW_GROUP_MEMORY_FACTOR x row group <= budget``,
        at least 1; ``threads`` when the row-group size is unknown.
    """
    if not max_row_group_bytes:
        return threads
    fit = budget // (ROW_GROUP_MEMORY_FACTOR * max_row_group_bytes)
    return max(1, min(threads, fit))


def expansion_factor(fmt: str, compression: str | None) -> float:
    """Estimated uncompressed in-memory size per byte of file.

    :param fmt: the ClickHouse format name, e.g. ``"Parquet"``.
    :param compression: the outer compression (``"gzip"``, ``"zstd"``...) or None.
    :return: the factor from :data:`SELF_COMPRESSED_EXPANSION`, else
        :data:`COMPRESSED_EXPANSION` or :data:`PLAIN_EXPANSION`.
    """
    key = fmt.lower()
    if key in SELF_COMPRESSED_EXPANSION:
        return SELF_COMPRESSED_EXPANSION[key]
    if is_compressed(compression):
        return COMPRESSED_EXPANSION
    return PLAIN_EXPANSION



def data_estimate(
    manifest: Manifest, fmt: str, compression: str | None, *, expansion: float | None = None
) -> tuple[int, str]:
    """The load's uncompressed bytes as the plan estimates them, and how.

    :param expansion: uncompressed bytes per file byte learned from earlier loads; used for formats
        without footers (Parquet's footers give the size itself).
    """
    if manifest.uncompressed_bytes:
        return manifest.uncompressed_bytes, (
            f"{fmt_bytes(manifest.total_bytes)} {fmt}, {fmt_bytes(manifest.uncompressed_bytes)} uncompressed "
            f"(from {manifest.footer_files} Parquet "
            f"footer{'s' if manifest.footer_files != 1 else ''})"
        )
    if expansion:
        return int(manifest.total_bytes * expansion), (
            f"~{fmt_bytes(manifest.total_bytes)} {fmt} x {expansion:.2f} (learned from earlier loads)"
        )
    factor = expansion_factor(fmt, compression)
    return int(manifest.total_bytes * factor), (
        f"~{fmt_bytes(manifest.total_bytes)} {fmt}{' ' + compression if is_compressed(compression) else ''} "
        f"x {factor:g}"
    )


def many_small_parts(figures: PartitionFigures | None) -> bool:
    """Whether 256 MiB blocks would write many small parts into each partition (:data:`MANY_PARTS_PER_PARTITION`)."""
    return (figures is not None and figures.parts_per_partition >= MANY_PARTS_PER_PARTITION
            and figures.part_bytes < SMALL_PART_BYTES)


def _parts_text(figures: PartitionFigures) -> str:
    return (f"at {fmt_bytes(figures.block)} the insert would write ~{figures.parts_per_partition:g} parts of "
            f"~{fmt_bytes(figures.part_bytes)} into each of {figures.partitions} partition"
            f"{'s' if figures.partitions != 1 else ''} ({figures.source})")


def block_size(budget: int, threads: int, data_bytes: int, figures: PartitionFigures | None = None,
               small: PartitionFigures | None = None) -> tuple[int, str]:
    """``min_insert_block_size_bytes``: the guide's memory formula, capped by the data and by the partitions.

    formula = ``budget // (BLOCK_MEMORY_FACTOR x threads)`` (the guide);
    data cap = ``max(MIN_DATA_BLOCK_BYTES, data_bytes // (threads x MIN_BLOCKS_PER_THREAD))``,
    so a thread writes several blocks and its reads and writes overlap, and the cap never
    goes below :data:`MIN_DATA_BLOCK_BYTES`, nor above ClickHouse's :data:`DEFAULT_BLOCK_BYTES` up to
    :data:`GUIDE_FROM_BYTES` a node, unless ``figures`` say that 256 MiB blocks would write many small parts into
    each partition (:func:`many_small_parts`): then ``max(256 MiB, min(LARGE_BLOCK_BYTES, data_bytes // threads))``.
    The block is ``min(formula, cap)``.

    :param budget: per-node memory budget in bytes.
    :param threads: insert threads per node.
    :param data_bytes: estimated uncompressed bytes one node will insert.
    :param figures: what 256 MiB blocks make of the load's partitions
        (:func:`~airflow_provider_s3ch.core.plan.partition_spans.partition_figures`); None when unknown.
    :param small: what :data:`MIN_DATA_BLOCK_BYTES` blocks make of them, for a text load (a sample): where they
        write fewer than :data:`MANY_PARTS_PER_PARTITION` parts a partition, the block ClickHouse would hold at
        256 MiB is :data:`MIN_DATA_BLOCK_BYTES` (:data:`SMALL_TEXT_POINT`).
    :return: the block size in bytes and the reason line.
    """
    formula = budget // (BLOCK_MEMORY_FACTOR * threads)
    per_thread_share = data_bytes // (threads * MIN_BLOCKS_PER_THREAD)
    data_cap = max(MIN_DATA_BLOCK_BYTES, per_thread_share)
    formula_text = (
        f"memory formula {fmt_bytes(budget)} / ({BLOCK_MEMORY_FACTOR} x {threads} threads) = {fmt_bytes(formula)}"
    )
    cap_text = (
        f"data cap max({fmt_bytes(MIN_DATA_BLOCK_BYTES)}, ~{fmt_bytes(data_bytes)} uncompressed / "
        f"({threads} threads x {MIN_BLOCKS_PER_THREAD} blocks)) = {fmt_bytes(data_cap)}"
    )
    if figures is not None and many_small_parts(figures):
        large = max(DEFAULT_BLOCK_BYTES, min(LARGE_BLOCK_BYTES, data_bytes // threads))
        why = (f"{_parts_text(figures)}, at least {MANY_PARTS_PER_PARTITION} under {fmt_bytes(SMALL_PART_BYTES)} "
               f"({LARGE_POINT})")
        if formula <= large:
            return formula, f"{formula_text} (the guide), under {fmt_bytes(large)}: {why}"
        return large, (f"{fmt_bytes(large)} (at most {fmt_bytes(LARGE_BLOCK_BYTES)}, a thread's share of the data): "
                       f"{why}; under the {formula_text} (the guide)")
    held = data_cap > DEFAULT_BLOCK_BYTES and data_bytes <= GUIDE_FROM_BYTES
    if formula <= (DEFAULT_BLOCK_BYTES if held else data_cap):
        under = f"ClickHouse's {fmt_bytes(DEFAULT_BLOCK_BYTES)}" if held else f"the {cap_text}"
        return formula, f"{formula_text} (the guide), under {under}"
    if held and small is not None and small.parts_per_partition < MANY_PARTS_PER_PARTITION:
        return MIN_DATA_BLOCK_BYTES, (
            f"{fmt_bytes(MIN_DATA_BLOCK_BYTES)}, not ClickHouse's {fmt_bytes(DEFAULT_BLOCK_BYTES)}: "
            f"{_parts_text(small)}, fewer than {MANY_PARTS_PER_PARTITION} ({SMALL_TEXT_POINT}); "
            f"under the {formula_text} (the guide)")
    if held:
        parts = (f"{_parts_text(figures)}, not {MANY_PARTS_PER_PARTITION} under {fmt_bytes(SMALL_PART_BYTES)}"
                 if figures is not None else "the partitions a block spans are not known (Parquet footers and a "
                 "partition key of one column under a date or integer function tell them)")
        return DEFAULT_BLOCK_BYTES, (
            f"ClickHouse's {fmt_bytes(DEFAULT_BLOCK_BYTES)}, not the {cap_text}: {parts}, and blocks past 256 MiB "
            f"bought no speed for their memory in {LADDER_POINT}; under the {formula_text} (the guide)"
        )
    if per_thread_share <= MIN_DATA_BLOCK_BYTES:
        return data_cap, (
            f"the floor {fmt_bytes(MIN_DATA_BLOCK_BYTES)}: ~{fmt_bytes(data_bytes)} uncompressed is too "
            f"little for bigger blocks; the {formula_text} (the guide) would make one huge block per thread, "
            f"and reads and writes would no longer overlap ({SMALL_LADDER_POINT})"
        )
    beyond = (f" (beyond {fmt_bytes(GUIDE_FROM_BYTES)} a node the guide's rule stands: 256 MiB blocks would write "
              f"at least {GUIDE_FROM_BYTES // DEFAULT_BLOCK_BYTES} parts into a partition)"
              if data_bytes > GUIDE_FROM_BYTES else "")
    return data_cap, (
        f"{cap_text}, so each thread writes several blocks and reads and writes overlap{beyond}; "
        f"under the {formula_text} (the guide)"
    )


def plan_settings(
    request: LoadRequest, manifest: Manifest, profile: ServerProfile, budget: Budget, nodes: int,
    *, expansion: float | None = None, partition_key: str | None = None,
) -> InsertSettings:
    """The insert settings, each with a one-line reason, then the user's overrides.

    :param request: the request (its ``settings`` override anything computed).
    :param manifest: the objects (sizes, format, compression).
    :param profile: the server (cores, per-node cores).
    :param budget: the per-node memory budget.
    :param nodes: nodes taking part (1 for a single-node load).
    :param expansion: uncompressed bytes per file byte learned from earlier loads (formats without footers).
    :param partition_key: the table's partition key (``""``: none); None when unknown, as for a distributed load.
    :return: values, reasons (same keys) and the names the user overrode or added.
    :raises PlanError: the computed block is below :data:`MIN_BLOCK_BYTES`.
    """
    values: dict[str, SettingValue] = {}
    reasons: dict[str, str] = {}

    def put(name: str, value: SettingValue, reason: str) -> None:
        values[name] = value
        reasons[name] = reason

    cores, cores_text = node_cores(profile, nodes)
    chosen_threads = insert_threads(cores)
    threads_reason = _threads_reason(cores, chosen_threads, cores_text)
    fitted = row_group_threads(budget.per_node, chosen_threads, manifest.max_row_group_bytes)
    if fitted < chosen_threads:
        threads_reason = (
            f"{fitted}, not {chosen_threads} ({threads_reason}): each thread reads a Parquet row group of up to "
            f"{fmt_bytes(manifest.max_row_group_bytes or 0)} uncompressed (footers), ~{ROW_GROUP_MEMORY_FACTOR}x "
            f"that in memory, and the budget is {fmt_bytes(budget.per_node)}"
        )
        chosen_threads = fitted
    threads = _user_threads(request) or chosen_threads
    put("max_insert_threads", chosen_threads, threads_reason)

    put("max_memory_usage", budget.per_node, f"the per-node memory budget: {budget.reason}")

    fmt = request.format or manifest.format
    compression = request.compression or manifest.compression
    per_nodes = f" / {nodes} nodes" if nodes > 1 else ""
    data_bytes, data_text = data_estimate(manifest, fmt, compression, expansion=expansion)
    data_bytes //= nodes
    estimate = f"; data {data_text}{per_nodes}"
    window = manifest.key_window
    figures = partition_figures(partition_key, window, data_bytes, DEFAULT_BLOCK_BYTES)
    small = (partition_figures(partition_key, window, data_bytes, MIN_DATA_BLOCK_BYTES)
             if window is not None and window.sampled_rows else None)
    block, block_reason = block_size(budget.per_node, threads, data_bytes, figures, small)
    if block < MIN_BLOCK_BYTES and "min_insert_block_size_bytes" not in request.settings:
        raise PlanError(_block_error(request, budget, threads))
    put("min_insert_block_size_bytes", block, block_reason + estimate)
    put("min_insert_block_size_rows", 0, "0 disables the row threshold so the bytes threshold governs (the guide)")

    median = manifest.summary()["median_file_bytes"]
    if manifest.file_count >= threads and median <= SMALL_FILE_BYTES and fmt.lower() not in DEFAULT_BUFFER_FORMATS:
        put(
            "max_download_buffer_size",
            LARGE_DOWNLOAD_BUFFER_BYTES,
            f"50 MiB (the guide): {manifest.file_count} files for {threads} threads, median file "
            f"{fmt_bytes(median)} <= {fmt_bytes(SMALL_FILE_BYTES)}, so each file is downloaded whole by one "
            "thread with fewer S3 calls; on the size ladder it made 1 GB of gzip'd CSV 11-16 % faster, and "
            "Parquet, which it slowed, keeps ClickHouse's 10 MiB (docs/tuning.md)",
        )

    readers = _latent_readers(manifest, fmt, compression, cores, nodes, budget.per_node)
    if readers:
        put(
            "max_threads",
            readers,
            f"{readers} reading streams, not {cores} (the cores): an S3 request took {manifest.request_ms:g} ms "
            f"(the quickest S3 call of the listing, >= {LATENT_REQUEST_MS:g} ms), "
            "so each stream waits on S3 most of the time "
            f"and more streams over {manifest.file_count} Parquet files hide the latency (docs/benchmarks.md)",
        )

    put(
        "insert_deduplicate",
        0,
        "an INSERT ... SELECT from object storage needs no insert deduplication (the guide); "
        "retries stay safe without it: a retry attaches to an earlier try and loads go through a staging table "
        "(docs/retries-and-modes.md)",
    )
    put("optimize_on_insert", 0, "skip merging at insert time, background merges do it later (the guide)")

    if budget.per_node < LOW_MEMORY_BYTES:
        put(
            "max_insert_delayed_streams_for_parallel_write",
            LOW_MEMORY_DELAYED_STREAMS,
            f"per-node budget {fmt_bytes(budget.per_node)} < "
            f"{fmt_bytes(LOW_MEMORY_BYTES)}; the guide advises lowering it in low-memory cases",
        )
    if nodes == 1 and profile.table.is_distributed:
        put(
            "distributed_foreground_insert",
            1,
            "1: a single-node load into a Distributed table sends each shard its rows before the task ends, "
            "so the rows are in the shards and the figures are final when the task succeeds",
        )
    if nodes > 1:
        put(
            "parallel_distributed_insert_select",
            2,
            "2: each node inserts the files it reads into its local table, not through the initiator (the guide)",
        )

    workload, source = chosen_workload(request, profile)
    if workload:
        put(
            "workload",
            workload,
            f"{source}: the server admits the load once reserve_memory of the workload's memory is free, so loads "
            "wait for their turn instead of running out of memory together (docs/many-loads.md)",
        )
        put(
            "reserve_memory",
            budget.per_node,
            f"the per-node memory budget {fmt_bytes(budget.per_node)} (= max_memory_usage): the load reserves what "
            f"its cap lets it use, so the max_memory of workload {workload!r} bounds the caps of the loads it runs at "
            "once",
        )

    overrides = apply_overrides(values, reasons, request.settings)
    return InsertSettings(values=values, reasons=reasons, overrides=overrides)


def apply_overrides(
    values: dict[str, SettingValue], reasons: dict[str, str], user: dict[str, SettingValue]
) -> list[str]:
    """Apply the user's settings over the computed ones, in place.

    :param values: computed values; updated.
    :param reasons: computed reasons; updated to "set by the user (planner chose X)".
    :param user: the request's settings.
    :return: the names the user overrode or added, in the user's order.
    """
    overrides: list[str] = []
    for name, value in user.items():
        if name in values:
            reasons[name] = f"set by the user (planner chose {values[name]})"
        else:
            reasons[name] = "set by the user"
        values[name] = value
        overrides.append(name)
    return overrides


def _latent_readers(manifest: Manifest, fmt: str, compression: str | None, cores: int, nodes: int, budget: int) -> int:
    """``max_threads`` for Parquet over S3 with request latency (:data:`LATENT_REQUEST_MS`), or 0 to leave it.

    At most the files per node; only while that many streams of the largest row group
    (x :data:`ROW_GROUP_MEMORY_FACTOR`) take at most half the budget."""
    if fmt.lower() != "parquet" or is_compressed(compression) or manifest.request_ms is None:
        return 0
    if manifest.request_ms < LATENT_REQUEST_MS:
        return 0
    files = -(-manifest.file_count // max(1, nodes))
    readers = min(max(cores, LATENT_READING_THREADS), files)
    if readers <= cores:
        return 0
    if readers * ROW_GROUP_MEMORY_FACTOR * (manifest.max_row_group_bytes or 0) > budget // 2:
        return 0
    return readers


def node_cores(profile: ServerProfile, nodes: int) -> tuple[int, str]:
    """The cores one node has for this load.

    :param profile: the server.
    :param nodes: nodes taking part; above 1 the smallest of ``profile.node_cores`` counts.
    :return: the cores and a note for the reason line.
    """
    if nodes > 1 and profile.node_cores:
        return min(profile.node_cores), f" (the smallest of {len(profile.node_cores)} nodes)"
    return profile.cores, ""


def _threads_reason(cores: int, threads: int, cores_text: str) -> str:
    noun = "core" if cores == 1 else "cores"
    if cores <= 1:
        return f"half of {cores} {noun}{cores_text} rounded down, at least 1"
    if threads > cores // 2:
        return (
            f"half of {cores} {noun}{cores_text} would be {max(1, cores // 2)}, but at least "
            f"{MIN_INSERT_THREADS} insert threads (ClickHouse's own default is one per core; on 2 cores one thread "
            "was slower than two in 11 of 12 benchmark loads, up to 2.4x: docs/benchmarks.md)"
        )
    return f"half of {cores} {noun}{cores_text}, leaving the rest for background merges"


def _user_threads(request: LoadRequest) -> int | None:
    """The user's ``max_insert_threads``, if it is a positive integer: the block is sized for it."""
    value = request.settings.get("max_insert_threads")
    try:
        threads = int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return threads if threads and threads > 0 else None


def _block_error(request: LoadRequest, budget: Budget, threads: int) -> str:
    needed = MIN_BLOCK_BYTES * BLOCK_MEMORY_FACTOR * threads
    cap = f"memory_cap={request.memory_cap} gives" if request.memory_cap is not None else "the budget is"
    return (
        f"{cap} {fmt_bytes(budget.per_node)} per node, so min_insert_block_size_bytes = budget / "
        f"({BLOCK_MEMORY_FACTOR} x {threads} threads) would be below the minimum {fmt_bytes(MIN_BLOCK_BYTES)}; "
        f"raise memory_cap to at least {fmt_bytes(needed)} per node or lower max_insert_threads in settings"
    )

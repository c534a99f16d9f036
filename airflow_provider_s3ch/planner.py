"""Pure load planning: strategy, insert settings and pre-flight checks.

:func:`make_plan` turns a validated :class:`~airflow_provider_s3ch.models.LoadRequest`,
the :class:`~airflow_provider_s3ch.models.Manifest` of the objects to load and the
:class:`~airflow_provider_s3ch.models.ServerProfile` of the ClickHouse side into a
:class:`~airflow_provider_s3ch.models.LoadPlan`. No I/O, no network, no Airflow objects
beyond the error classes: every decision is a function of its arguments, so every
decision can be unit-tested.

The rules follow ClickHouse's guide "Optimizing for S3 Insert and Read Performance"
(``max_insert_threads`` about half the cores, ``min_insert_block_size_bytes =
budget / (3 x threads)``, ``min_insert_block_size_rows = 0``, 50 MiB download buffers
for files one thread should read whole, ``s3Cluster`` with
``parallel_distributed_insert_select = 2`` when there are more files than nodes,
``insert_deduplicate = 0`` and ``optimize_on_insert = 0``), plus rules of our own, from
the benchmark (``make bench``, docs/benchmarks.md): at least two insert threads
(:func:`insert_threads`), the insert block also sized by the data (:func:`block_size`, with
Parquet's uncompressed size from its footers when the manifest has it), and fewer threads
when the budget cannot hold the largest Parquet row group per thread (:func:`row_group_threads`).
"""

from __future__ import annotations

from typing import NamedTuple

from airflow_provider_s3ch.errors import PlanError, RegionMismatchError
from airflow_provider_s3ch.models import (
    Check,
    InsertSettings,
    LoadPlan,
    LoadRequest,
    Manifest,
    ServerProfile,
    SettingValue,
    TableInfo,
)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

#: Share of the server's memory a load may use when the task gives no ``memory_cap``.
#: The guide says: all RAM for an isolated ingest, half or less to leave room for
#: other concurrent work. A scheduled load shares its server, so: half.
DEFAULT_MEMORY_SHARE = 0.5

#: Per-node budget when the server's memory is unknown (``ServerProfile.memory_bytes == 0``)
#: and no ``memory_cap`` is given. Small enough for any production server; the plan
#: warns and asks for a ``memory_cap``.
FALLBACK_BUDGET_BYTES = 4 * GiB

#: Below this per-node budget a load is refused: ClickHouse needs memory for reading,
#: parsing and sorting besides the insert blocks.
MIN_BUDGET_BYTES = 64 * MiB

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

#: Under this per-node budget, ``max_insert_delayed_streams_for_parallel_write`` is lowered.
LOW_MEMORY_BYTES = 2 * GiB

#: The lowered ``max_insert_delayed_streams_for_parallel_write`` (ClickHouse's default for
#: S3-backed storage is about 100 streams, each holding a write buffer).
LOW_MEMORY_DELAYED_STREAMS = 8

#: Formats whose rows carry no column names: without ``structure`` the columns are named
#: ``c1, c2, ...`` and matched to the table by position.
NAMELESS_FORMATS = frozenset(
    name.lower()
    for name in (
        "CSV",
        "TSV",
        "TabSeparated",
        "TSVRaw",
        "TabSeparatedRaw",
        "JSONCompactEachRow",
        "JSONCompactStringsEachRow",
        "CustomSeparated",
        "Values",
        "RowBinary",
        "Template",
        "Regexp",
    )
)

_NO_COMPRESSION = {"", "none", "auto"}


class Budget(NamedTuple):
    """The per-node memory budget and why."""

    per_node: int
    reason: str
    warning: str | None = None


class StrategyChoice(NamedTuple):
    """The chosen strategy and why."""

    name: str
    reason: str


def fmt_bytes(n: float) -> str:
    """Format a byte count for a reason line: ``"2.67 GiB"``, ``"256 MiB"``.

    :param n: bytes.
    :return: a short human-readable size (binary units).
    """
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{int(n)} B"


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


def is_compressed(compression: str | None) -> bool:
    """Whether ``compression`` names an actual compression method.

    :param compression: a compression name, ``"none"``, ``"auto"`` or None.
    """
    return (compression or "").strip().lower() not in _NO_COMPRESSION


def block_size(budget: int, threads: int, data_bytes: int) -> tuple[int, str]:
    """``min_insert_block_size_bytes``: the guide's memory formula, capped by the data.

    formula = ``budget // (BLOCK_MEMORY_FACTOR x threads)`` (the guide);
    data cap = ``max(MIN_DATA_BLOCK_BYTES, data_bytes // (threads x MIN_BLOCKS_PER_THREAD))``,
    so a thread writes several blocks and its reads and writes overlap, and the cap never
    goes below :data:`MIN_DATA_BLOCK_BYTES`. The block is ``min(formula, data cap)``: large
    loads get the guide's formula, small and medium ones blocks sized by their data.

    :param budget: per-node memory budget in bytes.
    :param threads: insert threads per node.
    :param data_bytes: estimated uncompressed bytes one node will insert.
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
    if formula <= data_cap:
        return formula, f"{formula_text} (the guide), under the {cap_text}"
    if per_thread_share <= MIN_DATA_BLOCK_BYTES:
        return data_cap, (
            f"the floor {fmt_bytes(MIN_DATA_BLOCK_BYTES)}: ~{fmt_bytes(data_bytes)} uncompressed is too "
            f"little for bigger blocks; the {formula_text} (the guide) would make one huge block per thread, "
            "and reads and writes would no longer overlap"
        )
    return data_cap, (
        f"{cap_text}, so each thread writes several blocks and reads and writes overlap; "
        f"under the {formula_text} (the guide)"
    )


def make_plan(request: LoadRequest, manifest: Manifest, profile: ServerProfile, *, source_url: str) -> LoadPlan:
    """Plan one load: strategy, settings with reasons, checks and warnings.

    :param request: the validated request.
    :param manifest: the objects the glob matched.
    :param profile: the ClickHouse side.
    :param source_url: the object URL with the glob, as ClickHouse will see it.
    :return: the plan.
    :raises PlanError: the memory cap is too small, or ``strategy="distributed"`` cannot run.
    :raises RegionMismatchError: regions differ and ``region_check="fail"``.
    """
    warnings: list[str] = []
    region = region_check(request, manifest, profile)
    if region.status == "warn":
        warnings.append(region.message)

    strategy = choose_strategy(request, manifest, profile)
    distributed = strategy.name == "distributed"
    nodes = profile.node_count if distributed else 1

    budget = memory_budget(request, profile, nodes)
    if budget.warning:
        warnings.append(budget.warning)

    settings = plan_settings(request, manifest, profile, budget, nodes)
    row_group_warning = row_group_check(manifest, budget)
    if row_group_warning:
        warnings.append(row_group_warning)
    fmt = request.format or manifest.format
    structure_warning = structure_check(fmt, request.structure)
    if structure_warning:
        warnings.append(structure_warning)

    return LoadPlan(
        table=request.table,
        source_url=source_url,
        format=fmt,
        compression=request.compression or manifest.compression,
        structure=request.structure,
        strategy="distributed" if distributed else "single",
        strategy_reason=strategy.reason,
        cluster=profile.cluster if distributed else None,
        settings=settings,
        budget_bytes=budget.per_node,
        budget_reason=budget.reason,
        checks=[region, files_vs_nodes_check(manifest, profile, distributed)],
        warnings=warnings,
        manifest=manifest.summary(),
    )


def memory_budget(request: LoadRequest, profile: ServerProfile, nodes: int) -> Budget:
    """The per-node memory budget (what ``max_memory_usage`` enforces).

    A ``memory_cap`` is for the whole load: each of ``nodes`` nodes gets ``cap // nodes``.
    Without a cap each node gets :data:`DEFAULT_MEMORY_SHARE` of the server's memory, or
    :data:`FALLBACK_BUDGET_BYTES` (with a warning) when that memory is unknown.

    :param request: the request (its ``memory_cap``).
    :param profile: the server (its ``memory_bytes``).
    :param nodes: nodes taking part in the load (1 for a single-node load).
    :return: the budget and its reason.
    :raises PlanError: the per-node budget is below :data:`MIN_BUDGET_BYTES`.
    """
    warning = None
    if request.memory_cap is not None:
        per_node = request.memory_cap // nodes
        if nodes > 1:
            reason = (
                f"memory_cap {fmt_bytes(request.memory_cap)} for the whole load / {nodes} nodes "
                f"= {fmt_bytes(per_node)} (per-node share of the cap)"
            )
        else:
            reason = f"memory_cap {fmt_bytes(request.memory_cap)}"
    elif profile.memory_bytes > 0:
        per_node = int(profile.memory_bytes * DEFAULT_MEMORY_SHARE)
        reason = (
            f"{DEFAULT_MEMORY_SHARE:g} of the server's {fmt_bytes(profile.memory_bytes)} "
            f"({profile.memory_source}) = {fmt_bytes(per_node)}"
            f"{' per node' if nodes > 1 else ''}, leaving room for other work (no memory_cap given)"
        )
    else:
        per_node = FALLBACK_BUDGET_BYTES
        reason = f"fallback {fmt_bytes(FALLBACK_BUDGET_BYTES)}: the server's memory is unknown and no memory_cap given"
        warning = (
            f"the server's memory is unknown: the load uses a fallback budget of {fmt_bytes(FALLBACK_BUDGET_BYTES)}"
            f"{' per node' if nodes > 1 else ''}; set memory_cap to size it yourself"
        )
    if per_node < MIN_BUDGET_BYTES:
        raise PlanError(_budget_error(request, profile, nodes, per_node))
    return Budget(per_node, reason, warning)


def _budget_error(request: LoadRequest, profile: ServerProfile, nodes: int, per_node: int) -> str:
    if request.memory_cap is None:
        return (
            f"the server's memory ({fmt_bytes(profile.memory_bytes)}) gives a budget of {fmt_bytes(per_node)}, "
            f"below the minimum {fmt_bytes(MIN_BUDGET_BYTES)}; set memory_cap to at least "
            f"{fmt_bytes(MIN_BUDGET_BYTES * nodes)}"
        )
    share = f" ({fmt_bytes(per_node)} per node over {nodes} nodes)" if nodes > 1 else ""
    return (
        f"memory_cap={request.memory_cap} ({fmt_bytes(request.memory_cap)}){share} is below the minimum "
        f"{fmt_bytes(MIN_BUDGET_BYTES)} per node; raise memory_cap to at least "
        f"{fmt_bytes(MIN_BUDGET_BYTES * nodes)} or leave it unset to use "
        f"{DEFAULT_MEMORY_SHARE:g} of the server's memory"
    )


def plan_settings(
    request: LoadRequest, manifest: Manifest, profile: ServerProfile, budget: Budget, nodes: int
) -> InsertSettings:
    """The insert settings, each with a one-line reason, then the user's overrides.

    :param request: the request (its ``settings`` override anything computed).
    :param manifest: the objects (sizes, format, compression).
    :param profile: the server (cores, per-node cores).
    :param budget: the per-node memory budget.
    :param nodes: nodes taking part (1 for a single-node load).
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
    if manifest.uncompressed_bytes:
        data_bytes = manifest.uncompressed_bytes // nodes
        estimate = (
            f"; data {fmt_bytes(manifest.total_bytes)} {fmt}, {fmt_bytes(manifest.uncompressed_bytes)} uncompressed "
            f"(from {manifest.footer_files} Parquet footer{'s' if manifest.footer_files != 1 else ''}){per_nodes}"
        )
    else:
        factor = expansion_factor(fmt, compression)
        data_bytes = int(manifest.total_bytes * factor) // nodes
        estimate = (
            f"; data ~{fmt_bytes(manifest.total_bytes)} {fmt}"
            f"{' ' + compression if is_compressed(compression) else ''} x {factor:g}{per_nodes}"
        )
    block, block_reason = block_size(budget.per_node, threads, data_bytes)
    if block < MIN_BLOCK_BYTES and "min_insert_block_size_bytes" not in request.settings:
        raise PlanError(_block_error(request, budget, threads))
    put("min_insert_block_size_bytes", block, block_reason + estimate)
    put("min_insert_block_size_rows", 0, "0 disables the row threshold so the bytes threshold governs (the guide)")

    median = manifest.summary()["median_file_bytes"]
    if manifest.file_count >= threads and median <= SMALL_FILE_BYTES:
        put(
            "max_download_buffer_size",
            LARGE_DOWNLOAD_BUFFER_BYTES,
            f"50 MiB (the guide): {manifest.file_count} files for {threads} threads, median file "
            f"{fmt_bytes(median)} <= {fmt_bytes(SMALL_FILE_BYTES)}, so each file is downloaded whole by one "
            "thread with fewer S3 calls",
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
            f"{LOW_MEMORY_DELAYED_STREAMS}: per-node budget {fmt_bytes(budget.per_node)} < "
            f"{fmt_bytes(LOW_MEMORY_BYTES)}; the guide advises lowering it in low-memory cases",
        )
    if nodes == 1 and profile.table is not None and profile.table.is_distributed:
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
            f"{threads}: half of {cores} {noun}{cores_text} would be {max(1, cores // 2)}, but at least "
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


def choose_strategy(request: LoadRequest, manifest: Manifest, profile: ServerProfile) -> StrategyChoice:
    """Single node or ``s3Cluster`` with ``parallel_distributed_insert_select = 2``.

    :param request: the request (its ``strategy``: auto, single or distributed).
    :param manifest: the objects (their count).
    :param profile: the server (cluster, nodes, target table).
    :return: the strategy and why.
    :raises PlanError: ``strategy="distributed"`` but the cluster or the table cannot take it.
    """
    possible, why = distributed_possible(profile)
    files, nodes = manifest.file_count, profile.node_count
    if request.strategy == "single":
        return StrategyChoice("single", "strategy='single' requested")
    if request.strategy == "distributed":
        if not possible:
            raise PlanError(
                f"strategy='distributed' cannot run: {why}; use strategy='auto' or 'single', "
                "or target a Distributed table over a MergeTree table (or a Replicated/Shared MergeTree "
                "table) on a cluster of several nodes"
            )
        return StrategyChoice("distributed", f"strategy='distributed' requested; {why}")
    if not possible:
        return StrategyChoice("single", f"single node: {why}")
    if files <= nodes:
        return StrategyChoice(
            "single",
            f"{files} file{'s' if files != 1 else ''} for {nodes} nodes: s3Cluster splits work per file, "
            "so more files than nodes are needed",
        )
    return StrategyChoice("distributed", f"{files} files for {nodes} nodes on cluster '{profile.cluster}'; {why}")


def distributed_possible(profile: ServerProfile) -> tuple[bool, str]:
    """Whether the cluster and the target table can take a parallel distributed insert.

    ``parallel_distributed_insert_select = 2`` needs a Distributed target over a
    MergeTree-family table on the same cluster, or a Replicated*/Shared* MergeTree target
    (then each node inserts into its own replica). Plain MergeTree cannot.

    :param profile: the server.
    :return: (possible, why) -- why explains either way.
    """
    if not profile.cluster:
        return False, "no cluster is configured"
    if profile.node_count <= 1:
        return False, f"cluster '{profile.cluster}' has {profile.node_count} node"
    table = profile.table
    if table is None:
        return False, "the target table's engine is unknown"
    return _table_can_take_parallel_insert(table, profile.cluster)


def _table_can_take_parallel_insert(table: TableInfo, cluster: str) -> tuple[bool, str]:
    name = f"{table.database}.{table.name}"
    if table.is_distributed:
        local = table.local_engine or ""
        if not local.endswith("MergeTree"):
            engine = f"engine {local}" if local else "an unknown engine"
            return False, f"Distributed table {name} points at a table with {engine}, not a MergeTree"
        if table.dist_cluster and table.dist_cluster != cluster:
            return False, (
                f"Distributed table {name} is on cluster '{table.dist_cluster}', not '{cluster}': "
                "the parallel insert needs the same cluster"
            )
        return True, f"Distributed table {name} over {local} takes a parallel distributed insert"
    if table.is_replicated and table.engine.endswith("MergeTree"):
        return True, f"{table.engine} table {name}: each node inserts into its own replica"
    return False, (
        f"table {name} is {table.engine}, not Distributed or Replicated/Shared MergeTree: "
        "parallel_distributed_insert_select needs a Distributed target or replicated storage"
    )


def region_check(request: LoadRequest, manifest: Manifest, profile: ServerProfile) -> Check:
    """Compare the bucket's region with the server's, under ``request.region_check``.

    :param request: the request (its ``region_check``: warn, fail or off).
    :param manifest: the objects (the bucket's region).
    :param profile: the server (its region, from the connection extra ``region``).
    :return: the check; status warn carries the warning text.
    :raises RegionMismatchError: the regions differ and the policy is ``fail``.
    """
    if request.region_check == "off":
        return Check(name="region", status="skipped", message="region_check='off'")
    if profile.region is None:
        return Check(
            name="region",
            status="skipped",
            message="ClickHouse's region is unknown; set the connection extra 'region' to enable this check",
        )
    if manifest.region is None:
        return Check(name="region", status="skipped", message=f"bucket '{manifest.bucket}' region is unknown")
    if manifest.region.strip().lower() == profile.region.strip().lower():
        return Check(name="region", status="ok", message=f"bucket and ClickHouse are both in {profile.region}")
    message = (
        f"bucket '{manifest.bucket}' is in {manifest.region} but ClickHouse is in {profile.region}: "
        "cross-region reads are slower and cost egress; move the data or set region_check='off'"
    )
    if request.region_check == "fail":
        raise RegionMismatchError(message)
    return Check(name="region", status="warn", message=message)


def files_vs_nodes_check(manifest: Manifest, profile: ServerProfile, distributed: bool) -> Check:
    """The file count against the node count: s3Cluster hands out whole files.

    :param manifest: the objects.
    :param profile: the server.
    :param distributed: whether the plan is distributed.
    :return: ok, warn (distributed with fewer files than nodes) or skipped (one node).
    """
    files, nodes = manifest.file_count, profile.node_count
    if not profile.cluster or nodes <= 1:
        return Check(name="files_vs_nodes", status="skipped", message="single node: no cluster to spread files over")
    if not distributed:
        return Check(
            name="files_vs_nodes",
            status="ok",
            message=f"{files} files, {nodes} nodes: the load runs on one node",
        )
    if files < nodes:
        return Check(
            name="files_vs_nodes",
            status="warn",
            message=(
                f"{files} files for {nodes} nodes: s3Cluster splits work per file, so "
                f"{nodes - files} node(s) will be idle; strategy='auto' would run on one node"
            ),
        )
    return Check(name="files_vs_nodes", status="ok", message=f"{files} files for {nodes} nodes")


def row_group_check(manifest: Manifest, budget: Budget) -> str | None:
    """Warn when even one thread reading the largest Parquet row group would exceed the budget.

    ClickHouse reads a row group's column chunks whole; no setting makes that smaller, so a
    cap below ~:data:`ROW_GROUP_MEMORY_FACTOR` x the largest row group stops the load with
    MEMORY_LIMIT_EXCEEDED (the cap holds: ``max_memory_usage`` enforces it).

    :param manifest: the objects (``max_row_group_bytes`` from the footers, if read).
    :param budget: the per-node memory budget.
    :return: a warning, or None.
    """
    group = manifest.max_row_group_bytes
    if not group or budget.per_node >= ROW_GROUP_MEMORY_FACTOR * group:
        return None
    return (
        f"the largest Parquet row group is {fmt_bytes(group)} uncompressed (footers); reading it takes "
        f"~{ROW_GROUP_MEMORY_FACTOR}x that, ~{fmt_bytes(ROW_GROUP_MEMORY_FACTOR * group)}, above the per-node budget "
        f"{fmt_bytes(budget.per_node)}: the load will likely stop with MEMORY_LIMIT_EXCEEDED; raise memory_cap or "
        "write the files with smaller row groups"
    )


def structure_check(fmt: str, structure: str | None) -> str | None:
    """Warn when the format has no column names and no ``structure`` is given.

    :param fmt: the ClickHouse format name.
    :param structure: the request's structure.
    :return: a warning, or None.
    """
    if structure is None and fmt.lower() in NAMELESS_FORMATS:
        return (
            f"format {fmt} carries no column names: columns are matched to the table by position; "
            f"give structure='col Type, ...' or use a format with names (e.g. {fmt}WithNames where it exists)"
        )
    return None

"""Pure load planning: strategy, insert settings and pre-flight checks.

:func:`make_plan` turns a validated :class:`~airflow_provider_s3ch.core.models.LoadRequest`,
the :class:`~airflow_provider_s3ch.core.models.Manifest` of the objects to load and the
:class:`~airflow_provider_s3ch.core.server_models.ServerProfile` of the ClickHouse side into a
:class:`~airflow_provider_s3ch.core.models.LoadPlan`. No I/O, no network, no Airflow objects
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

from airflow_provider_s3ch.core.history import Learned, TagFacts
from airflow_provider_s3ch.core.history import tag as history_tag
from airflow_provider_s3ch.core.models import Check, LoadPlan, LoadRequest, Manifest
from airflow_provider_s3ch.core.plan.budget import (
    DEFAULT_MEMORY_SHARE,
    FALLBACK_BUDGET_BYTES,
    MIN_BUDGET_BYTES,
    Budget,
    memory_budget,
)
from airflow_provider_s3ch.core.plan.checks import (
    files_vs_nodes_check,
    region_check,
    row_group_check,
    structure_check,
    workload_check,
)
from airflow_provider_s3ch.core.plan.memory import PEAK_BAND, PEAK_FIT_MARGIN, PeakEstimate, fit_block, predict_peak
from airflow_provider_s3ch.core.plan.settings import (
    BLOCK_MEMORY_FACTOR,
    COMPRESSED_EXPANSION,
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BUFFER_FORMATS,
    LARGE_DOWNLOAD_BUFFER_BYTES,
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
    apply_overrides,
    block_size,
    data_estimate,
    expansion_factor,
    insert_threads,
    node_cores,
    plan_settings,
    row_group_threads,
)
from airflow_provider_s3ch.core.plan.strategy import StrategyChoice, choose_strategy, distributed_possible
from airflow_provider_s3ch.core.plan.workload import WorkloadLimit, chosen_workload, workload_limit
from airflow_provider_s3ch.core.server_models import ServerProfile
from airflow_provider_s3ch.core.setting_types import setting_int
from airflow_provider_s3ch.core.sizes import GiB, KiB, MiB, fmt_bytes

__all__ = [
    "BLOCK_MEMORY_FACTOR", "COMPRESSED_EXPANSION", "DEFAULT_BLOCK_BYTES", "DEFAULT_BUFFER_FORMATS",
    "DEFAULT_MEMORY_SHARE",
    "FALLBACK_BUDGET_BYTES", "LARGE_DOWNLOAD_BUFFER_BYTES", "LOW_MEMORY_BYTES", "LOW_MEMORY_DELAYED_STREAMS",
    "MIN_BLOCKS_PER_THREAD", "MIN_BLOCK_BYTES", "MIN_BUDGET_BYTES", "MIN_DATA_BLOCK_BYTES", "MIN_INSERT_THREADS",
    "PLAIN_EXPANSION", "ROW_GROUP_MEMORY_FACTOR", "SELF_COMPRESSED_EXPANSION", "SMALL_FILE_BYTES",
    "Budget", "GiB", "KiB", "MiB", "StrategyChoice", "apply_overrides", "block_size", "choose_strategy",
    "distributed_possible", "expansion_factor", "files_vs_nodes_check", "fmt_bytes", "insert_threads",
    "make_plan", "memory_budget", "PEAK_BAND", "PEAK_FIT_MARGIN", "PeakEstimate", "fit_block", "data_estimate",
    "peak_estimate", "predict_peak",
    "with_prediction", "node_cores", "plan_settings", "region_check", "row_group_check",
    "row_group_threads", "structure_check", "WorkloadLimit", "chosen_workload", "workload_check", "workload_limit",
]  # fmt: skip


def make_plan(
    request: LoadRequest, manifest: Manifest, profile: ServerProfile, *, source_url: str, learned: Learned | None = None
) -> LoadPlan:
    """Plan one load: strategy, settings with reasons, checks and warnings.

    :param request: the validated request.
    :param manifest: the objects the glob matched.
    :param profile: the ClickHouse side.
    :param source_url: the object URL with the glob, as ClickHouse will see it.
    :param learned: what the target's earlier loads of the same files say (:func:`~airflow_provider_s3ch.core.
        history.learn`): the learned expansion sizes the data, the learned scale the predicted peak.
    :return: the plan.
    :raises PlanError: the memory cap is too small, or ``strategy="distributed"`` cannot run.
    :raises RegionMismatchError: regions differ and ``region_check="fail"``.
    :raises PlanError: the load's workload is not set up on the server, or its reservation cannot fit
        the workload's ``max_memory`` (:func:`workload_check`).
    """
    warnings: list[str] = []
    region = region_check(request, manifest, profile, source_url)
    if region.status == "warn":
        warnings.append(region.message)

    strategy = choose_strategy(request, manifest, profile)
    distributed = strategy.name == "distributed"
    nodes = profile.node_count if distributed else 1

    budget = memory_budget(request, profile, nodes)
    if budget.warning:
        warnings.append(budget.warning)

    learned = learned.for_cap(budget.per_node) if learned is not None and learned.loads else None
    expansion = learned.expansion if learned is not None else None
    # The partitions a block spans are reckoned for one node's insert into a table it holds: a Distributed
    # table's key is its shards', and s3Cluster spreads the files over the nodes.
    partition_key = None if distributed or profile.table.is_distributed else profile.table.partition_key
    settings = plan_settings(request, manifest, profile, budget, nodes, expansion=expansion,
                             partition_key=partition_key)
    fmt = request.format or manifest.format
    # The model alone fits the block: what earlier loads measured beyond it starts the load from their step down.
    settings = fit_block(settings, manifest, cores=node_cores(profile, nodes)[0], fmt=fmt,
                         compression=request.compression or manifest.compression, nodes=nodes, expansion=expansion)
    row_group_warning = row_group_check(manifest, budget)
    if row_group_warning:
        warnings.append(row_group_warning)
    structure_warning = structure_check(fmt, request.structure)
    if structure_warning:
        warnings.append(structure_warning)
    workload = workload_check(request, profile, settings, budget, distributed)
    if workload.status == "warn":
        warnings.append(workload.message)

    plan = LoadPlan(
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
        checks=[region, files_vs_nodes_check(manifest, profile, distributed), workload,
                Check(name="credentials", status="ok", message=request.access.describe())],
        warnings=warnings,
        manifest=manifest.summary(),
        history=learned.summary() if learned is not None else None,
        access=None if request.access.sends_keys else request.access,
    )
    return with_prediction(plan, manifest, profile)


def peak_estimate(plan: LoadPlan, manifest: Manifest, profile: ServerProfile) -> PeakEstimate:
    """The predicted peak memory of one node's insert with ``plan``'s settings as they are now."""
    nodes = profile.node_count if plan.strategy == "distributed" else 1
    cores, _ = node_cores(profile, nodes)
    history = plan.history or {}
    return predict_peak(plan.settings.values, manifest, cores=cores, fmt=plan.format, compression=plan.compression,
                        nodes=nodes, scale=history.get("memory_scale") or 1.0, expansion=history.get("expansion"))


def with_prediction(plan: LoadPlan, manifest: Manifest, profile: ServerProfile, *, tag: str | None = None,
                    step: str = "plan") -> LoadPlan:
    """``plan`` with its predicted peak memory for its settings as they are now (after a step down too) and,
    given the history key ``tag`` (None: the load does not learn from history) unless the user set one, the
    ``log_comment`` tag later loads learn from (:func:`~airflow_provider_s3ch.core.history.tag`).

    :param step: the memory step the settings are (``plan``, ``halve``, …).
    """
    estimate = peak_estimate(plan, manifest, profile)
    plan = plan.model_copy(update={"predicted_peak_bytes": estimate.bytes, "predicted_peak_reason": estimate.reason})
    if tag is None or "log_comment" in plan.settings.overrides:
        return plan
    facts = TagFacts(file_bytes=manifest.total_bytes, model_bytes=estimate.model_bytes,
                     cap=setting_int(plan.settings.values.get("max_memory_usage"), 0), step=step)
    values = {**plan.settings.values, "log_comment": history_tag(tag, facts)}
    reasons = {**plan.settings.reasons, "log_comment": "tags the insert for later loads of this target and "
               "files to learn from (learn_from_history, docs/tuning.md)"}
    return plan.model_copy(update={"settings": plan.settings.model_copy(update={"values": values,
                                                                                "reasons": reasons})})

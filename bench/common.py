"""What the bench's sections share: the bucket and database, a run's :class:`Config`, the operator's plan
for a dataset (:class:`Planned`, :func:`planned_for`) and a load through the operator (:func:`run_operator`).

``bench.run`` (the entry point) imports the sections and they import these from here, never from ``bench.run``:
no import circle between the bench's modules (tests/unit/test_no_import_cycles.py).
"""

from __future__ import annotations

import logging
import time
import types
import uuid
from dataclasses import dataclass, field
from typing import Any

from bench.datasets import Dataset, DatasetSpec
from bench.measure import flush_and_fetch, new_table, summarize, wait_ready

#: The end-to-end section's 100 MB datasets (``make bench``; ``bench.around`` measures the time around their insert).
E2E_DATASETS = (
    DatasetSpec("e2e_parquet_20", "parquet", 400_000, 20, "end to end: 20 Parquet files (~5.4 MB each)"),
    DatasetSpec("e2e_csvgz_10", "csv.gz", 400_000, 10, "end to end: 10 gzip'd CSV files (~9 MB each)"),
)

BUCKET = "s3ch-bench"
DATABASE = "bench"


@dataclass
class Config:
    """What one run of the benchmark does."""

    mode: str
    pool_rows_per_month: int
    datasets: list[DatasetSpec]
    repeats: int
    grid_threads: list[int]
    grid_blocks: list[int]
    caps: list[str]
    overhead_counts: list[int]
    ready_timeout_s: float
    plan_timing_loops: int = 200
    #: The dataset the chunking figures load (one load vs 10 and 40 chunks), and how often.
    chunk_dataset: str = "parquet_many_small"
    chunk_repeats: int = 2
    #: End to end, each load a fresh process (bench/end_to_end.py): ~100 MB as 20 Parquet / 10 gzip'd CSV files.
    e2e_datasets: list[DatasetSpec] = field(default_factory=list)
    e2e_repeats: int = 3
    #: Rounds of the latency section (bench/latency.py), on the end-to-end datasets.
    latency_repeats: int = 2
    #: The memory cap of the history section's capped case (bench/history_bench.py).
    history_cap: str = "1GiB"


def fake_context(run_id: str) -> dict[str, Any]:
    """The part of an Airflow context the operator reads."""
    ti = types.SimpleNamespace(dag_id="bench", task_id="load", run_id=run_id, map_index=-1, try_number=1)
    return {"ti": ti}


# ----------------------------------------------------------------------------------- the plan


class Planned:
    """The operator's plan for one dataset, built the way the operator builds it."""

    def __init__(self, stack: Any, ds: Dataset, probe_table: str, memory_cap: str | None = None,
                 endpoint: str | None = None) -> None:
        from airflow_provider_s3ch.core.glob import object_url
        from airflow_provider_s3ch.core.models import LoadRequest, S3Credentials
        from airflow_provider_s3ch.core.plan import make_plan
        from airflow_provider_s3ch.core.sql import render_source
        from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
        from airflow_provider_s3ch.hooks.s3 import build_manifest
        from airflow_provider_s3ch.hooks.server import get_profile
        from airflow_provider_s3ch.load.target import Listed, Target

        self.request = LoadRequest(s3_uri=ds.s3_uri, table=f"{DATABASE}.{probe_table}", memory_cap=memory_cap)
        s3 = stack.s3_client()
        if endpoint is not None:  # e.g. the S3-like proxy's: the plan sees the latency ClickHouse will
            import boto3

            s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=stack.s3_access_key,
                              aws_secret_access_key=stack.s3_secret_key, region_name=stack.region)
        self.manifest = build_manifest(s3, self.request)
        hook = ClickHouseHook()
        self.profile = get_profile(hook, self.request.table)
        url = object_url(ds.bucket, self.request.key_pattern, endpoint_url=endpoint or stack.s3_endpoint,
                         region=self.manifest.region)
        self.plan = make_plan(self.request, self.manifest, self.profile, source_url=url)
        self.credentials = S3Credentials(access_key_id=stack.s3_access_key, secret_access_key=stack.s3_secret_key)
        # A text load's sample of its rows for the block rule, as the operator's target phase reads it.
        started = time.monotonic()
        window = Target(hook, self.request, None, logging.getLogger("bench")).key_sample(
            Listed(self.manifest, url, self.credentials, None, s3), self.plan, self.profile)
        #: What the sample took (the first MiB's GET, the table's columns, the engine's read); None: none taken.
        self.sample_s = round(time.monotonic() - started, 3) if window is not None else None
        if window is not None:
            self.manifest = self.manifest.model_copy(update={"key_window": window})
            self.plan = make_plan(self.request, self.manifest, self.profile, source_url=url)
        self.source = render_source(self.plan, self.credentials)
        self.settings = dict(self.plan.settings.values)

    def file_source(self, ds: Dataset) -> str:
        from airflow_provider_s3ch.core.sql import quote_literal

        return f"file({quote_literal(ds.local_glob)}, {quote_literal(self.plan.format)})"

    def guide_settings(self) -> dict[str, Any]:
        """The guide's formula as written: half the cores, budget / (3 x threads), rows threshold off."""
        threads = max(1, self.profile.cores // 2)
        return {
            "max_insert_threads": threads,
            "min_insert_block_size_bytes": self.plan.budget_bytes // (3 * threads),
            "min_insert_block_size_rows": 0,
        }


def run_operator(stack: Any, client: Any, ds: Dataset, table: str, cfg: Config, memory_cap: str | None = None,
                 ready: bool = True, settings: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """Variant (c): ``S3ToClickHouseOperator(...).execute(context)``; its figures from query_log.

    :param options: more of the operator's arguments (e.g. ``compact_parts=True``)."""
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

    op = S3ToClickHouseOperator(
        task_id="load", s3_uri=ds.s3_uri, table=f"{DATABASE}.{table}", memory_cap=memory_cap,
        settings=settings or None, **options,
    )
    context = fake_context(f"bench-{uuid.uuid4().hex[:10]}")
    query_id = str(op.query_id(context))
    error, result = None, {}
    started = time.monotonic()
    try:
        result = op.execute(context)
    except Exception as exc:  # noqa: BLE001 - a failed load is a result
        error = f"{type(exc).__name__}: {str(exc).split('Stack trace:')[0].strip()[:400]}"
    task_wall = time.monotonic() - started
    entry = flush_and_fetch(client, query_id)
    out = summarize(entry, query_id, result.get("settings") or entry.get("Settings", {}), error, None)
    out["task_wall_s"] = round(task_wall, 3)
    out["operator_wall_ms"] = result.get("wall_ms")
    out["predicted_memory_usage"] = result.get("predicted_memory_usage")
    out["operator_overhead_s"] = round(result["wall_ms"] / 1000 - result["duration_ms"] / 1000, 3) if result else None
    out["settings"] = result.get("settings", {})
    out["settings_reasons"] = result.get("settings_reasons", {})
    out["phases_ms"] = result.get("phases_ms")
    out["memory_steps"] = [a.get("step") for a in result.get("memory_attempts") or []]
    if ready and out["ok"]:
        out.update(wait_ready(client, DATABASE, table, cfg.ready_timeout_s))
    return out


def planned_for(stack: Any, ds: Dataset, endpoint: str | None = None) -> Planned:
    """The operator's plan for ``ds``, against a probe table of the posts' shape (dropped after), reading S3
    at ``endpoint`` (default: the stack's S3 server)."""
    from airflow_provider_s3ch.local.sample import posts_ddl

    client = stack.clickhouse_client()
    probe = new_table(client, DATABASE, posts_ddl, f"{ds.spec.name}_probe")
    try:
        return Planned(stack, ds, probe, endpoint=endpoint)
    finally:
        client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")

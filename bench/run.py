"""The benchmark: ``python -m bench.run [--quick] [--out bench/results]`` (``make bench``).

On the real local stack (:class:`~airflow_provider_s3ch.local.LocalStack`: chdb-core ClickHouse
serving the native protocol, moto's S3 server on loopback) it loads datasets of several shapes
with five variants side by side:

(a) ClickHouse's defaults; (b) the guide's formula as written; (c) the operator's plan, run
through ``S3ToClickHouseOperator.execute``; (d) the best point of a small grid of
``max_insert_threads`` x ``min_insert_block_size_bytes``; (e) the same files from local disk
with ``file()`` (the engine-bound limit, no S3).

Then the listing/planning overhead for 10 000 and 100 000 objects, and the operator's plan
under memory caps. Writes ``results.json`` and ``REPORT.md`` with PNG plots to ``--out``.
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

# The operator logs each setting with its reason on every run: keep the bench's output short.
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from bench.common import BUCKET, DATABASE, E2E_DATASETS, Config, Planned, fake_context, planned_for, run_operator
from bench.datasets import Dataset, DatasetSpec, RowPool, node_files_dir, write_dataset
from bench.end_to_end import bench_end_to_end
from bench.latency import bench_latency
from bench.measure import new_table, run_sql_insert, wait_ready

LIST_BUCKET = "s3ch-bench-list"
MiB = 1024 * 1024
GiB = 1024 * MiB

# BUCKET, DATABASE, Config, Planned, planned_for, run_operator, fake_context: bench/common.py, which the
# sections (latency, large, history_bench) import too; nothing in bench/ imports this module.


def full_config() -> Config:
    # Sizes chosen so that `make bench` takes ~10 min on 2 cores (~260 bytes of Parquet per row).
    return Config(
        mode="full",
        pool_rows_per_month=40_000,
        datasets=[
            DatasetSpec("parquet_few_large", "parquet", 900_000, 3, "few large files (3 x ~77 MB, one row group each)"),
            DatasetSpec("parquet_many_small", "parquet", 400_000, 400, "many small files (400 x ~260 KB)"),
            DatasetSpec("csvgz_few_large", "csv.gz", 400_000, 4, "few large files (4 x ~23 MB gz, ~85 MB CSV)"),
            DatasetSpec("csvgz_many_small", "csv.gz", 400_000, 200, "many small files (200 x ~470 KB gz)"),
        ],
        repeats=3,
        grid_threads=[1, 2, 4],
        # 1 GiB blocks were never the best point of a dataset in earlier runs (docs/benchmarks.md); the
        # guide's own huge blocks stay measured as variant (b). Dropping them keeps `make bench` under 15 min.
        grid_blocks=[64 * MiB, 256 * MiB],
        caps=["256MiB", "1GiB", "4GiB"],
        # 100 000 objects (3.4-4.2 min, mostly moto's own listing) only with --large (make bench-large).
        overhead_counts=[10_000],
        ready_timeout_s=20.0,
        e2e_datasets=list(E2E_DATASETS),
        # One round of chunks and of the latency variants, three of end to end (a median of three interleaved
        # runs per variant, at each S3 distance).
        chunk_repeats=1,
        e2e_repeats=3,
        latency_repeats=1,
    )


def quick_config() -> Config:
    return Config(
        mode="quick",
        pool_rows_per_month=2_000,
        datasets=[
            DatasetSpec("parquet_few_large", "parquet", 30_000, 2, "few files (smoke test)"),
            DatasetSpec("csvgz_many_small", "csv.gz", 20_000, 20, "many files (smoke test)"),
        ],
        repeats=1,
        grid_threads=[1, 2],
        grid_blocks=[64 * MiB, 256 * MiB],
        caps=["256MiB", "1GiB"],
        overhead_counts=[1_000, 3_000],
        ready_timeout_s=5.0,
        plan_timing_loops=20,
        chunk_dataset="csvgz_many_small",
        chunk_repeats=1,
        e2e_datasets=[DatasetSpec("e2e_parquet_4", "parquet", 20_000, 4, "end to end (smoke test)")],
        e2e_repeats=1,
        latency_repeats=1,
    )


# ----------------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def describe_machine(client: Any) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    versions = {}
    for mod in ("moto", "boto3", "clickhouse_driver", "pyarrow", "chdb"):
        try:
            from importlib.metadata import version

            versions[mod] = version("chdb-core" if mod == "chdb" else mod.replace("_", "-"))
        except Exception:  # noqa: BLE001 - informative only
            versions[mod] = "?"
    return {
        "nproc": os.cpu_count(),
        "memory_bytes": mem,
        "cpu_model": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "clickhouse_version": client.execute("SELECT version()")[0][0],
        "clickhouse": "chdb-core engine (clickhouse-local) serving the native protocol on loopback",
        "s3": "moto server on loopback (not AWS S3: no network latency, single-process Python server)",
        "packages": versions,
        "load_average_start": os.getloadavg(),
    }


def quiet_airflow_logs() -> None:
    """The operator logs every setting and reason per run; the bench keeps warnings only."""
    for name in ("airflow", "airflow.task", "airflow.task.operators", "airflow.providers", "botocore", "boto3"):
        logging.getLogger(name).setLevel(logging.WARNING)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread of a variant's runs (failed runs are reported, not averaged)."""
    ok = [r for r in runs if r.get("ok")]
    durations = [r["duration_s"] for r in ok]
    med = median(durations)
    spread = (max(durations) - min(durations)) / med if len(durations) > 1 and med else None
    readies = [r["ready_s"] for r in ok if "ready_s" in r]
    last = ok[-1] if ok else (runs[-1] if runs else {})
    return {
        "runs": len(runs),
        "ok_runs": len(ok),
        "duration_s": round(med, 3),
        "durations_s": durations,
        "spread": round(spread, 3) if spread is not None else None,
        "rows_per_s": round(median([r["rows_per_s"] for r in ok])) if ok else 0,
        "peak_memory": max((r["peak_memory"] for r in ok), default=0),
        "ready_s": round(median(readies), 2) if readies else None,
        "time_to_ready_s": round(med + median(readies), 2) if readies else None,
        "ready": all(r.get("ready", True) for r in ok) if ok else False,
        "final_parts": last.get("parts"),
        "partitions": last.get("partitions"),
        "settings": last.get("settings", {}),
        "error": None if ok else (runs[-1].get("error") if runs else "not run"),
    }


# ----------------------------------------------------------------------------------- end to end


#: The S3-like proxy's settings of the end-to-end section: (request latency ms, MB/s per connection), as far
#: from the workers and the server as real S3 is from a region's neighbours and from another region.
E2E_PROXIES = ((20.0, 100.0), (50.0, 50.0))


def end_to_end_both(stack: Any, datasets: list[Dataset], cfg: Config) -> list[dict[str, Any]]:
    """End to end straight from the S3 server, then through the S3-like proxy at each of
    :data:`E2E_PROXIES` (bench/end_to_end.py): every peer at every distance."""
    from bench.s3proxy import S3Proxy

    out = bench_end_to_end(stack, datasets, repeats=cfg.e2e_repeats, database=DATABASE, log=log)
    for latency_ms, bandwidth_mbps in E2E_PROXIES:
        with S3Proxy(stack.s3_endpoint, latency_ms=latency_ms, bandwidth_mbps=bandwidth_mbps) as proxy:
            out += bench_end_to_end(stack, datasets, repeats=cfg.e2e_repeats, database=DATABASE, log=log,
                                    s3_url=proxy.url, path=f"{latency_ms:.0f} ms, {bandwidth_mbps:.0f} MB/s")
    return out


# ----------------------------------------------------------------------------------- per dataset


def bench_dataset(stack: Any, ds: Dataset, cfg: Config) -> dict[str, Any]:
    from airflow_provider_s3ch.local.sample import posts_ddl

    client = stack.clickhouse_client(send_receive_timeout=3600)
    ddl = posts_ddl
    probe = new_table(client, DATABASE, ddl, f"{ds.spec.name}_probe")
    planned = Planned(stack, ds, probe)
    sink = f"{ds.spec.name}_sink"
    client.execute(f"CREATE TABLE IF NOT EXISTS `{DATABASE}`.`{sink}` AS `{DATABASE}`.`{probe}` ENGINE = Null")
    # Warm the schema cache, moto and the page cache once, for S3 and for file().
    started = time.monotonic()
    client.execute(f"INSERT INTO `{DATABASE}`.`{sink}` SELECT * FROM {planned.source}")
    client.execute(f"INSERT INTO `{DATABASE}`.`{sink}` SELECT * FROM {planned.file_source(ds)}")
    log(f"{ds.spec.name}: warmed in {time.monotonic() - started:.1f}s; plan: {planned.settings}")

    runs: dict[str, list[dict[str, Any]]] = {"a": [], "b": [], "c": [], "d": [], "e": []}

    def sql_run(variant: str, source: str, settings: dict[str, Any]) -> dict[str, Any]:
        table = new_table(client, DATABASE, ddl, f"{ds.spec.name}_{variant}")
        try:
            return run_sql_insert(client, DATABASE, table, source, settings, ready_timeout_s=cfg.ready_timeout_s)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")

    def op_run() -> dict[str, Any]:
        table = new_table(client, DATABASE, ddl, f"{ds.spec.name}_c")
        try:
            return run_operator(stack, client, ds, table, cfg)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")

    # The grid first (one run per point), then every variant -- the grid's fastest point included --
    # in interleaved rounds, so that drift in the machine's load hits all five alike. (d)'s figure
    # is the median of its rounds, not of the grid run that picked it (a minimum of noisy runs).
    grid: list[dict[str, Any]] = []
    for threads in cfg.grid_threads:
        for block in cfg.grid_blocks:
            settings = dict(planned.settings, max_insert_threads=threads, min_insert_block_size_bytes=block)
            r = sql_run("d", planned.source, settings)
            r["threads"], r["block_bytes"] = threads, block
            grid.append(r)
            log(f"{ds.spec.name} grid t={threads} block={block // MiB}MiB: {r['duration_s']}s "
                f"peak {r['peak_memory'] / MiB:.0f} MiB {'' if r['ok'] else 'FAILED'}")
    ok_grid = [g for g in grid if g["ok"]]
    best = min(ok_grid, key=lambda g: g["duration_s"]) if ok_grid else None
    best_settings = None
    if best is not None:
        best_settings = dict(planned.settings, max_insert_threads=best["threads"],
                             min_insert_block_size_bytes=best["block_bytes"])

    for rep in range(cfg.repeats):
        for variant in ("a", "b", "c", "d", "e"):
            if variant == "a":
                r = sql_run("a", planned.source, {})
            elif variant == "b":
                r = sql_run("b", planned.source, planned.guide_settings())
            elif variant == "c":
                r = op_run()
            elif variant == "d":
                if best is None or best_settings is None:
                    continue
                r = sql_run("d", planned.source, best_settings)
                r["threads"], r["block_bytes"] = best["threads"], best["block_bytes"]
            else:
                r = sql_run("e", planned.file_source(ds), planned.settings)
            runs[variant].append(r)
            log(f"{ds.spec.name} rep{rep + 1} ({variant}): {r['duration_s']}s peak {r['peak_memory'] / MiB:.0f} MiB "
                f"ready+{r.get('ready_s')}s parts {r.get('parts')} {'' if r['ok'] else 'FAILED ' + str(r['error'])}")

    client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")
    client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{sink}` SYNC")
    variants = {k: aggregate(v) for k, v in runs.items()}
    if best is not None:
        variants["d"]["grid_point"] = {"max_insert_threads": best["threads"],
                                       "min_insert_block_size_bytes": best["block_bytes"]}
    return {
        "dataset": ds.summary(),
        "plan": {
            "settings": planned.settings,
            "reasons": planned.plan.settings.reasons,
            "budget_bytes": planned.plan.budget_bytes,
            "manifest": planned.plan.manifest,
        },
        "profile": {"cores": planned.profile.cores, "memory_bytes": planned.profile.memory_bytes,
                    "memory_source": planned.profile.memory_source},
        "variants": variants,
        "grid": [{k: g[k] for k in ("threads", "block_bytes", "ok", "duration_s", "rows_per_s", "peak_memory",
                                    "ready_s", "parts", "error") if k in g} for g in grid],
        "ratios": ratios(variants),
        "runs": runs,
    }


def ratios(v: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Duration ratios (below 1: the first is faster) and the run-to-run noise."""

    def ratio(x: str, y: str) -> float | None:
        if v[x]["ok_runs"] and v[y]["ok_runs"] and v[y]["duration_s"]:
            return round(v[x]["duration_s"] / v[y]["duration_s"], 3)
        return None

    spreads = [v[k]["spread"] for k in ("a", "b", "c", "d", "e") if v[k].get("spread") is not None]
    noise = max(spreads) if spreads else None
    ca, cd = ratio("c", "a"), ratio("c", "d")
    return {
        "c_over_a": ca,
        "c_over_d": cd,
        "e_over_c": ratio("e", "c"),
        "b_over_a": ratio("b", "a"),
        "noise": noise,
        "c_not_slower_than_a": None if ca is None else ca <= 1 + (noise or 0),
        "c_within_10pct_of_d": None if cd is None else cd <= 1.10,
    }


# ----------------------------------------------------------------------------------- memory caps


def bench_caps(stack: Any, ds: Dataset, cfg: Config) -> list[dict[str, Any]]:
    from airflow_provider_s3ch.core.sizes import parse_size
    from airflow_provider_s3ch.local.sample import posts_ddl

    client = stack.clickhouse_client(send_receive_timeout=3600)
    out = []
    for cap in cfg.caps:
        table = new_table(client, DATABASE, posts_ddl, f"cap_{cap.lower()}")
        try:
            r = run_operator(stack, client, ds, table, cfg, memory_cap=cap, ready=False)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        cap_bytes = parse_size(cap)
        probe = new_table(client, DATABASE, posts_ddl, "cap_probe")
        try:
            planned = Planned(stack, ds, probe, memory_cap=cap)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")
        r.update({"cap": cap, "cap_bytes": cap_bytes, "dataset": ds.spec.name,
                  "peak_within_cap": r["peak_memory"] <= cap_bytes,
                  "plan_settings": planned.settings, "plan_warnings": planned.plan.warnings})
        out.append(r)
        log(f"cap {cap}: ok={r['ok']} {r['duration_s']}s peak {r['peak_memory'] / MiB:.0f} MiB "
            f"(within cap: {r['peak_within_cap']}) {r['error'] or ''}")
    return out


# ----------------------------------------------------------------------------------- overhead


def bench_overhead(stack: Any, cfg: Config) -> dict[str, Any]:
    """Listing + planning for N objects against a bare boto3 paginator over the same bucket.

    The objects live in a second moto server process seeded at start (see :mod:`bench.moto_seeded`):
    one bucket per count, so each listing walks exactly N keys.
    """
    import subprocess

    import boto3

    from airflow_provider_s3ch.core.models import LoadRequest
    from airflow_provider_s3ch.core.plan import make_plan
    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
    from airflow_provider_s3ch.hooks.s3 import build_manifest
    from airflow_provider_s3ch.hooks.server import get_profile
    from airflow_provider_s3ch.local.sample import posts_ddl
    from airflow_provider_s3ch.local.stack import free_port

    client = stack.clickhouse_client()
    probe = new_table(client, DATABASE, posts_ddl, "overhead_probe")
    profile = get_profile(ClickHouseHook(), LoadRequest(s3_uri="s3://x-bucket/x", table=f"{DATABASE}.{probe}").table)
    client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")
    port = free_port()
    buckets = {count: f"{LIST_BUCKET}-{count}" for count in cfg.overhead_counts}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.moto_seeded", str(port), stack.region,
         *(f"{b}={n}" for n, b in buckets.items())],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    results = []
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("ready"):
            raise RuntimeError(f"the seeded moto server did not start: {line!r}")
        seed_s = time.monotonic() - started
        log(f"overhead: moto seeded with {sum(buckets)} objects in {seed_s:.1f}s")
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="bench",
                          aws_secret_access_key="bench", region_name=stack.region)
        for count, bucket in sorted(buckets.items()):
            pattern, prefix = "o/*/*.parquet", "o/"
            began = time.monotonic()
            pages = keys = 0
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                pages += 1
                keys += len(page.get("Contents", []))
            bare_s = time.monotonic() - began
            request = LoadRequest(s3_uri=f"s3://{bucket}/{pattern}", table=f"{DATABASE}.{probe}")
            began = time.monotonic()
            manifest = build_manifest(s3, request)
            manifest_s = time.monotonic() - began
            began = time.monotonic()
            for _ in range(cfg.plan_timing_loops):
                make_plan(request, manifest, profile, source_url=f"http://127.0.0.1:{port}/{bucket}/{pattern}")
            plan_s = (time.monotonic() - began) / cfg.plan_timing_loops
            r = {
                "objects": count,
                "pattern": pattern,
                "matched": manifest.file_count,
                "bare_paginator_s": round(bare_s, 3),
                "bare_paginator_keys": keys,
                "bare_paginator_calls": pages,
                "manifest_s": round(manifest_s, 3),
                "manifest_s3_calls": manifest.list_calls,
                "plan_s": round(plan_s, 5),
                "manifest_over_bare": round(manifest_s / bare_s, 2) if bare_s else None,
                "manifest_minus_bare_s": round(manifest_s - bare_s, 3),
            }
            results.append(r)
            log(f"overhead {count}: {r}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return {"listing": results, "seed_s": round(seed_s, 1),
            "note": "objects seeded into a second moto server process's backend, then listed over HTTP"}


# ----------------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------------- chunks


def bench_chunks(stack: Any, ds: Dataset, cfg: Config) -> list[dict[str, Any]]:
    """The cost of chunking (docs/ledger.md): the same files as one incremental load (``skip_loaded``) and as
    10 and 40 chunks (``max_files_per_load``), into a fresh table each time: the task's wall time, the
    inserts' time, and the table's active parts right after the load and once merges settle."""
    from airflow_provider_s3ch.local.sample import posts_ddl
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

    client = stack.clickhouse_client(send_receive_timeout=3600)
    files = len(ds.keys)
    out = []
    for repeat in range(cfg.chunk_repeats):
        for chunks in (1, 10, 40):
            per_chunk = None if chunks == 1 else -(-files // chunks)
            table = new_table(client, DATABASE, posts_ddl, f"chunks_{chunks}")
            try:
                op = S3ToClickHouseOperator(task_id="load", s3_uri=ds.s3_uri, table=f"{DATABASE}.{table}",
                                            skip_loaded=True, max_files_per_load=per_chunk)
                started = time.monotonic()
                result = op.execute(fake_context(f"bench-{uuid.uuid4().hex[:10]}"))
                wall = time.monotonic() - started
                parts = client.execute(
                    "SELECT count() FROM system.parts WHERE database = %(d)s AND table = %(t)s AND active",
                    {"d": DATABASE, "t": table})[0][0]  # fmt: skip
                ready = wait_ready(client, DATABASE, table, cfg.ready_timeout_s)
            finally:
                client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
            row = {"dataset": ds.spec.name, "repeat": repeat, "chunks": len(result.get("chunks") or [0]),
                   "files_per_chunk": per_chunk or files, "rows": result["written_rows"], "task_wall_s": round(wall, 2),
                   "insert_s": round(result["duration_ms"] / 1000, 2), "parts_after_load": int(parts),
                   "parts_settled": ready["parts"], "settle_s": ready["ready_s"]}
            out.append(row)
            log(f"chunks {row['chunks']:>2} x {row['files_per_chunk']} files: task {row['task_wall_s']} s, inserts "
                f"{row['insert_s']} s, {row['parts_after_load']} parts after the load, {row['parts_settled']} settled")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test of the harness")
    parser.add_argument("--out", default="bench/results", help="where results.json, REPORT.md and plots go")
    parser.add_argument("--skip-overhead", action="store_true", help="skip the object-listing figures")
    parser.add_argument("--large", action="store_true",
                        help="also list 100 000 objects (make bench-large; ~4 more minutes)")
    parser.add_argument("--grid", action="store_true",
                        help="with --large: the memory/speed grid and memory caps at that size (bench/large_grid.py)")
    parser.add_argument("--only", choices=["chunks", "end_to_end", "latency", "large"],
                        help="run one section only (on the datasets it needs)")
    args = parser.parse_args(argv)
    quiet_airflow_logs()
    cfg = quick_config() if args.quick else full_config()
    if args.only == "large":
        args.large = True
    if args.large:
        cfg.overhead_counts = [*cfg.overhead_counts, 100_000]
        if args.only == "large":  # bench/large.py writes its own dataset: no row pool, no other datasets
            cfg.pool_rows_per_month, cfg.datasets, cfg.e2e_datasets = 10, [], []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    # Import the whole provider now, once: the harness then runs one consistent version of it.
    import airflow_provider_s3ch.core.plan
    import airflow_provider_s3ch.hooks.clickhouse
    import airflow_provider_s3ch.operators.s3_to_clickhouse  # noqa: F401
    from airflow_provider_s3ch.local import LocalStack

    workdir = Path(tempfile.mkdtemp(prefix="s3ch-bench-"))
    results: dict[str, Any] = {"mode": cfg.mode, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    with LocalStack(nodes=1, workdir=workdir / "stack") as stack, stack.environ():
        client = stack.clickhouse_client()
        client.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        results["machine"] = describe_machine(client)
        log(f"stack up: ClickHouse {results['machine']['clickhouse_version']}, S3 {stack.s3_endpoint}")
        stack.create_bucket(BUCKET)
        started = time.monotonic()
        pool = RowPool(cfg.pool_rows_per_month)
        log(f"row pool: {pool.size} rows in {time.monotonic() - started:.1f}s")
        datasets = []
        specs = {"chunks": [s for s in cfg.datasets if s.name == cfg.chunk_dataset], "end_to_end": [],
                 "latency": []}.get(
            args.only or "", cfg.datasets) + ([] if args.only == "chunks" else cfg.e2e_datasets)
        for spec in specs:
            ds = write_dataset(spec, pool, stack.s3_client(), BUCKET, node_files_dir(stack))
            log(f"dataset {spec.name}: {len(ds.keys)} files, {ds.bytes / 1e6:.1f} MB in {ds.write_seconds:.1f}s")
            datasets.append(ds)
        del pool
        results["generate_s"] = round(time.monotonic() - started, 1)
        chunked = next((d for d in datasets if d.spec.name == cfg.chunk_dataset), None)
        e2e = [d for d in datasets if d.spec in cfg.e2e_datasets]
        datasets = [d for d in datasets if d.spec not in cfg.e2e_datasets]
        if args.only == "chunks":
            results["chunks"] = bench_chunks(stack, chunked, cfg) if chunked is not None else []
        elif args.only == "end_to_end":
            results["end_to_end"] = end_to_end_both(stack, e2e, cfg)
        elif args.only == "latency":
            results["latency"] = bench_latency(stack, e2e, {d.spec.name: planned_for(stack, d) for d in e2e},
                                               repeats=cfg.latency_repeats, database=DATABASE, log=log)
        elif args.only == "large":
            pass  # below
        else:
            results["datasets"] = [bench_dataset(stack, ds, cfg) for ds in datasets]
            # Caps on the largest dataset (one big row group per file) and on the one with the most files
            # (small row groups): the cap must hold on both, whether the load fits or not.
            largest = max(datasets, key=lambda d: d.bytes)
            most_files = max((d for d in datasets if d is not largest), key=lambda d: len(d.keys), default=None)
            results["memory_caps"] = bench_caps(stack, largest, cfg)
            if most_files is not None and most_files.spec.fmt == "parquet":
                results["memory_caps"] += bench_caps(stack, most_files, cfg)
            # Learning from past loads: the largest dataset under a cap its first plan cannot hold, and gzip'd CSV.
            from bench.history_bench import bench_history

            csv = next((d for d in datasets if d.spec.fmt != "parquet"), None)
            results["history"] = bench_history(stack, largest if largest.spec.fmt == "parquet" else None, csv,
                                               cap=cfg.history_cap, database=DATABASE, log=log)
            if not args.skip_overhead:
                results["overhead"] = bench_overhead(stack, cfg)
            results["operator_overhead"] = [
                {"dataset": d["dataset"]["name"], "runs": [
                    {"task_wall_s": r.get("task_wall_s"), "operator_wall_ms": r.get("operator_wall_ms"),
                     "insert_s": r.get("duration_s"), "overhead_s": r.get("operator_overhead_s")}
                    for r in d["runs"]["c"]]}
                for d in results["datasets"]
            ]
            results["chunks"] = bench_chunks(stack, chunked, cfg) if chunked is not None else []
            results["end_to_end"] = end_to_end_both(stack, e2e, cfg)
            results["latency"] = bench_latency(stack, e2e, {d.spec.name: planned_for(stack, d) for d in e2e},
                                               repeats=cfg.latency_repeats, database=DATABASE, log=log)
        if args.large:  # several GB with merge pressure (bench/large.py)
            from bench.large import bench_large

            results["large"] = bench_large(stack, quick=args.quick, log=log, grid=args.grid)
        results["machine"]["load_average_end"] = os.getloadavg()
    results["wall_s"] = round(time.monotonic() - began, 1)
    if args.only:  # one section: its figures alone, beside the full run's report
        (out / f"{args.only}.json").write_text(json.dumps(results, indent=2, default=str))
        if args.only == "large":
            from bench.large import lines as large_lines
            from bench.large_grid import plot as plot_frontier

            plot_frontier(results["large"].get("grid") or {}, out)
            (out / "LARGE.md").write_text("\n".join(large_lines(results["large"])))
        log(f"done in {results['wall_s']}s: {out / f'{args.only}.json'}")
        return 0
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    from bench.report import write_report

    write_report(results, out)
    log(f"done in {results['wall_s']}s: {out / 'REPORT.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

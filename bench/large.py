"""``make bench-large``'s own section: one dataset of several GB, with merge pressure, loaded twice.

The dataset (``large_parquet``): Stack Overflow-like posts (the guide's ``posts`` schema, monthly
partitions) as ~320 Parquet files of ~10 MB, ~3.3 GB in all, 96 monthly partitions (8 years).
Each file holds posts from a two-year window (as an export by activity date would: every file
mixes 24 months), so every insert block touches ~24 partitions and the load makes many parts per
partition: background merges have real work after the insert. 96 partitions in all keeps any
insert block under ClickHouse's ``max_partitions_per_insert_block`` (100), whatever its size.

The files are written one at a time (memory stays bounded: one file's rows, plus a pool of one
year of posts): a pool of ``rows_per_month`` x 12 rows is repeated ``repeats_per_year`` times per
year (new ids, same dates) and shifted by whole years. Moto keeps objects above ~5 MB in spooled
temporary files on disk, not in memory.

Loaded once each (it is big), into a fresh table, on the same node:

- **(a)** ClickHouse's defaults: ``INSERT ... SELECT * FROM s3(...)`` with no settings;
- **(c)** the operator: ``S3ToClickHouseOperator(...).execute(context)``.

Reported per load: insert duration and rows/s (``system.query_log``), time to ready (the insert
plus the wait until no merge runs and at most 4 active parts per partition: timeout 600 s),
active parts right after the insert and at the end, the insert's peak ``memory_usage`` and the
node process's peak RSS during insert and merges, and the rows in the table against the rows
written.
"""

from __future__ import annotations

import io
import shutil
import threading
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB

#: Free disk asked for before writing, as a multiple of the dataset's size: moto's spooled copy,
#: one loaded table at a time (about the Parquet's size), and headroom for merges.
DISK_FACTOR = 4


@dataclass
class LargeSpec:
    """The large dataset's shape.

    :param rows_per_month: rows per month of the generated pool (one year).
    :param repeats_per_year: copies of the pool per year (new ids, same dates).
    :param years: years of data (12 monthly partitions each).
    :param era_years: the window each file spans, in years (its rows mix all its months).
    :param files_per_era: files per window.
    :param ready_timeout_s: how long to wait for merges to settle.
    """

    name: str = "large_parquet"
    rows_per_month: int = 32_000
    repeats_per_year: int = 4
    years: int = 8
    era_years: int = 2
    files_per_era: int = 80
    ready_timeout_s: float = 600.0

    @property
    def rows(self) -> int:
        return self.rows_per_month * 12 * self.repeats_per_year * self.years

    @property
    def files(self) -> int:
        return self.files_per_era * (self.years // self.era_years)

    @property
    def partitions(self) -> int:
        return 12 * self.years


def large_spec(quick: bool = False) -> LargeSpec:
    """~3.3 GB of Parquet (320 files, 12.3 M rows, 96 partitions); ``quick``: a ~10 MB smoke test."""
    if quick:
        return LargeSpec(rows_per_month=500, repeats_per_year=2, years=2, era_years=2, files_per_era=8,
                         ready_timeout_s=30.0)
    return LargeSpec()


def _shift(table: Any, id_offset: int, years: int) -> Any:
    """New ids (+ ``id_offset``) and every timestamp ``years`` later."""
    import pyarrow as pa
    import pyarrow.compute as pc

    years_ms = pa.scalar(int(years * 365.25 * 86_400_000), pa.duration("ms"))
    cols = {}
    for name in table.column_names:
        col = table[name]
        if name == "Id" and id_offset:
            col = pc.add(col, pa.scalar(id_offset, pa.int32()))
        elif name in ("CreationDate", "LastEditDate", "LastActivityDate") and years:
            col = pc.add(col, years_ms)
        cols[name] = col
    return pa.table(cols)


def write_large(spec: LargeSpec, client: Any, bucket: str, log: Callable[[str], None] = print) -> Any:
    """Write the large dataset to ``s3://bucket/<name>/``, one file at a time; return a ``Dataset``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.datasets import Dataset, DatasetSpec, RowPool

    started = time.monotonic()
    pool = RowPool(spec.rows_per_month)
    log(f"large: row pool {pool.size} rows in {time.monotonic() - started:.1f}s")
    prefix = f"{spec.name}/"
    eras = spec.years // spec.era_years
    copies_per_era = spec.era_years * spec.repeats_per_year

    def one(item: tuple[int, int]) -> tuple[str, int, int]:
        era, k = item
        # File k of its window: every files_per_era-th row of each copy of the pool in the window, from a
        # different offset per copy (the same rows repeated in one file would shrink in Parquet's dictionaries).
        parts = []
        for c in range(copies_per_era):
            year = era * spec.era_years + c // spec.repeats_per_year
            copy = era * copies_per_era + c
            idx = pa.array(np.arange((k + 7 * c) % spec.files_per_era, pool.size, spec.files_per_era))
            parts.append(_shift(pool.table.take(idx), copy * pool.size, year))
        table = pa.concat_tables(parts)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        body = buf.getvalue()
        key = f"{prefix}part-{era:02d}-{k:04d}.parquet"
        client.put_object(Bucket=bucket, Key=key, Body=body)
        return key, len(body), table.num_rows

    items = [(e, k) for e in range(eras) for k in range(spec.files_per_era)]
    written: list[tuple[str, int, int]] = []
    with ThreadPoolExecutor(3) as ex:
        for i, w in enumerate(ex.map(one, items), 1):
            written.append(w)
            if i % 40 == 0 or i == len(items):
                log(f"large: {i}/{len(items)} files, {sum(x[1] for x in written) / 1e9:.2f} GB, "
                    f"{time.monotonic() - started:.0f}s")
    rows = sum(x[2] for x in written)
    ds_spec = DatasetSpec(spec.name, "parquet", rows, len(written),
                          f"{len(written)} files, each mixing {12 * spec.era_years} months")
    return Dataset(spec=ds_spec, bucket=bucket, prefix=prefix, local_dir="", keys=[x[0] for x in written],
                   bytes=sum(x[1] for x in written), partitions=spec.partitions, extension="parquet",
                   write_seconds=time.monotonic() - started,
                   extra={"rows_written": rows, "pool_rows": pool.size, "large_spec": asdict(spec)})


class RssPeak:
    """Peak resident memory of a process (``/proc/PID/status`` VmRSS), sampled every 0.5 s."""

    def __init__(self, pid: int | None) -> None:
        self.pid, self.peak = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.peak = max(self.peak, int(line.split()[1]) * 1024)
        except (OSError, ValueError):
            pass

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()

    def __enter__(self) -> RssPeak:
        if self.pid:
            self._sample()
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)


class PartsPeak:
    """Peak active parts (in all, and in one partition) and the level-0 parts seen in ``database``, every 1 s.

    Database-wide: the operator inserts into a staging table and moves its partitions into the target. Level-0
    parts are the insert's own (merged ones stay listed, outdated, for minutes), so their most seen is about
    how many parts the insert wrote (a staging table dropped at the end takes its parts with it).
    """

    def __init__(self, client: Any, database: str) -> None:
        self.client, self.database = client, database
        self.peak_active = self.peak_per_partition = self.level0 = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        try:
            active, level0, most = self.client.execute(
                "SELECT countIf(active), countIf(level = 0), (SELECT max(n) FROM (SELECT count() AS n FROM "
                "system.parts WHERE database = %(d)s AND active GROUP BY table, partition_id)) "
                "FROM system.parts WHERE database = %(d)s",
                {"d": self.database},
            )[0]
        except Exception:  # noqa: BLE001 - a missed sample is no result
            return
        self.samples += 1
        self.peak_active = max(self.peak_active, int(active))
        self.level0 = max(self.level0, int(level0))
        self.peak_per_partition = max(self.peak_per_partition, int(most or 0))

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def __enter__(self) -> PartsPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._sample()  # right after the insert (a load shorter than the interval gets one sample)


def part_counts(client: Any, database: str, table: str) -> dict[str, int]:
    """The table's active parts, partitions, most parts in one partition and bytes on disk."""
    parts, partitions, most, on_disk = client.execute(
        "SELECT sum(n), count(), max(n), sum(b) FROM (SELECT partition_id, count() AS n, "
        "sum(bytes_on_disk) AS b FROM system.parts WHERE database = %(d)s AND table = %(t)s AND active "
        "GROUP BY partition_id)",
        {"d": database, "t": table},
    )[0]
    return {"parts": int(parts), "partitions": int(partitions), "max_parts_per_partition": int(most or 0),
            "bytes_on_disk": int(on_disk or 0)}


def bench_large(stack: Any, quick: bool = False, log: Callable[[str], None] = print, grid: bool = False
                ) -> dict[str, Any]:
    """Write the large dataset, load it with (a) the defaults and (c) the operator, once each; with ``grid``,
    the memory/speed grid and the memory caps at this size (:mod:`bench.large_grid`)."""
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.common import BUCKET, DATABASE, Planned, run_operator
    from bench.measure import new_table, run_sql_insert, wait_ready

    spec = large_spec(quick)
    began = time.monotonic()
    estimate = int(spec.rows * 270)
    free = shutil.disk_usage(stack.workdir).free
    tmp_free = shutil.disk_usage("/tmp").free
    out: dict[str, Any] = {"spec": asdict(spec), "disk_free_bytes": free, "tmp_free_bytes": tmp_free,
                           "estimated_bytes": estimate}
    if min(free, tmp_free) < DISK_FACTOR * estimate:
        out["error"] = (f"not enough free disk: {min(free, tmp_free) / 1e9:.1f} GB free, "
                        f"{DISK_FACTOR * estimate / 1e9:.1f} GB wanted")
        log(f"large: {out['error']}")
        return out
    ds = write_large(spec, stack.s3_client(), BUCKET, log)
    out["dataset"] = ds.summary()
    out["generate_s"] = round(ds.write_seconds, 1)
    log(f"large: {len(ds.keys)} files, {ds.bytes / 1e9:.2f} GB, {ds.spec.rows:,} rows in {ds.write_seconds:.0f}s")

    client = stack.clickhouse_client(send_receive_timeout=3600)
    pid = stack.nodes[0].process.pid if stack.nodes and stack.nodes[0].process else None
    probe = new_table(client, DATABASE, posts_ddl, f"{spec.name}_probe")
    try:
        planned = Planned(stack, ds, probe)
    finally:
        client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")
    out["plan"] = {"settings": planned.settings, "reasons": planned.plan.settings.reasons,
                   "budget_bytes": planned.plan.budget_bytes, "warnings": planned.plan.warnings}
    out["profile"] = {"cores": planned.profile.cores, "memory_bytes": planned.profile.memory_bytes}
    # Warm the schema cache and the page cache over moto's files once (footers only: cheap).
    started = time.monotonic()
    source_rows = client.execute(f"SELECT count() FROM {planned.source}")[0][0]
    out["source_count"] = int(source_rows)
    out["warm_s"] = round(time.monotonic() - started, 2)
    log(f"large: count() over s3() = {source_rows:,} in {out['warm_s']}s; plan {planned.settings}")

    variants: dict[str, dict[str, Any]] = {}
    for variant in ("a", "c"):
        table = new_table(client, DATABASE, posts_ddl, f"{spec.name}_{variant}")
        try:
            with RssPeak(pid) as rss:
                with PartsPeak(stack.clickhouse_client(), DATABASE) as during:
                    if variant == "a":
                        r = run_sql_insert(client, DATABASE, table, planned.source, {}, ready=False)
                    else:
                        cfg = types.SimpleNamespace(ready_timeout_s=spec.ready_timeout_s)
                        r = run_operator(stack, client, ds, table, cfg, ready=False)  # type: ignore[arg-type]
                after = part_counts(client, DATABASE, table)
                ready = wait_ready(client, DATABASE, table, spec.ready_timeout_s) if r["ok"] else {}
            end = part_counts(client, DATABASE, table)
            table_rows = int(client.execute(f"SELECT count() FROM `{DATABASE}`.`{table}`")[0][0])
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        keep = ("ok", "error", "duration_s", "rows", "rows_per_s", "peak_memory", "read_bytes", "written_bytes",
                "s3_get", "client_wall_s", "task_wall_s", "operator_overhead_s", "settings", "predicted_memory_usage")
        v = {k: r[k] for k in keep if k in r}
        v.update({
            "parts_written": during.level0,
            "peak_active_parts_during_insert": during.peak_active,
            "peak_parts_per_partition_during_insert": during.peak_per_partition,
            "parts_samples": during.samples,
            "parts_after_insert": after["parts"],
            "max_parts_per_partition_after_insert": after["max_parts_per_partition"],
            "ready_wait_s": ready.get("ready_s"),
            "settled": ready.get("ready"),
            "time_to_ready_s": round(r["duration_s"] + ready["ready_s"], 2) if ready else None,
            "parts_at_end": end["parts"],
            "max_parts_per_partition_at_end": end["max_parts_per_partition"],
            "partitions": end["partitions"],
            "bytes_on_disk": end["bytes_on_disk"],
            "node_peak_rss": rss.peak,
            "table_rows": table_rows,
            "rows_match": table_rows == ds.spec.rows,
        })
        variants[variant] = v
        log(f"large ({variant}): insert {v['duration_s']}s, {v.get('rows_per_s', 0):,} rows/s, peak "
            f"{v.get('peak_memory', 0) / MiB:.0f} MiB (RSS {rss.peak / MiB:.0f} MiB), ~{during.level0} parts written, "
            f"peak {during.peak_active} active ({during.peak_per_partition} in one partition), parts "
            f"{v['parts_after_insert']} -> {v['parts_at_end']}, ready +{v['ready_wait_s']}s (settled {v['settled']}), "
            f"rows {table_rows:,} "
            f"{'=' if v['rows_match'] else '!='} {ds.spec.rows:,} {v.get('error') or ''}")
    out["variants"] = variants
    if grid:
        from bench.large_grid import bench_grid

        out["grid"] = bench_grid(stack, client, ds, planned, variants["c"], ds.spec.rows, log)
    out["wall_s"] = round(time.monotonic() - began, 1)
    return out


def _gb(n: Any) -> str:
    return "-" if not n else f"{n / 1e9:.2f}"


def _mib(n: Any) -> str:
    return "-" if not n else f"{n / MiB:,.0f}"


def lines(result: dict[str, Any]) -> list[str]:
    """The report's section for ``results["large"]``."""
    if not result:
        return []
    out = ["## Large: several GB with merge pressure (make bench-large)", ""]
    if result.get("error"):
        return [*out, f"Not run: {result['error']}", ""]
    ds = result.get("dataset", {})
    spec = result.get("spec", {})
    out += [
        f"`{ds.get('name')}`: {ds.get('file_count')} Parquet files (snappy), {ds.get('bytes', 0) / 1e9:.2f} GB, "
        f"{ds.get('rows', 0):,} rows, {ds.get('partitions')} monthly partitions; each file mixes "
        f"{12 * spec.get('era_years', 0)} months (a window of posts, as an export by activity date), so every "
        f"insert block touches ~{12 * spec.get('era_years', 0)} partitions. Written in {result.get('generate_s')} s; "
        f"this section's wall time {result.get('wall_s')} s ({(result.get('wall_s') or 0) / 60:.1f} min). "
        "Each load runs once, into a fresh table: (a) `INSERT ... SELECT * FROM s3()` with ClickHouse's defaults, "
        "(c) `S3ToClickHouseOperator.execute`. Time to ready = insert + the wait until no merge runs and at most "
        f"4 active parts per partition on average (bench/measure.py; timeout {spec.get('ready_timeout_s')} s). "
        "Peak memory: the insert's "
        "`memory_usage` (query_log) and the node process's peak RSS sampled every 0.5 s through insert and merges. "
        "Parts during the insert are sampled every 1 s over the whole database (the operator inserts into a staging "
        "table, then moves its partitions into the target): *parts written* is the most level-0 parts seen (the "
        "insert's own parts, merged ones included while they stay listed), background merges run during the insert, "
        "so the parts right after it are already fewer. For (c) the peak of active parts counts the staging table's "
        "and the target's while partitions move.",
        "",
        "| variant | threads | block | insert s | rows/s | time to ready s | parts written (~) | peak active parts "
        "during insert (max/partition) | parts after insert (max/partition) | parts at end (max/partition) | settled "
        "| peak memory MiB | node peak RSS MiB | rows in table = written |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|---:|---:|:---:|",
    ]
    labels = {"a": "(a) defaults", "c": "(c) operator plan"}
    for key, v in (result.get("variants") or {}).items():
        s = v.get("settings") or {}
        threads = s.get("max_insert_threads", "default")
        block = s.get("min_insert_block_size_bytes")
        block_text = f"{int(block) / MiB:,.0f} MiB" if block else "default"
        err = f" FAILED: {v['error']}" if v.get("error") else ""
        out.append(
            f"| {labels.get(key, key)}{err} | {threads} | {block_text} | {v.get('duration_s')} | "
            f"{v.get('rows_per_s', 0):,} | {v.get('time_to_ready_s', '-')} | {v.get('parts_written', '-')} | "
            f"{v.get('peak_active_parts_during_insert', '-')} ({v.get('peak_parts_per_partition_during_insert', '-')}) "
            f"| {v.get('parts_after_insert')} "
            f"({v.get('max_parts_per_partition_after_insert')}) | {v.get('parts_at_end')} "
            f"({v.get('max_parts_per_partition_at_end')}) | {'yes' if v.get('settled') else '**no**'} | "
            f"{_mib(v.get('peak_memory'))} | {_mib(v.get('node_peak_rss'))} | "
            f"{v.get('table_rows', 0):,} {'yes' if v.get('rows_match') else '**no**'} |"
        )
    ran = ((result.get("variants") or {}).get("c") or {}).get("settings") or {}
    if ran:
        shown = ", ".join(f"`{k} = {v}`" for k, v in ran.items() if k != "log_comment")
        out += ["", f"(c) ran with (the operator's own settings, from its result): {shown}."]
    plan = result.get("plan") or {}
    out += ["", "The plan for this dataset (`make_plan` before the loads) and its reasons:", ""]
    for name, value in (plan.get("settings") or {}).items():
        out.append(f"- `{name} = {value}`: {(plan.get('reasons') or {}).get(name, '')}")
    for w in plan.get("warnings") or []:
        out.append(f"- plan warning: {w}")
    from bench.large_grid import lines as grid_lines

    return [*out, "", *grid_lines(result.get("grid") or {})]


__all__ = ["LargeSpec", "bench_large", "large_spec", "lines", "write_large"]

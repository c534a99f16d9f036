"""What recomputing a materialized view costs a ``replace_partitions`` load, on one real ClickHouse node, in
paired rounds.

    python -m bench.views_replace_cost [--rows N] [--rounds R]

A posts table holding twelve months (``--rows`` rows, ~100 MB of Parquet in 12 files, loaded by ClickHouse's
own ``INSERT … SELECT FROM s3()``) gets one file replaced (``replace_partitions``, the month or two it holds),
by this tree's operator, in two shapes: the table with one view (a daily rollup into a ``SummingMergeTree``,
recomputed from the table as it will be: its other months are read through the view's query) and the same
table without the view. Each load runs in a fresh interpreter; its time is the operator's ``execute``. The
shapes alternate which goes first in each round. Both must leave the same rows in the table, and the view's
target must sum to the table's rows.

Writes ``--out`` (``bench/results/views_replace_cost.json``) and prints each shape's median and the median of
the per-round ratios (with the view / without).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack
from bench.cluster_staging import _load
from bench.datasets import DatasetSpec, RowPool, node_files_dir, write_dataset
from bench.views_cost import target_with_a_view

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "views_replace_cost.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    with LocalStack(nodes=1) as stack:
        env = {**os.environ, **stack.airflow_env()}
        stack.create_bucket("s3ch-bench")
        pool = RowPool(rows_per_month=min(args.rows // 12 + 1, 100_000))
        ds = write_dataset(DatasetSpec("vr-parquet", "parquet", args.rows, 12, "monthly"), pool, stack.s3_client(),
                           "s3ch-bench", node_files_dir(stack))
        print(f"{ds.spec.rows} rows in {len(ds.keys)} files, {ds.bytes / 2**20:.1f} MiB", flush=True)
        client = stack.clickhouse_client()
        everything = (f"s3('{stack.s3_endpoint}/s3ch-bench/{ds.prefix}*.parquet', '{stack.s3_access_key}', "
                      f"'{stack.s3_secret_key}', 'Parquet')")
        one_file = f"s3://s3ch-bench/{ds.keys[5]}"
        for i in range(args.rounds):
            for shape in (["view", "plain"] if i % 2 == 0 else ["plain", "view"]):
                table = target_with_a_view(client)
                if shape == "plain":
                    for suffix in ("_mv", "_daily"):
                        client.execute(f"DROP TABLE {table}{suffix} SYNC")
                client.execute(f"INSERT INTO {table} SELECT * FROM {everything}")
                try:
                    r = _load(ROOT, env, one_file, table, {"mode": "replace_partitions"})
                    got = client.execute(f"SELECT count() FROM {table}")[0][0]
                    if shape == "view":
                        assert client.execute(f"SELECT sum(n) FROM {table}_daily")[0][0] == got
                finally:
                    for suffix in ("_mv", "_daily", ""):
                        client.execute(f"DROP TABLE IF EXISTS {table}{suffix} SYNC")
                r.update(round=i, shape=shape, rows_after=got)
                runs.append(r)
                print(f"round {i} {shape:>5}: {r['wall_ms']:8.0f} ms (complete {r['phases_ms'].get('complete')} ms)",
                      flush=True)
    by = {s: [r for r in runs if r["shape"] == s] for s in ("view", "plain")}
    assert len({r["rows_after"] for r in runs}) == 1, "the two shapes left different rows"
    ratios = [v["wall_ms"] / p["wall_ms"] for v, p in zip(by["view"], by["plain"], strict=True)]
    summary = {"view_median_ms": round(statistics.median(r["wall_ms"] for r in by["view"])),
               "plain_median_ms": round(statistics.median(r["wall_ms"] for r in by["plain"])),
               "ratio_median": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios],
               "view_complete_median_ms": round(statistics.median(r["phases_ms"]["complete"] for r in by["view"])),
               "plain_complete_median_ms": round(statistics.median(r["phases_ms"]["complete"] for r in by["plain"])),
               "view_reason": by["view"][0]["mode_reason"]}
    report = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "note": args.note, "rows": args.rows, "rounds": args.rounds, "file_replaced": one_file,
              "table_bytes": ds.bytes, "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

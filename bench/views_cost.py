"""A load into a table that a materialized view reads, staged with the view's twin, against the direct insert
it replaced, on one real ClickHouse node, in paired rounds.

    python -m bench.views_cost [--rows N] [--rounds R] [--baseline REV]

The same files (20 Parquet files and 10 gzip'd CSV files, ``--rows`` rows each set, ~100 MB each, twelve
months) are loaded into a fresh posts table with one view (a daily rollup into a ``SummingMergeTree``) by two
versions of the operator: this tree (a staging table with the view's staging twin, then ``MOVE PARTITION`` into
the table and into the view's target) and ``--baseline`` (a git revision whose ``append`` into a table with
views was a direct insert; checked out into a temporary worktree). Each load runs in a fresh interpreter (as an
Airflow task does); its time is the operator's ``execute`` from the inside. The versions alternate which goes
first in each round. Both must leave the same rows in the table and in the view's target.

Writes ``--out`` (``bench/results/views_cost.json``) and prints a table: each version's median per format and
the median of the per-round ratios (staged / direct).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import posts_ddl
from bench.cluster_staging import _load, _worktree, paired_summary
from bench.datasets import DatasetSpec, RowPool, node_files_dir, write_dataset

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "views_cost.json"
#: The last revision whose append into a table with materialized views was a direct insert.
BASELINE = "2e7b030"

def target_with_a_view(client: Any) -> str:
    """A fresh posts table and its daily rollup view; the table's name."""
    name = f"default.vc_{uuid.uuid4().hex[:8]}"
    client.execute(posts_ddl(name))
    client.execute(f"CREATE TABLE {name}_daily (day Date, PostTypeId LowCardinality(String), n UInt64, "
                   "score Int64) ENGINE = SummingMergeTree PARTITION BY toYYYYMM(day) ORDER BY (day, PostTypeId)")
    client.execute(f"CREATE MATERIALIZED VIEW {name}_mv TO {name}_daily AS SELECT toDate(CreationDate) AS day, "
                   f"toString(PostTypeId) AS PostTypeId, count() AS n, sum(Score) AS score FROM {name} "
                   "GROUP BY day, PostTypeId")
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    baseline = _worktree(args.baseline)
    codes = {"staged": ROOT, "direct": baseline}
    runs: list[dict[str, Any]] = []
    try:
        with LocalStack(nodes=1) as stack:
            env = {**os.environ, **stack.airflow_env()}
            stack.create_bucket("s3ch-bench")
            pool = RowPool(rows_per_month=min(args.rows // 12 + 1, 100_000))
            sets = [write_dataset(DatasetSpec(f"vc-{fmt.replace('.', '')}", fmt, args.rows, files, "monthly"),
                                  pool, stack.s3_client(), "s3ch-bench", node_files_dir(stack))
                    for fmt, files in (("parquet", 20), ("csv.gz", 10))]
            for ds in sets:
                print(f"{ds.spec.fmt}: {ds.spec.rows} rows in {len(ds.keys)} files, {ds.bytes / 2**20:.1f} MiB",
                      flush=True)
            client = stack.clickhouse_client()
            for i in range(args.rounds):
                for ds in sets:
                    for version in (["staged", "direct"] if i % 2 == 0 else ["direct", "staged"]):
                        table = target_with_a_view(client)
                        try:
                            r = _load(codes[version], env, ds.s3_uri, table, {})
                            got = client.execute(f"SELECT (SELECT count() FROM {table}), (SELECT sum(n) FROM "
                                                 f"{table}_daily)")[0]
                        finally:
                            for suffix in ("_mv", "_daily", ""):
                                client.execute(f"DROP TABLE IF EXISTS {table}{suffix} SYNC")
                        assert got == (ds.spec.rows, ds.spec.rows), (version, got)
                        # the staged load reports the table's rows; the direct insert's figure counts the view's too
                        assert version == "direct" or r["written_rows"] == ds.spec.rows, r["written_rows"]
                        r.update(round=i, version=version, format=ds.spec.fmt)
                        runs.append(r)
                        print(f"round {i} {ds.spec.fmt:>7} {version:>6}: {r['wall_ms']:8.0f} ms", flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=False,
                       capture_output=True)
    summary = {fmt: paired_summary(runs, fmt) for fmt in ("parquet", "csv.gz")}
    report = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "note": args.note, "rows": args.rows, "rounds": args.rounds, "baseline": args.baseline,
              "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("| format | direct (median) | staged with the view's twin (median) | staged / direct (median of rounds) |")
    print("| --- | ---: | ---: | ---: |")
    for fmt, s in summary.items():
        print(f"| {fmt} | {s['direct_median_ms']} ms | {s['staged_median_ms']} ms | {s['ratio_median']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

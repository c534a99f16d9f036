"""Single-node vs distributed (s3Cluster + parallel_distributed_insert_select = 2) on a local 3-node cluster.

    python -m bench.distributed [--rows N] [--months M] [--repeat R]

Loads the same Parquet files (moto's S3 server on loopback) into a Distributed table over
MergeTree on three real ClickHouse nodes, once with ``strategy="single"`` and once with
``strategy="distributed"``, through the operator, and prints the figures from
``system.query_log``. All three nodes share this machine's cores, so this measures the
mechanics, not the scaling a real cluster gets.
"""

from __future__ import annotations

import argparse
import json
import statistics
import types
import uuid

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator


def _context() -> dict:
    ti = types.SimpleNamespace(dag_id="bench", task_id="load", run_id=uuid.uuid4().hex, map_index=-1, try_number=1)
    return {"ti": ti}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    out: dict[str, list[dict]] = {"single": [], "distributed": []}
    with LocalStack(nodes=3) as stack, stack.environ():
        stack.create_bucket("s3ch-bench")
        data = write_posts(stack.s3_client(), "s3ch-bench", rows=args.rows, months=args.months)
        print(f"data: {data.rows} rows, {len(data.keys)} Parquet files, {data.bytes / 2**20:.1f} MiB "
              "(S3: moto on loopback)")
        for i in range(args.repeat):
            for strategy in ("single", "distributed"):
                dist, _ = stack.create_distributed_table(
                    f"p_{strategy}_{i}_{uuid.uuid4().hex[:4]}", POSTS_DDL.replace("{engine}", "MergeTree")
                )
                r = S3ToClickHouseOperator(
                    task_id="load", s3_uri=data.s3_uri, table=dist, strategy=strategy, memory_cap="6GiB"
                ).execute(_context())
                assert r["written_rows"] == data.rows, r["written_rows"]
                out[strategy].append(r)
                print(
                    f"run {i} {strategy:>11}: {r['duration_ms']:>6} ms, {r['rows_per_second']:>10.0f} rows/s, "
                    f"peak {r['memory_usage'] / 2**20:.0f} MiB, per node rows "
                    f"{[n['written_rows'] for n in r['nodes']]}"
                )
    med = {k: statistics.median(r["duration_ms"] for r in v) for k, v in out.items()}
    print(json.dumps({"median_ms": med, "distributed_over_single": round(med["distributed"] / med["single"], 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does publishing go faster when the partition moves are spread over several connections at once?

``python -m bench.publish_parallel [--rounds 3] [--workdir DIR]``

The operator publishes a staged load with ``ALTER TABLE staging MOVE PARTITION ID … TO TABLE target, …``, 100
partitions a statement, one statement after the other (:func:`airflow_provider_s3ch.core.staging.finalize_statements`).
Each move is exact on its own, so the statements could as well run side by side. This measures, on the real local
ClickHouse, 120 partitions of 1 and 3 Wide parts each (:class:`bench.publish.Bench`'s tables, merges stopped): the
moves one statement after the other, and split evenly over 2, 4 and 8 connections at once. Per way: the wall time
of the moves (median of ``--rounds``, fresh tables each round, the ways interleaved) and whether the target holds
every row once (count and ``sum(cityHash64(*))``). Writes ``bench/results/publish_parallel.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.core.sql import render_drop_table, render_move_partitions
from airflow_provider_s3ch.core.staging import PARTITIONS_PER_ALTER
from bench.publish import DATABASE, Bench, _chunks

#: Connections the moves are spread over (1: the operator's way, one statement after the other).
CONNECTIONS = (1, 2, 4, 8)
PARTITIONS = 120


def publish(bench: Bench, clients: list[Any], parts: int, connections: int) -> dict[str, Any]:
    """One publish of fresh tables over ``connections`` connections: its wall time, exact or not."""
    target, staging, ids = bench.fresh(PARTITIONS, parts)
    want = bench.expected("move_batched", target, staging)
    began = time.perf_counter()
    if connections == 1:
        for chunk in _chunks(ids, PARTITIONS_PER_ALTER):
            bench.q(render_move_partitions(staging, target, chunk))
    else:
        chunks = _chunks(ids, -(-len(ids) // connections))
        with ThreadPoolExecutor(connections) as pool:
            list(pool.map(lambda job: job[0].execute(render_move_partitions(staging, target, job[1])),
                          zip(clients, chunks, strict=False)))
    wall = time.perf_counter() - began
    bench.q(render_drop_table(staging))
    exact = bench.digest(target) == want
    bench.drop(target)
    return {"wall_s": round(wall, 4), "exact": exact}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", help="where the node keeps its data; the system's temporary directory by default")
    parser.add_argument("--out", type=Path, default=Path("bench/results/publish_parallel.json"))
    args = parser.parse_args()
    from airflow_provider_s3ch.local import LocalStack

    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                           "machine": platform.platform(), "partitions": PARTITIONS, "rounds": args.rounds,
                           "workdir": args.workdir or tempfile.gettempdir(), "results": []}
    with tempfile.TemporaryDirectory(prefix="bench-publish-parallel-", dir=args.workdir) as workdir, \
            LocalStack(nodes=1, workdir=workdir) as stack:
        client = stack.clickhouse_client()
        client.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        bench = Bench(client, merges=False)
        clients = [stack.clickhouse_client() for _ in range(max(CONNECTIONS))]
        for parts in (1, 3):
            runs: dict[int, list[dict[str, Any]]] = {n: [] for n in CONNECTIONS}
            for _ in range(args.rounds):
                for n in CONNECTIONS:
                    runs[n].append(publish(bench, clients, parts, n))
            for n in CONNECTIONS:
                walls = [r["wall_s"] for r in runs[n]]
                row = {"parts_per_partition": parts, "connections": n, "wall_s_median": statistics.median(walls),
                       "wall_s": walls, "per_partition_ms": round(1000 * statistics.median(walls) / PARTITIONS, 2),
                       "exact": all(r["exact"] for r in runs[n])}
                out["results"].append(row)
                print(f"{parts} part(s) a partition, {n} connection(s): {row['wall_s_median']:.3f} s "
                      f"({row['per_partition_ms']} ms a partition), exact: {row['exact']}", flush=True)
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()

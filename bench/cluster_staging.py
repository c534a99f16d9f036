"""A distributed load staged on every shard against the direct distributed insert it replaced, on the local
three-node cluster, in paired rounds.

    python -m bench.cluster_staging [--rows N] [--files F] [--rounds R] [--baseline REV]

The same files (``--files`` Parquet files and as many gzip'd CSV files, ``--rows`` rows each set, twelve months)
are loaded into a fresh Distributed table over MergeTree on three real ClickHouse nodes with
``strategy="distributed"`` (``s3Cluster`` with ``parallel_distributed_insert_select = 2``), by two versions of
the operator: this tree (a staging table on every shard, then ``MOVE PARTITION`` on each shard) and
``--baseline`` (a git revision whose distributed load inserted straight into the shards; checked out into a
temporary worktree). Each load runs in a process of its own (a fresh interpreter, as an Airflow task is); its
end to end time is the operator's ``execute`` from the inside. The two versions alternate which goes first in
each round. Also per staged load: the publish window, from the first shard's ``MOVE PARTITION`` starting to
the last shard's finishing (``system.query_log`` of every node): while it lasts, a reader of the Distributed
table sees some shards' new rows and not others'.

Writes ``--out`` (``bench/results/cluster_staging.json``) and prints a table: the median of each version's
end to end time per format, and the median of the per-round ratios (staged / direct).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL
from bench.datasets import DatasetSpec, RowPool, node_files_dir, write_dataset

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "cluster_staging.json"
#: The last revision whose distributed append was a direct insert into the shards.
BASELINE = "87bf1d0"

#: What each load process runs: the operator on the stack's connections, with the arguments in its third
#: argument (JSON); one JSON line out.
LOAD = """
import json, sys, time, types, uuid
import airflow_provider_s3ch
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
uri, table, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ti = types.SimpleNamespace(dag_id="bench", task_id="load", run_id=uuid.uuid4().hex, map_index=-1, try_number=1,
                           xcom_push=lambda key, value: None)
op = S3ToClickHouseOperator(task_id="load", s3_uri=uri, table=table, **kwargs)
started = time.perf_counter()
r = op.execute({"ti": ti})
wall = (time.perf_counter() - started) * 1000
print(json.dumps({"wall_ms": wall, "written_rows": r["written_rows"], "query_id": r["query_id"],
                  "mode_reason": r["mode_reason"], "phases_ms": r.get("phases_ms"),
                  "code": airflow_provider_s3ch.__file__}))
"""


def _worktree(rev: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="s3ch-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


#: The operator's arguments of a distributed load on the stack's cluster.
DISTRIBUTED = {"strategy": "distributed", "clickhouse_conn_id": "clickhouse_cluster", "aws_conn_id": "aws_cluster"}


def _load(code: Path, env: dict[str, str], uri: str, table: str, kwargs: dict[str, Any] = DISTRIBUTED
          ) -> dict[str, Any]:
    """One load by the operator of checkout ``code``, in a fresh interpreter (:data:`LOAD`)."""
    out = subprocess.run([sys.executable, "-c", LOAD, uri, table, json.dumps(kwargs)], cwd=code,
                         env={**env, "PYTHONPATH": str(code)},
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"the load from {code} failed: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["code"]).resolve().is_relative_to(code.resolve()), result["code"]
    return result


def paired_summary(runs: list[dict[str, Any]], fmt: str) -> dict[str, Any]:
    """The loads of format ``fmt`` by version (``staged``, ``direct``), one of each a round: each version's median
    and the median of the rounds' ratios (staged / direct)."""
    mine = {v: [r for r in runs if r["format"] == fmt and r["version"] == v] for v in ("staged", "direct")}
    ratios = [s["wall_ms"] / d["wall_ms"] for s, d in zip(mine["staged"], mine["direct"], strict=True)]
    return {"staged_median_ms": round(statistics.median(r["wall_ms"] for r in mine["staged"])),
            "direct_median_ms": round(statistics.median(r["wall_ms"] for r in mine["direct"])),
            "ratio_median": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios],
            "staged_reason": mine["staged"][0]["mode_reason"], "direct_reason": mine["direct"][0]["mode_reason"]}


def _window_ms(stack: LocalStack, query_id: str) -> float | None:
    """From the first shard's MOVE PARTITION starting to the last one's finishing, on every node's log."""
    stem = query_id.split("-")[1]
    spans = []
    for node in stack.nodes:
        client = stack.clickhouse_client(node.index)
        client.execute("SYSTEM FLUSH LOGS")
        spans += client.execute(
            "SELECT toUnixTimestamp64Micro(query_start_time_microseconds), toUnixTimestamp64Micro("
            "event_time_microseconds) FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Alter' "
            "AND position(query, %(s)s) > 0 AND position(query, 'MOVE PARTITION') > 0", {"s": f"_s3ch_stage_{stem}"})
    if not spans:
        return None
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_200_000)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--note", default="")
    args = parser.parse_args(argv)
    baseline = _worktree(args.baseline)
    codes = {"staged": ROOT, "direct": baseline}
    runs: list[dict[str, Any]] = []
    try:
        with LocalStack(nodes=3) as stack:
            env = {**os.environ, **stack.airflow_env("clickhouse_cluster", "aws_cluster")}
            stack.create_bucket("s3ch-bench")
            pool = RowPool(rows_per_month=min(args.rows // 12 + 1, 100_000))
            sets = [write_dataset(DatasetSpec(f"cs-{fmt.replace('.', '')}", fmt, args.rows, args.files, "monthly"),
                                  pool, stack.s3_client(), "s3ch-bench", node_files_dir(stack))
                    for fmt in ("parquet", "csv.gz")]
            for ds in sets:
                print(f"{ds.spec.fmt}: {ds.spec.rows} rows in {len(ds.keys)} files, {ds.bytes / 2**20:.1f} MiB",
                      flush=True)
            for i in range(args.rounds):
                for ds in sets:
                    order = ["staged", "direct"] if i % 2 == 0 else ["direct", "staged"]
                    for version in order:
                        dist, _ = stack.create_distributed_table(f"cs_{uuid.uuid4().hex[:8]}",
                                                                 POSTS_DDL.replace("{engine}", "MergeTree"))
                        r = _load(codes[version], env, ds.s3_uri, dist)
                        got = int(stack.clickhouse_client(0).execute(f"SELECT count() FROM {dist}")[0][0])
                        assert got == ds.spec.rows == r["written_rows"], (version, got, r["written_rows"])
                        r.update(round=i, version=version, format=ds.spec.fmt,
                                 window_ms=_window_ms(stack, r["query_id"]) if version == "staged" else None)
                        runs.append(r)
                        print(f"round {i} {ds.spec.fmt:>7} {version:>6}: {r['wall_ms']:8.0f} ms"
                              + (f", publish window {r['window_ms']:.0f} ms" if r["window_ms"] is not None else ""),
                              flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)], check=False,
                       capture_output=True)
    summary: dict[str, Any] = {}
    for fmt in ("parquet", "csv.gz"):
        windows = [r["window_ms"] for r in runs if r["format"] == fmt and r["window_ms"] is not None]
        summary[fmt] = {
            **paired_summary(runs, fmt),
            "publish_window_ms_median": round(statistics.median(windows)) if windows else None,
            "publish_window_ms_max": round(max(windows)) if windows else None,
        }
    report = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "note": args.note, "rows": args.rows, "files": args.files, "rounds": args.rounds,
              "baseline": args.baseline, "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("| format | direct (median) | staged (median) | staged / direct (median of rounds) | publish window |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for fmt, s in summary.items():
        print(f"| {fmt} | {s['direct_median_ms']} ms | {s['staged_median_ms']} ms | {s['ratio_median']} | "
              f"{s['publish_window_ms_median']} ms (max {s['publish_window_ms_max']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

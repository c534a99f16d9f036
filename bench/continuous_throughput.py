"""Throughput side by side at the aimed sizes: ClickHouse's S3Queue and the provider's ledger load, on the same files.

On ``LocalStack(keeper=True)`` (one ClickHouse node, moto's S3, Debian's ZooKeeper): ``--small-files`` files of
``--small-rows`` rows (10,000 of 500) put first, then S3Queue (unordered and ordered, :func:`bench.s3queue_load.
throughput_small`) and the provider's ``S3ToClickHouseOperator`` with the file ledger (``skip_loaded=True``,
``max_files_per_load=1000``: the continuous example DAG's settings, one task's load of everything that landed) each
load them into their own MergeTree table; then ``--large-mb`` MB of CSV in 64 MB files (1 GB), loaded by an unordered
queue and by the operator. For each: the seconds from the start (the queue's ``CREATE``, the operator's ``execute``)
to the last row readable, rows/s, MB/s, the parts the load made (``system.part_log``), its inserts, and each file's
rows once. S3Queue runs first on each set (the files are then warm in moto for the operator's read: said in the
result). Writes ``--out`` (``bench/results/continuous_throughput.json``) and prints a table.

    .venv/bin/python -m bench.continuous_throughput                     # 10,000 small files, 1 GB (~6 min)
    .venv/bin/python -m bench.continuous_throughput --small-files 500 --large-mb 128
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.local import LocalStack
from bench import s3queue_load as load
from bench import s3queue_scenarios as sc
from bench.common import fake_context

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "continuous_throughput.json"


def provider_load(stack: LocalStack, prefix: str, files: int, rows_per_file: int, *, max_files_per_load: int | None,
                  say: sc.Say = print) -> dict[str, Any]:  # fmt: skip
    """The operator's ledger load of every file under ``prefix`` into a fresh table: its figures."""
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

    ch, tag = stack.clickhouse_client(), uuid.uuid4().hex[:8]
    table = f"default.p_{tag}"
    ch.execute(f"CREATE TABLE {table} ({sc.STRUCTURE}) ENGINE = MergeTree ORDER BY (file, id)")
    op = S3ToClickHouseOperator(task_id="load", s3_uri=f"s3://{sc.BUCKET}/{prefix}*.csv", table=table, format="CSV",
                                structure=sc.STRUCTURE, skip_loaded=True, max_files_per_load=max_files_per_load,
                                on_bad_file="set_aside")  # fmt: skip
    since = ch.execute("SELECT now64(6)")[0][0]
    began = time.monotonic()
    x = op.execute(fake_context(f"throughput-{tag}"))
    took = time.monotonic() - began
    ch.execute("SYSTEM FLUSH LOGS")
    parts = ch.execute("SELECT count() FROM system.part_log WHERE event_type = 'NewPart' AND database = 'default' AND "
                       "(table = %(t)s OR startsWith(table, '_s3ch_stage_')) AND event_time_microseconds >= %(s)s",
                       {"t": table.split(".")[1], "s": since})[0][0]  # fmt: skip
    active = ch.execute(f"SELECT count() FROM system.parts WHERE active AND database = 'default' "
                        f"AND table = '{table.split('.')[1]}'")[0][0]  # fmt: skip
    per_file = dict(ch.execute(f"SELECT file, count() FROM {table} GROUP BY file"))
    size = sum(o["Size"] for page in stack.s3_client().get_paginator("list_objects_v2").paginate(
        Bucket=sc.BUCKET, Prefix=prefix) for o in page.get("Contents", []))  # fmt: skip
    once = len(per_file) == files and all(c == rows_per_file for c in per_file.values())
    inserts = max(1, int((x.get("ledger") or {}).get("chunks") or 1))
    say(f"provider: {files} files, {size / 1e6:.0f} MB in {took:.1f} s, {files * rows_per_file / took:,.0f} rows/s, "
        f"{inserts} inserts, {parts} parts; each once: {once}")
    return {"files": files, "rows_per_file": rows_per_file, "bytes": size, "load_s": round(took, 1),
            "rows_per_s": round(files * rows_per_file / took), "mb_per_s": round(size / 1e6 / took, 1),
            "inserts": inserts, "parts_made": int(parts), "active_parts_at_end": int(active), "exactly_once": once,
            "max_files_per_load": max_files_per_load, "written_rows": x.get("written_rows"),
            "phases_ms": x.get("phases_ms")}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small-files", type=int, default=10_000)
    p.add_argument("--small-rows", type=int, default=500)
    p.add_argument("--large-mb", type=int, default=1024)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    say = lambda line: print(f"[throughput] {line}", flush=True)  # noqa: E731
    started = time.time()
    with LocalStack(nodes=1, keeper=True) as stack, stack.environ():
        stack.create_bucket(sc.BUCKET)
        sc.enable_logs(stack)
        version = stack.clickhouse_client().execute("SELECT version()")[0][0]
        small = load.throughput_small(stack, args.small_files, args.small_rows, ["unordered", "ordered"], say=say)
        small_provider = provider_load(stack, small[0]["prefix"], args.small_files, args.small_rows,
                                       max_files_per_load=1000, say=say)  # fmt: skip
        large = load.throughput_large(stack, args.large_mb, say=say)
        large_provider = provider_load(stack, large["prefix"], large["files"], large["rows_per_file"],
                                       max_files_per_load=None, say=say)  # fmt: skip
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "machine": platform.platform(),
        "python": platform.python_version(), "clickhouse": version,
        "command": shlex.join(["python", "-m", "bench.continuous_throughput",
                               *(argv if argv is not None else sys.argv[1:])]),
        "order": "S3Queue first on each set, then the operator (the files warm in moto for it)",
        "small": {"s3queue": small, "provider": small_provider},
        "large": {"s3queue": large, "provider": large_provider},
        "duration_s": round(time.time() - started, 1),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    for name in ("small", "large"):
        for who, r in [*((f"S3Queue {q['mode']}", q) for q in (out[name]["s3queue"] if name == "small"
                                                               else [{**out[name]["s3queue"], "mode": "unordered"}])),
                       ("provider", out[name]["provider"])]:  # fmt: skip
            print(f"{name:<6} {who:<18} {r['load_s']:>7.1f} s {r['rows_per_s']:>12,} rows/s "
                  f"{r.get('parts_made', '-'):>5} parts  once: {r['exactly_once']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

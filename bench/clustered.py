"""Blocks past 256 MiB on files clustered by the partition key, and on the same rows unclustered.

``python -m bench.clustered --era-years 2`` writes ``bench/large.py``'s 3.3 GB dataset (320 Parquet files, 96
monthly partitions) with each file spanning ``--era-years`` years of months (2: 24 of 96 months, as the large
section loads it; 8: every file across all 96), then loads it into fresh posts tables (monthly partitions),
interleaved over ``--rounds`` rounds (each round in the other order): ClickHouse's defaults, the plan's other
settings with 256 MiB and with 1 GiB blocks (2 threads), and the plan itself (its block from the rule that knows
partitions: ``core/plan/settings.py``). ``--labels`` keeps some of
those beside the defaults; ``--variant`` adds the defaults' statement with some settings (one of the plan's alone).
Every load lifts ``max_partitions_per_insert_block``. Per load: the insert's seconds and peak memory
(``system.query_log``) and the active parts right after it. Writes ``bench/results/clustered/era<N>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from bench.common import BUCKET, DATABASE, Planned
from bench.ladder import COMMON, grid_settings, parse_variants
from bench.large import LargeSpec, part_counts, write_large
from bench.measure import new_table, run_sql_insert

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.clustered", description=__doc__.splitlines()[0])
    parser.add_argument("--era-years", type=int, default=2, choices=(1, 2, 4, 8),
                        help="years of months each file spans (2: 24 of 96 months; 8: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--labels", help="only these loads beside the defaults (of t2-256M, t2-1G, plan)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:SETTING=VALUE,...",
                        help="one more load: the defaults' statement with these settings (repeatable), e.g. "
                        "rows0:min_insert_block_size_rows=0")
    args = parser.parse_args(argv)
    labels = set(args.labels.split(",")) if args.labels else None
    variants = parse_variants(args.variant)
    out_path = args.out or ROOT / "bench" / "results" / "clustered" / f"era{args.era_years}.json"
    from airflow_provider_s3ch.local import LocalStack
    from airflow_provider_s3ch.local.sample import posts_ddl

    spec = LargeSpec(era_years=args.era_years, files_per_era=320 * args.era_years // 8)
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.platform(),
                           "cores": os.cpu_count(), "era_years": args.era_years, "loads": []}
    with tempfile.TemporaryDirectory(prefix="s3ch-clustered-") as work, \
            LocalStack(nodes=1, workdir=Path(work) / "stack") as stack, stack.environ():
        client = stack.clickhouse_client(send_receive_timeout=3600)
        client.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        stack.create_bucket(BUCKET)
        ds = write_large(spec, stack.s3_client(), BUCKET, print)
        probe = new_table(client, DATABASE, posts_ddl, "probe")
        planned = Planned(stack, ds, probe)
        plan = dict(planned.settings)
        out.update(files=len(ds.keys), bytes=ds.bytes, rows=ds.spec.rows, plan_settings=plan,
                   plan_block=plan["min_insert_block_size_bytes"],
                   plan_reason=planned.plan.settings.reasons["min_insert_block_size_bytes"])
        print(f"plan: {plan['min_insert_block_size_bytes'] / MiB:.0f} MiB: {out['plan_reason']}", flush=True)
        runs = [("defaults", dict(COMMON)), ("t2-256M", {**grid_settings(plan, 2, 256 * MiB, False), **COMMON}),
                ("t2-1G", {**grid_settings(plan, 2, 1024 * MiB, False), **COMMON}), ("plan", {**plan, **COMMON})]
        runs = [run for run in runs if labels is None or run[0] in labels or run[0] == "defaults"]
        runs += [(name, {**COMMON, **extra}) for name, extra in variants.items()]
        for rnd in range(args.rounds):
            for label, settings in runs if rnd % 2 == 0 else runs[::-1]:
                table = new_table(client, DATABASE, posts_ddl, f"clustered_{label.replace('-', '_')}")
                r = run_sql_insert(client, DATABASE, table, planned.source, settings, ready=False)
                parts = part_counts(client, DATABASE, table)["parts"]
                client.execute(f"DROP TABLE `{DATABASE}`.`{table}` SYNC")
                out["loads"].append({"round": rnd + 1, "label": label, "duration_s": r["duration_s"],
                                     "peak_memory": r["peak_memory"], "rows": r["rows"], "parts": parts,
                                     "ok": r["ok"]})
                print(f"r{rnd + 1} {label:>9}: {r['duration_s']:7.2f} s  peak {r['peak_memory'] / MiB:6.0f} MiB  "
                      f"parts {parts}", flush=True)
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

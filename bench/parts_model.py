"""The parts an insert writes, predicted (``core.plan.parts``) against what the engine reports writing.

``python -m bench.parts_model [--out bench/results/parts_model.json]``

Three layouts of posts, each loaded with ClickHouse's defaults but ``min_insert_block_size_bytes`` (64 MiB,
256 MiB, 1 GiB) into fresh tables, every load lifting ``max_partitions_per_insert_block``:

- ``ladder``: the size ladder's 1 GB rung (20 Parquet files over 120 months, in order, each spanning 6), into 120,
  12 and 1 partitions (``bench/ladder.py``'s keys);
- ``eras``: ~0.8 GB in 320 files over 96 months, each file spanning the 24 months of its era (``bench/large.py``'s
  layout at a quarter of its rows), into monthly partitions;
- ``all_months``: the same rows with every file across all 96 months.

Per load: the parts the insert wrote (``InsertedWideParts``, ``InsertedCompactParts`` in ``system.query_log``) and
its seconds; beside them :func:`~airflow_provider_s3ch.core.plan.parts.predicted_parts` from each file's rows and
the partitions they fall in, as the engine reads them (``_file``, ``count()`` and the partition key's values of
``s3()``, in the order of the keys), each file's bytes its share of the insert's ``written_bytes``.
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

from bench.common import BUCKET, DATABASE
from bench.datasets import DatasetSpec, RowPool, node_files_dir, write_dataset
from bench.ladder import COMMON, MONTHS, ROWS, ddl_for, log
from bench.large import LargeSpec, write_large
from bench.measure import new_table, run_sql_insert

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
BLOCKS = (64 * MiB, 256 * MiB, 1024 * MiB)


def file_partitions(client: Any, source: str, key: str) -> list[tuple[str, int, frozenset[str]]]:
    """Each file's name, rows and the partition ids its rows fall in, in the order of the keys."""
    rows = client.execute(f"SELECT _file, count(), groupUniqArray(toString({key})) FROM {source} "
                          "GROUP BY _file ORDER BY _file")
    return [(name, int(n), frozenset(ids)) for name, n, ids in rows]


def measure(client: Any, layout: str, source: str, ddl: Any, partitions: int) -> list[dict[str, Any]]:
    from airflow_provider_s3ch.core.plan.parts import predicted_parts

    probe = new_table(client, DATABASE, ddl, f"pm_{layout}_{partitions}_probe")
    key = client.execute("SELECT partition_key FROM system.tables WHERE database = %(d)s AND name = %(t)s",
                         {"d": DATABASE, "t": probe})[0][0] or "tuple()"
    client.execute(f"DROP TABLE `{DATABASE}`.`{probe}` SYNC")
    files = file_partitions(client, source, key)
    total_rows = sum(n for _, n, _ in files)
    out = []
    for block in BLOCKS:
        table = new_table(client, DATABASE, ddl, f"pm_{layout}_{partitions}_{block // MiB}")
        try:
            r = run_sql_insert(client, DATABASE, table, source, {**COMMON, "min_insert_block_size_bytes": block},
                               ready=False)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        per_row = r["written_bytes"] / max(1, total_rows)
        predicted = predicted_parts([(int(n * per_row), ids) for _, n, ids in files], block)
        one = {"layout": layout, "partitions": partitions, "block_mib": block // MiB, "files": len(files),
               "insert_s": r["duration_s"], "written_bytes": r["written_bytes"], "ok": r["ok"],
               "wide_parts": r["wide_parts"], "compact_parts": r["compact_parts"],
               "parts": r["wide_parts"] + r["compact_parts"],
               "predicted_parts": predicted.parts, "predicted_wide_parts": predicted.wide_parts,
               "predicted_blocks": predicted.blocks}
        one["predicted_over_measured"] = round(predicted.parts / one["parts"], 3) if one["parts"] else None
        out.append(one)
        log(f"{layout} p{partitions} block {block // MiB} MiB: {one['insert_s']} s, parts {one['wide_parts']} wide + "
            f"{one['compact_parts']} compact = {one['parts']}; predicted {predicted.parts} ({predicted.wide_parts} "
            f"wide, {predicted.blocks} blocks): {one['predicted_over_measured']}x")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.parts_model", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "parts_model.json")
    args = parser.parse_args(argv)
    from airflow_provider_s3ch.local import LocalStack
    from airflow_provider_s3ch.local.sample import posts_ddl

    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.platform(),
                           "cores": os.cpu_count(), "loads": []}
    with tempfile.TemporaryDirectory(prefix="s3ch-parts-") as work, \
            LocalStack(nodes=1, workdir=Path(work) / "stack") as stack, stack.environ():
        client = stack.clickhouse_client(send_receive_timeout=3600)
        client.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        out["clickhouse"] = client.execute("SELECT version()")[0][0]
        stack.create_bucket(BUCKET)
        creds = f"'{stack.s3_access_key}', '{stack.s3_secret_key}'"

        def source(prefix: str) -> str:
            return f"s3('{stack.s3_endpoint}/{BUCKET}/{prefix}*.parquet', {creds}, 'Parquet')"

        pool = RowPool(ROWS["1GB"] // MONTHS)
        ladder = write_dataset(DatasetSpec("pm_ladder_1gb", "parquet", ROWS["1GB"], 20, "the ladder's 1 GB rung"),
                               pool, stack.s3_client(), BUCKET, node_files_dir(stack))
        del pool
        for p in (120, 12, 1):
            out["loads"] += measure(client, "ladder", source(ladder.prefix), ddl_for(p), p)
        for layout, era_years in (("eras", 2), ("all_months", 8)):
            spec = LargeSpec(name=f"pm_{layout}", repeats_per_year=1, era_years=era_years,
                             files_per_era=320 * era_years // 8)
            ds = write_large(spec, stack.s3_client(), BUCKET, log)
            out["loads"] += measure(client, layout, source(ds.prefix), posts_ddl, spec.partitions)
            args.out.write_text(json.dumps(out, indent=2) + "\n")
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    log(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

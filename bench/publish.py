"""What publishing a staging table's partitions into its target costs, each exact way the engine offers.

A staged load (modes ``append``, ``replace_partitions``) inserts into a staging table, then publishes: the
staging table's partitions go into the target and the staging table is dropped
(:func:`airflow_provider_s3ch.core.staging.finalize_statements`). ``python -m bench.publish`` measures, on the
real local ClickHouse, for 1, 12, 120 and 360 partitions, each way to publish:

- ``move_batched``: today's: ``ALTER TABLE staging MOVE PARTITION ID .. TO TABLE target, ...`` per
  :data:`~airflow_provider_s3ch.core.staging.PARTITIONS_PER_ALTER` partitions, then ``DROP TABLE staging``;
- ``move_one_alter``: one ``ALTER`` with every ``MOVE`` command; ``move_per_partition``: one ``ALTER`` each;
- ``attach_from``: ``ALTER TABLE target ATTACH PARTITION ID .. FROM staging, ...`` (hard-linked copies; the
  staging table keeps its parts), then the drop; ``attach_all``: ``ATTACH PARTITION ALL FROM staging``;
- ``replace``: ``ALTER TABLE target REPLACE PARTITION ID .. FROM staging, ...`` (``replace_partitions``);
- ``move_batch_50``, ``move_batch_20``, ``move_batch_5``: today's with fewer commands in each ``ALTER``;
- the forms the engine refuses (``MOVE PARTITION ALL``, ``REPLACE PARTITION ALL``), with its error;
- fewer, larger staging parts: the same ways with 1, 3 and 8 parts in each partition of the staging table.

The data: the posts table (``airflow_provider_s3ch.local.sample``), monthly partitions, filled with
``INSERT ... SELECT FROM numbers()``: each insert is one block that touches every partition, so ``k`` inserts
leave ``k`` parts in each. The tables set ``min_bytes_for_wide_part = 1``: every part that holds rows is
Wide, as the parts of a ~1 GB load are (each over the default 10 MB), on a few hundred MB here. Each run
copies the prepared parts into fresh tables (``ATTACH PARTITION ALL FROM``, hard links): the target holds one
part of earlier rows in each partition, the staging table ``k`` parts of new rows; merges are stopped on
both, as nothing else then changes the part counts while the publish runs (``--merges`` lets them run).

Per way: the wall time of its statements (the median of ``--repeats`` runs, fresh tables each), the cost per
partition, the statements' ``query_duration_ms`` from ``system.query_log``, and its guarantees: exact (the
target holds every row once: row count and ``sum(cityHash64(*))`` against the expected), and a retry after a
crash mid-way (half of the partition commands applied, or all of them but not the drop), which repeats the
whole publish, is exact too; the staging table's mark (its comment) is there for the retry to read.

Writes ``bench/results/publish.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.sql import (
    render_drop_table,
    render_move_partitions,
    render_replace_partitions,
    render_set_comment,
    render_table,
)
from airflow_provider_s3ch.core.staging import PARTITIONS_PER_ALTER

DATABASE = "bench_publish"

#: Rows each part holds in each partition.
ROWS_PER_PART = 500

#: The staging table's comment: what a finished insert leaves on it (the mark a retry reads).
MARK = "s3ch-staging:bench;filled"

#: The ways every shape measures; the batch sizes are measured at 120 and 360 partitions.
MAIN_WAYS = ("move_batched", "move_one_alter", "move_per_partition", "attach_from", "attach_all", "replace")
BATCH_WAYS = ("move_batched", "move_one_alter", "move_batch_50", "move_batch_20", "move_batch_5")
#: The ways the parts sweep measures.
SWEEP_WAYS = ("move_batched", "move_batch_20", "attach_from", "replace")

#: (partitions, parts per partition, runs: None for ``--repeats``, ways: None for all) of each shape measured:
#: 3 parts a partition is what the plan's ~1 GB-class inserts leave (bench/README.md, bench-large: ~3.1 parts a
#: partition written with the plan's blocks, ~5.4 with the defaults'); 1 and 8 show fewer and more parts.
SHAPES: list[tuple[int, int, int | None, tuple[str, ...] | None]] = [
    (1, 3, None, MAIN_WAYS), (12, 3, None, MAIN_WAYS), (120, 3, None, MAIN_WAYS + BATCH_WAYS[2:]),
    (360, 3, 3, ("move_batched", "move_one_alter", "move_batch_20", "attach_from")), (120, 1, None, SWEEP_WAYS),
    (120, 8, 3, SWEEP_WAYS[:3]),
]

#: Statements the engine may refuse: each is tried once, its error recorded.
ALL_AT_ONCE = {
    "move_partition_all": "ALTER TABLE {staging} MOVE PARTITION ALL TO TABLE {target}",
    "replace_partition_all": "ALTER TABLE {target} REPLACE PARTITION ALL FROM {staging}",
    "attach_partition_all": "ALTER TABLE {target} ATTACH PARTITION ALL FROM {staging}",
}

Statements = Callable[[TableRef, TableRef, list[str]], list[str]]


def _chunks(ids: list[str], size: int) -> list[list[str]]:
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def _attach(target: TableRef, staging: TableRef, ids: list[str]) -> str:
    source = render_table(staging)
    return f"ALTER TABLE {render_table(target)} " + ", ".join(
        f"ATTACH PARTITION ID '{pid}' FROM {source}" for pid in ids)


#: Each way: the partition statements for the given ids (the drop of the staging table follows them).
WAYS: dict[str, Statements] = {
    "move_batched": lambda s, t, ids: [render_move_partitions(s, t, b) for b in _chunks(ids, PARTITIONS_PER_ALTER)],
    "move_one_alter": lambda s, t, ids: [render_move_partitions(s, t, ids)],
    "move_per_partition": lambda s, t, ids: [render_move_partitions(s, t, [pid]) for pid in ids],
    "attach_from": lambda s, t, ids: [_attach(t, s, ids)],
    "attach_all": lambda s, t, ids: [f"ALTER TABLE {render_table(t)} ATTACH PARTITION ALL FROM {render_table(s)}"],
    "replace": lambda s, t, ids: [render_replace_partitions(t, s, ids)],
    # today's, with fewer commands in each ALTER
    "move_batch_50": lambda s, t, ids: [render_move_partitions(s, t, b) for b in _chunks(ids, 50)],
    "move_batch_20": lambda s, t, ids: [render_move_partitions(s, t, b) for b in _chunks(ids, 20)],
    "move_batch_5": lambda s, t, ids: [render_move_partitions(s, t, b) for b in _chunks(ids, 5)],
}

#: What the target holds after a way: the earlier rows and the new ones, or the new ones alone.
REPLACES = {"replace"}


class Bench:
    """The prepared parts of each shape and the fresh tables of each run, on one ClickHouse."""

    def __init__(self, client: Any, merges: bool) -> None:
        self.client, self.merges = client, merges
        self.seeds: dict[tuple[int, int], tuple[TableRef, TableRef]] = {}

    def q(self, sql: str, query_id: str | None = None) -> Any:
        return self.client.execute(sql, query_id=query_id) if query_id else self.client.execute(sql)

    def create(self, name: str) -> TableRef:
        from airflow_provider_s3ch.local.sample import posts_ddl

        table = TableRef(database=DATABASE, name=name)
        self.q(posts_ddl(render_table(table)).strip() + " SETTINGS min_bytes_for_wide_part = 1")
        return table

    def fill(self, table: TableRef, partitions: int, parts: int, first: int) -> None:
        """``parts`` inserts of one block each, every block in all ``partitions`` months."""
        rows = partitions * ROWS_PER_PART
        for k in range(parts):
            start = first + k * rows
            self.q(
                f"INSERT INTO {render_table(table)} (Id, PostTypeId, CreationDate, Score, Body, Title, Tags, "
                "ContentLicense) SELECT number, 1 + number % 2, toDateTime64('2000-01-01 00:00:00', 3, 'UTC') "
                f"+ toIntervalMonth(number % {partitions}) + toIntervalSecond(number % 2000000), number % 100, "
                "repeat('body ', 10 + number % 40), concat('title ', toString(number)), '<sql><clickhouse>', "
                f"'CC BY-SA 4.0' FROM numbers({start}, {rows}) SETTINGS max_partitions_per_insert_block = 1000, "
                f"max_insert_threads = 1, max_threads = 1, max_block_size = {rows}, min_insert_block_size_rows = 0, "
                "min_insert_block_size_bytes = 0")

    def seed(self, partitions: int, parts: int) -> tuple[TableRef, TableRef]:
        """The shape's prepared tables (made once): the target's earlier rows (one part a partition) and the
        staging table's new rows (``parts`` parts a partition)."""
        if (partitions, parts) not in self.seeds:
            old, new = self.create(f"seed_old_{partitions}_{parts}"), self.create(f"seed_new_{partitions}_{parts}")
            for table in (old, new):
                self.q(f"SYSTEM STOP MERGES {render_table(table)}")
            self.fill(old, partitions, 1, 0)
            self.fill(new, partitions, parts, 10_000_000)
            self.seeds[partitions, parts] = old, new
        return self.seeds[partitions, parts]

    def fresh(self, partitions: int, parts: int) -> tuple[TableRef, TableRef, list[str]]:
        """A fresh target and staging table of the shape, the staging table marked; its partition ids."""
        old, new = self.seed(partitions, parts)
        tag = uuid.uuid4().hex[:8]
        target, staging = self.create(f"target_{tag}"), self.create(f"staging_{tag}")
        if not self.merges:
            for table in (target, staging):
                self.q(f"SYSTEM STOP MERGES {render_table(table)}")
        self.q(f"ALTER TABLE {render_table(target)} ATTACH PARTITION ALL FROM {render_table(old)}")
        self.q(f"ALTER TABLE {render_table(staging)} ATTACH PARTITION ALL FROM {render_table(new)}")
        self.q(render_set_comment(staging, MARK))
        ids = [str(r[0]) for r in self.q(
            "SELECT DISTINCT partition_id FROM system.parts WHERE active "
            f"AND rows > 0 AND database = '{DATABASE}' AND table = '{staging.name}' ORDER BY 1")]
        return target, staging, ids

    def digest(self, table: TableRef) -> tuple[int, int]:
        count, digest = self.q(f"SELECT count(), sum(cityHash64(*)) FROM {render_table(table)}")[0]
        return int(count), int(digest)

    def parts(self, table: TableRef) -> int:
        return int(self.q("SELECT count() FROM system.parts WHERE active AND rows > 0 AND "
                          f"database = '{DATABASE}' AND table = '{table.name}'")[0][0])

    def comment(self, table: TableRef) -> str | None:
        rows = self.q(f"SELECT comment FROM system.tables WHERE database = '{DATABASE}' AND name = '{table.name}'")
        return str(rows[0][0]) if rows else None

    def drop(self, *tables: TableRef) -> None:
        for table in tables:
            self.q(render_drop_table(table))

    def expected(self, way: str, target: TableRef, staging: TableRef) -> tuple[int, int]:
        old, new = self.digest(target), self.digest(staging)
        if way in REPLACES:  # every partition of the target is one the staging table holds
            return new
        return old[0] + new[0], (old[1] + new[1]) % 2**64

    def timed_run(self, way: str, partitions: int, parts: int, run: str) -> dict[str, Any]:
        """One publish on fresh tables: its statements' wall times and query ids; exact or not."""
        target, staging, ids = self.fresh(partitions, parts)
        want = self.expected(way, target, staging)
        staged_parts = self.parts(staging)
        statements = [*WAYS[way](staging, target, ids), render_drop_table(staging)]
        walls, query_ids = [], []
        for i, sql in enumerate(statements):
            query_id = f"publish-{run}-{i}"
            began = time.perf_counter()
            self.q(sql, query_id)
            walls.append(time.perf_counter() - began)
            query_ids.append(query_id)
        got = self.digest(target)
        self.drop(target, staging)
        return {"wall_s": sum(walls), "alter_s": sum(walls[:-1]), "drop_s": walls[-1], "statements": len(statements),
                "query_ids": query_ids, "exact": got == want, "staged_parts": staged_parts, "partitions": len(ids)}

    def retry_check(self, way: str, partitions: int, parts: int) -> dict[str, Any]:
        """A crash mid-way, then a retry that repeats the whole publish: is the target exact?

        Two crash points: half of the partition commands applied (the first half of the partitions as one
        statement), and every partition command applied but not the drop of the staging table. A retry finds
        the staging table (with its mark) and runs the way's statements again, then the drop.
        """
        out: dict[str, Any] = {}
        for point in ("half", "before_drop"):
            target, staging, ids = self.fresh(partitions, parts)
            want = self.expected(way, target, staging)
            try:
                done = WAYS[way](staging, target, ids[:max(1, len(ids) // 2)]) if point == "half" else WAYS[way](
                    staging, target, ids)
                for sql in done:
                    self.q(sql)
                mark_kept = self.comment(staging) == MARK
                for sql in [*WAYS[way](staging, target, ids), render_drop_table(staging)]:
                    self.q(sql)
                got = self.digest(target)
                out[point] = {"exact": got == want, "rows": got[0], "expected_rows": want[0], "mark_kept": mark_kept}
            except Exception as exc:  # noqa: BLE001 - a refused retry is a result
                out[point] = {"exact": False, "error": _error(exc)}
            finally:
                self.drop(target, staging)
        return out

    def durations(self, query_ids: list[str]) -> dict[str, int]:
        self.q("SYSTEM FLUSH LOGS")
        rows = self.q("SELECT query_id, query_duration_ms FROM system.query_log WHERE type = 'QueryFinish' AND "
                      f"query_id IN ({', '.join(repr(q) for q in query_ids)})")
        return {str(q): int(ms) for q, ms in rows}


def _error(exc: BaseException) -> str:
    return str(exc).split("Stack trace")[0].strip().replace("\n", " ")[:300]


def measure(bench: Bench, ways: tuple[str, ...], partitions: int, parts: int, repeats: int) -> list[dict[str, Any]]:
    """``repeats`` rounds of one shape, each round every way in turn (a drift in the machine's load hits them
    alike): per way the medians, query_log's figures, exactness."""
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    for n in range(repeats):
        for way in ways:
            runs[way].append(bench.timed_run(way, partitions, parts,
                                             f"{way}-{partitions}-{parts}-{n}-{uuid.uuid4().hex[:6]}"))
    logged = bench.durations([q for way in ways for run in runs[way] for q in run["query_ids"]])
    return [_figures(way, partitions, runs[way], logged) for way in ways]


def _figures(way: str, partitions: int, runs: list[dict[str, Any]], logged: dict[str, int]
             ) -> dict[str, Any]:
    per_run_ms = [sum(logged.get(q, 0) for q in run["query_ids"]) for run in runs]
    alter_ms = [sum(logged.get(q, 0) for q in run["query_ids"][:-1]) for run in runs]
    wall = statistics.median(r["wall_s"] for r in runs)
    return {
        # the parts a partition holds, as counted (a block of numbers() is at most max_block_size rows)
        "way": way, "partitions": partitions, "parts_per_partition": round(runs[0]["staged_parts"] / partitions, 2),
        "staged_parts": runs[0]["staged_parts"], "statements": runs[0]["statements"], "runs": len(runs),
        "wall_s_median": round(wall, 4), "wall_s": [round(r["wall_s"], 4) for r in runs],
        "alter_s_median": round(statistics.median(r["alter_s"] for r in runs), 4),
        "drop_s_median": round(statistics.median(r["drop_s"] for r in runs), 4),
        "per_partition_ms": round(wall * 1000 / partitions, 2),
        "per_part_ms": round(wall * 1000 / runs[0]["staged_parts"], 2),
        "query_log_ms_median": statistics.median(per_run_ms), "query_log_alter_ms_median": statistics.median(alter_ms),
        "exact": all(r["exact"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 and 12 partitions, one run each")
    parser.add_argument("--merges", action="store_true", help="leave merges running on the fresh tables")
    parser.add_argument("--out", default="bench/results/publish.json")
    parser.add_argument("--shapes", help="only these shapes, e.g. 360x3,120x1 (partitions x parts a partition)")
    parser.add_argument("--workdir", help="where the node keeps its data (e.g. /dev/shm: a file system without the "
                        "disk's metadata latency); the system's temporary directory by default")
    args = parser.parse_args()
    from airflow_provider_s3ch.local import LocalStack

    shapes = SHAPES[:2] if args.quick else SHAPES
    if args.shapes:
        wanted = {tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")}
        shapes = [shape for shape in SHAPES if shape[:2] in wanted]
    repeats = 1 if args.quick else args.repeats
    started = time.time()
    out: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "machine": platform.platform(),
        "repeats": repeats, "rows_per_part": ROWS_PER_PART, "partitions_per_alter": PARTITIONS_PER_ALTER,
        "all_at_once": {}, "results": [], "merges_running": [], "retry_after_crash": {},
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every section: a run cut short keeps what it measured
        out["duration_s"] = round(time.time() - started, 1)
        path.write_text(json.dumps(out, indent=2) + "\n")

    out["workdir"] = args.workdir or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="bench-publish-", dir=args.workdir) as workdir, \
            LocalStack(nodes=1, workdir=workdir) as stack:
        client = stack.clickhouse_client()
        client.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        bench = Bench(client, merges=args.merges)
        out["engine"] = f"chdb-core, ClickHouse {client.execute('SELECT version()')[0][0]}"
        target, staging, _ = bench.fresh(12, 1)
        for name, template in ALL_AT_ONCE.items():
            try:
                bench.q(template.format(staging=render_table(staging), target=render_table(target)))
                out["all_at_once"][name] = "accepted"
            except Exception as exc:  # noqa: BLE001 - the engine's refusal is the result
                out["all_at_once"][name] = _error(exc)
        bench.drop(target, staging)
        for partitions, parts, runs, ways in shapes:
            for row in measure(bench, ways or tuple(WAYS), partitions, parts, min(runs or repeats, repeats)):
                out["results"].append(row)
                print(_row(row), flush=True)
            save()
        out["retry_after_crash"] = {way: bench.retry_check(way, 12, 3) for way in MAIN_WAYS}
        save()
        if not args.quick:  # merges running on the staging table, as after a real insert
            bench.merges = True
            out["merges_running"] = measure(bench, ("move_batched", "move_batch_20", "attach_from"), 120, 3, repeats)
            bench.merges = args.merges
            save()
    print(report(out))


def _row(r: dict[str, Any]) -> str:
    return (f"| {r['way']} | {r['partitions']} | {r['parts_per_partition']} | {r['statements']} | "
            f"{r['wall_s_median'] * 1000:.0f} | {r['alter_s_median'] * 1000:.0f} | {r['drop_s_median'] * 1000:.0f} | "
            f"{r['per_partition_ms']:.1f} | {r['per_part_ms']:.1f} | {r['query_log_ms_median']:.0f} | {r['runs']} | "
            f"{'yes' if r['exact'] else 'NO'} |")


def report(out: dict[str, Any]) -> str:
    """The markdown table of a run's figures."""
    lines = [
        f"Publish, {out['engine']}, median of the runs (fresh tables each), {out['rows_per_part']} rows a part",
        "",
        "| way | partitions | parts/partition | statements | wall ms | ALTERs ms | drop ms | ms/partition | ms/part | "
        "query_log ms | runs | exact |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *(_row(r) for r in out["results"]),
    ]
    if out["merges_running"]:
        lines += ["", "Merges running on the fresh tables (120 partitions, 3 parts each):", "",
                  *(_row(r) for r in out["merges_running"])]
    if out["retry_after_crash"]:
        lines += ["", "| way | retry after half the commands | retry before the drop | mark kept |",
                  "|---|---|---|---|"]
    for way, checks in out["retry_after_crash"].items():
        cells = [("exact" if c.get("exact") else f"NOT exact ({c.get('rows', '?')} rows, want "
                  f"{c.get('expected_rows', '?')})" if "error" not in c else f"error: {c['error'][:80]}")
                 for c in (checks["half"], checks["before_drop"])]
        lines.append(f"| {way} | {cells[0]} | {cells[1]} | "
                     f"{'yes' if all(c.get('mark_kept') for c in checks.values()) else 'no'} |")
    lines += ["", "All partitions in one command:", ""]
    lines += [f"- `{name}`: {text}" for name, text in out["all_at_once"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

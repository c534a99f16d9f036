"""The size ladder: the plan against a grid and ClickHouse's defaults at the sizes users load.

``python -m bench.ladder [--sizes 100MB,1GB] [--formats parquet,csv.gz] [--partitions 1,12,120]``

Each rung is one dataset (Stack Overflow-like posts, :mod:`bench.datasets`) of ``--files`` files spanning
120 months, in Parquet (snappy) or gzip'd CSV; the same rows give about the same bytes in both formats
(~3,700 rows a MB). Each rung is loaded into three tables that differ only in the partition key:

- ``120``: ``toYYYYMM(CreationDate)`` (monthly, as the guide's posts table);
- ``12``: ``toStartOfInterval(CreationDate, INTERVAL 10 MONTH)``;
- ``1``: ``tuple()``.

At each point (rung x partitions), one round, interleaved, each load into a fresh table:

- ``defaults``: ``INSERT … SELECT * FROM s3(…)`` with no settings (what a user writes);
- ``plan``: the same statement with the plan's settings (``make_plan`` for that table and these files);
- the grid: the plan's settings with ``max_insert_threads`` x ``min_insert_block_size_bytes`` of
  :data:`GRID`, and with ClickHouse's default download buffer instead of the plan's (``*-buf10``);
- ``defaults-again``: the defaults' statement once more: how far two identical loads fall apart here;
- ``operator``: ``S3ToClickHouseOperator(...).execute`` (listing, plan, staging table, insert, publish,
  figures), its wall time against ``defaults``' client wall time; ``operator-compact``: the same with
  ``compact_parts=True`` (its staging table writes parts under 64 MiB Compact, ``min_bytes_for_wide_part``; off by
  default: those parts stay Compact in the user's table until merged), for what publishing costs with one file a
  part.

Per load: the insert's ``query_duration_ms`` and ``memory_usage`` (``system.query_log``). Per point: the
fastest load whose peak fits the plan's budget, the plan against it (within 5 %?), the lightest load within
5 % of the fastest, and whether the plan's extra memory over the defaults bought >= 5 % speed; and each load
against the defaults of its own round (``paired``: the median ratio over the rounds and its range).
``--labels`` keeps only some loads beside the defaults and the plan, for more rounds of fewer loads;
``--variant`` adds the defaults' statement with some settings changed (integer values). Writes
``bench/results/ladder/ladder.json`` (``--out``), a markdown table (``ladder.md``) and ``ladder.png`` (speed
against peak memory per point, the plan marked) next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from bench.common import BUCKET, DATABASE, Config, Planned, run_operator
from bench.datasets import DatasetSpec, RowPool, node_files_dir, write_dataset
from bench.large_grid import place
from bench.measure import new_table, run_sql_insert

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "ladder" / "ladder.json"

#: Rows a rung of each size holds (~3,700 posts a MB in either format).
ROWS = {"10MB": 37_000, "100MB": 370_000, "1GB": 3_700_000, "2GB": 7_400_000, "3GB": 11_100_000,
        "10GB": 37_000_000}

#: Months the data spans: 120 monthly partitions at most.
MONTHS = 120

#: The partition keys, by partition count.
PARTITION_KEYS = {
    120: "toYYYYMM(CreationDate)",
    12: "toStartOfInterval(CreationDate, INTERVAL 10 MONTH)",
    1: "tuple()",
}

#: (label, max_insert_threads, min_insert_block_size_bytes, ClickHouse's default download buffer?)
GRID = (
    ("t1-256M", 1, 256 * MiB, False),
    ("t2-64M", 2, 64 * MiB, False),
    ("t2-256M", 2, 256 * MiB, False),
    ("t2-1G", 2, 1024 * MiB, False),
    ("t2-64M-buf10", 2, 64 * MiB, True),
    ("t2-256M-buf10", 2, 256 * MiB, True),
)

#: Every load (the defaults' statement and the operator's too) lifts ClickHouse's limit of 100 partitions an
#: insert block may touch: a block of 100 MB of posts spans all 120 months, and without it no load of the
#: 120-partition table runs at all. It is the one setting a user has to add to the statement for this table.
COMMON = {"max_partitions_per_insert_block": 0}

#: Speed the plan may give up against the fastest point that fits, and the least gain extra memory must buy.
TOLERANCE = 0.05


def parse_variants(specs: list[str]) -> dict[str, dict[str, int]]:
    """``--variant NAME:SETTING=VALUE,...`` (repeatable) as {name: {setting: integer value}}."""
    return {name: {k: int(v) for k, v in (kv.split("=", 1) for kv in spec.split(","))}
            for name, spec in (v.split(":", 1) for v in specs)}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ddl_for(partitions: int) -> Any:
    from airflow_provider_s3ch.local.sample import posts_ddl

    def ddl(table: str) -> str:
        return posts_ddl(table).replace("PARTITION BY toYYYYMM(CreationDate)",
                                        f"PARTITION BY {PARTITION_KEYS[partitions]}")

    return ddl


def grid_settings(plan: dict[str, Any], threads: int, block: int, default_buffer: bool) -> dict[str, Any]:
    settings = dict(plan, max_insert_threads=threads, min_insert_block_size_bytes=block)
    if default_buffer:
        settings.pop("max_download_buffer_size", None)
    return settings


def judge(loads: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """The point's verdict: the plan placed against the grid (:func:`bench.large_grid.place`: the fastest load that
    fits the budget, the lightest within 5 % of it), then against the defaults, and the operator end to end."""
    by = {x["label"]: x for x in loads if x.get("ok")}
    plan, defaults = by.get("plan"), by.get("defaults")
    placed = place(plan or {}, [x for x in loads if not x["label"].startswith("operator")], budget)
    if not defaults or "fastest" not in placed:
        return {"complete": False}
    speedup = defaults["duration_s"] / plan["duration_s"]
    out = {
        "complete": True,
        **placed,
        "plan_within_5pct": placed["plan_vs_fastest"] <= 1 + TOLERANCE,
        "plan_speedup_over_defaults": round(speedup, 3),
        "plan_memory_over_defaults": round(plan["peak_memory"] / max(1, defaults["peak_memory"]), 3),
        "memory_ok": plan["peak_memory"] <= defaults["peak_memory"] or speedup >= 1 + TOLERANCE,
    }
    for label, key in (("operator", "operator"), ("operator-compact", "operator_compact")):
        operator = by.get(label)
        if operator and defaults.get("client_wall_s"):
            out[f"{key}_end_to_end_vs_defaults"] = round(defaults["client_wall_s"] / operator["task_wall_s"], 3)
            out[f"{key}_around_insert_s"] = round(operator["task_wall_s"] - operator["duration_s"], 3)
            out[f"{key}_publish_ms"] = (operator.get("phases_ms") or {}).get("complete")
    return out


def _one_load(stack: Any, client: Any, ds: Any, ddl: Any, tag: str, label: str, settings: dict[str, Any] | None,
              source: str, cfg: Config) -> dict[str, Any]:
    """One load into a fresh table (dropped after): the operator's where ``settings`` is None."""
    table = new_table(client, DATABASE, ddl, f"{tag}_{label.replace('-', '_')}")
    try:
        if settings is None:
            r = run_operator(stack, client, ds, table, cfg, ready=False, settings=COMMON,
                             compact_parts=label == "operator-compact")
        else:
            r = run_sql_insert(client, DATABASE, table, source, settings, ready=False)
    finally:
        client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
    return {k: v for k, v in r.items() if k not in ("settings_reasons", "query_id")}


def paired(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each load against the defaults of the same round (the machine's drift cancels), over the rounds: the
    median ratio of insert durations (> 1: slower than the defaults) and its range. ``defaults-again`` (the very
    same statement) shows what the machine's noise alone gives."""
    out: dict[str, Any] = {}
    for label, runs in rounds.items():
        if label == "defaults":
            continue
        ratios = sorted(r["duration_s"] / d["duration_s"] for r, d in zip(runs, rounds["defaults"], strict=False)
                        if r.get("ok") and d.get("ok"))
        if ratios:
            out[label] = {"median": round(statistics.median(ratios), 3), "min": round(ratios[0], 3),
                          "max": round(ratios[-1], 3), "rounds": len(ratios),
                          "slower_in": sum(x > 1 for x in ratios)}
        if label.startswith("operator"):  # end to end: the defaults' client wall time over the task's
            pairs = [(d["client_wall_s"] / r["task_wall_s"], r["task_wall_s"] - r["duration_s"])
                     for r, d in zip(runs, rounds["defaults"], strict=False)
                     if r.get("ok") and d.get("ok") and r.get("task_wall_s") and d.get("client_wall_s")]
            if pairs:
                e2e, around = sorted(x for x, _ in pairs), sorted(y for _, y in pairs)
                out[label].update(end_to_end_median=round(statistics.median(e2e), 3), end_to_end_min=round(e2e[0], 3),
                                  end_to_end_max=round(e2e[-1], 3), around_insert_s=[round(y, 3) for y in around])
    return out


def paired_verdict(point: dict[str, Any]) -> dict[str, Any]:
    """The point's verdict on the paired ratios (:func:`paired`): :func:`bench.large_grid.place` over the loads'
    median ratios (the defaults count 1.0) and median peaks, and whether the plan's extra memory over the
    defaults, if any, bought >= 5 %. Empty where the point has no paired figures."""
    ratios = {label: r["median"] for label, r in (point["verdict"].get("paired") or {}).items()}
    by = {x["label"]: x for x in point["loads"] if x.get("ok")}
    if "plan" not in ratios or "defaults" not in by:
        return {}
    ratios["defaults"] = 1.0
    loads = [{"label": label, "ok": True, "duration_s": ratio, "peak_memory": by[label]["peak_memory"]}
             for label, ratio in ratios.items() if label in by and not label.startswith(("operator", "defaults-"))]
    placed = place(next(x for x in loads if x["label"] == "plan"), loads, point["budget_bytes"])
    if "fastest" not in placed:  # nothing fits the budget
        return {}
    memory = by["plan"]["peak_memory"] / max(1, by["defaults"]["peak_memory"])
    return {**placed, "plan_within_5pct": placed["plan_vs_fastest"] <= 1 + TOLERANCE,
            "plan_memory_over_defaults": round(memory, 3),
            "memory_ok": memory <= 1 or 1 / ratios["plan"] >= 1 + TOLERANCE}


def _median(label: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A label's record: its median run by duration (its peak and figures), with every run's duration and peak."""
    ok = [r for r in runs if r.get("ok")]
    if not ok:
        return {**runs[-1], "label": label, "runs": len(runs)}
    chosen = sorted(ok, key=lambda r: r["duration_s"])[(len(ok) - 1) // 2]
    out = {**chosen, "label": label, "runs": len(runs), "ok_runs": len(ok),
           "durations_s": [r["duration_s"] for r in runs], "peaks": [r["peak_memory"] for r in runs],
           "peak_memory": int(statistics.median(r["peak_memory"] for r in ok))}
    for wall in ("client_wall_s", "task_wall_s"):  # end to end: the median of each run's own wall time
        walls = [r[wall] for r in ok if r.get(wall) is not None]
        if walls:
            out[wall] = round(statistics.median(walls), 3)
            out[f"{wall}_all"] = walls
    if label.startswith("operator"):
        out["publish_ms_all"] = [(r.get("phases_ms") or {}).get("complete") for r in ok]
    if label not in ("plan", "operator"):
        out.pop("settings", None)
    return out


def bench_point(stack: Any, ds: Any, partitions: int, cfg: Config, repeats: int,
                labels: set[str] | None = None, variants: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    client = stack.clickhouse_client(send_receive_timeout=3600)
    ddl = ddl_for(partitions)
    tag = f"{ds.spec.name}_p{partitions}"
    probe = new_table(client, DATABASE, ddl, f"{tag}_probe")
    try:
        planned = Planned(stack, ds, probe)
    finally:
        client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{probe}` SYNC")
    plan = dict(planned.settings)
    runs: list[tuple[str, dict[str, Any] | None]] = [("defaults", dict(COMMON)), ("plan", {**plan, **COMMON})]
    runs += [(label, {**grid_settings(plan, t, b, d), **COMMON}) for label, t, b, d in GRID]
    runs += [("defaults-again", dict(COMMON)), ("operator", None), ("operator-compact", None)]
    runs = [run for run in runs if labels is None or run[0] in labels or run[0] in ("defaults", "plan")]
    runs += [(name, {**COMMON, **values}) for name, values in (variants or {}).items()]
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in runs}
    for round_no in range(repeats):
        shift = round_no % len(runs)  # each round starts elsewhere: drift in the machine's load hits all alike
        for label, settings in runs[shift:] + runs[:shift]:
            r = _one_load(stack, client, ds, ddl, tag, label, settings, planned.source, cfg)
            rounds[label].append(r)
            log(f"{tag} r{round_no + 1} {label:>14}: {r['duration_s']:7.2f} s  peak {r['peak_memory'] / MiB:7.0f} MiB"
                + (f"  task {r['task_wall_s']} s" if settings is None else f"  wall {r.get('client_wall_s')} s")
                + f"  parts {r.get('wide_parts', 0)} wide / {r.get('compact_parts', 0)} compact"
                + ("" if r["ok"] else f"  FAILED {str(r.get('error'))[:160]}"))
    loads = [_median(label, rounds[label]) for label, _ in runs]
    for load, (_, settings) in zip(loads, runs, strict=True):
        load["same_settings_as_plan"] = settings == runs[1][1]
    verdict = judge([x for x in loads if x["label"] != "defaults-again"], planned.plan.budget_bytes)
    verdict["paired"] = paired(rounds)
    log(f"{tag}: {verdict}")
    return {"rung": ds.spec.name, "format": ds.spec.fmt, "files": len(ds.keys), "bytes": ds.bytes,
            "partitions": partitions, "rows": ds.spec.rows, "budget_bytes": planned.plan.budget_bytes,
            "sample_s": planned.sample_s,
            "plan_settings": plan, "plan_reasons": planned.plan.settings.reasons, "loads": loads,
            "verdict": verdict}


def _cell(by: dict[str, dict[str, Any]], label: str) -> str:
    x = by.get(label)
    return f"{x['duration_s']:.2f} / {x['peak_memory'] / MiB:,.0f}" if x and x.get("ok") else "failed"


#: How the plot draws a load: the plan, the defaults, a grid point.
STYLES = {"plan": ("*", "tab:red", 160), "defaults": ("s", "black", 60)}
GRID_STYLE = ("o", "tab:blue", 30)


def report(out: dict[str, Any]) -> str:
    lines = [
        "| rung | format | partitions | defaults s / MiB | plan s / MiB | fastest fitting | plan / fastest "
        "| plan memory / defaults | plan speed-up | operator end to end / defaults | around insert s "
        "| publish ms (as shipped → Compact staging) |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for p in out["points"]:
        by = {x["label"]: x for x in p["loads"]}
        v = p["verdict"]
        lines.append(
            f"| {p['rung']} ({p['bytes'] / 1e6:,.0f} MB) | {p['format']} | {p['partitions']} | {_cell(by, 'defaults')} "
            f"| {_cell(by, 'plan')} | {v.get('fastest', '-')} | {v.get('plan_vs_fastest', '-')} "
            f"| {v.get('plan_memory_over_defaults', '-')} | {v.get('plan_speedup_over_defaults', '-')} "
            f"| {v.get('operator_end_to_end_vs_defaults', '-')} | {v.get('operator_around_insert_s', '-')} "
            f"| {v.get('operator_publish_ms', '-')} → {v.get('operator_compact_publish_ms', '-')} |")
    paired_points = [p for p in out["points"] if p["verdict"].get("paired")]
    if paired_points:
        lines += ["", "Each load against the defaults of its round (insert seconds; median over the rounds, range):",
                  "", "| rung | partitions | load | vs defaults | range | slower in | end to end (operator) |",
                  "|---|---:|---|---:|---|---:|---:|"]
        verdicts = ["", "The verdict on those ratios (the fastest load whose peak fits the plan's budget):", "",
                    "| rung | partitions | fastest fitting | plan / fastest | within 5 % | plan memory / defaults "
                    "| memory ok |", "|---|---:|---|---:|---|---:|---|"]
        for p in paired_points:
            v = paired_verdict(p)
            if v:
                verdicts.append(f"| {p['rung']} | {p['partitions']} | {v['fastest']} | {v['plan_vs_fastest']} "
                                f"| {v['plan_within_5pct']} | {v['plan_memory_over_defaults']} | {v['memory_ok']} |")
            for label, r in p["verdict"]["paired"].items():
                e2e = f"{r['end_to_end_median']} ({r['end_to_end_min']}-{r['end_to_end_max']})" \
                    if "end_to_end_median" in r else "-"
                lines.append(f"| {p['rung']} | {p['partitions']} | {label} | {r['median']} | {r['min']}-{r['max']} "
                             f"| {r['slower_in']} of {r['rounds']} | {e2e} |")
        lines += verdicts
    return "\n".join(lines) + "\n"


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = out["points"]
    cols = 3
    rows = -(-len(points) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, p in zip(axes.flat, points, strict=False):
        for x in p["loads"]:
            if not x.get("ok") or x["label"].startswith("operator"):
                continue
            mb_s = p["bytes"] / 1e6 / x["duration_s"]
            style = STYLES.get(x["label"], GRID_STYLE)
            ax.scatter(x["peak_memory"] / MiB, mb_s, marker=style[0], c=style[1], s=style[2], zorder=3)
            ax.annotate(x["label"], (x["peak_memory"] / MiB, mb_s), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_title(f"{p['rung']} {p['format']}, {p['partitions']} partitions", fontsize=8)
        ax.set_xlabel("peak memory, MiB", fontsize=7)
        ax.set_ylabel("file MB/s", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(points):]:
        ax.axis("off")
    fig.suptitle("Speed against peak memory (red star: the plan; black square: ClickHouse's defaults)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ladder", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100MB,1GB", help=f"rungs, of {', '.join(ROWS)} (100MB,1GB)")
    parser.add_argument("--formats", default="parquet,csv.gz")
    parser.add_argument("--partitions", default="1,12,120")
    parser.add_argument("--files", type=int, default=20, help="files a rung is written as (20)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds per point; medians (3)")
    parser.add_argument("--labels", help="only these loads beside defaults and plan, e.g. defaults-again,operator "
                        f"(of {', '.join([g[0] for g in GRID] + ['defaults-again', 'operator', 'operator-compact'])})")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:SETTING=VALUE,...",
                        help="one more load: the defaults' statement with these settings (repeatable), e.g. "
                        "dedup0:insert_deduplicate=0")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--workdir", help="where the stack keeps its data (e.g. /dev/shm: a file system without the "
                        "disk's metadata latency); the system's temporary directory by default")
    parser.add_argument("--report", type=Path, help="re-render ladder.md and ladder.png from this JSON; load nothing")
    args = parser.parse_args(argv)
    if args.report:
        out = json.loads(args.report.read_text())
        args.report.with_suffix(".md").write_text(report(out))
        plot(out, args.report.with_suffix(".png"))
        print(report(out))
        return 0
    sizes = [s for s in args.sizes.split(",") if s]
    formats = [f for f in args.formats.split(",") if f]
    partitions = [int(p) for p in args.partitions.split(",") if p]
    labels = set(args.labels.split(",")) if args.labels else None
    variants = parse_variants(args.variant)

    import airflow_provider_s3ch.operators.s3_to_clickhouse  # noqa: F401 - one version for the whole run
    from airflow_provider_s3ch.local import LocalStack

    cfg = Config(mode="ladder", pool_rows_per_month=0, datasets=[], repeats=1, grid_threads=[], grid_blocks=[],
                 caps=[], overhead_counts=[], ready_timeout_s=0.0)
    out: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.platform(),
                           "cores": os.cpu_count(), "note": args.note, "grid": [g[0] for g in GRID],
                           "command": "python -m bench.ladder " + " ".join(argv if argv is not None else []),
                           "points": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    out["workdir"] = args.workdir or tempfile.gettempdir()
    with tempfile.TemporaryDirectory(prefix="s3ch-ladder-", dir=args.workdir) as work, \
            LocalStack(nodes=1, workdir=Path(work) / "stack") as stack, stack.environ():
        client = stack.clickhouse_client()
        client.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        out["clickhouse"] = client.execute("SELECT version()")[0][0]
        stack.create_bucket(BUCKET)
        for size in sizes:
            pool = RowPool(max(1, ROWS[size] // MONTHS))
            for fmt in formats:
                spec = DatasetSpec(f"ladder_{size.lower()}_{fmt.replace('.', '')}", fmt, ROWS[size], args.files,
                                   f"{size} {fmt}, {args.files} files, {MONTHS} months")
                ds = write_dataset(spec, pool, stack.s3_client(), BUCKET, node_files_dir(stack))
                log(f"{spec.name}: {len(ds.keys)} files, {ds.bytes / 1e6:,.0f} MB written in {ds.write_seconds:.0f} s")
                for p in partitions:
                    out["points"].append(bench_point(stack, ds, p, cfg, args.repeats, labels, variants))
                    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
                s3 = stack.s3_client()
                for key in ds.keys:
                    s3.delete_object(Bucket=BUCKET, Key=key)
                shutil.rmtree(ds.local_dir, ignore_errors=True)
            del pool
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    args.out.write_text(json.dumps(out, indent=2, default=str) + "\n")
    table = report(out)
    args.out.with_suffix(".md").write_text(table)
    plot(out, args.out.with_suffix(".png"))
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

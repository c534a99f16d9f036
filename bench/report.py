"""REPORT.md and PNG plots from ``results.json`` (matplotlib, Agg backend).

``python -m bench.report bench/results`` re-renders the report from an existing results.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
VARIANTS = {
    "a": "(a) defaults",
    "b": "(b) guide formula",
    "c": "(c) operator plan",
    "d": "(d) best of grid",
    "e": "(e) file(), no S3",
}


def _mib(n: float | None) -> str:
    return "-" if not n else f"{n / MiB:,.0f}"


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _block(v: Any) -> str:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v) if v is not None else "default"
    return f"{n / MiB:,.0f} MiB" if n >= MiB else f"{n} B"


def plots(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    datasets = results.get("datasets", [])
    if datasets:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
        names = [d["dataset"]["name"] for d in datasets]
        width = 0.16
        for i, (key, label) in enumerate(VARIANTS.items()):
            xs = [j + (i - 2) * width for j in range(len(names))]
            dur = [d["variants"][key]["duration_s"] for d in datasets]
            ttr = [d["variants"][key].get("time_to_ready_s") or d["variants"][key]["duration_s"] for d in datasets]
            axes[0].bar(xs, dur, width, label=label)
            axes[1].bar(xs, ttr, width, label=label)
        for ax, title in zip(axes, ("insert duration (query_log), s", "time to ready (insert + merges settle), s"),
                             strict=True):
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=12, fontsize=8)
            ax.set_title(title, fontsize=10)
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "durations.png", dpi=110)
        plt.close(fig)
        files.append("durations.png")

        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, (key, label) in enumerate(VARIANTS.items()):
            xs = [j + (i - 2) * width for j in range(len(names))]
            ax.bar(xs, [d["variants"][key]["peak_memory"] / MiB for d in datasets], width, label=label)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=12, fontsize=8)
        ax.set_ylabel("peak memory_usage, MiB")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "peak_memory.png", dpi=110)
        plt.close(fig)
        files.append("peak_memory.png")

        fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 3.6), squeeze=False)
        for ax, d in zip(axes[0], datasets, strict=True):
            threads = sorted({g["threads"] for g in d["grid"]})
            for t in threads:
                pts = sorted((g["block_bytes"] / MiB, g["duration_s"])
                             for g in d["grid"] if g["threads"] == t and g["ok"])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{t} insert threads")
            c = d["variants"]["c"]
            cblock = c["settings"].get("min_insert_block_size_bytes")
            if cblock and c["duration_s"]:
                ax.scatter([int(cblock) / MiB], [c["duration_s"]], marker="*", s=160, color="k", label="(c) plan",
                           zorder=5)
            ax.axhline(d["variants"]["a"]["duration_s"], color="grey", ls="--", lw=1, label="(a) defaults")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("min_insert_block_size_bytes, MiB")
            ax.set_title(d["dataset"]["name"], fontsize=9)
            ax.legend(fontsize=6)
        axes[0][0].set_ylabel("insert duration, s")
        fig.tight_layout()
        fig.savefig(out / "grid.png", dpi=110)
        plt.close(fig)
        files.append("grid.png")

    caps = results.get("memory_caps", [])
    if caps:
        fig, ax = plt.subplots(figsize=(9, 4.2))
        labels = [f"{c['cap']}\n{c['dataset']}" for c in caps]
        ax.bar(labels, [c["cap_bytes"] / MiB for c in caps], color="#ddd", label="cap")
        ax.bar(labels, [c["peak_memory"] / MiB for c in caps], width=0.5,
               color=["tab:green" if c["ok"] else "tab:red" for c in caps], label="peak (green ok, red failed)")
        ax.set_yscale("log", base=2)
        ax.set_ylabel("MiB")
        ax.set_title("operator's plan under memory_cap: peak memory_usage", fontsize=10)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "memory_caps.png", dpi=110)
        plt.close(fig)
        files.append("memory_caps.png")

    listing = results.get("overhead", {}).get("listing", [])
    if listing:
        fig, ax = plt.subplots(figsize=(6, 4))
        xs = [r["objects"] for r in listing]
        ax.plot(xs, [r["bare_paginator_s"] for r in listing], marker="o", label="bare boto3 paginator")
        ax.plot(xs, [r["manifest_s"] for r in listing], marker="o", label="build_manifest (list + glob)")
        ax.plot(xs, [r["plan_s"] for r in listing], marker="o", label="make_plan")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("objects")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "overhead.png", dpi=110)
        plt.close(fig)
        files.append("overhead.png")
    return files


def markdown(results: dict[str, Any], images: list[str]) -> str:
    m = results.get("machine", {})
    lines = [
        "# Benchmark report: S3ToClickHouseOperator on the local stack",
        "",
        f"Mode: **{results.get('mode')}**, started {results.get('started')}, total wall time "
        f"**{results.get('wall_s')} s** ({(results.get('wall_s') or 0) / 60:.1f} min), of which data generation "
        f"{results.get('generate_s')} s. Produced by `make bench` (`python -m bench.run`).",
        "",
        "## Machine",
        "",
        f"- CPU: {m.get('nproc')} cores, {m.get('cpu_model')}; memory {m.get('memory_bytes', 0) / 1024**3:.1f} GiB; "
        f"{m.get('os')}",
        f"- ClickHouse {m.get('clickhouse_version')}: {m.get('clickhouse')}",
        f"- **S3: {m.get('s3')}**. Absolute speeds say little about AWS; compare variants within one run.",
        f"- Load average at start {_fmt(list(m.get('load_average_start') or []))}, at end "
        f"{_fmt(list(m.get('load_average_end') or []))} (other jobs may share the machine: figures are noisy).",
        f"- Packages: {', '.join(f'{k} {v}' for k, v in (m.get('packages') or {}).items())}",
        "",
        "Every figure is from `system.query_log` (`query_duration_ms`, `written_rows`, `memory_usage`) after "
        "`SYSTEM FLUSH LOGS`. The grid runs first; then each round runs (a), (b), (c), (d), (e) in turn. "
        "Each variant loads into a fresh, empty `posts` table (the guide's schema, "
        "`PARTITION BY toYYYYMM(CreationDate)`). Durations are medians of the repeats; *spread* is "
        "(max - min) / median over the repeats and the dataset's *noise* is the largest spread of its variants. "
        "Time to ready = insert + the wait until no merge runs on the table and active parts are at most "
        "4 per partition (20 s timeout in the full run).",
        "",
        "Variants: (a) no settings (ClickHouse's defaults); (b) the guide's formula as written: "
        "`max_insert_threads` = cores / 2, `min_insert_block_size_bytes` = budget / (3 x threads), "
        "`min_insert_block_size_rows` = 0, with the operator's budget; (c) the operator: "
        "`S3ToClickHouseOperator(...).execute(context)`; (d) the fastest point of the grid "
        "`max_insert_threads` x `min_insert_block_size_bytes` (other settings as in (c)), chosen from one run per "
        "point and then measured in the same interleaved rounds as the others; "
        "(e) (c)'s settings reading the same files from local disk with `file()`.",
        "",
        "## Summary",
        "",
        "| dataset | files | MB | (c)/(a) | (c)/(d) | (e)/(c) | (b)/(a) | noise | (c) not slower than (a) | "
        "(c) within 10 % of (d) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|:---:|",
    ]
    for d in results.get("datasets", []):
        r, ds = d["ratios"], d["dataset"]
        lines.append(
            f"| {ds['name']} | {ds['file_count']} | {ds['bytes'] / 1e6:.0f} | {_fmt(r['c_over_a'])} | "
            f"{_fmt(r['c_over_d'])} | {_fmt(r['e_over_c'])} | {_fmt(r['b_over_a'])} | {_fmt(r['noise'])} | "
            f"{_fmt(r['c_not_slower_than_a'])} | {_fmt(r['c_within_10pct_of_d'])} |"
        )
    lines += ["", "Ratios are of insert durations: below 1 the first is faster.", ""]
    for img in images:
        lines.append(f"![{img}]({img})")
    lines.append("")

    for d in results.get("datasets", []):
        ds = d["dataset"]
        lines += [
            f"## {ds['name']}: {ds['shape']}",
            "",
            f"{ds['fmt']}, {ds['file_count']} files, {ds['bytes'] / 1e6:.1f} MB, {ds['rows']:,} rows, "
            f"{ds['partitions']} monthly partitions. `{ds['s3_uri']}`",
            "",
            "| variant | threads | block | duration s (runs) | spread | rows/s | peak MiB | ready +s | "
            "time to ready s | parts at end | settled |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|:---:|",
        ]
        for key, label in VARIANTS.items():
            v = d["variants"][key]
            s = v.get("settings") or {}
            if key == "a":
                threads, block = "default", "default"
            else:
                threads = s.get("max_insert_threads", "default")
                block = _block(s.get("min_insert_block_size_bytes"))
            runs = ", ".join(f"{x:.2f}" for x in v["durations_s"])
            err = f" FAILED: {v['error']}" if v.get("error") else ""
            lines.append(
                f"| {label}{err} | {threads} | {block} | {v['duration_s']:.2f} ({runs}) | {_fmt(v['spread'])} | "
                f"{v['rows_per_s']:,} | {_mib(v['peak_memory'])} | {_fmt(v['ready_s'])} | "
                f"{_fmt(v['time_to_ready_s'])} | {_fmt(v['final_parts'])} | {_fmt(v['ready'])} |"
            )
        lines += ["", "Grid (one run per point):", "",
                  "| threads | block | duration s | rows/s | peak MiB | parts |", "|---:|---:|---:|---:|---:|---:|"]
        for g in d["grid"]:
            lines.append(
                f"| {g['threads']} | {_block(g['block_bytes'])} | "
                f"{_fmt(g['duration_s']) if g['ok'] else 'failed'} | {g.get('rows_per_s', 0):,} | "
                f"{_mib(g['peak_memory'])} | {_fmt(g.get('parts'))} |"
            )
        lines += ["", "The operator's settings and reasons:", ""]
        for name, value in d["plan"]["settings"].items():
            lines.append(f"- `{name} = {value}`: {d['plan']['reasons'].get(name, '')}")
        lines.append("")

    caps = results.get("memory_caps", [])
    if caps:
        lines += [
            "## Memory caps",
            "",
            "The operator's plan with `memory_cap`, on the largest dataset and on the one with the most files. "
            "`max_memory_usage` = the cap, so ClickHouse stops a load before its peak passes the cap.",
            "",
            "| dataset | memory_cap | loaded | duration s | peak memory MiB | peak <= cap | threads | block | error |",
            "|---|---|:---:|---:|---:|:---:|---:|---:|---|",
        ]
        for c in caps:
            err = (c.get("error") or "").replace("|", "/").replace("\n", " ")[:240]
            planned = c.get("plan_settings") or c.get("settings") or {}
            block = _block(planned.get("min_insert_block_size_bytes"))
            lines.append(
                f"| {c['dataset']} | {c['cap']} | {_fmt(c['ok'])} | {_fmt(c['duration_s'])} | "
                f"{_mib(c['peak_memory'])} | "
                f"{_fmt(c['peak_within_cap'])} | {planned.get('max_insert_threads', '-')} | {block} | {err} |"
            )
        lines.append("")
        for c in caps:
            for w in c.get("plan_warnings") or []:
                lines.append(f"- plan warning, {c['dataset']} at {c['cap']}: {w}")
        lines.append("")

    listing = results.get("overhead", {}).get("listing", [])
    lines += ["## Overhead", ""]
    if listing:
        lines += [
            "Listing and planning for N objects (1-byte keys `o/NNN/obj-NNNNNN.parquet`, glob `o/*/*.parquet`) "
            "against a bare boto3 `list_objects_v2` paginator over the same prefix.",
            "",
            "| objects | bare paginator s | its S3 calls | build_manifest s | its S3 calls | manifest / bare | "
            "make_plan s |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in listing:
            lines.append(
                f"| {r['objects']:,} | {r['bare_paginator_s']:.3f} | {r['bare_paginator_calls']} | "
                f"{r['manifest_s']:.3f} | {r['manifest_s3_calls']} | {_fmt(r['manifest_over_bare'])} | "
                f"{r['plan_s']:.5f} |"
            )
        lines += [
            "",
            "build_manifest makes one GetBucketLocation call plus one ListObjectsV2 call per 1000 keys. "
            f"The objects were seeded into a second moto server process ({results['overhead'].get('seed_s')} s) "
            "because putting 100 000 objects through moto's HTTP API takes ~9 min here; the listings measured "
            "go through HTTP and moto's ListObjectsV2 (which re-sorts the bucket for every page and serializes "
            "~0.5 s per 1000 keys: far slower than AWS S3, so compare the two columns, not the absolute times).",
            "",
        ]
    ops = results.get("operator_overhead", [])
    if ops:
        lines += [
            "The operator's own overhead: its wall time (manifest, server profile, insert, metrics read) minus "
            "the insert's `query_duration_ms`.",
            "",
            "| dataset | insert s | operator wall s | overhead s |",
            "|---|---:|---:|---:|",
        ]
        for o in ops:
            for r in o["runs"]:
                wall = (r.get("operator_wall_ms") or 0) / 1000
                lines.append(f"| {o['dataset']} | {_fmt(r['insert_s'])} | {wall:.2f} | {_fmt(r['overhead_s'])} |")
        lines.append("")
    lines += chunk_lines(results.get("chunks") or [])
    lines += end_to_end_lines(results.get("end_to_end") or [])
    lines += latency_lines(results.get("latency") or {})
    from bench.history_bench import lines as history_lines
    from bench.memory_model import lines as memory_lines

    # The memory section also covers the loads of the sections run alone after the full run (SECTION.json), and
    # sums up the end-to-end runs of another server (cores16/).
    lines += memory_lines({**results, **(results.get("later_runs") or {})}, results.get("other_server"))
    lines += history_lines(results.get("history") or {})
    from bench.guide_regime import lines as guide_lines

    lines += guide_lines()  # pure: make_plan for the guide's nodes and dataset
    if results.get("large"):  # make bench-large (bench/large.py)
        from bench.large import lines as large_lines

        lines += large_lines(results["large"])
    return "\n".join(lines)


def end_to_end_lines(rows: list[dict[str, Any]]) -> list[str]:
    """End to end, each load a fresh process (bench/end_to_end.py)."""
    from bench.end_to_end import lines

    return lines(rows)


def latency_lines(result: dict[str, Any]) -> list[str]:
    """Direct and through the S3-like proxy (bench/latency.py)."""
    from bench.latency import lines

    return lines(result)


def chunk_lines(chunks: list[dict[str, Any]]) -> list[str]:
    """The cost of chunking: one incremental load against 10 and 40 chunks of the same files."""
    if not chunks:
        return []
    lines = [
        "## Chunks",
        "",
        f"The same files ({chunks[0]['dataset']}) loaded with `skip_loaded=True` as one insert and in chunks "
        "(`max_files_per_load`), into a fresh table each time: the task's wall time, the inserts' own time, the "
        "table's active parts right after the load and once merges settle (docs/ledger.md, 'Choosing a chunk size').",
        "",
        "| chunks | files per chunk | task s | inserts s | parts after the load | parts settled |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in chunks:
        lines.append(f"| {r['chunks']} | {r['files_per_chunk']} | {_fmt(r['task_wall_s'])} | {_fmt(r['insert_s'])} "
                     f"| {r['parts_after_load']} | {r['parts_settled']} |")
    return [*lines, ""]


def write_report(results: dict[str, Any], out: Path) -> Path:
    """Write the plots and REPORT.md into ``out``."""
    images = plots(results, out)
    path = out / "REPORT.md"
    later = {}
    for section in ("latency", "end_to_end"):  # `--only SECTION` runs (make bench-peers): their loads' peaks
        if (out / f"{section}.json").exists():
            later[section] = json.loads((out / f"{section}.json").read_text()).get(section)
    # The end-to-end section run on a 16-core server (python -m bench.run --only end_to_end there, its JSON copied)
    other = [json.loads(f.read_text()) for f in sorted((out / "cores16").glob("end_to_end_run*.json"))]
    text = markdown({**results, "later_runs": {k: v for k, v in later.items() if v}, "other_server": other}, images)
    peers = out / "end_to_end.json"  # make bench-peers: the end-to-end section again, with dlt
    if peers.exists():
        from bench.end_to_end import lines as end_to_end_lines

        run = json.loads(peers.read_text())
        section = end_to_end_lines(run.get("end_to_end") or [])
        if section:
            section[0] = f"## End to end with dlt too (make bench-peers, started {run.get('started')})"
            text += "\n" + "\n".join(section)
    path.write_text(text)
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    write_report(json.loads((target / "results.json").read_text()), target)

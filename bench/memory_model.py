"""Predicted against measured peak memory for every load of the main datasets (the report's section).

The prediction is the planner's (``airflow_provider_s3ch.core.plan.memory.predict_peak``), made after the run
from what the plan knew (the dataset's manifest summary, the server's cores) and the settings each load ran
with: variants (a)-(e), every grid point, every memory-cap load. The band is measured / predicted over the
loads from S3; (e) reads local files with ``file()`` (no S3 reader), is predicted for a local read
(``source="file"``) and is shown apart.

:func:`other_server_rows` does the same for the end-to-end section run on another server (``bench/results/
cores16``: 16 cores): those runs recorded the operator's prediction of the moment, not its settings, so its plan is
made again from the manifest summary at that server's cores (the plan's choices do not depend on the model).
"""

from __future__ import annotations

import math
import types
from typing import Any

MiB = 1024 * 1024


def _manifest(summary: dict[str, Any]) -> Any:
    return types.SimpleNamespace(
        file_count=summary["files"], total_bytes=summary["bytes"], uncompressed_bytes=summary.get("uncompressed_bytes"),
        max_row_group_bytes=summary.get("max_row_group_bytes"), footer_files=1, request_ms=summary.get("request_ms"),
    )


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per load: dataset, load, threads, block, predicted, measured, ratio."""
    from airflow_provider_s3ch.core.plan import predict_peak

    out: list[dict[str, Any]] = []
    summaries = {}
    for d in results.get("datasets", []):
        name = d["dataset"]["name"]
        summary = d["plan"]["manifest"]
        summaries[name] = summary
        cores = int(d.get("profile", {}).get("cores") or 2)
        man = _manifest(summary)

        def add(load: str, settings: dict[str, Any], peak: int, ok: bool = True, *, _n: str = name,
                _man: Any = man, _c: int = cores, _s: dict = summary) -> None:
            if not ok or not peak:
                return
            s3 = not load.startswith("(e)")  # (e) reads the files from local disk with file()
            e = predict_peak(settings, _man, cores=_c, fmt=_s["format"], compression=_s.get("compression"),
                             source="s3" if s3 else "file")
            out.append({"dataset": _n, "load": load, "threads": settings.get("max_insert_threads"),
                        "block": settings.get("min_insert_block_size_bytes"), "predicted": e.bytes, "measured": peak,
                        "ratio": round(peak / e.bytes, 3), "s3": s3})

        labels = {"a": "(a) defaults", "b": "(b) guide formula", "c": "(c) operator", "d": "(d) best of grid",
                  "e": "(e) file()"}
        for v, runs in d["runs"].items():
            for i, r in enumerate(runs, start=1):
                add(f"{labels.get(v, v)} #{i}", r.get("settings") or {}, r.get("peak_memory") or 0, r.get("ok", True))
        base = dict(d["runs"]["c"][0].get("settings") or {}) if d["runs"].get("c") else {}
        for g in d.get("grid", []):
            add(f"grid {g['threads']} x {g['block_bytes'] // MiB} MiB",
                {**base, "max_insert_threads": g["threads"], "min_insert_block_size_bytes": g["block_bytes"]},
                g.get("peak_memory") or 0, g.get("ok", True))
    for c in results.get("memory_caps", []):
        name = c["dataset"] if isinstance(c["dataset"], str) else c["dataset"]["name"]
        if name in summaries:
            s = summaries[name]
            e = predict_peak(c.get("settings") or {}, _manifest(s), cores=2, fmt=s["format"],
                             compression=s.get("compression"))
            if c.get("ok") and c.get("peak_memory"):
                out.append({"dataset": name, "load": f"cap {c['cap']}", "threads": (c.get("settings") or {}).get(
                    "max_insert_threads"), "block": (c.get("settings") or {}).get("min_insert_block_size_bytes"),
                    "predicted": e.bytes, "measured": c["peak_memory"], "ratio": round(c["peak_memory"] / e.bytes, 3),
                    "s3": True})
    cores = int((results.get("machine") or {}).get("nproc") or 2)
    for r in (results.get("latency") or {}).get("datasets", []):  # plain inserts straight and through the proxy
        if not r.get("manifest"):
            continue
        man, m = _manifest(r["manifest"]), r["manifest"]
        for i, load in enumerate(r.get("loads", []), start=1):
            e = predict_peak(load["settings"], man, cores=cores, fmt=m["format"], compression=m.get("compression"))
            out.append({"dataset": r["dataset"], "load": f"latency {load['path']}: {load['variant']} #{i}",
                        "threads": load["settings"].get("max_insert_threads"),
                        "block": load["settings"].get("min_insert_block_size_bytes"), "predicted": e.bytes,
                        "measured": load["peak"], "ratio": round(load["peak"] / e.bytes, 3), "s3": True})
    for r in results.get("end_to_end") or []:  # the hand-written insert (defaults) and the operator's own prediction
        if not r.get("manifest"):
            continue
        man, m = _manifest(r["manifest"]), r["manifest"]
        for variant in ("hand", "operator"):
            for i, run in enumerate(r["runs"].get(variant, []), start=1):
                if not run.get("peak"):
                    continue
                predicted = run.get("predicted") if variant == "operator" else predict_peak(
                    {}, man, cores=cores, fmt=m["format"], compression=m.get("compression")).bytes
                if predicted:
                    out.append({"dataset": r["dataset"], "load": f"end to end {r['path']}: {variant} #{i}",
                                "threads": "plan" if variant == "operator" else None,
                                "block": "plan" if variant == "operator" else None, "predicted": predicted,
                                "measured": run["peak"],
                                "ratio": round(run["peak"] / predicted, 3), "s3": True})
    return out


def replan(summary: dict[str, Any], cores: int, memory: int) -> tuple[dict[str, Any], int]:
    """The operator's plan for these files on a server of ``cores`` and ``memory``: its settings and its predicted peak.

    :param summary: a manifest summary (``files``, ``bytes``, ``format``, ``compression``, ``uncompressed_bytes``,
        ``max_row_group_bytes``, ``request_ms``), the objects taken as equal.
    """
    from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object
    from airflow_provider_s3ch.core.plan import make_plan
    from airflow_provider_s3ch.core.server_models import ServerProfile, TableInfo

    count, total = summary["files"], summary["bytes"]
    sizes = [total // count] * count
    sizes[-1] += total - sum(sizes)
    bucket, pattern = summary.get("bucket") or "bench", summary.get("pattern") or "data/*"
    prefix = pattern.rsplit("/", 1)[0] + "/" if "/" in pattern else ""
    manifest = Manifest(
        bucket=bucket, pattern=pattern, prefix=prefix, format=summary["format"], compression=summary.get("compression"),
        objects=[S3Object(key=f"{prefix}{i:04d}", size=size) for i, size in enumerate(sizes)],
        uncompressed_bytes=summary.get("uncompressed_bytes"), max_row_group_bytes=summary.get("max_row_group_bytes"),
        footer_files=count if summary.get("max_row_group_bytes") else 0, request_ms=summary.get("request_ms"),
    )
    server = ServerProfile(version="bench", cores=cores, memory_bytes=memory, memory_source="bench",
                           table=TableInfo(database="default", name="t", engine="MergeTree"))
    plan = make_plan(LoadRequest(s3_uri=f"s3://{bucket}/{pattern}", table="default.t"), manifest, server,
                     source_url=f"https://{bucket}.s3.amazonaws.com/{pattern}")
    return dict(plan.settings.values), plan.predicted_peak_bytes or 0


def other_server_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The end-to-end loads of runs on another server, predicted with the current model: the hand-written insert
    (ClickHouse's defaults) and the operator's plan made again from the manifest summary at the run's cores.

    :param runs: the runs' JSON (``machine`` and ``end_to_end``, as ``python -m bench.run --only end_to_end``
        writes it).
    :return: rows as :func:`rows` makes them, with ``recorded`` (the operator's prediction at run time), ``cores``
        and ``variant``.
    """
    from airflow_provider_s3ch.core.plan import predict_peak

    out: list[dict[str, Any]] = []
    for run in runs:
        cores = int((run.get("machine") or {}).get("nproc") or 2)
        memory = int((run.get("machine") or {}).get("memory_bytes") or 0)
        for r in run.get("end_to_end") or []:
            m = r.get("manifest")
            if not m:
                continue
            settings, _ = replan(m, cores, memory)
            for variant, values in (("hand", {}), ("operator", settings)):
                predicted = predict_peak(values, _manifest(m), cores=cores, fmt=m["format"],
                                         compression=m.get("compression")).bytes
                for i, load in enumerate(r["runs"].get(variant, []), start=1):
                    if not load.get("peak"):
                        continue
                    out.append({"dataset": r["dataset"], "load": f"{cores} cores, {r['path']}: {variant} #{i}",
                                "threads": values.get("max_insert_threads"),
                                "block": values.get("min_insert_block_size_bytes"), "predicted": predicted,
                                "measured": load["peak"], "ratio": round(load["peak"] / predicted, 3), "s3": True,
                                "recorded": load.get("predicted"), "cores": cores, "variant": variant})
    return out


def band(table: list[dict[str, Any]]) -> dict[str, Any]:
    s3 = [r["ratio"] for r in table if r["s3"]]
    other = [r["ratio"] for r in table if not r["s3"]]
    if not s3:
        return {}
    geo = math.exp(sum(abs(math.log(x)) for x in s3) / len(s3))
    return {"loads": len(s3), "min": min(s3), "max": max(s3), "mean_abs_error": round(geo - 1, 3),
            "file_loads": len(other), "file_min": min(other) if other else None,
            "file_max": max(other) if other else None}


def lines(results: dict[str, Any], other_server: list[dict[str, Any]] | None = None) -> list[str]:
    """The report's section: every load of ``results``, and the range over the end-to-end runs of another server.

    :param other_server: runs of the end-to-end section on another server (:func:`other_server_rows`); their
        loads are summed up in one paragraph, per dataset and insert (hand-written, operator), not listed.
    """
    from airflow_provider_s3ch.core.plan import PEAK_BAND

    table = rows(results)
    if not table:
        return []
    b = band(table)
    inside = sum(1 for r in table if r["s3"] and PEAK_BAND[0] <= r["ratio"] <= PEAK_BAND[1])
    out = ["## Peak memory: predicted against measured", "",
           "The planner's prediction (docs/tuning.md, 'Predicted peak memory') for the settings each load ran with, "
           "beside the peak `system.query_log` measured (bench/memory_model.py). Ratio = measured / predicted. The "
           "loads: every load of the main datasets (variants, grid, caps), every load of the latency section, and "
           "the end-to-end section's hand-written and operator inserts (the operator's own prediction, from its "
           "XCom), where the run recorded their peaks; a section run alone (`--only`, `SECTION.json` beside "
           "results.json) counts with its own run.", "",
           f"Over the {b['loads']} loads from S3: **{b['min']:.2f} to {b['max']:.2f}**, "
           f"{inside} of {b['loads']} within "
           f"the stated band {PEAK_BAND[0]}-{PEAK_BAND[1]}; mean error {b['mean_abs_error'] * 100:.0f} %. "
           + (f"The {b['file_loads']} `file()` loads (no S3 reader, predicted for a local read): "
              f"{b['file_min']:.2f} to {b['file_max']:.2f}."
              if b["file_loads"] else ""), "",
           *other_server_lines(other_server or []),
           "| dataset | load | threads | block MiB | predicted MiB | measured MiB | ratio |",
           "|---|---|---:|---:|---:|---:|---:|"]
    for r in table:
        block = (r["block"] if isinstance(r["block"], str) else f"{r['block'] / MiB:,.0f}") if r["block"] else "default"
        out.append(f"| {r['dataset']} | {r['load']} | {r['threads'] or 'default'} | {block} | "
                   f"{r['predicted'] / MiB:,.0f} | {r['measured'] / MiB:,.0f} | {r['ratio']:.2f} |")
    return [*out, ""]


def other_server_lines(runs: list[dict[str, Any]]) -> list[str]:
    """One paragraph: the end-to-end loads of another server, measured / predicted per dataset and insert."""
    table = other_server_rows(runs)
    if not table:
        return []
    from airflow_provider_s3ch.core.plan import PEAK_BAND

    cores = [str(n) for n in sorted({r["cores"] for r in table})]
    ranges: dict[str, list[float]] = {}
    for r in table:
        ranges.setdefault(f"{r['dataset']} {r['variant']}", []).append(r["ratio"])
    ratios = [r["ratio"] for r in table]
    inside = sum(1 for x in ratios if PEAK_BAND[0] <= x <= PEAK_BAND[1])
    recorded = [r["measured"] / r["recorded"] for r in table if r.get("recorded")]
    parts = "; ".join(f"{k} {min(v):.2f}-{max(v):.2f}" for k, v in ranges.items())
    return [f"On {' and '.join(cores)} cores (the end-to-end section, {len(runs)} runs, {len(table)} loads from S3, "
            f"the operator's plan made again from the manifest at those cores): **{min(ratios):.2f} to "
            f"{max(ratios):.2f}**, {inside} of {len(table)} within the band; {parts}."
            + (f" The operator's predictions at run time: {min(recorded):.2f} to {max(recorded):.2f}."
               if recorded else ""), ""]

"""The large dataset's memory/speed frontier (``make bench-large``, after its two loads).

Each grid point is the plan's own ``INSERT … SELECT FROM s3()`` with its settings, but for
``max_insert_threads`` and ``min_insert_block_size_bytes`` (the two that decide the insert's memory),
into a fresh table, once. A point is on the **frontier** when no other point is both faster and lighter.
The plan's load (variant (c)) is placed against the fastest point whose peak fits the plan's budget, and
against the lightest point within 5 % of the fastest (memory that buys less than 5 % speed is not worth it).
Then the operator loads the same data under ``memory_cap`` of 1, 2 and 4 GiB: each must finish within its
cap. Every load reports its predicted peak beside the measured one where the operator made it.
"""

from __future__ import annotations

from typing import Any

MiB = 1024 * 1024
GiB = 1024 * MiB

#: (max_insert_threads, min_insert_block_size_bytes): threads x blocks around the plan's choice on 2 cores.
GRID = ((1, 256 * MiB), (2, 64 * MiB), (2, 256 * MiB), (2, 1024 * MiB), (4, 64 * MiB), (4, 256 * MiB))
CAPS = ("1GiB", "2GiB", "4GiB")


def frontier(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The points no other point beats on both time and peak memory (fastest first)."""
    ok = [p for p in points if p.get("ok")]
    return sorted((p for p in ok if not any(
        q is not p and q["duration_s"] <= p["duration_s"] and q["peak_memory"] <= p["peak_memory"]
        and (q["duration_s"] < p["duration_s"] or q["peak_memory"] < p["peak_memory"]) for q in ok)),
        key=lambda p: p["duration_s"])


def place(plan: dict[str, Any], points: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Where the plan's load sits: against the fastest point that fits the budget, and the lightest point
    within 5 % of the fastest."""
    fits = [p for p in points if p.get("ok") and p["peak_memory"] <= budget]
    out: dict[str, Any] = {"budget_bytes": budget}
    if not fits or not plan.get("ok"):
        return out
    fastest = min(fits, key=lambda p: p["duration_s"])
    near = [p for p in fits if p["duration_s"] <= 1.05 * fastest["duration_s"]]
    lightest = min(near, key=lambda p: p["peak_memory"])
    out.update(fastest=fastest["label"], plan_vs_fastest=round(plan["duration_s"] / fastest["duration_s"], 3),
               lightest_within_5pct=lightest["label"],
               plan_memory_vs_lightest=round(plan["peak_memory"] / max(1, lightest["peak_memory"]), 2),
               within_10pct=plan["duration_s"] <= 1.10 * fastest["duration_s"])
    return out


def predicted(planned: Any, settings: dict[str, Any]) -> int:
    """The planner's predicted peak for a grid point's settings (docs/tuning.md), from the plan's manifest."""
    from airflow_provider_s3ch.core.plan import predict_peak

    return predict_peak(settings, planned.manifest, cores=planned.profile.cores, fmt=planned.plan.format,
                        compression=planned.plan.compression).bytes


def _ratio(row: dict[str, Any]) -> str:
    """measured / predicted, or - where either is missing."""
    return f"{row['peak_memory'] / row['predicted']:.2f}" if row.get("peak_memory") and row.get("predicted") else "-"


def bench_grid(stack: Any, client: Any, ds: Any, planned: Any, plan_load: dict[str, Any], rows: int,
               log: Any = print) -> dict[str, Any]:
    """The grid's loads, the frontier, the plan's place, and the operator under each cap."""
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.common import DATABASE, run_operator
    from bench.measure import new_table, run_sql_insert

    # The settings the operator's load ran with: its own listing decides the reading streams (a slow S3 call there
    # gives 8), and the points must differ from it in threads and block only.
    ran = plan_load.get("settings") or planned.settings
    base = {k: v for k, v in ran.items() if k != "log_comment"}
    points = []
    for threads, block in GRID:
        label = f"{threads} x {block // MiB} MiB"
        table = new_table(client, DATABASE, posts_ddl, f"grid_{threads}_{block // MiB}")
        try:
            settings = {**base, "max_insert_threads": threads, "min_insert_block_size_bytes": block,
                        "min_insert_block_size_rows": 0}
            r = run_sql_insert(client, DATABASE, table, planned.source, settings, ready=False)
            table_rows = int(client.execute(f"SELECT count() FROM `{DATABASE}`.`{table}`")[0][0])
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        point = {"label": label, "threads": threads, "block_bytes": block, "ok": r["ok"] and table_rows == rows,
                 "duration_s": r.get("duration_s"), "peak_memory": r.get("peak_memory"), "error": r.get("error"),
                 "predicted": predicted(planned, settings)}
        points.append(point)
        log(f"large grid {label}: {point['duration_s']} s, peak {(point['peak_memory'] or 0) / MiB:,.0f} MiB, "
            f"rows {'=' if point['ok'] else '!='} {rows:,} {point['error'] or ''}")
    plan = {"label": "plan", "ok": plan_load.get("ok"), "duration_s": plan_load.get("duration_s"),
            "peak_memory": plan_load.get("peak_memory"), "predicted": plan_load.get("predicted_memory_usage")}
    # One run each is noisy on a shared machine (the plan's first run follows the defaults' merges): the plan and
    # the fastest point that fits its budget run once more, one after the other, and are compared on their means.
    fits = [p for p in points if p.get("ok") and p["peak_memory"] <= planned.plan.budget_bytes]
    if fits and plan["ok"]:
        fastest = min(fits, key=lambda p: p["duration_s"])
        table = new_table(client, DATABASE, posts_ddl, "grid_again")
        try:
            again = run_sql_insert(client, DATABASE, table, planned.source, {
                **base, "max_insert_threads": fastest["threads"], "min_insert_block_size_bytes": fastest["block_bytes"],
                "min_insert_block_size_rows": 0}, ready=False)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        table = new_table(client, DATABASE, posts_ddl, "grid_plan_again")
        try:
            plan_again = run_operator(stack, client, ds, table, None, ready=False)  # type: ignore[arg-type]
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        for row, second in ((fastest, again), (plan, plan_again)):
            if second.get("ok") and second.get("duration_s"):
                row["runs_s"] = [row["duration_s"], second["duration_s"]]
                row["duration_s"] = round(sum(row["runs_s"]) / 2, 3)
        log(f"large grid, again: {fastest['label']} {again.get('duration_s')} s, "
            f"the plan {plan_again.get('duration_s')} s")
    caps = []
    for cap in CAPS:
        table = new_table(client, DATABASE, posts_ddl, f"grid_cap_{cap}")
        try:
            r = run_operator(stack, client, ds, table, None, memory_cap=cap, ready=False)  # type: ignore[arg-type]
            table_rows = int(client.execute(f"SELECT count() FROM `{DATABASE}`.`{table}`")[0][0])
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
        limit = int(cap.removesuffix("GiB")) * GiB
        caps.append({"cap": cap, "ok": r["ok"] and table_rows == rows, "duration_s": r.get("duration_s"),
                     "peak_memory": r.get("peak_memory"), "within_cap": (r.get("peak_memory") or 0) <= limit,
                     "predicted": r.get("predicted_memory_usage"), "settings": r.get("settings"),
                     "error": r.get("error"), "task_wall_s": r.get("task_wall_s"), "steps": r.get("memory_steps")})
        log(f"large cap {cap}: {r.get('duration_s')} s, peak {(r.get('peak_memory') or 0) / MiB:,.0f} MiB, "
            f"predicted {(r.get('predicted_memory_usage') or 0) / MiB:,.0f} MiB, rows "
            f"{'=' if caps[-1]['ok'] else '!='} {rows:,} {r.get('error') or ''}")
    return {"points": points, "frontier": [p["label"] for p in frontier(points)], "plan": plan,
            "place": place(plan, points, planned.plan.budget_bytes), "caps": caps}


def _runs(row: dict[str, Any]) -> str:
    """The insert's seconds: the mean of two runs, with both, where it ran twice."""
    runs = row.get("runs_s")
    return f"{row.get('duration_s')} ({runs[0]}, {runs[1]})" if runs else f"{row.get('duration_s')}"


def lines(grid: dict[str, Any]) -> list[str]:
    """The report's table of the grid."""
    if not grid:
        return []
    on = set(grid.get("frontier") or [])
    out = ["### Memory/speed frontier at this size", "",
           "| load | insert s | peak MiB | predicted MiB | measured / predicted | on the frontier |",
           "|---|---:|---:|---:|---:|:---:|"]
    for p in grid.get("points", []):
        err = f" FAILED: {p['error']}" if p.get("error") else ""
        out.append(f"| {p['label']}{err} | {_runs(p)} | {(p['peak_memory'] or 0) / MiB:,.0f} | "
                   f"{(p.get('predicted') or 0) / MiB:,.0f} | {_ratio(p)} | {'yes' if p['label'] in on else ''} |")
    plan = grid.get("plan") or {}
    out.append(f"| the plan (c) | {_runs(plan)} | {(plan.get('peak_memory') or 0) / MiB:,.0f} | "
               f"{(plan.get('predicted') or 0) / MiB:,.0f} | {_ratio(plan)} | |")
    for c in grid.get("caps", []):
        err = f" FAILED: {c['error']}" if c.get("error") else ""
        steps = " → ".join(c.get("steps") or []) or "plan"
        out.append(f"| operator, memory_cap {c['cap']}{err} | {c['duration_s']} | {(c['peak_memory'] or 0) / MiB:,.0f}"
                   f" | {(c.get('predicted') or 0) / MiB:,.0f} | {_ratio(c)} | within cap: {c['within_cap']}; "
                   f"attempts: {steps}; task {c.get('task_wall_s')} s |")
    place = grid.get("place") or {}
    if place.get("fastest"):
        out += ["", f"The fastest point within the plan's budget ({place['budget_bytes'] / GiB:.1f} GiB) is "
                f"{place['fastest']}: the plan took {place['plan_vs_fastest']}x its time (within 10 %: "
                f"{place['within_10pct']}; the two compared on the means of two runs where both ran twice). "
                f"The lightest point within 5 % of that one is "
                f"{place['lightest_within_5pct']}; the plan's peak is {place['plan_memory_vs_lightest']}x its peak."]
    return [*out, ""]


def plot(grid: dict[str, Any], out: Any) -> str | None:
    """``large_frontier.png``: insert seconds against peak memory, the frontier joined, the plan and the caps
    marked; the file name, or None without a grid."""
    if not grid or not grid.get("points"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ok = [p for p in grid["points"] if p.get("ok")]
    ax.scatter([p["peak_memory"] / GiB for p in ok], [p["duration_s"] for p in ok], label="grid (threads x block)")
    for p in ok:
        ax.annotate(p["label"], (p["peak_memory"] / GiB, p["duration_s"]), fontsize=7, xytext=(4, 2),
                    textcoords="offset points")
    front = [p for p in ok if p["label"] in set(grid.get("frontier") or [])]
    front.sort(key=lambda p: p["peak_memory"])
    ax.plot([p["peak_memory"] / GiB for p in front], [p["duration_s"] for p in front], "--", label="frontier")
    plan = grid.get("plan") or {}
    if plan.get("ok"):
        ax.scatter([plan["peak_memory"] / GiB], [plan["duration_s"]], marker="*", s=160, label="the plan")
    caps = [c for c in grid.get("caps", []) if c.get("ok")]
    ax.scatter([c["peak_memory"] / GiB for c in caps], [c["duration_s"] for c in caps], marker="s",
               label="operator under memory_cap 1/2/4 GiB")
    ax.set_xlabel("peak memory (GiB, query_log)")
    ax.set_ylabel("insert seconds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "large_frontier.png", dpi=110)
    plt.close(fig)
    return "large_frontier.png"

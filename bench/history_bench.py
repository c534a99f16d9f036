"""Learning from past loads: the same load run twice, the second planning from the first's figures.

Two cases, each a load the same task repeats (same target table, same files):

- ``capped``: the dataset with the largest row groups under a memory cap its first plan cannot hold.
  First, every plan the operator may run (its first plan and each step down: core/plan/shrink.py) is
  loaded once as a plain ``INSERT … SELECT`` under the cap: the *grid* of what fits, and the fastest
  of it. Then the operator twice: the first run fails into the limit and steps down inside the task;
  the second starts from the step the first needed (``history.start_step``).
- ``uncapped``: gzip'd CSV (no footers): the first plan guesses the uncompressed size; the second
  learns it, and scales its memory prediction by the first's measured / predicted.

For each run: its first attempt, the attempts, the insert's and the task's seconds, predicted and
measured peak memory.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from bench.datasets import Dataset

MiB = 1024 * 1024


def _operator_run(stack: Any, client: Any, ds: Dataset, table: str, database: str, cap: str | None) -> dict[str, Any]:
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
    from bench.common import fake_context
    from bench.measure import flush_and_fetch

    op = S3ToClickHouseOperator(task_id="load", s3_uri=ds.s3_uri, table=f"{database}.{table}", memory_cap=cap)
    started = time.monotonic()
    result = op.execute(fake_context(f"hist-{uuid.uuid4().hex[:8]}"))
    task_s = time.monotonic() - started
    entry = flush_and_fetch(client, result["query_id"])
    rows = client.execute(f"SELECT count() FROM `{database}`.`{table}`")[0][0]
    attempts = result.get("memory_attempts") or []
    return {
        "task_s": round(task_s, 3), "insert_s": round(int(entry.get("query_duration_ms") or 0) / 1000, 3),
        "first_step": attempts[0]["step"] if attempts else "plan",
        "attempts": [{"step": a["step"], "ok": a["error"] is None, **({"from_history": True}
                                                                       if a.get("from_history") else {})}
                     for a in attempts],
        "final_step": attempts[-1]["step"] if attempts else "plan",
        "threads": result["settings"].get("max_insert_threads"),
        "block": result["settings"].get("min_insert_block_size_bytes"),
        "peak": result["memory_usage"], "predicted": result.get("predicted_memory_usage"),
        "ratio": result.get("memory_vs_predicted"), "history": result.get("history"), "rows": int(rows),
    }


def _recreate(client: Any, database: str, table: str) -> None:
    from airflow_provider_s3ch.local.sample import posts_ddl

    client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
    client.execute(posts_ddl(f"`{database}`.`{table}`"))


def bench_history(stack: Any, capped: Dataset | None, uncapped: Dataset | None, *, cap: str, database: str,
                  log: Any) -> dict[str, Any]:
    """The two cases (either may be None: skipped)."""
    from airflow_provider_s3ch.core.plan.shrink import STEPS, smaller
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.common import Planned
    from bench.measure import new_table, run_sql_insert

    client = stack.clickhouse_client(send_receive_timeout=3600)
    out: dict[str, Any] = {"cap": cap}
    if capped is not None:
        probe = new_table(client, database, posts_ddl, "hist_probe")
        try:
            planned = Planned(stack, capped, probe, memory_cap=cap)
        finally:
            client.execute(f"DROP TABLE IF EXISTS `{database}`.`{probe}` SYNC")
        grid = []
        for name in ("plan", *STEPS):
            if sum(g["ok"] for g in grid) >= 2:  # each step holds less than the one before: and runs slower
                break
            settings = planned.plan.settings if name == "plan" else smaller(
                planned.plan.settings, name, cores=planned.profile.cores, user={})
            table = new_table(client, database, posts_ddl, f"hist_grid_{name}")
            try:
                r = run_sql_insert(client, database, table, planned.source, dict(settings.values), ready=False)
            finally:
                client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
            grid.append({"step": name, "ok": r["ok"], "duration_s": r["duration_s"], "peak": r["peak_memory"],
                         "threads": settings.values.get("max_insert_threads"),
                         "block": settings.values.get("min_insert_block_size_bytes")})
            log(f"history grid {name}: ok={r['ok']} {r['duration_s']} s, peak {r['peak_memory'] / MiB:.0f} MiB")
        fitting = [g for g in grid if g["ok"]]
        best = min(fitting, key=lambda g: g["duration_s"]) if fitting else None
        table = f"hist_capped_{uuid.uuid4().hex[:8]}"
        runs = []
        for _ in range(2):
            _recreate(client, database, table)
            runs.append(_operator_run(stack, client, capped, table, database, cap))
            log(f"history capped run {len(runs)}: first step {runs[-1]['first_step']}, attempts "
                f"{[a['step'] for a in runs[-1]['attempts']]}, task {runs[-1]['task_s']} s")
        client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
        out["capped"] = {"dataset": capped.spec.name, "grid": grid, "best": best, "runs": runs}
    if uncapped is not None:
        table = f"hist_free_{uuid.uuid4().hex[:8]}"
        runs = []
        for _ in range(2):
            _recreate(client, database, table)
            runs.append(_operator_run(stack, client, uncapped, table, database, None))
            log(f"history uncapped run {len(runs)}: measured / predicted peak {runs[-1]['ratio']}")
        client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
        out["uncapped"] = {"dataset": uncapped.spec.name, "runs": runs}
    return out


def _mib(n: Any) -> str:
    return f"{n / MiB:,.0f}" if n else ""


def lines(result: dict[str, Any]) -> list[str]:
    """The report's section."""
    if not result or not (result.get("capped") or result.get("uncapped")):
        return []
    out = ["## Learning from past loads: the second run against the first", "",
           "The same operator load run twice into the same table (bench/history_bench.py, docs/tuning.md "
           "'Learning from past loads'): the second reads the first's tagged figures from `system.query_log`.", ""]
    capped = result.get("capped")
    if capped:
        best = capped["best"]
        out += [f"**Under a memory cap** ({capped['dataset']}, `memory_cap={result['cap']}`). The grid: the first "
                "plan and each step down, loaded once as plain SQL under the cap.", "",
                "| plan | fits | insert s | peak MiB | threads | block MiB |", "|---|:---:|---:|---:|---:|---:|"]
        for g in capped["grid"]:
            out.append(f"| {g['step']}{' (best)' if best and g['step'] == best['step'] else ''} | "
                       f"{'yes' if g['ok'] else 'no'} | {g['duration_s']} | {_mib(g['peak'])} | {g['threads']} | "
                       f"{_mib(g['block'])} |")
        out += ["", "| run | first attempt | attempts | final plan | task s | insert s | vs best insert | "
                "predicted MiB | peak MiB | measured / predicted |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(capped["runs"], start=1):
            vs = f"{r['insert_s'] / best['duration_s']:.2f}" if best and best["duration_s"] else ""
            steps = " → ".join(a["step"] + ("" if a["ok"] else " ✗") for a in r["attempts"]) or "plan"
            out.append(f"| {i} | {r['first_step']} | {steps} | {r['final_step']} | {r['task_s']} | {r['insert_s']} | "
                       f"{vs} | {_mib(r['predicted'])} | "
                       f"{_mib(r['peak'])} | {r['ratio']} |")
        if len(capped["runs"]) == 2 and best:
            first, second = capped["runs"]
            def said(run: dict[str, Any]) -> str:  # the first step's own grid point against the best
                if run["first_step"] == best["step"]:
                    return "the grid's best"
                point = next((g for g in capped["grid"] if g["step"] == run["first_step"]), None)
                if point is None or not point["ok"]:
                    return f"it does not fit under the cap (the grid's best: {best['step']})"
                return (f"{point['duration_s'] / best['duration_s']:.2f}x the grid's best insert "
                        f"({best['step']}, {best['duration_s']} s)")

            out += ["", f"The first run's first plan is {first['first_step']!r}: {said(first)}; the second run's is "
                    f"{second['first_step']!r}: {said(second)}. Task time {first['task_s']} s → {second['task_s']} s "
                    f"({second['task_s'] / first['task_s']:.2f}x)."]
        out.append("")
    uncapped = result.get("uncapped")
    if uncapped:
        out += [f"**Learning the data** ({uncapped['dataset']}, gzip'd CSV: no footers, so the first plan assumes "
                "4 x the files' bytes).", "",
                "| run | expansion used | memory scale | predicted MiB | peak MiB | measured / predicted | task s |",
                "|---|---:|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(uncapped["runs"], start=1):
            h = r.get("history") or {}
            out.append(f"| {i} | {h.get('expansion') or '4 (fixed)'} | {h.get('memory_scale') or ''} | "
                       f"{_mib(r['predicted'])} | {_mib(r['peak'])} | {r['ratio']} | {r['task_s']} |")
        out.append("")
    return out

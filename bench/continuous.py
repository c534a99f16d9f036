"""Continuous ingestion's latency: from ``put_object`` returning to the file's rows being readable.

On the local stack (one ClickHouse node, moto's S3 and SQS) with Airflow's own api-server, dag-processor,
scheduler and triggerer on the continuous example DAG (``example_dags/example_continuous.py``), the way
``s3ch-local live`` runs it (:func:`airflow_provider_s3ch.local.live.run_live`): ``--files`` small CSV files
(default 300) put at one a second, the table polled every 0.2 s for each file's marker column (``file``).
Two modes, each with a fresh stack and a fresh Airflow:

- ``sqs``: the notification watcher (S3 event notifications through SQS) and the listing watcher as the
  backstop (a look every ``--backstop-poll`` seconds, 300 by default, so that the notifications carry the files);
- ``listing``: the listing watcher alone, a look every ``--listing-poll`` seconds (10).

Per mode: p50, p95 and max latency, files put and loaded (each exactly once; ``unld``: not loaded yet when the
wait after the last put timed out), the DAG's runs (Airflow's database) and the inserts from S3
(``system.query_log``). Writes ``--out`` (``bench/results/continuous_latency.json``) and prints a table. Goal
figures: SQS p50 <= 10 s and p95 <= 20 s; listing (10 s poll) p95 <= 30 s.

    .venv/bin/python -m bench.continuous                          # 300 files a mode (~13 min with start-up)
    .venv/bin/python -m bench.continuous --files 40 --note "..."  # a short run
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.compat import AIRFLOW_VERSION
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.live import LiveOptions, run_live
from airflow_provider_s3ch.local.phases import PHASES

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "continuous_latency.json"

#: The goal figures (seconds) each mode is compared with.
GOALS = {"sqs": {"p50_s": 10.0, "p95_s": 20.0}, "listing": {"p95_s": 30.0}}


def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """One mode on a fresh stack and a fresh Airflow: the live run's summary, with the mode's settings."""
    sqs = mode == "sqs"
    poll = args.backstop_poll if sqs else args.listing_poll
    options = LiveOptions(
        dag_file=ROOT / "example_dags" / "example_continuous.py", bucket=f"s3ch-bench-{mode}",
        table=f"default.continuous_{mode}", files=args.files, interval=args.interval, rows_per_file=args.rows_per_file,
        sqs=sqs, listing_poll=poll, report_every=args.report_every, drain_timeout=args.drain_timeout,
        safety_net=args.safety_net, batch_wait=args.batch_wait,
    )  # fmt: skip
    started = time.monotonic()
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        version = stack.clickhouse_client().execute("SELECT version()")[0][0]
        result = run_live(stack, options, say=lambda line: print(f"[{mode}] {line}", flush=True))
    summary = result.summary()
    goals = GOALS[mode]
    summary.update({
        "mode": mode, "watchers": "notification + listing" if sqs else "listing", "listing_poll_s": poll,
        "safety_net": args.safety_net, "batch_wait_s": args.batch_wait,
        "interval_s": args.interval, "rows_per_file": args.rows_per_file, "clickhouse": version,
        "latencies_s": [round(x, 3) for x in result.latencies], "duration_s": round(time.monotonic() - started, 1),
        "goals": goals,
        "meets_goals": all(summary[k] is not None and summary[k] <= v for k, v in goals.items()),
    })  # fmt: skip
    return summary


def table(modes: list[dict[str, Any]]) -> str:
    head = f"{'mode':<8} {'poll':>6} {'put':>5} {'loaded':>6} {'unld':>4} {'once':>5} {'p50':>6} {'p95':>6} " \
           f"{'max':>6} {'runs':>5} {'inserts':>7}  goals"  # fmt: skip
    lines = [head, "-" * len(head)]
    for m in modes:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f}"

        goals = ", ".join(f"{k[:-2]} <= {v:g} s" for k, v in m["goals"].items())
        lines.append(
            f"{m['mode']:<8} {m['listing_poll_s']:>5g}s {m['files_put']:>5} {m['files_loaded']:>6} "
            f"{m['not_loaded_yet']:>4} {'yes' if m['exactly_once'] else 'NO':>5} {s(m['p50_s']):>6} "
            f"{s(m['p95_s']):>6} {s(m['max_s']):>6} "
            f"{sum(m['runs'].values()):>5} {m['inserts']:>7}  {goals}: {'met' if m['meets_goals'] else 'NOT met'}"
        )
    return "\n".join(lines)


def phase_table(modes: list[dict[str, Any]]) -> str:
    """Where each mode's latency went (:mod:`airflow_provider_s3ch.local.phases`): per phase, p50 / p95 and its
    share of the mean latency."""
    lines = ["| mode | files | " + " | ".join(PHASES) + " | mean latency |",
             "| --- | ---: | " + " | ".join("---:" for _ in PHASES) + " | ---: |"]
    for m in modes:
        ph = m.get("phases") or {}
        if not ph.get("files"):
            lines.append(f"| {m['mode']} | 0 | " + " | ".join("-" for _ in PHASES) + " | - |")
            continue
        cells = [f"{ph[p]['p50_s']:.2f} / {ph[p]['p95_s']:.2f} s ({ph[p]['mean_share']:.0%})" for p in PHASES]
        lines.append(f"| {m['mode']} | {ph['files']} | " + " | ".join(cells) + f" | {ph['mean_latency_s']:.2f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="files put in each mode (300)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between two files (1)")
    parser.add_argument("--rows-per-file", type=int, default=100, help="rows in each file (100)")
    parser.add_argument("--listing-poll", type=float, default=10.0, help="listing mode: seconds between looks (10)")
    parser.add_argument("--backstop-poll", type=float, default=300.0,
                        help="sqs mode: the listing watcher's seconds between looks, the backstop (300)")  # fmt: skip
    parser.add_argument("--safety-net", default="* * * * *",
                        help="the DAG's time schedule beside the asset (cron; every minute): it bounds the wait of "
                        "the last files' events, which reach no run until the next event or this schedule")  # fmt: skip
    parser.add_argument("--modes", default="sqs,listing", help="which modes, in order (sqs,listing)")
    parser.add_argument("--batch-wait", type=float, default=0.0,
                        help="sqs mode: the notification watcher's batch_wait, seconds (0)")  # fmt: skip
    parser.add_argument("--report-every", type=float, default=10.0, help="seconds between progress lines (10)")
    parser.add_argument("--drain-timeout", type=float, default=180.0,
                        help="after the last put, how long to wait for the files not loaded yet (180 s)")  # fmt: skip
    parser.add_argument("--note", default="", help="a note kept in the result (e.g. a short run, a busy machine)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the result file ({OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    started = time.time()
    modes = [run_mode(mode.strip(), args) for mode in args.modes.split(",") if mode.strip()]
    out = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)), "machine": platform.platform(),
        "files_per_mode": args.files, "full_run": args.files >= 300, "note": args.note,
        "command": shlex.join(["python", "-m", "bench.continuous", *(argv if argv is not None else sys.argv[1:])]),
        "airflow": AIRFLOW_VERSION,
        "modes": modes,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("\n" + table(modes))
    print("\nwhere the latency went, per phase: p50 / p95 (share of the mean latency)\n" + phase_table(modes))
    print(f"\nwritten: {args.out}")
    return 0 if all(m["exactly_once"] and not m["not_loaded_yet"] for m in modes) else 1


if __name__ == "__main__":
    raise SystemExit(main())

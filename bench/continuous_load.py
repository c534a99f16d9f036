"""Continuous ingestion under load and under bad notifications, on the local stack with Airflow's own processes.

The continuous example DAG (``example_dags/example_continuous.py``) under Airflow's api-server, dag-processor,
scheduler and triggerer, as ``s3ch-local live`` runs it (:mod:`airflow_provider_s3ch.local.live`), each scenario
on a fresh stack and a fresh Airflow:

- ``batching``: ``--batch-files`` files (10,000) of ~10 KB land within ``--batch-seconds`` (60), put by
  ``--batch-threads`` (8) threads at a steady pace, S3's notifications to SQS; ``max_files_per_load=1000``.
  Counted: the DAG's runs
  (from events, from the time schedule), the inserts from S3 and the files each read (``system.query_log``),
  every file's rows exactly once, and the time from the last put to the last file's rows.
- ``bad_notifications``: the bucket sends no notification; the benchmark sends them itself, as S3 would (the
  same JSON), dropping 10 % (seeded) and sending every other one twice, the second copy a few seconds later.
  The listing watcher (a look every ``--backstop-poll`` seconds) is the backstop for the dropped ones. Counted:
  every file's rows exactly once, and the latency of the files whose notification was dropped against the
  backstop interval plus a load.

Writes ``bench/results/continuous_load.json`` (``--out``) and prints a table.

    .venv/bin/python -m bench.continuous_load                         # both scenarios (~10 min with start-up)
    .venv/bin/python -m bench.continuous_load --scenarios batching --batch-files 2000 --batch-seconds 20
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shlex
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.compat import AIRFLOW_VERSION
from airflow_provider_s3ch.core.history import TAG_PREFIX
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.live import (
    STRUCTURE,
    LiveOptions,
    Tracker,
    count_runs_and_inserts,
    settle,
    start_airflow,
)
from airflow_provider_s3ch.local.stack import s3_notification

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "continuous_load.json"
DAG_FILE = ROOT / "example_dags" / "example_continuous.py"


def _percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, -(-int(p * len(ordered)) // 100) - 1)], 2)


def _wait_loaded(tracker: Tracker, timeout: float, poll: float = 1.0) -> float:
    """Look at the table until every file put is readable (or ``timeout``); when the last one became readable."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tracker.look()
        if not tracker.waiting():
            break
        time.sleep(poll)
    return max(tracker.seen_at.values(), default=time.monotonic())


def _inserts_read(stack: LocalStack, rows_per_file: int) -> list[int]:
    """The files each finished insert from S3 read (its ``read_rows`` over the rows a file holds)."""
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    rows = ch.execute(
        "SELECT read_rows FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Insert' "
        "AND is_initial_query AND startsWith(log_comment, %(tag)s) "
        "AND NOT arrayExists(t -> endsWith(t, '._s3ch_ledger'), tables) ORDER BY event_time_microseconds",
        {"tag": TAG_PREFIX + " "})
    return [round(int(r) / rows_per_file) for (r,) in rows]


def _exactly_once(tracker: Tracker, rows_per_file: int) -> dict[str, Any]:
    tracker.look()
    missing = [n for n in tracker.put_at if tracker.counts.get(n, 0) < rows_per_file]
    doubled = [n for n, c in tracker.counts.items() if c > rows_per_file]
    return {"files_put": len(tracker.put_at), "files_loaded": len(tracker.seen_at), "missing": len(missing),
            "doubled": len(doubled), "exactly_once": tracker.counts == dict.fromkeys(tracker.put_at, rows_per_file)}


def batching(args: argparse.Namespace) -> dict[str, Any]:
    rows = args.batch_rows
    options = LiveOptions(dag_file=DAG_FILE, bucket="s3ch-bench-batching", table="default.continuous_batching",
                          batch_wait=args.batch_wait,
                          rows_per_file=rows, sqs=True, listing_poll=300.0, safety_net=args.safety_net,
                          max_files_per_load=1000, queue="s3ch-bench-batching")
    with LocalStack(nodes=1, region="eu-west-3") as stack, tempfile.TemporaryDirectory(prefix="s3ch-bench-") as home:
        stack.create_bucket(options.bucket)
        queue = stack.notify_queue(options.bucket, options.queue, prefix=options.prefix)
        _create(stack, options)
        airflow = start_airflow(stack, Path(home), options, queue)
        try:
            before = dict(count_runs_and_inserts(stack, airflow)[0])
            tracker = Tracker(stack, options)
            started = time.monotonic()
            pace = args.batch_seconds / args.batch_files

            def put(n: int) -> None:
                time.sleep(max(0.0, started + n * pace - time.monotonic()))
                tracker.put(n)

            with ThreadPoolExecutor(args.batch_threads) as pool:
                list(pool.map(put, range(1, args.batch_files + 1)))
            landed = time.monotonic() - started
            last_put = max(tracker.put_at.values())
            last_seen = _wait_loaded(tracker, args.drain_timeout)
            settle(airflow)
            runs, _ = count_runs_and_inserts(stack, airflow)
            per_insert = _inserts_read(stack, rows)
            once = _exactly_once(tracker, rows)
        finally:
            airflow.stop()
    new_runs = {k: v - before.get(k, 0) for k, v in runs.items() if v - before.get(k, 0)}
    return {"scenario": "batching", "batch_wait_s": args.batch_wait, "files": args.batch_files, "rows_per_file": rows,
            "file_bytes": len(f"{args.batch_files},{args.batch_files * 1_000_000 + rows},v{rows}\n") * rows,
            "landed_in_s": round(landed, 1), "put_threads": args.batch_threads,
            "max_files_per_load": options.max_files_per_load,
            "runs": new_runs, "runs_total": sum(new_runs.values()), "inserts": len(per_insert),
            "files_per_insert": per_insert, "drain_after_last_put_s": round(last_seen - last_put, 1),
            **once, "goals": {"inserts": 15, "runs": 10}}


def bad_notifications(args: argparse.Namespace) -> dict[str, Any]:
    rows, rng = args.rows_per_file, random.Random(args.seed)
    options = LiveOptions(dag_file=DAG_FILE, bucket="s3ch-bench-badnotes", table="default.continuous_badnotes",
                          rows_per_file=rows, sqs=True, listing_poll=args.backstop_poll, safety_net=args.safety_net,
                          queue="s3ch-bench-badnotes")
    with LocalStack(nodes=1, region="eu-west-3") as stack, tempfile.TemporaryDirectory(prefix="s3ch-bench-") as home:
        stack.create_bucket(options.bucket)
        sqs = stack.sqs_client()
        queue = sqs.create_queue(QueueName=options.queue)["QueueUrl"]  # no bucket notification: sent below
        _create(stack, options)
        airflow = start_airflow(stack, Path(home), options, queue)
        try:
            tracker, s3 = Tracker(stack, options), stack.s3_client()
            dropped, doubled, later = [], [], []
            for n in range(1, args.files + 1):
                tracker.put(n)
                key = f"{options.prefix}f-{n:06d}.csv"
                head = s3.head_object(Bucket=options.bucket, Key=key)
                body = s3_notification(options.bucket, key, head["ContentLength"], head["ETag"].strip('"'),
                                    datetime.now(UTC))
                if rng.random() < 0.10:
                    dropped.append(n)
                else:
                    sqs.send_message(QueueUrl=queue, MessageBody=body)
                    if n % 2 == 0:  # every other one twice, the copy a few seconds later
                        doubled.append(n)
                        later.append(threading.Timer(3.0, sqs.send_message, kwargs={
                            "QueueUrl": queue, "MessageBody": body}))
                        later[-1].start()
                tracker.look()
                time.sleep(max(0.0, args.interval))
            for timer in later:
                timer.join()
            _wait_loaded(tracker, args.drain_timeout)
            settle(airflow)
            runs, inserts = count_runs_and_inserts(stack, airflow)
            once = _exactly_once(tracker, rows)
        finally:
            airflow.stop()
    latency = {n: tracker.seen_at[n] - tracker.put_at[n] for n in tracker.seen_at}
    late = [latency[n] for n in dropped if n in latency]
    sent = [latency[n] for n in latency if n not in dropped]
    return {"scenario": "bad_notifications", "files": args.files, "interval_s": args.interval, "seed": args.seed,
            "dropped": len(dropped), "sent_twice": len(doubled), "backstop_poll_s": args.backstop_poll,
            "notified_p50_s": _percentile(sent, 50), "notified_p95_s": _percentile(sent, 95),
            "dropped_p50_s": _percentile(late, 50), "dropped_max_s": round(max(late), 2) if late else None,
            "runs": runs, "inserts": inserts, **once}


def _create(stack: LocalStack, options: LiveOptions) -> None:
    stack.clickhouse_client().execute(
        f"CREATE TABLE IF NOT EXISTS {options.table} ({STRUCTURE}) ENGINE = MergeTree ORDER BY (file, id)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="batching,bad_notifications")
    parser.add_argument("--batch-files", type=int, default=10_000)
    parser.add_argument("--batch-seconds", type=float, default=60.0)
    parser.add_argument("--batch-threads", type=int, default=8, help="threads putting the batching files (8)")
    parser.add_argument("--batch-rows", type=int, default=500, help="rows a batching file holds (~10 KB)")
    parser.add_argument("--files", type=int, default=300, help="bad_notifications: files put")
    parser.add_argument("--interval", type=float, default=0.2, help="bad_notifications: seconds between puts")
    parser.add_argument("--rows-per-file", type=int, default=100)
    parser.add_argument("--backstop-poll", type=float, default=30.0, help="the listing watcher's poll (30 s)")
    parser.add_argument("--safety-net", default="0 * * * *",
                        help="the DAG's time schedule beside the asset (hourly: the runs counted are the events')")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--batch-wait", type=float, default=0.0, help="batching: the notification watcher's batch_wait")
    parser.add_argument("--drain-timeout", type=float, default=300.0)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    chosen = {"batching": batching, "bad_notifications": bad_notifications}
    results = []
    for name in (s.strip() for s in args.scenarios.split(",") if s.strip()):
        print(f"=== {name}", flush=True)
        results.append(chosen[name](args))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "files_per_insert"}), flush=True)
    out = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC"), "machine": platform.platform(), "note": args.note,
           "airflow": AIRFLOW_VERSION,
           "command": shlex.join(["python", "-m", "bench.continuous_load",
                                  *(argv if argv is not None else sys.argv[1:])]),
           "scenarios": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written: {args.out}")
    return 0 if all(r["exactly_once"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())

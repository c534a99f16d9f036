"""Continuous ingestion under faults: processes killed while files land, and ClickHouse down for minutes.

On the local stack with Airflow's own api-server, dag-processor, scheduler and triggerer on the continuous
example DAG (``example_dags/example_continuous.py``: both watchers, the minute's safety net, the file ledger), run
as ``s3ch-local live`` runs it (:func:`airflow_provider_s3ch.local.live.run_live`, whose ``faults`` hook this file
fills). Two scenarios, each on a fresh stack and a fresh Airflow:

- ``crashes``: ``--files`` small CSV files (2,000) put at ``--interval`` (0.1 s) while, at seeded random points
  (``--seed``), the triggerer, the scheduler (its LocalExecutor's task processes die with it), a task process
  (``airflow worker -- …``, killed while it runs) and the ClickHouse node are SIGKILLed and started again,
  ``--kills`` in all (24: each kind 6 times); then the files still unloaded are waited for. A killed scheduler's
  running task instances stay ``running`` until a scheduler resets them as orphans, every
  ``--orphaned-tasks-check`` seconds (Airflow's ``[scheduler] orphaned_tasks_check_interval``, 300 s by default,
  30 s here); with ``max_active_runs=1`` the DAG's next run waits for that.
- ``backpressure``: the ClickHouse node stopped for ``--outage`` seconds (600) while ``--files`` files (5,000)
  land, then started again: the task's tries (Airflow's ``task_instance``) and the lag are sampled during the
  outage, the inserts and the files each one read are counted after it.

Both end with the engine's checks: the table's ``count()`` and ``sum(cityHash64(*))`` against ClickHouse's own
read of every file (``s3()``), the ledger (``_s3ch_ledger FINAL``) holding one ``loaded`` entry per key and ETag,
and each file's rows counted by its marker column (``file``): files lost, doubled or not loaded yet. Writes
``--out`` (``bench/results/continuous_faults.json``; a scenario run alone replaces its own entry) and prints a
table.

    .venv/bin/python -m bench.continuous_faults                                  # both, full size (~45 min)
    .venv/bin/python -m bench.continuous_faults --scenarios crashes --files 200 --kills 8 --interval 0.5
    .venv/bin/python -m bench.continuous_faults --scenarios backpressure --files 300 --outage 60
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shlex
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from airflow_provider_s3ch.compat import AIRFLOW_VERSION
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.airflow import Airflow
from airflow_provider_s3ch.local.live import (
    DAG_ID,
    STRUCTURE,
    LiveOptions,
    LiveResult,
    Tracker,
    count_runs_and_inserts,
    run_live,
)  # fmt: skip

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "continuous_faults.json"
KINDS = ("triggerer", "scheduler", "worker", "clickhouse")


def kill_plan(kills: int, period: float, rng: random.Random) -> list[tuple[float, str]]:
    """``kills`` kills spread over the kinds as evenly as they go (each kind ``kills // 4`` times or once more), at
    seeded random points between 5 % and 95 % of ``period`` seconds, in time order."""
    kinds = [KINDS[i % len(KINDS)] for i in range(kills)]
    rng.shuffle(kinds)
    times = sorted(rng.uniform(0.05 * period, 0.95 * period) for _ in kinds)
    return [(round(t, 2), kind) for t, kind in zip(times, kinds, strict=True)]


def insert_sizes(loaded_per_query: list[int], bound: int) -> dict[str, Any]:
    """The inserts (queries that loaded files, from the ledger) and the files each read, against ``bound``."""
    return {"inserts": len(loaded_per_query), "files_per_insert_max": max(loaded_per_query, default=0),
            "files_per_insert": loaded_per_query, "bounded": all(n <= bound for n in loaded_per_query)}  # fmt: skip


def task_processes(airflow: Airflow) -> list[psutil.Process]:
    """The task processes (``airflow worker -- <task instance id>``) under the scheduler's LocalExecutor."""
    try:
        children = psutil.Process(airflow.procs["scheduler"].pid).children(recursive=True)
    except psutil.Error:
        return []
    found = []
    for child in children:
        try:
            title = " ".join(child.cmdline())
            # the executor's own processes are "airflow worker -- LocalExecutor: …" (the task's supervisor)
            if title.startswith("airflow worker -- ") and not title.startswith("airflow worker -- LocalExecutor"):
                found.append(child)
        except psutil.Error:
            continue
    return found


def kill_component(airflow: Airflow, name: str) -> None:
    """SIGKILL one Airflow component's process group (the scheduler's holds its executor's task processes)."""
    proc = airflow.procs[name]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def stop_node(stack: LocalStack) -> None:
    """Stop the ClickHouse node (SIGTERM; ``restart_node`` starts it again on its ports and data)."""
    proc = stack.nodes[0].process
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a node that ignores SIGTERM
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def airflow_figures(airflow: Airflow, tries: bool = False) -> dict[str, Any]:
    """The DAG's task tries (each task instance's ``try_number``: the tries it started) and states; with
    ``tries``, each try (its run's type, number, state and start), in the order they started."""
    current = airflow.db("SELECT try_number, state FROM task_instance WHERE dag_id = ?", DAG_ID)
    earlier = airflow.db("SELECT state FROM task_instance_history WHERE dag_id = ?", DAG_ID)
    runs = Counter(f"{t}/{s}" for t, s in airflow.db("SELECT run_type, state FROM dag_run WHERE dag_id = ?", DAG_ID))
    figures: dict[str, Any] = {
        "task_instances": len(current), "task_tries": sum(t for t, _ in current),
        "max_try": max((t for t, _ in current), default=0),
        "task_states": dict(Counter(str(s) for _, s in current)),
        "earlier_try_states": dict(Counter(str(s) for (s,) in earlier)), "runs": dict(runs),
    }  # fmt: skip
    if tries:
        each = [f"SELECT r.run_type, t.try_number, t.state, t.start_date FROM {table} t JOIN dag_run r "
                "ON r.dag_id = t.dag_id AND r.run_id = t.run_id WHERE t.dag_id = ?"
                for table in ("task_instance_history", "task_instance")]  # fmt: skip
        figures["tries"] = [list(row) for row in airflow.db(" UNION ALL ".join(each) + " ORDER BY 4", DAG_ID, DAG_ID)]
    return figures


def engine_checks(stack: LocalStack, options: LiveOptions) -> dict[str, Any]:
    """The table against ClickHouse's own read of every file; the ledger's entries per key and ETag."""
    ch = stack.clickhouse_client()
    files = (f"s3('{stack.s3_endpoint}/{options.bucket}/{options.prefix}*.csv', '{stack.s3_access_key}', "
             f"'{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")  # fmt: skip
    (s3_rows, s3_sum), = ch.execute(f"SELECT count(), sum(cityHash64(*)) FROM {files}")
    (table_rows, table_sum), = ch.execute(f"SELECT count(), sum(cityHash64(*)) FROM {options.table}")
    ledger = f"{options.table.split('.')[0]}._s3ch_ledger"
    entries = ch.execute(
        f"SELECT key, etag, countIf(state = 'loaded'), countIf(state IN ('claimed', 'pending')) FROM {ledger} FINAL "
        "WHERE table = %(t)s GROUP BY key, etag", {"t": options.table})  # fmt: skip
    objects = {o["Key"]: o["ETag"].strip('"') for page in stack.s3_client().get_paginator("list_objects_v2").paginate(
        Bucket=options.bucket, Prefix=options.prefix) for o in page.get("Contents", [])}  # fmt: skip
    loaded = {(k, e): n for k, e, n, _ in entries}
    per_query = ch.execute(
        f"SELECT count() FROM {ledger} FINAL WHERE table = %(t)s AND state = 'loaded' GROUP BY query_id "
        "ORDER BY min(updated_at)", {"t": options.table})  # fmt: skip
    return {
        "s3_rows": s3_rows, "table_rows": table_rows, "sums_equal": (s3_rows, s3_sum) == (table_rows, table_sum),
        "ledger_one_loaded_per_file": all(loaded.get((k, e)) == 1 for k, e in objects.items())
        and all(n == 1 for n in loaded.values()),
        "ledger_loaded_twice": sum(1 for n in loaded.values() if n > 1),
        "ledger_not_loaded": sum(1 for k, e in objects.items() if not loaded.get((k, e))),
        "files_held_by_claims": sum(1 for k, e, n, held in entries if n == 0 and held and k in objects),
        **insert_sizes([n for (n,) in per_query], options.max_files_per_load),
    }  # fmt: skip


class Crashes:
    """The ``faults`` hook of the crashes scenario: fires each planned kill once its time (seconds after the first
    put) has come; a task process kill waits for a task to run (the later kills go on meanwhile); the puts wait
    while the node restarts."""

    def __init__(self, stack: LocalStack, plan: list[tuple[float, str]], say: Any) -> None:
        self.stack, self.pending, self.say = stack, list(plan), say
        self.done: list[dict[str, Any]] = []
        self.inserts_logged = 0  # the node's query log starts empty after each restart: counted before each kill
        self.t0: float | None = None

    def __call__(self, airflow: Airflow, tracker: Tracker) -> bool:
        if self.t0 is None:
            self.t0 = min(tracker.put_at.values())
        if not self.pending:
            return False
        now = time.monotonic() - self.t0
        # the first kill due that can be made now: a task process kill waits for a task to run, the others go on
        tasks = task_processes(airflow) if any(k == "worker" and at <= now for at, k in self.pending) else []
        due = [(at, kind) for at, kind in self.pending if at <= now and (kind != "worker" or tasks)]
        if not due:
            return True
        at, kind = due[0]
        what = kind
        if kind == "worker":
            try:
                what = " ".join(tasks[0].cmdline())
                tasks[0].kill()
            except psutil.Error:
                return True  # it ended meanwhile: the next look tries again
        elif kind == "clickhouse":
            self.inserts_logged += count_runs_and_inserts(self.stack, airflow)[1]
            # In this thread: the node dies with the thread that started it. The puts wait meanwhile (seconds)
            # and catch up after.
            self.stack.restart_node(0, kill=True)
        else:
            kill_component(airflow, kind)
            airflow.start(kind)
        self.pending.remove((at, kind))
        self.done.append({"kind": kind, "planned_s": at, "at_s": round(now, 1), "files_put": len(tracker.put_at)})
        self.say(f"  kill {len(self.done)}: {what} at {now:.1f} s (planned {at:.1f} s), {len(tracker.put_at)} put")
        return True


class Outage:
    """The ``faults`` hook of the backpressure scenario: the node stopped at the first look, started again
    ``seconds`` later; the lag, the loaded files and Airflow's tries sampled every ``every`` seconds."""

    def __init__(self, stack: LocalStack, seconds: float, every: float, say: Any) -> None:
        self.stack, self.seconds, self.every, self.say = stack, seconds, every, say
        self.down_at: float | None = None
        self.up_at: float | None = None
        self.samples: list[dict[str, Any]] = []
        self.next_sample = 0.0

    def __call__(self, airflow: Airflow, tracker: Tracker) -> bool:
        now = time.monotonic()
        if self.down_at is None:
            stop_node(self.stack)
            self.down_at = now
            self.say(f"  ClickHouse stopped for {self.seconds:g} s")
        elif self.up_at is None and now - self.down_at >= self.seconds:
            self.stack.restart_node(0)  # in this thread: the node dies with the thread that started it
            self.up_at = time.monotonic()
            self.say(f"  ClickHouse started again after {self.up_at - self.down_at:.0f} s")
        if now >= self.next_sample:
            self.next_sample = now + self.every
            figures = airflow_figures(airflow)
            self.samples.append({
                "t_s": round(now - self.down_at, 1), "clickhouse": "up" if self.up_at else "down",
                "lag_s": round(tracker.lag(), 1), "put": len(tracker.put_at), "loaded": len(tracker.seen_at),
                "task_tries": figures["task_tries"], "task_states": figures["task_states"], "runs": figures["runs"],
            })  # fmt: skip
        return self.up_at is None


def run_scenario(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One scenario on a fresh stack and a fresh Airflow: the live run's figures, the faults', the engine's."""
    crashes = name == "crashes"
    files = args.files or (2000 if crashes else 5000)
    interval = args.interval or (0.1 if crashes else 0.9 * args.outage / files)
    options = LiveOptions(
        dag_file=ROOT / "example_dags" / "example_continuous.py", bucket=f"s3ch-faults-{name}",
        table=f"default.faults_{name}", files=files, interval=interval, rows_per_file=args.rows_per_file,
        listing_poll=args.listing_poll, safety_net=args.safety_net, max_files_per_load=args.max_files_per_load,
        report_every=args.report_every, drain_timeout=args.drain_timeout, queue=f"s3ch-faults-{name}",
        airflow_env={"AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": str(args.orphaned_tasks_check)},
    )  # fmt: skip
    say = lambda line: print(f"[{name}] {line}", flush=True)  # noqa: E731
    hook: Crashes | Outage
    started = time.monotonic()
    with LocalStack(nodes=1, region="eu-west-3") as stack, tempfile.TemporaryDirectory(prefix="s3ch-faults-") as home:
        if crashes:
            plan = kill_plan(args.kills, files * interval, random.Random(args.seed))
            hook = Crashes(stack, plan, say)
        else:
            hook = Outage(stack, args.outage, args.sample_every, say)
        trackers: list[Tracker] = []
        airflows: list[Airflow] = []

        def faults(airflow: Airflow, tracker: Tracker) -> bool:
            trackers[:] = [tracker]
            airflows[:] = [airflow]
            return hook(airflow, tracker)

        result: LiveResult = run_live(stack, options, home=Path(home), say=say, faults=faults)
        tracker, airflow = trackers[0], airflows[0]
        figures = {**airflow_figures(airflow, tries=True), **engine_checks(stack, options)}
        _, inserts_logged = count_runs_and_inserts(stack, airflow)
    last_put = max(tracker.put_at.values())
    drained = not tracker.waiting()
    summary = result.summary()
    out: dict[str, Any] = {
        "scenario": name, "files": files, "interval_s": round(interval, 3), "rows_per_file": args.rows_per_file,
        "max_files_per_load": args.max_files_per_load, "listing_poll_s": args.listing_poll,
        "safety_net": args.safety_net, "orphaned_tasks_check_interval_s": args.orphaned_tasks_check,
        "files_put": summary["files_put"], "files_loaded": summary["files_loaded"],
        "rows": summary["rows"], "exactly_once": summary["exactly_once"], "lost": summary["lost"],
        "doubled": summary["doubled"], "not_loaded_yet": summary["not_loaded_yet"], "drained": drained,
        "drain_after_last_put_s": round(max(tracker.seen_at.values()) - last_put, 1) if drained else None,
        "p50_s": summary["p50_s"], "p95_s": summary["p95_s"], "max_s": summary["max_s"], **figures,
        "duration_s": round(time.monotonic() - started, 1),
    }  # fmt: skip
    if isinstance(hook, Crashes):
        out.update({
            "kills": len(hook.done), "kills_by_kind": dict(Counter(k["kind"] for k in hook.done)), "seed": args.seed,
            "kills_planned": args.kills, "kill_log": hook.done,
            "inserts_logged": hook.inserts_logged + inserts_logged,  # query_log, across the node's restarts
            "full_run": files >= 2000 and len(hook.done) >= 20,
        })  # fmt: skip
    else:
        down = [s for s in hook.samples if s["clickhouse"] == "down"]
        out.update({
            "outage_s": args.outage, "samples": hook.samples,
            # the tries started while the node was down (the first sample's are from before the outage)
            "tries_during_outage": down[-1]["task_tries"] - down[0]["task_tries"] if down else 0,
            "lag_at_restart_s": down[-1]["lag_s"] if down else None,
            "lag_rising": len(down) > 1 and all(b["lag_s"] >= a["lag_s"] for a, b in zip(down, down[1:], strict=False)),
            "drain_after_restart_s": round(max(tracker.seen_at.values()) - hook.up_at, 1)
            if drained and hook.up_at else None,
            "inserts_logged_after_restart": inserts_logged,
            "full_run": files >= 5000 and args.outage >= 600,
        })  # fmt: skip
    out["ok"] = bool(out["exactly_once"] and not out["not_loaded_yet"] and out["sums_equal"]
                     and out["ledger_one_loaded_per_file"])  # fmt: skip
    return out


def table(scenarios: list[dict[str, Any]]) -> str:
    head = (f"{'scenario':<13} {'faults':<34} {'files':>5} {'loaded':>6} {'unld':>4} {'lost':>4} {'dbl':>3} "
            f"{'drain':>6} {'tries':>5} {'runs':>4} {'inserts':>7} {'max/ins':>7} {'held':>4}  "
            "engine checks")  # fmt: skip
    lines = [head, "-" * len(head)]
    for s in scenarios:
        if s["scenario"] == "crashes":
            faults = f"{s['kills']} kills " + ",".join(f"{k[:4]} {n}" for k, n in sorted(s["kills_by_kind"].items()))
            drain = s["drain_after_last_put_s"]
        else:
            faults = f"down {s['outage_s']:g} s, lag to {s['lag_at_restart_s']} s, {s['tries_during_outage']} tries"
            drain = s["drain_after_restart_s"]
        checks = "count+cityHash64 " + ("equal" if s["sums_equal"] else "DIFFER") + ", ledger " + (
            "1 loaded/file" if s["ledger_one_loaded_per_file"] else "NOT 1 loaded/file")
        lines.append(
            f"{s['scenario']:<13} {faults:<34} {s['files_put']:>5} {s['files_loaded']:>6} {s['not_loaded_yet']:>4} "
            f"{s['lost']:>4} "
            f"{s['doubled']:>3} {'-' if drain is None else f'{drain:.0f}s':>6} {s['task_tries']:>5} "
            f"{sum(s['runs'].values()):>4} {s['inserts']:>7} {s['files_per_insert_max']:>7} "
            f"{s['files_held_by_claims']:>4}  {checks}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="crashes,backpressure", help="which, in order (crashes,backpressure)")
    parser.add_argument("--files", type=int, default=0, help="files put (crashes 2000, backpressure 5000)")
    parser.add_argument("--interval", type=float, default=0.0,
                        help="seconds between two puts (crashes 0.1; backpressure: the files spread over 90 %% of "
                        "the outage)")  # fmt: skip
    parser.add_argument("--kills", type=int, default=24, help="crashes: kills in all, spread over the 4 kinds (24)")
    parser.add_argument("--seed", type=int, default=43, help="crashes: the kill plan's seed (43)")
    parser.add_argument("--outage", type=float, default=600.0, help="backpressure: seconds ClickHouse is down (600)")
    parser.add_argument("--sample-every", type=float, default=10.0, help="backpressure: seconds between samples (10)")
    parser.add_argument("--rows-per-file", type=int, default=20, help="rows in each file (20)")
    parser.add_argument("--max-files-per-load", type=int, default=1000, help="the DAG's max_files_per_load (1000)")
    parser.add_argument("--listing-poll", type=float, default=60.0, help="the listing watcher's seconds between looks")
    parser.add_argument("--safety-net", default="* * * * *", help="the DAG's time schedule (every minute)")
    parser.add_argument("--orphaned-tasks-check", type=float, default=30.0,
                        help="Airflow's [scheduler] orphaned_tasks_check_interval (30 s; Airflow's default 300 s): how "
                        "soon a restarted scheduler fails the running tasks of the one killed, which hold the DAG's "
                        "one active run meanwhile")  # fmt: skip
    parser.add_argument("--drain-timeout", type=float, default=900.0,
                        help="after the last put (and the last fault), how long to wait for unloaded files (900 s)")
    parser.add_argument("--report-every", type=float, default=10.0, help="seconds between progress lines (10)")
    parser.add_argument("--note", default="", help="a note kept with each scenario's result")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the result file ({OUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    # SIGTERM ends a scenario as Ctrl-C does: Airflow (in its own sessions) and the stack stopped first.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # the looks while the node is down or restarting fail by design: no traceback for each of them
    logging.getLogger("clickhouse_driver").setLevel(logging.ERROR)
    command = shlex.join(["python", "-m", "bench.continuous_faults", *(argv if argv is not None else sys.argv[1:])])
    results = {}
    for name in [n.strip() for n in args.scenarios.split(",") if n.strip()]:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        results[name] = {"started": started, "command": command, "note": args.note, **run_scenario(name, args)}
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    out = {"machine": platform.platform(), "airflow": AIRFLOW_VERSION,
           "scenarios": {**previous.get("scenarios", {}), **results}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("\n" + table(list(results.values())))
    for r in results.values():
        if r["files_held_by_claims"]:
            print(f"{r['scenario']}: {r['files_held_by_claims']} file(s) still held by the claims of killed task "
                  "processes (a claim stays live until claim_timeout without a query or staging table of its load)")
    print(f"\nwritten: {args.out}")
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

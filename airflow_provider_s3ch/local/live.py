"""``s3ch-local live``: continuous ingestion, live, on the local stack with Airflow's own processes.

The local stack (ClickHouse, S3 and SQS), an SQS queue the bucket notifies of each new object, and Airflow's
api-server, dag-processor, scheduler and triggerer on the continuous example DAG
(``example_dags/example_continuous.py``). Then a small CSV file is put once a second, and every few seconds
a line says how many rows the table holds, how many files were put and loaded, and the lag (now minus the
put time of the oldest file whose rows are not readable yet). At the end: each file's latency from its
``put_object`` returning to its rows being readable (p50, p95, max), whether every file's rows are in the
table exactly once, the DAG's runs and the inserts; then everything stops.

:func:`run_live` does the work on a started stack and returns the figures (``bench/continuous.py`` uses it).
"""

from __future__ import annotations

import argparse
import functools
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clickhouse_driver.errors import Error as ClickHouseError

from airflow_provider_s3ch.core.history import TAG_PREFIX
from airflow_provider_s3ch.local.airflow import COMPONENTS, Airflow, wait_for
from airflow_provider_s3ch.local.stack import LocalStack

DAG_ID = "s3_to_clickhouse_continuous"
STRUCTURE = "file UInt32, id UInt32, v String"


@dataclass
class LiveOptions:
    """What a live run does (the command's arguments)."""

    dag_file: Path
    bucket: str = "s3ch-live"
    prefix: str = "landing/"
    table: str = "default.landing_events"
    seconds: float = 60.0  #: how long files are put
    files: int | None = None  #: put this many files instead (``seconds`` is then ignored)
    interval: float = 1.0  #: seconds between two puts
    rows_per_file: int = 100
    sqs: bool = True  #: the notification watcher beside the listing watcher
    listing_poll: float = 60.0  #: the listing watcher's poll interval
    #: the time schedule beside the asset (cron): it bounds the wait of events that reached no run (Airflow
    #: starts a run with the events stored when the first of them queued it; later ones wait for the next event,
    #: and after the last file there is none: docs/continuous.md)
    safety_net: str = "* * * * *"
    max_files_per_load: int = 1000
    report_every: float = 5.0  #: seconds between two progress lines
    poll: float = 0.2  #: seconds between two looks at the table
    drain_timeout: float = 120.0  #: after the last put, how long to wait for the files still unloaded
    start_timeout: float = 300.0  #: how long Airflow may take to run the watchers
    queue: str = "s3ch-live-landing"
    airflow_env: dict[str, str] = field(default_factory=dict)  #: more Airflow settings (``AIRFLOW__…``)


@dataclass
class LiveResult:
    """The figures of one live run."""

    put: int = 0
    loaded: int = 0  #: files whose rows are all readable
    exactly_once: bool = False  #: every file put has exactly ``rows_per_file`` rows in the table, no other file any
    missing: int = 0  #: files put whose rows are not all in the table
    doubled: int = 0  #: files with more rows in the table than they hold
    rows: int = 0
    latencies: list[float] = field(default_factory=list)  #: seconds, put -> readable, per loaded file
    runs: dict[str, int] = field(default_factory=dict)  #: the DAG's runs by "run_type/state"
    inserts: int = 0  #: inserts from S3 into ClickHouse (system.query_log)
    stopped_by: str | None = None  #: the signal that cut the run short

    def percentile(self, p: float) -> float | None:
        """The ``p``-th percentile (nearest rank) of the latencies; None without any."""
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    def summary(self) -> dict[str, Any]:
        """A JSON-safe summary."""
        return {
            "files_put": self.put, "files_loaded": self.loaded, "exactly_once": self.exactly_once,
            "missing": self.missing, "doubled": self.doubled, "rows": self.rows,
            "p50_s": _round(self.percentile(50)), "p95_s": _round(self.percentile(95)),
            "max_s": _round(max(self.latencies) if self.latencies else None), "runs": self.runs,
            "inserts": self.inserts, "stopped_by": self.stopped_by,
        }  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class Tracker:
    """The files put and when their rows became readable: each file's rows carry its number (``file``)."""

    def __init__(self, stack: LocalStack, options: LiveOptions) -> None:
        self.s3 = stack.s3_client()
        self.ch = stack.clickhouse_client()
        self.options = options
        self.put_at: dict[int, float] = {}
        self.seen_at: dict[int, float] = {}
        self.counts: dict[int, int] = {}

    def put(self, n: int) -> None:
        """Put file ``n``; its clock starts when ``put_object`` returns."""
        rows = self.options.rows_per_file
        body = "".join(f"{n},{n * 1_000_000 + i},v{i}\n" for i in range(rows)).encode()
        self.s3.put_object(Bucket=self.options.bucket, Key=f"{self.options.prefix}f-{n:06d}.csv", Body=body)
        self.put_at[n] = time.monotonic()

    def look(self) -> None:
        """Read each file's row count; a file is readable once all its rows are. While the node is down (a
        fault injected on purpose) the last counts stand."""
        try:
            rows = self.ch.execute(f"SELECT file, count() FROM {self.options.table} GROUP BY file")
        except (ClickHouseError, OSError, EOFError):
            return
        now = time.monotonic()
        self.counts = {int(f): int(c) for f, c in rows}
        for n, count in self.counts.items():
            if count >= self.options.rows_per_file and n in self.put_at and n not in self.seen_at:
                self.seen_at[n] = now

    def waiting(self) -> list[int]:
        return [n for n in self.put_at if n not in self.seen_at]

    def lag(self) -> float:
        """Now minus the put time of the oldest file not readable yet (0 when every file is)."""
        waiting = [self.put_at[n] for n in self.waiting()]
        return time.monotonic() - min(waiting) if waiting else 0.0

    def line(self, started: float) -> str:
        return (f"  {time.monotonic() - started:6.0f} s  rows {sum(self.counts.values()):>8,}  files put "
                f"{len(self.put_at):>4}  loaded {len(self.seen_at):>4}  lag {self.lag():5.1f} s")  # fmt: skip


def start_airflow(stack: LocalStack, home: Path, options: LiveOptions, queue_url: str | None) -> Airflow:
    """Airflow's components on the continuous example DAG alone (a DAGs folder holding a copy of it), the DAG
    unpaused; returns once the triggerer runs its watchers."""
    dags = home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(options.dag_file, dags / options.dag_file.name)
    airflow = Airflow(home, stack, {
        "S3CH_CONTINUOUS_URI": f"s3://{options.bucket}/{options.prefix}*.csv",
        "S3CH_CONTINUOUS_QUEUE_URL": queue_url or "",
        "S3CH_CONTINUOUS_LISTING_POLL": str(options.listing_poll),
        "S3CH_CONTINUOUS_SAFETY_NET": options.safety_net,
        "S3CH_CONTINUOUS_TABLE": options.table,
        "S3CH_CONTINUOUS_STRUCTURE": STRUCTURE,
        "S3CH_CONTINUOUS_MAX_FILES": str(options.max_files_per_load),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        **options.airflow_env,
    }, dags_folder=dags)  # fmt: skip
    airflow.migrate()
    airflow.start(*COMPONENTS)
    watchers = 2 if queue_url else 1
    wait_for(
        "the triggerer to run the asset's watchers",
        lambda: _running_watchers(airflow) >= watchers,
        options.start_timeout,
        airflow,
    )
    # The time schedule's first run (made once the DAG appears, for its latest tick) holds the one active run's
    # place while it goes on: the first files would wait for it. It finds nothing to load; let it end first.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not airflow.db("SELECT 1 FROM dag_run WHERE dag_id = ?", DAG_ID):
        time.sleep(0.5)
    settle(airflow, options.start_timeout)
    return airflow


def _running_watchers(airflow: Airflow) -> int:
    try:
        return int(airflow.db("SELECT count() FROM trigger WHERE triggerer_id IS NOT NULL")[0][0])
    except Exception:  # noqa: BLE001 - the table appears with the first migration's commit
        return 0


def settle(airflow: Airflow, timeout: float = 60.0) -> None:
    """Wait (at most ``timeout`` seconds) for the DAG's runs to end: a run may still be going on with the last
    events, which name files already loaded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and airflow.db(
        "SELECT 1 FROM dag_run WHERE dag_id = ? AND state IN ('queued', 'running')", DAG_ID
    ):
        time.sleep(0.5)


def count_runs_and_inserts(stack: LocalStack, airflow: Airflow) -> tuple[dict[str, int], int]:
    """The DAG's runs by type and state (Airflow's database); the provider's inserts from S3 (ClickHouse's query
    log: the finished inserts that carry the provider's ``log_comment`` tag, the ledger's own writes left out)."""
    runs = Counter(f"{t}/{s}" for t, s in airflow.db("SELECT run_type, state FROM dag_run WHERE dag_id = ?", DAG_ID))
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    inserts = ch.execute(
        "SELECT count() FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Insert' "
        "AND is_initial_query AND startsWith(log_comment, %(tag)s) "
        "AND NOT arrayExists(t -> endsWith(t, '._s3ch_ledger'), tables)",
        {"tag": TAG_PREFIX + " "},
    )[0][0]
    return dict(runs), int(inserts)


def feed(tracker: Tracker, options: LiveOptions, say: Any, tick: Callable[[], bool] | None = None) -> None:
    """Put a file every ``interval`` seconds (for ``seconds``, or ``files`` files), looking at the table every
    ``poll`` seconds and printing a line every ``report_every``; then wait for the files not loaded yet.

    :param tick: called at every look (faults injected between puts); while it returns True the feed does not end.
    """
    total = options.files if options.files is not None else max(1, int(options.seconds / options.interval))
    started = time.monotonic()
    next_put, next_report, n, last_put = started, started + options.report_every, 0, None
    while True:
        now = time.monotonic()
        if n < total and now >= next_put:
            n += 1
            tracker.put(n)
            next_put += options.interval
            if n == total:
                last_put = time.monotonic()
        busy = tick() if tick is not None else False
        tracker.look()
        if time.monotonic() >= next_report:
            say(tracker.line(started))
            next_report += options.report_every
        done = not tracker.waiting() and not busy
        if last_put is not None and (done or time.monotonic() - last_put > options.drain_timeout):
            say(tracker.line(started))
            return
        time.sleep(max(0.0, min(options.poll, next_put - time.monotonic() if n < total else options.poll)))


def run_live(
    stack: LocalStack,
    options: LiveOptions,
    home: Path | None = None,
    say: Any = print,
    stop_on: tuple[type[BaseException], ...] = (KeyboardInterrupt,),
    faults: Callable[[Airflow, Tracker], bool] | None = None,
) -> LiveResult:
    """The live run on a started ``stack``: queue, table, Airflow, the feed, the figures; Airflow stopped at the end.

    :param home: the ``AIRFLOW_HOME`` (a temporary folder, removed at the end, if None).
    :param say: prints a line.
    :param stop_on: the exceptions that end the feed early (a stop signal's, Ctrl-C): the figures are then
        those of the files put so far, and the exception is raised again once Airflow has stopped.
    :param faults: called at every look of the feed with Airflow and the tracker (``bench/continuous_faults.py``
        kills processes there); while it returns True the feed goes on.
    """
    stack.create_bucket(options.bucket)
    queue_url = stack.notify_queue(options.bucket, options.queue, prefix=options.prefix) if options.sqs else None
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE IF NOT EXISTS {options.table} ({STRUCTURE}) ENGINE = MergeTree ORDER BY (file, id)")
    result = LiveResult()
    tmp = None
    if home is None:
        tmp = tempfile.TemporaryDirectory(prefix="s3ch-live-")
        home = Path(tmp.name)
    t0 = time.monotonic()
    watching = "SQS notifications + listing" if options.sqs else "listing"
    say(f"starting Airflow (api-server, dag-processor, scheduler, triggerer) in {home}; watchers: {watching} "
        f"(listing every {options.listing_poll:g} s)")  # fmt: skip
    airflow: Airflow | None = None
    tracker = Tracker(stack, options)
    stopped: BaseException | None = None
    try:
        airflow = start_airflow(stack, home, options, queue_url)
        say(f"Airflow is up, its watchers running ({time.monotonic() - t0:.0f} s); putting a file every "
            f"{options.interval:g} s into s3://{options.bucket}/{options.prefix}")  # fmt: skip
        try:
            feed(tracker, options, say, None if faults is None else functools.partial(faults, airflow, tracker))
        except stop_on as stop:
            stopped = stop
            result.stopped_by = str(stop) or type(stop).__name__
            say(f"{result.stopped_by}: no more files; the figures so far")
        tracker.look()
        if stopped is None:
            settle(airflow)
        result.runs, result.inserts = count_runs_and_inserts(stack, airflow)
    finally:
        if airflow is not None:
            airflow.stop()
        if tmp is not None:
            tmp.cleanup()
    result.put = len(tracker.put_at)
    result.loaded = len(tracker.seen_at)
    result.rows = sum(tracker.counts.values())
    result.latencies = [tracker.seen_at[n] - tracker.put_at[n] for n in sorted(tracker.seen_at)]
    result.missing = sum(1 for n in tracker.put_at if tracker.counts.get(n, 0) < options.rows_per_file)
    result.doubled = sum(1 for c in tracker.counts.values() if c > options.rows_per_file)
    result.exactly_once = tracker.counts == dict.fromkeys(tracker.put_at, options.rows_per_file)
    print_summary(result, options, say)
    if stopped is not None:
        raise stopped
    return result


def print_summary(result: LiveResult, options: LiveOptions, say: Any = print) -> None:
    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    say("\n=== summary ===")
    say(f"files put: {result.put}, loaded: {result.loaded}, rows: {result.rows} "
        f"({options.rows_per_file} per file); each file exactly once: "
        f"{'yes' if result.exactly_once else f'NO ({result.missing} missing, {result.doubled} doubled)'}")
    say(f"put -> readable latency over {len(result.latencies)} files: p50 {s(result.percentile(50))}, "
        f"p95 {s(result.percentile(95))}, max {s(max(result.latencies) if result.latencies else None)}")
    runs = ", ".join(f"{k} {v}" for k, v in sorted(result.runs.items())) or "none"
    say(f"DAG runs: {sum(result.runs.values())} ({runs}); inserts from S3: {result.inserts}")  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=60.0, help="how long to put files, one a second (60)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two files (1)")
    p.add_argument("--rows-per-file", type=int, default=100, help="rows in each file (100)")
    p.add_argument("--listing-poll", type=float, default=60.0, help="the listing watcher's poll interval (60 s)")
    p.add_argument("--no-sqs", action="store_true", help="the listing watcher alone (no SQS notifications)")
    p.add_argument("--safety-net", default="* * * * *",
                   help="the DAG's time schedule beside the asset, a cron expression (every minute)")  # fmt: skip
    p.add_argument("--dag-file", default="example_dags/example_continuous.py",
                   help="the continuous example DAG (example_dags/example_continuous.py)")  # fmt: skip
    p.add_argument("--region", default="eu-west-3", help="the server's and the bucket's region (eu-west-3)")
    p.add_argument("--bucket", default="s3ch-live", help="the landing bucket (s3ch-live)")
    p.add_argument("--table", default="default.landing_events", help="the target table (default.landing_events)")


def options_from(args: argparse.Namespace) -> LiveOptions:
    return LiveOptions(
        dag_file=Path(args.dag_file).resolve(), bucket=args.bucket, table=args.table, seconds=args.seconds,
        interval=args.interval, rows_per_file=args.rows_per_file, sqs=not args.no_sqs,
        listing_poll=args.listing_poll, safety_net=args.safety_net,
    )  # fmt: skip

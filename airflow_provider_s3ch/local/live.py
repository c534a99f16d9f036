"""``s3ch-local live``: continuous ingestion, live, on the local stack with Airflow's own processes.

The local stack (ClickHouse, S3 and SQS), an SQS queue the bucket notifies of each new object, and Airflow's
api-server, dag-processor, scheduler and triggerer on the continuous example DAG
(``example_dags/example_continuous.py``). Then a small CSV file is put once a second, and every few seconds
a line says how many rows the table holds, how many files were put and loaded, and the lag (now minus the
put time of the oldest file whose rows are not readable yet; :data:`COLUMNS` explains them once, first). At
the end: each file's latency from its ``put_object`` returning to its rows being readable (p50, p95, max),
whether every file's rows are in the table exactly once (a file whose rows are absent because the run was
stopped, or the wait after the last put timed out, is "not loaded yet", neither doubled nor lost), the DAG's
runs and the inserts; then everything stops. A stop signal at any point (while Airflow starts, while files are
put, while the last ones are waited for) stops every process Airflow started before the command says so.

:func:`run_live` does the work on a started stack and returns the figures (``bench/continuous.py`` uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clickhouse_driver.errors import Error as ClickHouseError

from airflow_provider_s3ch.core.history import TAG_PREFIX
from airflow_provider_s3ch.local.airflow import COMPONENTS, Airflow, wait_for
from airflow_provider_s3ch.local.phases import from_servers
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
    listing_poll: float = 10.0  #: the listing watcher's poll interval (docs/continuous.md's figures use 10 s)
    #: the time schedule beside the asset (cron): it bounds the wait of events that reached no run (Airflow
    #: starts a run with the events stored when the first of them queued it; later ones wait for the next event,
    #: and after the last file there is none: docs/continuous.md)
    safety_net: str = "* * * * *"
    max_files_per_load: int = 1000
    batch_wait: float = 0.0  #: the notification watcher's ``batch_wait``
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
    loaded: int = 0  #: files whose rows were all readable
    #: nothing doubled or lost: each file loaded so far has its rows in the table once, no other file any (the files
    #: not loaded yet do not make it False; :attr:`complete` also asks that every file be loaded)
    exactly_once: bool = False
    #: files put whose rows never were in the table: the run was cut short, or the wait for them timed out
    not_loaded_yet: int = 0
    lost: int = 0  #: files put of whose rows the table holds fewer than the file does (not all, or none any more)
    doubled: int = 0  #: files with more rows in the table than they hold (a file never put holds none)
    rows: int = 0
    latencies: list[float] = field(default_factory=list)  #: seconds, put -> readable, per loaded file
    runs: dict[str, int] = field(default_factory=dict)  #: the DAG's runs by "run_type/state"
    inserts: int = 0  #: inserts from S3 into ClickHouse (system.query_log)
    stopped_by: str | None = None  #: the signal that cut the run short
    drain_timed_out: bool = False  #: the wait for the last files ended (``drain_timeout``) with some not loaded
    #: where the latency went, per phase (:mod:`airflow_provider_s3ch.local.phases`; its ``per_file`` left out here)
    phases: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Files were put, and every one is in the table exactly once."""
        return self.put > 0 and self.exactly_once and self.not_loaded_yet == 0

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
            "not_loaded_yet": self.not_loaded_yet, "lost": self.lost, "doubled": self.doubled, "rows": self.rows,
            "p50_s": _round(self.percentile(50)), "p95_s": _round(self.percentile(95)),
            "max_s": _round(max(self.latencies) if self.latencies else None), "runs": self.runs,
            "inserts": self.inserts, "stopped_by": self.stopped_by, "drain_timed_out": self.drain_timed_out,
            "phases": {k: v for k, v in self.phases.items() if k != "per_file"},
        }  # fmt: skip


@dataclass(frozen=True)
class Tally:
    """What the table holds of the files put, file by file (:func:`tally`)."""

    not_loaded_yet: int  #: never readable, and none of their rows in the table
    lost: int  #: fewer rows than the file holds, though once readable or partly there
    doubled: int  #: more rows than the file holds (a file never put holds none)

    @property
    def exactly_once(self) -> bool:
        return not self.lost and not self.doubled


def tally(counts: Mapping[int, int], put: Iterable[int], seen: Collection[int], rows_per_file: int) -> Tally:
    """Each file put, by its rows in the table (``counts``, file -> rows) and whether they were all readable once
    (``seen``): not loaded yet (no rows, never readable: a load still to come), lost (fewer rows than it holds
    otherwise: a file's rows arrive in one insert), doubled (more; rows of a file never put count here too).
    """
    put = set(put)
    not_loaded = lost = 0
    for n in put:
        count = counts.get(n, 0)
        if count == 0 and n not in seen:
            not_loaded += 1
        elif count < rows_per_file:
            lost += 1
    doubled = sum(1 for n, count in counts.items() if count > (rows_per_file if n in put else 0))
    return Tally(not_loaded_yet=not_loaded, lost=lost, doubled=doubled)


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
        #: the same moments on the wall clock (epoch seconds), by key: Airflow's and ClickHouse's times are so
        self.put_wall: dict[str, float] = {}
        self.seen_wall: dict[str, float] = {}
        self.counts: dict[int, int] = {}
        #: files a fault hook put beside the feed's (its own to count: left out of the run's tally)
        self.extra: set[int] = set()

    def put(self, n: int) -> None:
        """Put file ``n``; its clock starts when ``put_object`` returns."""
        rows = self.options.rows_per_file
        body = "".join(f"{n},{n * 1_000_000 + i},v{i}\n" for i in range(rows)).encode()
        self.s3.put_object(Bucket=self.options.bucket, Key=self.key(n), Body=body)
        self.put_at[n] = time.monotonic()
        self.put_wall[self.key(n)] = time.time()

    def key(self, n: int) -> str:
        return f"{self.options.prefix}f-{n:06d}.csv"

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
                self.seen_wall[self.key(n)] = time.time()

    def waiting(self) -> list[int]:
        return [n for n in self.put_at if n not in self.seen_at]

    def lag(self) -> float:
        """Now minus the put time of the oldest file not readable yet (0 when every file is)."""
        waiting = [self.put_at[n] for n in self.waiting()]
        return time.monotonic() - min(waiting) if waiting else 0.0

    def line(self, started: float) -> str:
        """A progress line (:data:`COLUMNS` says what each figure is)."""
        return (f"  {time.monotonic() - started:6.0f} s  rows {sum(self.counts.values()):>8,}  files put "
                f"{len(self.put_at):>4}  loaded {len(self.seen_at):>4}  lag {self.lag():5.1f} s")  # fmt: skip


#: What the progress lines' figures are, printed once before them.
COLUMNS = ("columns: seconds since the first put; rows in the table; files put so far; files loaded (all their rows "
           "readable); lag = now minus the put time of the oldest file not loaded yet (0 s when every file is)")


def airflow_for(stack: LocalStack, home: Path, options: LiveOptions, queue_url: str | None) -> Airflow:
    """Airflow's components (not started) on the continuous example DAG alone: a DAGs folder in ``home`` holding a
    copy of it, configured by ``options``, the DAG unpaused once parsed."""
    dags = home / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(options.dag_file, dags / options.dag_file.name)
    return Airflow(home, stack, {
        "S3CH_CONTINUOUS_URI": f"s3://{options.bucket}/{options.prefix}*.csv",
        "S3CH_CONTINUOUS_QUEUE_URL": queue_url or "",
        "S3CH_CONTINUOUS_LISTING_POLL": str(options.listing_poll),
        "S3CH_CONTINUOUS_SAFETY_NET": options.safety_net,
        "S3CH_CONTINUOUS_TABLE": options.table,
        "S3CH_CONTINUOUS_STRUCTURE": STRUCTURE,
        "S3CH_CONTINUOUS_MAX_FILES": str(options.max_files_per_load),
        "S3CH_CONTINUOUS_BATCH_WAIT": str(options.batch_wait),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        **options.airflow_env,
    }, dags_folder=dags)  # fmt: skip


def bring_up(airflow: Airflow, options: LiveOptions, watchers: int) -> None:
    """Migrate ``airflow``'s database, start its components; return once the triggerer runs ``watchers`` watchers
    and the time schedule's first run has ended. Stopping what it started, should it not return, is the caller's
    (:meth:`Airflow.stop`)."""
    airflow.migrate()
    airflow.start(*COMPONENTS)
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


def start_airflow(stack: LocalStack, home: Path, options: LiveOptions, queue_url: str | None) -> Airflow:
    """:func:`airflow_for` started (:func:`bring_up`). Whatever cuts the start short (a stop signal's exception, a
    time-out), every process started so far is stopped before it is raised again."""
    airflow = airflow_for(stack, home, options, queue_url)
    try:
        bring_up(airflow, options, 2 if queue_url else 1)
    except BaseException:
        airflow.stop()
        raise
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


def feed(tracker: Tracker, options: LiveOptions, say: Any, tick: Callable[[], bool] | None = None) -> bool:
    """Put a file every ``interval`` seconds (for ``seconds``, or ``files`` files), looking at the table every
    ``poll`` seconds and printing a line every ``report_every`` (:data:`COLUMNS` first); then wait, at most
    ``drain_timeout`` seconds, for the files not loaded yet.

    :param tick: called at every look (faults injected between puts); while it returns True the feed does not end.
    :returns: False when that wait timed out.
    """
    total = options.files if options.files is not None else max(1, int(options.seconds / options.interval))
    say(COLUMNS)
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
                say(f"all {total} files put; waiting (at most {options.drain_timeout:g} s) for the "
                    f"{len(tracker.waiting())} not loaded yet")  # fmt: skip
        busy = tick() if tick is not None else False
        tracker.look()
        if time.monotonic() >= next_report:
            say(tracker.line(started))
            next_report += options.report_every
        done = not tracker.waiting() and not busy
        if last_put is not None and (done or time.monotonic() - last_put > options.drain_timeout):
            say(tracker.line(started))
            if not done:
                say(f"the wait timed out: {len(tracker.waiting())} files not loaded {options.drain_timeout:g} s "
                    "after the last put")  # fmt: skip
            return done
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

    Whatever ends it (the end, a stop signal's exception at any point, an error), every process Airflow started is
    stopped (:meth:`Airflow.stop`) before it returns or raises.

    :param home: the ``AIRFLOW_HOME`` (a temporary folder, removed at the end, if None).
    :param say: prints a line.
    :param stop_on: the exceptions that end the feed early (a stop signal's, Ctrl-C): the figures are then
        those of the files put so far (the files not loaded yet named as such), and the exception is raised
        again once Airflow has stopped. Raised while Airflow starts, they stop it and are raised again at once.
    :param faults: called at every look of the feed with Airflow and the tracker (``bench/continuous_faults.py``
        kills processes there); while it returns True the feed goes on.
    """
    stack.create_bucket(options.bucket)
    queue_url = stack.notify_queue(options.bucket, options.queue, prefix=options.prefix) if options.sqs else None
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE IF NOT EXISTS {options.table} ({STRUCTURE}) ENGINE = MergeTree ORDER BY (file, id)")
    result = LiveResult()
    tracker = Tracker(stack, options)
    stopped: BaseException | None = None
    with contextlib.ExitStack() as cleanup:
        if home is None:
            home = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="s3ch-live-")))
        t0 = time.monotonic()
        watching = "SQS notifications + listing" if options.sqs else "listing"
        say(f"starting Airflow (api-server, dag-processor, scheduler, triggerer) in {home}; watchers: {watching} "
            f"(listing every {options.listing_poll:g} s)")  # fmt: skip
        airflow = airflow_for(stack, home, options, queue_url)
        cleanup.callback(airflow.stop)  # before any process starts: whatever ends the block, they stop
        bring_up(airflow, options, 2 if queue_url else 1)
        say(f"Airflow is up, its watchers running ({time.monotonic() - t0:.0f} s); putting a file every "
            f"{options.interval:g} s into s3://{options.bucket}/{options.prefix}")  # fmt: skip
        try:
            result.drain_timed_out = not feed(
                tracker, options, say, None if faults is None else functools.partial(faults, airflow, tracker)
            )
        except stop_on as stop:
            stopped = stop
            result.stopped_by = str(stop) or type(stop).__name__
            say(f"{result.stopped_by}: no more files; the figures so far; stopping Airflow")
        tracker.look()
        if stopped is None:
            settle(airflow)
        result.runs, result.inserts = count_runs_and_inserts(stack, airflow)
        try:
            result.phases = from_servers(stack.clickhouse_client(), airflow.db, options.table,
                                         tracker.put_wall, tracker.seen_wall)
        except Exception as exc:  # noqa: BLE001 - the account is a figure beside the run's; the run stands
            say(f"the phase account could not be read: {exc}")
    result.put = len(tracker.put_at)
    result.loaded = len(tracker.seen_at)
    result.rows = sum(c for n, c in tracker.counts.items() if n not in tracker.extra)
    result.latencies = [tracker.seen_at[n] - tracker.put_at[n] for n in sorted(tracker.seen_at)]
    counted = tally({n: c for n, c in tracker.counts.items() if n not in tracker.extra}, tracker.put_at,
                    tracker.seen_at, options.rows_per_file)
    result.not_loaded_yet, result.lost, result.doubled = counted.not_loaded_yet, counted.lost, counted.doubled
    result.exactly_once = counted.exactly_once
    print_summary(result, options, say)
    if stopped is not None:
        raise stopped
    return result


def summary_lines(result: LiveResult, options: LiveOptions) -> list[str]:
    """The summary's lines: the files (once, doubled, lost, not loaded yet, and why), the latencies, the runs."""

    def s(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    wrong = ", ".join(
        [f"{result.doubled} doubled (more rows in the table than the file holds)"] * bool(result.doubled)
        + [f"{result.lost} lost (fewer rows than the file holds)"] * bool(result.lost)
    )
    once = "yes" if result.exactly_once else f"NO ({wrong})"
    files = (f"files put: {result.put}, loaded: {result.loaded}, rows: {result.rows} "
             f"({options.rows_per_file} per file); ")  # fmt: skip
    if result.not_loaded_yet:
        if result.stopped_by:
            why = f"the run was stopped ({result.stopped_by}) before their rows were in"
        elif result.drain_timed_out:
            why = f"their rows were not in {options.drain_timeout:g} s after the last put"
        else:
            why = "their rows are not in the table"
        files += f"each file loaded so far exactly once: {once}; not loaded yet: {result.not_loaded_yet} ({why})"
    else:
        files += f"each file exactly once: {once}"
    runs = ", ".join(f"{k} {v}" for k, v in sorted(result.runs.items())) or "none"
    return [
        "\n=== summary ===",
        files,
        f"put -> readable latency over {len(result.latencies)} files: p50 {s(result.percentile(50))}, "
        f"p95 {s(result.percentile(95))}, max {s(max(result.latencies) if result.latencies else None)}",
        f"DAG runs: {sum(result.runs.values())} ({runs}); inserts from S3: {result.inserts}",
    ]


def print_summary(result: LiveResult, options: LiveOptions, say: Any = print) -> None:
    for line in summary_lines(result, options):
        say(line)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=60.0, help="how long to put files, one a second (60)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two files (1)")
    p.add_argument("--rows-per-file", type=int, default=100, help="rows in each file (100)")
    p.add_argument("--listing-poll", type=float, default=10.0,
                   help="the listing watcher's seconds between two looks (10; with SQS it is the backstop)")
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

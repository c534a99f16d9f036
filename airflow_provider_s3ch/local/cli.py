"""``s3ch-local``: run the local ClickHouse + S3 stack, write sample data, run the demo.

s3ch-local up [--nodes N] [--rows R]      start, write sample data, print AIRFLOW_CONN_*; Ctrl-C stops
s3ch-local demo --dags-folder DIR         start, write sample data, run the example DAG through Airflow,
                                          print what it loaded, stop
s3ch-local live [--seconds S] [--no-sqs] [--listing-poll P]
                                          start, run Airflow's scheduler and triggerer on the continuous
                                          example DAG, put a file a second, print rows and lag, stop
s3ch-local queue --bucket B --prefix P [--name N]
                                          on the running stack (`up`'s AIRFLOW_CONN_AWS_DEFAULT exported): an SQS
                                          queue the bucket notifies of each object created under P; prints its URL
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.core.sizes import fmt_bytes
from airflow_provider_s3ch.local import live
from airflow_provider_s3ch.local.sample import write_posts
from airflow_provider_s3ch.local.stack import (
    DEFAULT_BUCKET,
    DEFAULT_REGION,
    WORKLOAD,
    LocalStack,
    create_bucket,
    notify_queue,
)

DEMO_DAG_ID = "s3_to_clickhouse_posts"


def _add_stack_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1, help="ClickHouse nodes (default 1)")
    p.add_argument("--region", default=DEFAULT_REGION, help=f"the server's and the bucket's region ({DEFAULT_REGION})")
    p.add_argument("--rows", type=int, default=200_000, help="sample posts to write; 0 writes none (200000)")
    p.add_argument("--months", type=int, default=12, help="monthly Parquet files to spread them over (12)")
    p.add_argument("--bucket", default=DEFAULT_BUCKET, help=f"the sample bucket ({DEFAULT_BUCKET})")
    p.add_argument(
        "--workload-memory",
        default=None,
        help="workload scheduling for loads on each node: the root workload's max_memory (e.g. 3Gi); "
        "the connection's extra workload is then 'loads' (docs/many-loads.md)",
    )


#: Signals that stop the stack: Ctrl-C, ``kill``, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived: unwind, so that ``finally`` stops the stack and removes its directory."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def _stack_until_stopped(args: argparse.Namespace) -> Iterator[LocalStack]:
    """The stack of ``args`` (not started), stopped and its directory removed when the block ends.

    The stop signals raise :class:`Stopped` in the block: without a handler SIGTERM ends the
    process at once, before any ``finally`` runs, and leaves the stack's processes to die on
    their own and its directory (the nodes' data) behind. The handlers are in place before the
    stack starts, so a signal during start-up or while sample data is written also cleans up;
    while the stack stops, further signals are ignored, so that nothing interrupts the clean-up.
    """
    previous = {s: signal.signal(s, _raise_stopped) for s in STOP_SIGNALS}
    stack: LocalStack | None = None
    try:
        stack = LocalStack(nodes=args.nodes, region=args.region, workload_memory=args.workload_memory)
        yield stack
    finally:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        try:
            if stack is not None:
                stack.stop()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def _start(stack: LocalStack, args: argparse.Namespace) -> Any:
    """Start ``stack``, create the sample bucket and write the sample data (None when ``--rows 0``)."""
    stack.start()
    stack.create_bucket(args.bucket)
    dataset = None
    if args.rows > 0:
        t0 = time.monotonic()
        dataset = write_posts(stack.s3_client(), args.bucket, rows=args.rows, months=args.months)
        print(
            f"sample: {dataset.rows} rows in {len(dataset.keys)} Parquet files, {fmt_bytes(dataset.bytes)}, "
            f"at {dataset.s3_uri} ({time.monotonic() - t0:.1f} s)",
            flush=True,
        )
    return dataset


def cmd_up(args: argparse.Namespace) -> int:
    """Start the stack and serve until SIGINT, SIGTERM or SIGHUP; then stop it and remove its directory."""
    try:
        with _stack_until_stopped(args) as stack:
            _start(stack, args)
            print(f"# {args.nodes} ClickHouse node(s): " + ", ".join(n.address for n in stack.nodes))
            print(f"# S3: {stack.s3_endpoint} (key {stack.s3_access_key}); cluster {stack.cluster}")
            print(f"# data: {stack.workdir} (removed on stop)")
            if args.workload_memory:
                print(f"# workload: {WORKLOAD} in all (max_memory {args.workload_memory}) on each node")
            for key, value in stack.airflow_env().items():
                print(f"export {key}={shlex.quote(value)}")
            print("# Ctrl-C stops the stack", flush=True)
            while True:
                signal.pause()
    except Stopped as stop:
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(f"# {stop}: stopped the stack and removed its data", flush=True)
    return 0


def read_xcom(airflow_home: Path, dag_id: str, task_id: str) -> Any:
    """The newest ``return_value`` XCom of a task from a SQLite metadata database in ``airflow_home``."""
    db = airflow_home / "airflow.db"
    with sqlite3.connect(db) as conn:
        row = conn.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value' "
            "ORDER BY timestamp DESC LIMIT 1",
            (dag_id, task_id),
        ).fetchone()
    if row is None:
        return None
    value = row[0]
    if isinstance(value, bytes):
        value = value.decode()
    value = json.loads(value)
    return json.loads(value) if isinstance(value, str) else value


def cmd_demo(args: argparse.Namespace) -> int:
    dags_folder = Path(args.dags_folder).resolve()
    try:
        with _stack_until_stopped(args) as stack:
            return _demo(stack, args, dags_folder)
    except Stopped as stop:
        print(f"# {stop}: stopped the stack", file=sys.stderr, flush=True)
        return 128 + stop.signum


def _demo(stack: LocalStack, args: argparse.Namespace, dags_folder: Path) -> int:
    dataset = _start(stack, args)
    with tempfile.TemporaryDirectory(prefix="s3ch-airflow-") as home:
        env = dict(os.environ)
        env.update(stack.airflow_env())
        env.update(
            {
                "AIRFLOW_HOME": home,
                "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            }
        )
        airflow = [sys.executable, "-m", "airflow"]
        conf = json.dumps({"s3_uri": dataset.s3_uri if dataset else f"s3://{args.bucket}/nothing/*.parquet"})
        steps = [
            airflow + ["db", "migrate"],
            airflow + ["dags", "reserialize"],
            airflow + ["dags", "test", DEMO_DAG_ID, "-c", conf],
        ]
        # Airflow's own output (the scheduler's lines, the task's log) goes to a file the summary names.
        log_path = Path(tempfile.gettempdir()) / "s3ch-demo-airflow.log"
        with log_path.open("w") as log:
            for argv in steps:
                print("$ airflow " + " ".join(shlex.quote(a) for a in argv[3:]), flush=True)
                t0 = time.monotonic()
                out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                log.write(f"$ airflow {' '.join(argv[3:])}\n{out.stdout}{out.stderr}\n")
                if out.returncode != 0:
                    print(out.stdout[-4000:], out.stderr[-4000:], sep="\n")
                    print(f"demo failed at: {' '.join(argv[3:])} (Airflow's output: {log_path})", file=sys.stderr)
                    return 1
                print(f"  ok ({time.monotonic() - t0:.1f} s)", flush=True)
        print(f"  Airflow's output, the task's log included: {log_path}")
        result = read_xcom(Path(home), DEMO_DAG_ID, "load_posts")
    rows_in_table = stack.clickhouse_client().execute("SELECT count() FROM default.posts")[0][0]
    print_figures(result, rows_in_table, dataset.rows if dataset else 0)
    print(NEXT_STEPS)
    return 0 if result and result.get("written_rows") == (dataset.rows if dataset else 0) else 1


#: The figures that are sizes: shown readable beside the bytes.
BYTE_KEYS = frozenset({"bytes", "written_bytes", "read_bytes", "memory_usage"})

NEXT_STEPS = """
=== next ===
  your own DAGs on this stack:  .venv/bin/s3ch-local up   (starts it, prints the AIRFLOW_CONN_* variables
                                to export; Ctrl-C stops it)
  then read:                    docs/local-stack.md (a real scheduler on the local stack),
                                README.md#operator-reference (every argument), docs/tuning.md (the settings)"""


def print_figures(result: dict[str, Any] | None, rows_in_table: int, sample_rows: int) -> None:
    """Print the load's figures (the operator's XCom) and the table's row count."""
    print("\n=== what the load did (XCom return_value of task load_posts, from system.query_log) ===")
    if not result:
        print("no XCom found: the load did not run")
        return
    keys = [
        "query_id",
        "strategy",
        "strategy_reason",
        "files",
        "bytes",
        "format",
        "written_rows",
        "written_bytes",
        "read_rows",
        "read_bytes",
        "duration_ms",
        "rows_per_second",
        "memory_usage",
        "wall_ms",
        "phases_ms",
        "workload",
        "admission_wait_ms",
        "run_ms",
    ]
    for key in keys:
        value = result.get(key)
        readable = f" ({fmt_bytes(value)})" if key in BYTE_KEYS and isinstance(value, int) else ""
        print(f"{key:>18}: {value}{readable}")
    created = (result.get("table_changes") or {}).get("created")
    if created:
        print(f"{'table created':>18}: {created} from the files' columns")
    print(f"{'settings':>18}:")
    for name, value in result.get("settings", {}).items():
        print(f"{'':>20}{name} = {value}  ({result.get('settings_reasons', {}).get(name, '')})")
    for warning in result.get("warnings", []):
        print(f"{'warning':>18}: {warning}")
    print(f"{'rows in table':>18}: {rows_in_table} (sample data: {sample_rows})")


def cmd_live(args: argparse.Namespace) -> int:
    """The live demo (:mod:`airflow_provider_s3ch.local.live`): 0 when every file put is in the table once.

    A stop signal at any point (the stack starting, Airflow starting, files put, the last ones waited for) stops
    Airflow's processes (:meth:`Airflow.stop`), then the stack's, and only then says so; the exit status is then
    128 + the signal's number.
    """
    from airflow_provider_s3ch.errors import NeedsNewerAirflowError, require

    try:  # the api-server, the dag-processor and asset watchers are Airflow 3's
        require("s3ch-local live (asset watchers, Airflow's api-server and dag-processor)", "3.0")
    except NeedsNewerAirflowError as e:
        print(e, file=sys.stderr)
        return 2
    args.nodes, args.workload_memory = 1, None
    options = live.options_from(args)
    if not options.dag_file.is_file():
        print(f"no DAG file at {options.dag_file} (--dag-file: example_dags/example_continuous.py)", file=sys.stderr)
        return 2
    say = functools.partial(print, flush=True)  # each line as it comes, also into a pipe
    try:
        with _stack_until_stopped(args) as stack:
            say(f"starting the stack (a ClickHouse node, S3 and SQS) in {stack.workdir}")
            stack.start()
            result = live.run_live(stack, options, say=say, stop_on=(Stopped,))
    except Stopped as stop:
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(f"# {stop}: stopped every process it started (Airflow's, ClickHouse, S3)", file=sys.stderr,
                  flush=True)  # fmt: skip
        return 128 + stop.signum
    return 0 if result.complete else 1


def queue_name(bucket: str, prefix: str) -> str:
    """The default queue of ``s3ch-local queue``: ``s3ch-<bucket>-<prefix>``, in the characters and the 80 a queue's
    name may have."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", f"s3ch-{bucket}-{prefix}").strip("-")[:80]


def cmd_queue(args: argparse.Namespace) -> int:
    """Create, on the running stack, an SQS queue that ``--bucket`` notifies of each object created under ``--prefix``
    (the bucket too, if it does not exist); print the queue's URL (alone on stdout: ``QUEUE=$(s3ch-local queue …)``;
    the rest, Airflow's log lines included, goes to stderr).

    The stack is the one the aws connection (``--aws-conn-id``, as ``s3ch-local up`` exports it) points at; a
    connection without an ``endpoint_url`` (AWS itself) is refused.
    """
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    from botocore.exceptions import BotoCoreError, ClientError

    from airflow_provider_s3ch.compat import AirflowNotFoundException

    name = args.name or queue_name(args.bucket, args.prefix)
    with contextlib.redirect_stdout(sys.stderr):
        try:
            s3_hook = AwsBaseHook(aws_conn_id=args.aws_conn_id, client_type="s3")
            endpoint, region = s3_hook.conn_config.endpoint_url, s3_hook.conn_config.region_name or DEFAULT_REGION
        except AirflowNotFoundException:
            print(f"no aws connection {args.aws_conn_id!r}: start the stack with `s3ch-local up` and export the "
                  "AIRFLOW_CONN_* lines it prints")
            return 2
        if not endpoint:
            print(f"the aws connection {args.aws_conn_id!r} has no endpoint_url: s3ch-local queue makes queues on the "
                  "local stack only (on AWS: docs/continuous.md, From S3 event notifications)")
            return 2
        try:
            s3 = s3_hook.get_client_type(region_name=region)
            sqs = AwsBaseHook(aws_conn_id=args.aws_conn_id, client_type="sqs").get_client_type(region_name=region)
            create_bucket(s3, args.bucket, region)
            url = notify_queue(s3, sqs, args.bucket, name, prefix=args.prefix,
                               visibility_timeout=args.visibility_timeout)
        except (ClientError, BotoCoreError) as exc:
            print(f"could not make queue {name} for bucket {args.bucket} on {endpoint}: {exc}")
            return 1
        print(f"# bucket {args.bucket} notifies queue {name} of s3:ObjectCreated:* under {args.prefix!r} ({endpoint});"
              f" a watcher: notification_watcher(..., queue_url={url!r}, s3_uri='s3://{args.bucket}/{args.prefix}…')")
    print(url, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="s3ch-local", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the stack and print AIRFLOW_CONN_* variables")
    _add_stack_args(up)
    up.set_defaults(func=cmd_up)
    demo = sub.add_parser("demo", help="run the example DAG on the local stack and print what it loaded")
    _add_stack_args(demo)
    demo.add_argument("--dags-folder", default="example_dags", help="folder with the example DAG (example_dags)")
    demo.set_defaults(func=cmd_demo)
    live_cmd = sub.add_parser("live", help="continuous ingestion, live: files put once a second, rows and lag printed")
    live.add_arguments(live_cmd)
    live_cmd.set_defaults(func=cmd_live)
    queue = sub.add_parser("queue", help="on the running stack: an SQS queue the bucket notifies of new objects "
                                         "under a prefix; prints its URL")
    queue.add_argument("--bucket", required=True, help="the bucket (created if it does not exist)")
    queue.add_argument("--prefix", default="", help="only keys starting with it are notified: the glob's literal "
                                                    "prefix, e.g. in/ for s3://B/in/*.csv (default: every key)")
    queue.add_argument("--name", default=None, help="the queue's name (default: s3ch-<bucket>-<prefix>)")
    queue.add_argument("--visibility-timeout", type=int, default=None, help="the queue's, in seconds (SQS's: 30)")
    queue.add_argument("--aws-conn-id", default="aws_default",
                       help="the connection to the stack, as `up` exports it (aws_default)")
    queue.set_defaults(func=cmd_queue)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())

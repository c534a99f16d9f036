"""Continuous ingestion through Airflow's own processes (api-server, dag-processor, scheduler, triggerer): the
watchers hand new files on as asset events, the scheduler starts runs of the DAGs on the assets, and each run
loads the files its events name; every file's rows are in the table once. The tests share one Airflow (one
database, one set of processes), each with its own DAG, bucket and table."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from airflow_provider_s3ch.compat import AIRFLOW
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import s3_notification
from tests.integration.faults import fingerprint
from tests.scheduler.support import Airflow, wait_for

DAG_ID = "s3ch_events"
BUCKET = "s3ch-events-live"
PREFIX = "landing/"
TABLE = "default.events_live"
SQS_DAG_ID, SQS_BUCKET, SQS_TABLE = "s3ch_events_sqs", "s3ch-events-sqs", "default.events_sqs"
BAD_DAG_ID, BAD_BUCKET, BAD_TABLE, BAD_MAX_FILES = "s3ch_events_bad", "s3ch-events-bad", "default.events_bad", 8
STRUCTURE = "file UInt16, id UInt32, v String"
ROWS = 200

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        s.create_bucket(BUCKET)
        s.create_bucket(SQS_BUCKET)
        s.create_bucket(BAD_BUCKET)
        yield s


@pytest.fixture(scope="module")
def airflow(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Airflow]:
    """One Airflow for the module's tests: both DAGs, their watchers in one triggerer."""
    home = tmp_path_factory.mktemp("airflow")
    ch = stack.clickhouse_client()
    for table in (TABLE, SQS_TABLE, BAD_TABLE):
        ch.execute(f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
    queue = stack.notify_queue(SQS_BUCKET, "s3ch-events-sqs", prefix=PREFIX)
    bad_queue = stack.sqs_client().create_queue(QueueName="s3ch-events-bad")["QueueUrl"]  # no bucket sends to it
    running = Airflow(home, stack, {
        "S3CH_TEST_EVENTS_URI": f"s3://{BUCKET}/{PREFIX}*.csv", "S3CH_TEST_EVENTS_TABLE": TABLE,
        "S3CH_TEST_SQS_URI": f"s3://{SQS_BUCKET}/{PREFIX}*.csv", "S3CH_TEST_SQS_TABLE": SQS_TABLE,
        "S3CH_TEST_SQS_QUEUE": queue, "S3CH_TEST_SQS_HOLD": str(home / "hold"),
        "S3CH_TEST_BAD_URI": f"s3://{BAD_BUCKET}/{PREFIX}*.csv", "S3CH_TEST_BAD_TABLE": BAD_TABLE,
        "S3CH_TEST_BAD_QUEUE": bad_queue, "S3CH_TEST_BAD_MAX_FILES": str(BAD_MAX_FILES),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    })
    migrated = running.run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    running.start("api-server", "dag-processor", "scheduler", "triggerer")
    try:
        yield running
    finally:
        running.stop()


def put(stack: LocalStack, *numbers: int, bucket: str = BUCKET) -> None:
    for n in numbers:
        body = "".join(f"{n},{n * 100_000 + i},v{i}\n" for i in range(ROWS))
        stack.s3_client().put_object(Bucket=bucket, Key=f"{PREFIX}f-{n:02d}.csv", Body=body.encode())


def clean(stack: LocalStack) -> tuple[int, int]:
    """count() and sum(cityHash64(*)) of one plain load of every file, by ClickHouse."""
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE default.events_clean ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
    ch.execute(f"INSERT INTO default.events_clean SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{PREFIX}*.csv', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")
    return fingerprint(stack, "default.events_clean")


def test_files_put_reach_the_table_through_asset_events(stack: LocalStack, airflow: Airflow) -> None:
    ch = stack.clickhouse_client()
    put(stack, 1, 2)
    wait_for("the first files' rows", lambda: fingerprint(stack, TABLE)[0] == 2 * ROWS, 180, airflow)
    put(stack, 3, 4, 5)
    put_at = time.monotonic()
    wait_for("the later files' rows", lambda: fingerprint(stack, TABLE)[0] == 5 * ROWS, 120, airflow, 0.2)
    latency = time.monotonic() - put_at
    wait_for("the runs to end", lambda: not airflow.db(
        "SELECT 1 FROM dag_run WHERE dag_id = ? AND state NOT IN ('success', 'failed')", DAG_ID), 60, airflow)

    assert fingerprint(stack, TABLE) == clean(stack)
    loaded = ch.execute("SELECT key, countIf(state = 'loaded') FROM default._s3ch_ledger FINAL WHERE table = %(t)s "
                        "GROUP BY key ORDER BY key", {"t": TABLE})
    assert loaded == [(f"{PREFIX}f-{n:02d}.csv", 1) for n in range(1, 6)]
    runs = airflow.db("SELECT run_type, state FROM dag_run WHERE dag_id = ?", DAG_ID)
    assert runs and all(run == ("asset_triggered", "success") for run in runs), runs
    events = airflow.db("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ?",
                        "s3ch_events_landing")
    assert events and all('"from_trigger": true' in extra for (extra,) in events), events
    if Version("3.3") <= AIRFLOW:  # the watcher's cursor in the asset's state store
        stored = airflow.db("SELECT s.key, s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
                            "WHERE s.key LIKE 's3ch.listing:%' AND a.name = ?", "s3ch_events_landing")
        assert len(stored) == 1 and f'"start_after": "{PREFIX}f-05.csv"' in stored[0][1].replace('":"', '": "'), stored
    print(f"\n{len(runs)} asset-triggered run(s) from {len(events)} asset event(s); 3 files put -> rows readable in "
          f"{latency:.1f} s (poll_interval 1 s)")


def xcoms(airflow: Airflow, dag_id: str) -> list[dict]:
    """The load task's XCom of each run of the DAG, in the order the runs were created."""
    rows = airflow.db("SELECT x.value FROM xcom x JOIN dag_run r ON r.id = x.dag_run_id WHERE r.dag_id = ? AND "
                      "x.task_id = 'load' AND x.key = 'return_value' ORDER BY r.id", dag_id)
    out = []
    for (value,) in rows:
        value = json.loads(value.decode() if isinstance(value, bytes) else value)
        out.append(json.loads(value) if isinstance(value, str) else value)
    return out


def runs_ended(airflow: Airflow, dag_id: str, count: int) -> bool:
    states = airflow.db("SELECT state FROM dag_run WHERE dag_id = ?", dag_id)
    return len(states) == count and all(state in ("success", "failed") for (state,) in states)


def test_a_run_takes_the_events_stored_while_it_waited(stack: LocalStack, airflow: Airflow) -> None:
    """Run A holds (its first task) while files 2 and 3 land, one event each. Airflow queues run B with the events
    stored before B was queued (file 2's) and keeps file 3's for a later run, which only a further event starts.
    A's load, started after both, takes them too: files 1 to 3 are in the table when A ends. B finds nothing new;
    C, started by file 4's event, gets file 3's event as well and finds file 3 in the ledger."""
    hold = Path(airflow.env["S3CH_TEST_SQS_HOLD"])
    hold.touch()
    put(stack, 1, bucket=SQS_BUCKET)
    wait_for("run A to hold", lambda: airflow.db(
        "SELECT 1 FROM task_instance WHERE dag_id = ? AND task_id = 'hold' AND state = 'running'", SQS_DAG_ID),
        120, airflow, 0.2)
    events = lambda: airflow.db(  # noqa: E731
        "SELECT count(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = ?",
        "s3ch_events_sqs_landing")[0][0]
    for n in (2, 3):
        put(stack, n, bucket=SQS_BUCKET)
        wait_for(f"file {n}'s event", lambda n=n: events() == n, 60, airflow, 0.2)
    hold.unlink()
    wait_for("runs A and B", lambda: runs_ended(airflow, SQS_DAG_ID, 2), 180, airflow)
    key = lambda n: f"{PREFIX}f-{n:02d}.csv"  # noqa: E731
    a, b = xcoms(airflow, SQS_DAG_ID)  # B's load was skipped (nothing new, skip_when_empty) and left its figures
    assert a["ledger"]["new_keys"] == [key(1), key(2), key(3)]
    assert (b["written_rows"], b["ledger"]["new"]) == (0, 0) and key(2) in b["ledger"]["skipped_loaded_keys"]
    assert airflow.db("SELECT r.id, t.state FROM task_instance t JOIN dag_run r ON r.run_id = t.run_id AND r.dag_id = "
                      "t.dag_id WHERE t.dag_id = ? AND t.task_id = 'load' ORDER BY r.id", SQS_DAG_ID)[1][1] == "skipped"

    put(stack, 4, bucket=SQS_BUCKET)
    wait_for("run C", lambda: runs_ended(airflow, SQS_DAG_ID, 3), 180, airflow)
    c = xcoms(airflow, SQS_DAG_ID)[2]
    assert (c["ledger"]["new_keys"], c["ledger"]["skipped_loaded_keys"]) == ([key(4)], [key(3)])
    consumed = airflow.db("SELECT count(*) FROM dag_run r JOIN dagrun_asset_event d ON d.dag_run_id = r.id "
                          "WHERE r.dag_id = ? GROUP BY r.id ORDER BY r.id", SQS_DAG_ID)
    assert [n for (n,) in consumed] == [1, 1, 2], consumed  # file 3's event waited for C
    ch = stack.clickhouse_client()
    assert ch.execute(f"SELECT file, count() FROM {SQS_TABLE} GROUP BY file ORDER BY file") == [
        (n, ROWS) for n in (1, 2, 3, 4)]


def test_dropped_and_repeated_notifications_load_every_file_once_in_bounded_inserts(
        stack: LocalStack, airflow: Airflow) -> None:
    """40 files; their notifications sent by the test as S3 would, one in ten dropped (seeded) and every other one
    sent twice, some of the copies late: the listing watcher finds the dropped files, the ledger loads each file
    once, and no insert reads more than ``max_files_per_load`` files."""
    rng, s3, sqs = random.Random(43), stack.s3_client(), stack.sqs_client()
    queue = airflow.env["S3CH_TEST_BAD_QUEUE"]
    dropped, late = [], []
    for n in range(1, 41):
        put(stack, n, bucket=BAD_BUCKET)
        key = f"{PREFIX}f-{n:02d}.csv"
        head = s3.head_object(Bucket=BAD_BUCKET, Key=key)
        body = s3_notification(BAD_BUCKET, key, head["ContentLength"], head["ETag"].strip('"'), head["LastModified"])
        if rng.random() < 0.1:
            dropped.append(n)
            continue
        sqs.send_message(QueueUrl=queue, MessageBody=body)
        if n % 2 == 0:
            (late if n % 4 == 0 else [body]).append(body)
            sqs.send_message(QueueUrl=queue, MessageBody=body) if n % 4 else None
    assert dropped, "the seed drops some notifications"
    for body in late:  # the late copies, after the files' first loads
        sqs.send_message(QueueUrl=queue, MessageBody=body)
    wait_for("every file's rows", lambda: fingerprint(stack, BAD_TABLE)[0] == 40 * ROWS, 240, airflow, 0.5)
    wait_for("the runs to end", lambda: not airflow.db(
        "SELECT 1 FROM dag_run WHERE dag_id = ? AND state NOT IN ('success', 'failed')", BAD_DAG_ID), 120, airflow)
    ch = stack.clickhouse_client()
    assert ch.execute(f"SELECT file, count() FROM {BAD_TABLE} GROUP BY file ORDER BY file") == [
        (n, ROWS) for n in range(1, 41)]
    loaded = ch.execute("SELECT key, etag, countIf(state = 'loaded') FROM default._s3ch_ledger FINAL WHERE table = "
                        "%(t)s GROUP BY key, etag", {"t": BAD_TABLE})
    assert len(loaded) == 40 and all(n == 1 for *_, n in loaded), loaded
    ch.execute("SYSTEM FLUSH LOGS")
    reads = ch.execute("SELECT read_rows FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Insert' "
                       "AND query LIKE '%%FROM s3(%%' AND query LIKE %(t)s", {"t": f"%{BAD_BUCKET}%"})
    assert reads and all(rows <= BAD_MAX_FILES * ROWS for (rows,) in reads), reads

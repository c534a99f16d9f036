"""Continuous ingestion through Airflow's own processes (api-server, dag-processor, scheduler, triggerer): the
listing watcher hands new files on as asset events, the scheduler starts runs of the DAG on the asset, and
each run loads the files its events name; every file's rows are in the table once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from airflow_provider_s3ch.compat import AIRFLOW
from airflow_provider_s3ch.local import LocalStack
from tests.integration.faults import fingerprint
from tests.scheduler.support import Airflow, wait_for

DAG_ID = "s3ch_events"
BUCKET = "s3ch-events-live"
PREFIX = "landing/"
TABLE = "default.events_live"
STRUCTURE = "file UInt16, id UInt32, v String"
ROWS = 200

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        s.create_bucket(BUCKET)
        yield s


def put(stack: LocalStack, *numbers: int) -> None:
    for n in numbers:
        body = "".join(f"{n},{n * 100_000 + i},v{i}\n" for i in range(ROWS))
        stack.s3_client().put_object(Bucket=BUCKET, Key=f"{PREFIX}f-{n:02d}.csv", Body=body.encode())


def clean(stack: LocalStack) -> tuple[int, int]:
    """count() and sum(cityHash64(*)) of one plain load of every file, by ClickHouse."""
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE default.events_clean ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
    ch.execute(f"INSERT INTO default.events_clean SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{PREFIX}*.csv', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")
    return fingerprint(stack, "default.events_clean")


def test_files_put_reach_the_table_through_asset_events(stack: LocalStack, tmp_path: Path) -> None:
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE {TABLE} ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
    put(stack, 1, 2)
    airflow = Airflow(tmp_path, stack, {
        "S3CH_TEST_EVENTS_URI": f"s3://{BUCKET}/{PREFIX}*.csv", "S3CH_TEST_EVENTS_TABLE": TABLE,
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    })
    migrated = airflow.run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    airflow.start("api-server", "dag-processor", "scheduler", "triggerer")
    try:
        wait_for("the first files' rows", lambda: fingerprint(stack, TABLE)[0] == 2 * ROWS, 180, airflow)
        put(stack, 3, 4, 5)
        put_at = time.monotonic()
        wait_for("the later files' rows", lambda: fingerprint(stack, TABLE)[0] == 5 * ROWS, 120, airflow, 0.2)
        latency = time.monotonic() - put_at
        wait_for("the runs to end", lambda: not airflow.db(
            "SELECT 1 FROM dag_run WHERE dag_id = ? AND state NOT IN ('success', 'failed')", DAG_ID), 60, airflow)
    finally:
        airflow.stop()

    assert fingerprint(stack, TABLE) == clean(stack)
    loaded = ch.execute("SELECT key, countIf(state = 'loaded') FROM default._s3ch_ledger FINAL WHERE table = %(t)s "
                        "GROUP BY key ORDER BY key", {"t": TABLE})
    assert loaded == [(f"{PREFIX}f-{n:02d}.csv", 1) for n in range(1, 6)]
    runs = airflow.db("SELECT run_type, state FROM dag_run WHERE dag_id = ?", DAG_ID)
    assert runs and all(run == ("asset_triggered", "success") for run in runs), runs
    events = airflow.db("SELECT extra FROM asset_event")
    assert events and all('"from_trigger": true' in extra for (extra,) in events), events
    if Version("3.3") <= AIRFLOW:  # the watcher's cursor in the asset's state store
        stored = airflow.db("SELECT key, value FROM asset_state_store WHERE key LIKE 's3ch.listing:%'")
        assert len(stored) == 1 and f'"start_after": "{PREFIX}f-05.csv"' in stored[0][1].replace('":"', '": "'), stored
    print(f"\n{len(runs)} asset-triggered run(s) from {len(events)} asset event(s); 3 files put -> rows readable in "
          f"{latency:.1f} s (poll_interval 1 s)")

"""A live monthly schedule under Airflow's real scheduler (not ``dags test``): the run the scheduler makes
today loads the month that ended, with the README's template and the backfill example's macro as written,
while the month that just began already has a file of its own."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import write_posts
from tests.scheduler.support import Airflow, wait_for

DAG_ID = "s3ch_live_monthly"
BUCKET = "s3ch-live"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        s.create_bucket(BUCKET)
        yield s


def _utc(value: str | None) -> datetime.datetime | None:
    return None if value is None else datetime.datetime.fromisoformat(value).replace(tzinfo=datetime.UTC)


def test_the_scheduled_monthly_run_loads_the_month_that_ended(stack: LocalStack, tmp_path: Path) -> None:
    this_month = datetime.datetime.now(datetime.UTC).replace(day=1, hour=0, minute=0, second=0,
                                                                      microsecond=0)
    ended = (this_month - datetime.timedelta(days=1)).replace(day=1)
    s3 = stack.s3_client()
    write_posts(s3, BUCKET, rows=3_000, months=1, prefix="live/", start=(ended.year, ended.month))
    write_posts(s3, BUCKET, rows=700, months=1, prefix="live/", start=(this_month.year, this_month.month), seed=3)
    stack.clickhouse_client().execute("CREATE DATABASE IF NOT EXISTS live")

    airflow = Airflow(tmp_path, stack, {"S3CH_TEST_BUCKET": BUCKET})
    migrated = airflow.run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    airflow.start("api-server", "dag-processor")
    try:
        wait_for("the DAG to be parsed", lambda: airflow.db("SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300,
                 airflow)
        assert airflow.run("dags", "unpause", DAG_ID).returncode == 0
        airflow.start("scheduler")

        def finished() -> list[tuple[str]]:
            states = airflow.db("SELECT state FROM dag_run WHERE dag_id = ?", DAG_ID)
            return states if states and all(s in ("success", "failed") for (s,) in states) else []

        wait_for("the scheduled run to finish", finished, 600, airflow, interval=2)
    finally:
        airflow.stop()

    runs = airflow.db("SELECT run_type, state, logical_date, data_interval_start, data_interval_end FROM dag_run "
                      "WHERE dag_id = ?", DAG_ID)
    assert len(runs) == 1, runs
    run_type, state, logical, start, end = runs[0]
    tries = airflow.db("SELECT task_id, state FROM task_instance WHERE dag_id = ?", DAG_ID)
    assert (run_type, state) == ("scheduled", "success"), (runs, tries)
    # The dates the scheduler gave the run: the month that ended.
    assert (_utc(logical), _utc(start), _utc(end)) == (ended, ended, this_month), runs
    month = ended.year * 100 + ended.month
    ch = stack.clickhouse_client()
    for table in ("live.readme", "live.example"):
        loaded = dict(ch.execute(f"SELECT toYYYYMM(CreationDate) AS m, count() FROM {table} GROUP BY m"))
        assert loaded == {month: 3_000}, f"{table}: {loaded}"
    print(f"\nscheduled run: logical date {logical}, data interval {start} .. {end}: loaded {ended:%Y-%m} "
          f"(3,000 rows) and left {this_month:%Y-%m} alone")

"""The backfill example through Airflow on the real local stack: running one month twice
(`airflow dags test`) gives the same rows, and the other months are untouched; a manual run
(`airflow dags trigger`) loads the month of its logical date, not of its data interval; one without a logical
date loads the last month that ended."""

from __future__ import annotations

import datetime
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import write_posts
from tests.dags.test_dags import ROOT, _airflow, prepare_home

DAG_ID = "s3_to_clickhouse_backfill"
CONF = {"bucket": "s3ch-backfill", "database": "backfill"}


@pytest.fixture(scope="module")
def backfill_stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        yield stack


def _fingerprint(stack: LocalStack) -> tuple[int, int, dict[int, int]]:
    ch = stack.clickhouse_client()
    count, checksum = ch.execute("SELECT count(), sum(cityHash64(*)) FROM backfill.posts")[0]
    parts = dict(ch.execute("SELECT toYYYYMM(CreationDate) AS p, count() FROM backfill.posts GROUP BY p ORDER BY p"))
    return int(count), int(checksum), {int(k): int(v) for k, v in parts.items()}


def _dags_test(home: Path, stack: LocalStack, logical_date: str) -> dict:
    out = _airflow(home, ROOT / "example_dags", stack, "dags", "test", DAG_ID, logical_date, "-c", json.dumps(CONF))
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    assert "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]
    return read_xcom(home, DAG_ID, "load_month")


def test_rerunning_a_month_gives_the_same_rows(tmp_path: Path, backfill_stack: LocalStack) -> None:
    stack = backfill_stack
    stack.create_bucket("s3ch-backfill")
    data = write_posts(stack.s3_client(), "s3ch-backfill", rows=12_000, months=6)  # 2008-07 .. 2008-12
    home = tmp_path / "airflow"
    home.mkdir()
    prepare_home(home, lambda *args: _airflow(home, ROOT / "example_dags", stack, *args))

    july = _dags_test(home, stack, "2008-07-01")
    assert july["partitions"] == ["200807"] and july["mode"] == "replace_partitions"
    after_july = _fingerprint(stack)
    assert after_july[2] == {200807: data.rows // 6}

    first = _dags_test(home, stack, "2008-08-01")
    after_first = _fingerprint(stack)
    second = _dags_test(home, stack, "2008-08-01")
    after_second = _fingerprint(stack)

    assert first["partitions"] == second["partitions"] == ["200808"]
    assert first["written_rows"] == second["written_rows"] == data.rows // 6
    assert after_first == after_second, "re-running a month must give the same rows"
    assert after_second[2] == {200807: data.rows // 6, 200808: data.rows // 6}
    assert after_second[2][200807] == after_july[2][200807]
    print(
        f"\nbackfill: after 2008-07 {after_july[:2]}; after 2008-08 run 1 {after_first[:2]}, "
        f"run 2 {after_second[:2]}; run 2 query {second['query_id']} attached_to={second['attached_to']}"
    )


def _run_row(home: Path, run_id: str) -> dict[str, datetime.datetime | None]:
    """The run's logical date, data interval start and run_after as Airflow stored them (UTC). Airflow 2 calls
    the logical date ``execution_date`` and has no run_after: its ``queued_at`` is the trigger time."""
    columns = ("logical_date, data_interval_start, run_after" if AIRFLOW_3
               else "execution_date, data_interval_start, queued_at")
    with sqlite3.connect(home / "airflow.db") as conn:
        row = conn.execute(
            f"SELECT {columns} FROM dag_run WHERE dag_id = ? AND run_id = ?",
            (DAG_ID, run_id),
        ).fetchone()
    assert row is not None, run_id
    names = ("logical_date", "data_interval_start", "run_after")
    return {
        name: None if value is None else datetime.datetime.fromisoformat(value).replace(tzinfo=datetime.UTC)
        for name, value in zip(names, row, strict=True)
    }


def _trigger(home: Path, stack: LocalStack, run_id: str, conf: dict, logical_date: str | None) -> None:
    """``airflow dags trigger``: a manual run, queued."""
    args = ["dags", "trigger", DAG_ID, "-r", run_id, "-c", json.dumps(conf)]
    date = ["-l" if AIRFLOW_3 else "-e", logical_date] if logical_date else []  # Airflow 2: --exec-date
    out = _airflow(home, ROOT / "example_dags", stack, *args, *date)
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    # A scheduler would start the queued run (running, with a start date); `tasks test` runs its tasks without
    # one, and the execution API of Airflow 3.0 and 3.1 refuses a task whose run has no start date.
    with sqlite3.connect(home / "airflow.db") as conn:
        conn.execute("UPDATE dag_run SET state = 'running', start_date = queued_at "
                     "WHERE dag_id = ? AND run_id = ? AND start_date IS NULL", (DAG_ID, run_id))


def _run_tasks(home: Path, stack: LocalStack, run_id: str) -> None:
    """Each task of the run, in that run (its logical date, data interval and conf), with ``airflow tasks test``."""
    for task_id in ("create_database", "load_month"):
        out = _airflow(home, ROOT / "example_dags", stack, "tasks", "test", DAG_ID, task_id, run_id)
        assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
        assert "NoObjectsError" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]


def _file_rows(stack: LocalStack, bucket: str, key: str) -> int:
    url = f"{stack.s3_endpoint}/{bucket}/{key}"
    sql = f"SELECT count() FROM s3('{url}', '{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')"
    return int(stack.clickhouse_client().execute(sql)[0][0])


def _months(stack: LocalStack, table: str) -> dict[int, int]:
    rows = stack.clickhouse_client().execute(f"SELECT toYYYYMM(CreationDate) AS m, count() FROM {table} GROUP BY m")
    return {int(m): int(n) for m, n in rows}


def test_manual_runs_load_the_month_they_name(tmp_path: Path, backfill_stack: LocalStack) -> None:
    stack = backfill_stack
    bucket = "s3ch-manual"
    stack.create_bucket(bucket)
    data = write_posts(stack.s3_client(), bucket, rows=6_100, months=6)  # 2008-07 .. 2008-12, uneven: 1017, 1017, …
    september = next(key for key in data.keys if key.endswith("2008-09.parquet"))
    home = tmp_path / "airflow"
    home.mkdir()
    prepare_home(home, lambda *args: _airflow(home, ROOT / "example_dags", stack, *args))

    # A manual run of a past date, mid-month: its data interval is the trigger time, its logical date 2008-09-15.
    _trigger(home, stack, "manual_2008_09", {"bucket": bucket, "database": "manual_past"}, "2008-09-15")
    _run_tasks(home, stack, "manual_2008_09")
    run = _run_row(home, "manual_2008_09")
    assert run["logical_date"] == datetime.datetime(2008, 9, 15, tzinfo=datetime.UTC)
    if AIRFLOW_3:  # a manual run's data interval is its trigger time; Airflow 2 infers the month before
        assert run["data_interval_start"] is not None and run["data_interval_start"].year > 2008
    else:
        assert run["data_interval_start"] == datetime.datetime(2008, 8, 1, tzinfo=datetime.UTC)
    expected = _file_rows(stack, bucket, september)
    assert expected > 0
    assert _months(stack, "manual_past.posts") == {200809: expected}, "exactly the rows of 2008-09.parquet"

    # A manual run without a logical date loads the last month that ended before it was triggered, as a
    # scheduled run made at that time would; the month that just began (its file here too) is left alone.
    # On Airflow 2 such a run has the trigger time as its logical date, after this DAG's end_date, so Airflow
    # does not run its tasks at all; what run_month makes of it is checked below without Airflow's scheduler.
    if not AIRFLOW_3:
        return
    _trigger(home, stack, "manual_now", {"bucket": bucket, "database": "manual_now"}, None)
    run = _run_row(home, "manual_now")
    when = run["run_after"]
    assert when is not None
    # Airflow 3 gives the run no logical date; Airflow 2 gives it the trigger time, in the month under way.
    assert run["logical_date"] is None if AIRFLOW_3 else run["logical_date"].month == when.month
    ended = when.replace(day=1) - datetime.timedelta(days=1)
    before = write_posts(stack.s3_client(), bucket, rows=321, months=1, start=(ended.year, ended.month), seed=7)
    write_posts(stack.s3_client(), bucket, rows=55, months=1, start=(when.year, when.month), seed=8)
    assert before.keys == [f"{data.prefix}{ended:%Y-%m}.parquet"]
    _run_tasks(home, stack, "manual_now")
    assert _months(stack, "manual_now.posts") == {ended.year * 100 + ended.month: 321}


@pytest.mark.parametrize("airflow_2", [False, True])
def test_run_month_of_a_manual_run_without_a_date_is_the_month_that_ended(airflow_2: bool) -> None:
    """The example's macro: a run triggered on 2026-11-26 without a date (Airflow 3: no logical date; Airflow 2:
    the trigger time as logical date, no run_after) loads 2026-10; a past logical date loads its own month."""
    import types

    from example_dags.example_backfill import run_month

    triggered = datetime.datetime(2026, 11, 26, 2, 9, tzinfo=datetime.UTC)
    now = (types.SimpleNamespace(logical_date=triggered, queued_at=triggered) if airflow_2
           else types.SimpleNamespace(logical_date=None, run_after=triggered, queued_at=triggered))
    assert run_month(now) == "2026-10"
    past = types.SimpleNamespace(logical_date=datetime.datetime(2008, 9, 15, tzinfo=datetime.UTC),
                                 run_after=triggered, queued_at=triggered)
    assert run_month(past) == "2008-09"
    scheduled = types.SimpleNamespace(logical_date=datetime.datetime(2026, 10, 1, tzinfo=datetime.UTC),
                                      run_after=datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC), queued_at=None)
    assert run_month(scheduled) == "2026-10"

"""Late files of past months through Airflow (``airflow dags test``): the late-files example's next run
loads a file that arrived after its month's run, and every file's rows are in the table exactly once."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from tests.dags.test_dags import ROOT, _airflow, prepare_home

DAG_ID = "s3_to_clickhouse_late_files"
BUCKET = "s3ch-late"
CONF = {"bucket": BUCKET, "prefix": "events/", "table": "late.events"}


@pytest.fixture(scope="module")
def late_stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        stack.create_bucket(BUCKET)
        stack.clickhouse_client().execute("CREATE DATABASE IF NOT EXISTS late")
        yield stack


def _put_day(stack: LocalStack, month: str, day: int, rows: int) -> str:
    key = f"events/{month}/{day:02d}.csv.gz"
    body = "id,day,value\n" + "".join(f"{i},{month}-{day:02d},{i * day}\n" for i in range(rows))
    stack.s3_client().put_object(Bucket=BUCKET, Key=key, Body=gzip.compress(body.encode()))
    return key


def _run(home: Path, stack: LocalStack, logical_date: str) -> dict:
    out = _airflow(home, ROOT / "example_dags", stack, "dags", "test", DAG_ID, logical_date, "-c", json.dumps(CONF))
    assert out.returncode == 0 and "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]
    return read_xcom(home, DAG_ID, "load_recent_months")


def test_the_next_run_loads_a_late_file_of_a_past_month(tmp_path: Path, late_stack: LocalStack) -> None:
    stack = late_stack
    sizes = {_put_day(stack, "2008-08", day, 100 + day): 100 + day for day in (1, 2, 3)}
    sizes |= {_put_day(stack, "2008-09", day, 200 + day): 200 + day for day in (1, 2)}
    home = tmp_path / "airflow"
    home.mkdir()
    prepare_home(home, lambda *args: _airflow(home, ROOT / "example_dags", stack, *args))

    september = _run(home, stack, "2008-09-01")  # reads 2008-07 .. 2008-09: every file so far
    assert september["ledger"]["new"] == 5 and september["written_rows"] == sum(sizes.values())

    late = _put_day(stack, "2008-08", 17, 77)  # August's file, after August's and September's runs
    sizes[late] = 77
    sizes |= {_put_day(stack, "2008-10", 1, 301): 301}
    october = _run(home, stack, "2008-10-01")  # reads 2008-08 .. 2008-10
    assert october["ledger"]["new_keys"] == sorted([late, "events/2008-10/01.csv.gz"]), october["ledger"]
    assert october["ledger"]["skipped_loaded"] == 5 and october["written_rows"] == 77 + 301

    # Every file's rows exactly once: per file (the day), the table's count equals the file's.
    ch = stack.clickhouse_client()
    loaded = {f"events/{d:%Y-%m}/{d:%d}.csv.gz": n for d, n in ch.execute(
        "SELECT day, count() FROM late.events GROUP BY day")}  # fmt: skip
    assert loaded == sizes

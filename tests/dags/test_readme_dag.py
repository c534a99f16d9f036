"""The README's first example DAG, copied as it stands, through `airflow dags test` on the real local stack.

Only its surroundings are made here: the connections it uses by default (``AIRFLOW_CONN_*``), its bucket
with a file for the month of its first run and one for the month after, and the database of its target
(``create_table="if_missing"`` creates the table, not the database). The text of the DAG is not touched.
"""

from __future__ import annotations

import datetime
import re
import sqlite3
from pathlib import Path

import jinja2

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import write_posts
from tests.dags.test_dags import ROOT, _airflow, dag_stack  # noqa: F401 - dag_stack: the module's stack fixture

README = ROOT / "README.md"


def readme_dag() -> str:
    """The README's first ``python`` code block, exactly as written."""
    match = re.search(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert match is not None, "README.md has no python code block"
    return match.group(1)


def _argument(code: str, name: str) -> str:
    """A string argument of the DAG or the operator, as the code block writes it (``name="value"``)."""
    match = re.search(rf'\b{name}="([^"]*)"', code)
    assert match is not None, f"the README's example has no {name}="
    return match.group(1)


def _files_sum(stack: LocalStack, bucket: str, glob: str) -> tuple[int, int]:
    """Rows and a checksum of the files, as ClickHouse itself reads them from S3."""
    url = f"{stack.s3_endpoint}/{bucket}/{glob}"
    sql = (f"SELECT count(), sum(cityHash64(toString(tuple(*)))) "
           f"FROM s3('{url}', '{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')")
    count, checksum = stack.clickhouse_client().execute(sql)[0]
    return int(count), int(checksum)


def test_the_readme_example_runs_as_written(tmp_path: Path, dag_stack: LocalStack) -> None:  # noqa: F811
    code = readme_dag()
    dag_id, task_id, table = _argument(code, "dag_id"), _argument(code, "task_id"), _argument(code, "table")
    start = re.search(r"start_date=datetime\.datetime\((\d+), (\d+), (\d+)", code)
    assert start is not None, "the README's example has no start_date=datetime.datetime(Y, M, D, ...)"
    year, month, day = (int(x) for x in start.groups())
    # The first run's logical date is its start date; its glob, rendered as Airflow renders it.
    logical_date = datetime.datetime(year, month, day, tzinfo=datetime.UTC)
    s3_uri = jinja2.Template(_argument(code, "s3_uri")).render(logical_date=logical_date)
    bucket, glob = s3_uri.removeprefix("s3://").split("/", 1)
    assert glob.endswith("*.parquet") and "/" in glob, s3_uri

    # Two months of files where the example looks: the run's month and the next, which it must leave alone.
    dag_stack.create_bucket(bucket)
    data = write_posts(
        dag_stack.s3_client(), bucket, rows=3_001, months=2, prefix=glob.rsplit("/", 1)[0] + "/", start=(year, month)
    )
    first, second = data.keys
    assert re.fullmatch(glob.replace(".", r"\.").replace("*", "[^/]*"), first), (glob, first)
    assert not re.fullmatch(glob.replace(".", r"\.").replace("*", "[^/]*"), second), (glob, second)
    expected = _files_sum(dag_stack, bucket, glob)
    assert expected[0] == 1_501  # the first month takes the odd row
    database = table.split(".")[0] if "." in table else "default"
    ch = dag_stack.clickhouse_client()
    ch.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "readme_example.py").write_text(code)
    home = tmp_path / "airflow"
    home.mkdir()
    out = _airflow(home, dags, dag_stack, "db", "migrate")
    assert out.returncode == 0, out.stderr[-3000:]
    out = _airflow(home, dags, dag_stack, "dags", "test", dag_id, logical_date.date().isoformat())
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-5000:]

    with sqlite3.connect(home / "airflow.db") as db:
        states = dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)))
    assert states == {task_id: "success"}, log[-5000:]
    xcom = read_xcom(home, dag_id, task_id)
    assert xcom["table_changes"]["created"] == "MergeTree table", xcom["table_changes"]
    assert xcom["written_rows"] == expected[0]
    table_sum = ch.execute(f"SELECT count(), sum(cityHash64(toString(tuple(*)))) FROM {table}")[0]
    assert (int(table_sum[0]), int(table_sum[1])) == expected, "the table holds exactly the rows of the run's file"

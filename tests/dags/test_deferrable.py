"""A deferrable load through Airflow itself (`airflow dags test`, which runs the trigger in-process), on the
real local stack: the task defers while the server runs the insert, the trigger follows it, the task
resumes and returns the figures a load that did not defer returns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from airflow_provider_s3ch.compat import AIRFLOW
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import posts_ddl, write_posts
from tests.dags.test_dags import prepare_home

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).parent / "dags" / "deferrable_dag.py"
BUCKET = "s3ch-deferrable"
ROWS = 1_500
SLEEP = 0.004  # seconds per row in the target's MATERIALIZED column: ~6 s per load


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        s.create_bucket(BUCKET)
        yield s


def _slow_table(stack: LocalStack, name: str) -> str:
    client = stack.clickhouse_client()
    client.execute(posts_ddl(name))
    client.execute(f"ALTER TABLE {name} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP})")
    return name


def _airflow(home: Path, dags: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def test_a_deferrable_load_defers_while_the_server_runs_it_and_returns_a_normal_loads_figures(
    tmp_path: Path, stack: LocalStack
) -> None:
    data = write_posts(stack.s3_client(), BUCKET, rows=ROWS, months=3)
    deferred_table = _slow_table(stack, "default.deferred_posts")
    normal_table = _slow_table(stack, "default.normal_posts")
    home, dags = tmp_path / "airflow", tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    shutil.copy(DAG_FILE, dags)
    env = {
        **os.environ,
        **stack.airflow_env(),
        # the deferrable load starts its insert over HTTP: the node's HTTP port in the connection's extra
        "AIRFLOW_CONN_CLICKHOUSE_NATIVE_DEFAULT": json.dumps(
            stack.clickhouse_connection(0, http_port=stack.nodes[0].http_port)),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "S3CH_DEFERRABLE_URI": data.s3_uri,
        "S3CH_DEFERRABLE_TABLE": deferred_table,
        "S3CH_NORMAL_TABLE": normal_table,
        "S3CH_POLL_INTERVAL": "0.5",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    prepare_home(home, lambda *args: _airflow(home, dags, env, *args))
    out = _airflow(home, dags, env, "dags", "test", "s3ch_deferrable")
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "state=success" in log, log[-5000:]

    deferred = read_xcom(home, "s3ch_deferrable", "deferred")
    normal = read_xcom(home, "s3ch_deferrable", "normal")
    query_id = deferred["query_id"]

    # The task deferred once the server ran the insert; the trigger followed it; the task resumed.
    # Airflow 3.1's `dags test` runs the trigger in line but prints neither the trigger's log lines nor the task's
    # once it resumes: there the XComs and the query log below show what they did.
    quiet = Version("3.1") <= AIRFLOW < Version("3.2")
    steps = [
        f"The server at 127.0.0.1:{stack.nodes[0].http_port} runs query {query_id} (started over HTTP)",
        f"Deferring: the triggerer follows query {query_id}",
        "[DAG TEST] running trigger in line",
        *([] if quiet else [f"{query_id} runs: ", f"{query_id} finished: {ROWS} rows written (after"]),
        "[DAG TEST] Trigger completed",
        *([] if quiet else [f"Loaded {ROWS} rows"]),
    ]
    at = 0
    for step in steps:
        found = log.find(step, at)
        assert found >= 0, f"{step!r} not found after position {at}:\n{log[at:at + 3000]}"
        at = found + len(step)

    # The query ran over HTTP (interface 2) under the task's query id, once, and wrote every row.
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    entries = client.execute(
        "SELECT toUInt8(interface), written_rows FROM system.query_log WHERE query_id = %(q)s AND type = "
        "'QueryFinish'", {"q": query_id},
    )
    assert entries == [(2, ROWS)]
    assert query_id.startswith("s3ch-") and query_id.endswith("-try1")

    # The same figures as the load that did not defer (the native protocol, interface 1).
    assert deferred["written_rows"] == normal["written_rows"] == ROWS
    for key in ("written_bytes", "read_rows", "read_bytes", "files", "bytes", "strategy", "mode", "table_changes"):
        assert deferred[key] == normal[key], key
    assert sorted(deferred) == sorted(normal)
    assert len(deferred["partitions"]) == 3 and deferred["attached_to"] is None
    assert client.execute(
        "SELECT toUInt8(interface) FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'",
        {"q": normal["query_id"]},
    ) == [(1,)]
    for table in (deferred_table, normal_table):
        assert client.execute(f"SELECT count() FROM {table}")[0][0] == ROWS

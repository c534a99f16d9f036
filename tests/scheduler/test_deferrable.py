"""A deferrable load under Airflow's real components (api-server, scheduler with LocalExecutor, dag-processor,
triggerer; SQLite) on the real local stack.

1. While the task is deferred and the server runs its insert, the scheduler (with its LocalExecutor workers)
   and the triggerer are SIGKILLed and started again. The insert runs on, the new triggerer takes the
   trigger over, the task resumes, and the run ends successful with every row loaded exactly once, by one
   query, in the first try.
2. A second run's deferred task is cleared while its insert runs: the triggerer calls the trigger's
   ``on_kill``, which kills the query on the server, and the cleared task's next try loads the files again,
   once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import posts_ddl, write_posts
from tests.scheduler.support import Airflow, wait_for

DAG_FILE = Path(__file__).resolve().parents[1] / "dags" / "dags" / "deferrable_dag.py"
DAG_ID = "s3ch_deferrable"
BUCKET = "s3ch-deferrable-scheduler"
TABLE = "default.deferred_posts"
ROWS = 3_000
SECOND_RUN_DATE = "2024-06-01T00:00:00+00:00"
SLEEP = 0.01  # seconds per row in the target's MATERIALIZED column: an insert of ~30 s

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as s:
        s.create_bucket(BUCKET)
        yield s


def _running_loads(stack: LocalStack) -> list[str]:
    return [q for (q,) in stack.clickhouse_client().execute(
        "SELECT query_id FROM system.processes WHERE query_id LIKE 's3ch-%'")]


def _trigger_logs(home: Path, run_id: str = "*") -> dict[str, int]:
    """Each triggerer's log of a run's trigger (one file per triggerer job) and how many looks it logged that
    saw the insert running."""
    return {p.name: p.read_text(errors="replace").count(" runs: ")
            for p in home.glob(f"logs/dag_id={DAG_ID}/run_id={run_id}/task_id=deferred/attempt=1.log.trigger.*.log")}


def _ti(airflow: Airflow, run_id: str) -> list[tuple[int, str]]:
    return airflow.db("SELECT try_number, state FROM task_instance WHERE dag_id = ? AND run_id = ?", DAG_ID, run_id)


def _inserts(stack: LocalStack, query_id: str) -> list[tuple[str, str, int, int, int]]:
    """Every try's insert of the task instance of ``query_id``: (query id, type, interface, rows, code)."""
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    return ch.execute(
        "SELECT query_id, toString(type), toUInt8(interface), written_rows, exception_code FROM system.query_log "
        "WHERE query_id LIKE %(p)s AND type != 'QueryStart' ORDER BY query_id",
        {"p": query_id.rsplit("-try", 1)[0] + "-try%"},
    )


def _kill(airflow: Airflow, name: str) -> None:
    proc = airflow.procs[name]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_a_deferred_load_survives_the_scheduler_and_the_triggerer_killed_and_restarted(
    stack: LocalStack, tmp_path: Path
) -> None:
    data = write_posts(stack.s3_client(), BUCKET, rows=ROWS, months=3)
    ch = stack.clickhouse_client()
    ch.execute(posts_ddl(TABLE))
    ch.execute(f"ALTER TABLE {TABLE} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP})")
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(DAG_FILE, dags)
    airflow = Airflow(tmp_path, stack, {
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_CLICKHOUSE_NATIVE_DEFAULT": json.dumps(
            stack.clickhouse_connection(0, http_port=stack.nodes[0].http_port)),
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "5",
        "S3CH_DEFERRABLE_URI": data.s3_uri,
        "S3CH_DEFERRABLE_TABLE": TABLE,
        "S3CH_POLL_INTERVAL": "2",
    })  # fmt: skip
    migrated = airflow.run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    started = time.monotonic()
    airflow.start("api-server", "scheduler", "dag-processor", "triggerer")
    try:
        wait_for("the DAG to be parsed", lambda: airflow.db("SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300, airflow)
        assert airflow.run("dags", "unpause", DAG_ID).returncode == 0
        triggered = airflow.run("dags", "trigger", DAG_ID)
        assert triggered.returncode == 0, triggered.stdout[-2000:] + triggered.stderr[-2000:]

        def deferred_while_loading() -> list[str]:
            states = airflow.db("SELECT state FROM task_instance WHERE dag_id = ? AND task_id = 'deferred'", DAG_ID)
            followed = any(_trigger_logs(tmp_path).values())  # the triggerer saw the insert running
            return _running_loads(stack) if states == [("deferred",)] and followed else []

        (query_id,) = wait_for("the task to defer and the triggerer to follow the insert", deferred_while_loading, 300,
                            airflow, interval=0.5)
        (first_triggerer,) = _trigger_logs(tmp_path)
        ((run_id,),) = airflow.db("SELECT run_id FROM dag_run WHERE dag_id = ?", DAG_ID)
        # No process of Airflow's runs the load: kill the scheduler (its LocalExecutor workers with it) and
        # the triggerer that follows the query.
        _kill(airflow, "scheduler")
        _kill(airflow, "triggerer")
        assert _running_loads(stack) == [query_id], "the insert must outlive every Airflow process"
        assert airflow.db("SELECT state FROM task_instance WHERE dag_id = ?", DAG_ID) == [("deferred",)]
        airflow.start("scheduler", "triggerer")

        def run_done(run: str) -> list[tuple[str]]:
            states = airflow.db("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", DAG_ID, run)
            return states if states and states[0][0] in ("success", "failed") else []

        assert wait_for("the run to finish", lambda: run_done(run_id), 300, airflow, interval=2) == [("success",)]
        restarted = time.monotonic() - started

        # A second run: its deferred task is cleared while the server runs its insert.
        # (a logical date, so that the clear names this run only: the first run, triggered without one, has none)
        triggered = airflow.run("dags", "trigger", DAG_ID, "-l", SECOND_RUN_DATE)
        assert triggered.returncode == 0, triggered.stdout[-2000:] + triggered.stderr[-2000:]
        ((second_run,),) = airflow.db("SELECT run_id FROM dag_run WHERE dag_id = ? AND run_id != ?", DAG_ID, run_id)

        def second_deferred_while_loading() -> list[str]:
            followed = any(_trigger_logs(tmp_path, second_run).values())
            return _running_loads(stack) if _ti(airflow, second_run) == [(1, "deferred")] and followed else []

        (cleared_query,) = wait_for("the second run's task to defer", second_deferred_while_loading, 300, airflow,
                                 interval=0.5)
        cleared = airflow.run("tasks", "clear", DAG_ID, "-t", "deferred", "-s", SECOND_RUN_DATE, "-e",
                              SECOND_RUN_DATE, "-y")
        assert cleared.returncode == 0, cleared.stdout[-2000:] + cleared.stderr[-2000:]
        assert wait_for("the second run to finish", lambda: run_done(second_run), 300, airflow, interval=2) == [
            ("success",)]
        elapsed = time.monotonic() - started
    finally:
        airflow.stop()

    # The first triggerer followed the insert while it ran; the restarted one took the trigger over and fired its
    # event. Whether the insert still ran when the new triggerer first looked is a race between Airflow's restart
    # and the insert's ~30 s (a busy machine starts Airflow slower): its log says either.
    looks = _trigger_logs(tmp_path, run_id)
    assert len(looks) == 2 and looks[first_triggerer] > 0, looks
    (second_triggerer,) = set(looks) - {first_triggerer}
    second_log = next(tmp_path.glob(f"logs/dag_id={DAG_ID}/run_id={run_id}/task_id=deferred/{second_triggerer}"))
    assert f"{query_id} finished: {ROWS} rows written" in second_log.read_text(errors="replace"), looks
    # 1. The first run: its first try, every row by one insert over HTTP, never repeated.
    assert _ti(airflow, run_id) == [(1, "success")]
    assert _inserts(stack, query_id) == [(query_id, "QueryFinish", 2, ROWS, 0)]
    # 2. The cleared run: the trigger's on_kill killed try 1's query (394 QUERY_WAS_CANCELLED: KILL QUERY, and
    # no worker held it); try 2 loaded the files again, once.
    assert _ti(airflow, second_run) == [(2, "success")]
    second_try = cleared_query.replace("-try1", "-try2")
    killed, loaded = _inserts(stack, cleared_query)
    assert killed[:3] + killed[4:] == (cleared_query, "ExceptionWhileProcessing", 2, 394)  # into its staging table
    assert loaded == (second_try, "QueryFinish", 2, ROWS, 0)
    trigger_log = "".join(p.read_text(errors="replace") for p in tmp_path.glob(
        f"logs/dag_id={DAG_ID}/run_id={second_run}/task_id=deferred/attempt=1.log.trigger.*.log"))
    assert "Trigger cancelled by user action, invoking on_kill" in trigger_log
    assert f"Killing query {cleared_query} on 127.0.0.1:{stack.nodes[0].tcp_port}" in trigger_log
    # The table holds each run's rows once: twice the files.
    file_sums = ch.execute(
        "SELECT count(), sum(cityHash64(Id, Body, Title)) "
        f"FROM s3('{stack.s3_endpoint}/{BUCKET}/{data.prefix}*.parquet', "
        f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')"
    )[0]
    assert file_sums[0] == ROWS
    table = ch.execute(f"SELECT count(), sum(cityHash64(Id, Body, Title)) FROM {TABLE}")[0]
    assert table == (2 * ROWS, (2 * file_sums[1]) % 2**64)
    assert ch.execute("SELECT count() FROM system.tables WHERE name LIKE '\\_s3ch\\_stage\\_%'")[0][0] == 0
    print(f"\ndeferrable load under the real scheduler: {ROWS} rows; scheduler and triggerer killed and restarted "
          f"while {query_id} ran, run done after {restarted:.0f} s; a second run's task cleared while "
          f"{cleared_query} ran, loaded again by try 2; {elapsed:.0f} s in all")

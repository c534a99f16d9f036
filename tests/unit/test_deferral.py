"""What a deferrable load decides without a server: what a look means, the HTTP insert's URL, what the task
carries through the deferral; and the trigger and the operator as Airflow builds them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_provider_s3ch.core.deferral import (
    MAX_CARRIED_OBJECTS,
    MAX_CARRIED_SQL,
    DeferredLoad,
    LoggedQuery,
    Look,
    RunningQuery,
    http_params,
    judge,
)
from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import InsertSettings, LoadPlan, S3Object, TableRef
from airflow_provider_s3ch.core.recovery import plan_steps
from airflow_provider_s3ch.core.server_models import ClusterNode, TableInfo
from airflow_provider_s3ch.triggers.load import LoadTrigger

QID = "s3ch-0123456789abcdef0123-try1"


def _running(*nodes: str, read: int = 10, written: int = 5) -> Look:
    return Look(running=[RunningQuery(node=n, query_id=QID, elapsed=3.0, read_rows=read, written_rows=written)
                         for n in nodes])


def test_a_load_that_runs_on_any_node_is_running_with_its_figures_summed() -> None:
    verdict = judge(_running("a:9000", "b:9000"), kind="insert", query_ids=[QID])
    assert (verdict.verdict, verdict.read_rows, verdict.written_rows, verdict.done) == ("running", 20, 10, False)
    assert "20 rows read, 10 written so far (on 2 nodes)" in verdict.message


def test_a_load_that_ended_is_finished_or_failed_by_its_log_entry() -> None:
    finished = judge(Look(logged=LoggedQuery(query_id=QID, type="QueryFinish", written_rows=7)), kind="insert",
                     query_ids=[QID])
    assert (finished.verdict, finished.written_rows, finished.done) == ("finished", 7, True)
    failed = judge(
        Look(logged=LoggedQuery(query_id=QID, type="ExceptionWhileProcessing", exception_code=394,
                                exception="Code: 394. Query was cancelled. Stack trace: 0. x")),
        kind="insert", query_ids=[QID],
    )
    assert (failed.verdict, failed.error_code) == ("failed", 394)
    assert failed.message.endswith("Code: 394. Query was cancelled.")


def test_a_load_neither_running_nor_logged_is_missing_only_after_the_settle_time() -> None:
    early = judge(Look(), kind="insert", query_ids=[QID], absent_for=2.0, settle=15.0)
    assert (early.verdict, early.absent, early.done) == ("running", True, False)
    late = judge(Look(), kind="insert", query_ids=[QID], absent_for=15.0, settle=15.0)
    assert (late.verdict, late.done) == ("missing", True)


def test_a_wait_for_earlier_tries_ends_when_none_runs_or_times_out_at_its_deadline() -> None:
    assert judge(Look(), kind="wait", query_ids=[QID]).verdict == "ended"
    assert judge(_running("a:9000"), kind="wait", query_ids=[QID], now=99.0, deadline=100.0).verdict == "running"
    timeout = judge(_running("a:9000"), kind="wait", query_ids=[QID], now=100.0, deadline=100.0)
    assert timeout.verdict == "timeout" and "earlier_try_timeout" in timeout.message
    # a wait never reads the log: a logged entry changes nothing
    logged = Look(logged=LoggedQuery(query_id=QID, type="ExceptionWhileProcessing"))
    assert judge(logged, kind="wait", query_ids=[QID]).verdict == "ended"


def test_the_http_insert_url_holds_the_query_id_the_database_and_the_settings_only() -> None:
    params = http_params(QID, "analytics", {"max_query_size": 300_000, "log_queries": 1,
                                            "log_queries_probability": 1.0, "log_queries_min_type": "QUERY_START",
                                            "flag": True})
    assert params == [("query_id", QID), ("database", "analytics"), ("max_query_size", "300000"),
                      ("log_queries", "1"), ("log_queries_probability", "1.0"),
                      ("log_queries_min_type", "QUERY_START"), ("flag", "1")]
    for name in ("password", "user", "query"):
        with pytest.raises(InvalidRequestError):
            http_params(QID, "d", {name: "x"})
    with pytest.raises(InvalidRequestError):
        http_params(QID, "d", {"max_threads": float("nan")})


def _plan() -> LoadPlan:
    return LoadPlan(table=TableRef(database="d", name="t"), source_url="http://s3/b/k/*.parquet", format="Parquet",
                    strategy="single", strategy_reason="one node", settings=InsertSettings(values={"a": 1}),
                    budget_bytes=1, budget_reason="r")


def _load(objects: int, sql: str = "INSERT …") -> DeferredLoad:
    table = TableInfo(database="d", name="t", engine="MergeTree")
    return DeferredLoad.carry(
        objects=[S3Object(key=f"k/{i}.parquet", size=i) for i in range(objects)], sql=sql, query_id=QID,
        resume_reason="no earlier try", plan=_plan(), steps=plan_steps("append", table, "0123456789abcdef0123"),
        table=table, fan_out=[ClusterNode(host="h", port=9000)], bucket="b", started_at=1.0,
    )


def test_the_deferred_state_survives_json_and_carries_the_files_and_the_sql_only_when_small() -> None:
    small = _load(MAX_CARRIED_OBJECTS)
    again = DeferredLoad.model_validate(json.loads(json.dumps(small.model_dump(mode="json"))))
    assert again == small
    assert again.steps.staging is not None and len(again.objects or []) == MAX_CARRIED_OBJECTS
    assert _load(MAX_CARRIED_OBJECTS + 1).objects is None
    assert _load(1, "x" * (MAX_CARRIED_SQL + 1)).sql is None


def test_the_trigger_serializes_to_what_rebuilds_it() -> None:
    trigger = LoadTrigger(clickhouse_conn_id="ch", query_ids=[QID], nodes=[{"host": "h", "port": 9000}],
                          kind="wait", poll_interval=2, deadline=123.0, load=None)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_s3ch.triggers.load.LoadTrigger"
    rebuilt = LoadTrigger(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs["nodes"][0]["host"] == "h" and kwargs["kind"] == "wait" and kwargs["deadline"] == 123.0


def test_airflow_lists_the_load_trigger() -> None:
    code = (
        "import json; from airflow.providers_manager import ProvidersManager as P; "
        "print(json.dumps([t.trigger_class_name for t in P().trigger if t.package_name == 'airflow-provider-s3ch']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "airflow_provider_s3ch.triggers.load" in json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("value", "expected"), [("True", True), ("False", False)])
def test_deferrable_defaults_to_airflows_default_deferrable(value: str, expected: bool, tmp_path) -> None:
    code = (
        "from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator as O; "
        "print(O(task_id='t', s3_uri='s3://b/k', table='t').deferrable)"
    )
    env = {"AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": value, "AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == str(expected)

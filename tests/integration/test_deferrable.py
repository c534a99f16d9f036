"""Deferrable loads on the real local stack: the insert started over HTTP outlives the process that
started it, the trigger follows it on the server, the task resumes to finish it, and a retry waits for an
earlier try in the trigger and then takes its figures.

The loads are slowed on the server: the target has a column ``MATERIALIZED sleepEachRow(…)``, so an insert
takes seconds whatever the machine (the column is the table's own: the files do not have it).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from airflow_provider_s3ch.core.recovery import QueryId
from airflow_provider_s3ch.errors import ClickHouseQueryError, LoadError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, posts_ddl, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.triggers.load import LoadTrigger
from tests.integration.faults import ROOT
from tests.integration.support import SAMPLE_BUCKET, ReservationBlocker, count, fake_context, secondary_inserts

pytestmark = pytest.mark.integration

ROWS = 1_200
#: Seconds each row sleeps in the target's MATERIALIZED column: ~6 s per load.
SLEEP = 0.005
#: sleepEachRow over a whole block: the default cap is 3 s per block.
SLOW_SETTINGS = {"function_sleep_max_microseconds_per_block": 0}
CONN_ID = "clickhouse_http_port"


@pytest.fixture(scope="module")
def small(stack: LocalStack) -> SampleDataset:
    return write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=ROWS, months=2, prefix="deferrable/")


@pytest.fixture(autouse=True)
def http_conn(stack: LocalStack, env_conn) -> str:
    """The node's connection with its HTTP port (the extra ``http_port``), as deferrable loads need it."""
    return env_conn(CONN_ID, stack.clickhouse_connection(0, http_port=stack.nodes[0].http_port))


@pytest.fixture
def slow_table(stack: LocalStack) -> str:
    """A posts table whose inserts sleep SLEEP seconds per row (a column the files lack)."""
    name = f"default.slow_{uuid.uuid4().hex[:8]}"
    client = stack.clickhouse_client()
    client.execute(posts_ddl(name))
    client.execute(f"ALTER TABLE {name} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP})")
    return name


def _operator(uri: str, table: str, settings: dict[str, Any] | None = None, **kwargs: Any) -> S3ToClickHouseOperator:
    return S3ToClickHouseOperator(task_id="load", s3_uri=uri, table=table, deferrable=True, poll_interval=0.5,
                                  settings={**SLOW_SETTINGS, **(settings or {})}, clickhouse_conn_id=CONN_ID, **kwargs)


def _staging_tables(stack: LocalStack, query_id: str) -> int:
    """How many staging tables of this task instance's load exist."""
    name = f"_s3ch_stage_{QueryId.parse(query_id).stem}"
    return int(stack.clickhouse_client().execute("SELECT count() FROM system.tables WHERE name = %(n)s",
                                                 {"n": name})[0][0])


def _fire(trigger: LoadTrigger, timeout: float = 120) -> dict[str, Any]:
    """Run a trigger to its event, as the triggerer does (after a round trip through its serialization)."""
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_s3ch.triggers.load.LoadTrigger"
    rebuilt = LoadTrigger(**json.loads(json.dumps(kwargs)))

    async def main() -> dict[str, Any]:
        return (await asyncio.wait_for(anext(rebuilt.run()), timeout=timeout)).payload

    return asyncio.run(main())


def _defer(op: S3ToClickHouseOperator, context: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value


def _run(op: S3ToClickHouseOperator, context: dict[str, Any], triggers: list[LoadTrigger] | None = None
         ) -> dict[str, Any]:
    """What Airflow does with a deferrable task: execute; while it defers, fire the trigger and resume
    (the triggers it deferred to go into ``triggers``)."""
    call: Any = lambda: op.execute(context)  # noqa: E731
    for _ in range(10):
        try:
            return call()
        except TaskDeferred as deferred:
            if triggers is not None:
                triggers.append(deferred.trigger)
            event = _fire(deferred.trigger)
            call = lambda event=event, method=deferred.method_name: getattr(op, method)(context, event)  # noqa: E731
    raise AssertionError("the task deferred ten times")


def _log_entries(stack: LocalStack, query_id: str) -> list[tuple[Any, ...]]:
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    return client.execute(
        "SELECT toString(type), toString(interface), written_rows, exception_code FROM system.query_log "
        "WHERE query_id = %(q)s AND type != 'QueryStart' ORDER BY event_time_microseconds", {"q": query_id},
    )


def _running(stack: LocalStack, query_id: str) -> bool:
    return bool(stack.clickhouse_client().execute(
        "SELECT count() FROM system.processes WHERE query_id = %(q)s", {"q": query_id})[0][0])


_STARTER = """
import json, os, signal, sys
from airflow.providers.common.compat.sdk import TaskDeferred
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context
uri, table, run_id, settings = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
op = S3ToClickHouseOperator(task_id="load", s3_uri=uri, table=table, deferrable=True, poll_interval=0.5,
                            settings=settings, clickhouse_conn_id=sys.argv[5])
try:
    op.execute(fake_context("load", run_id=run_id))
except TaskDeferred as deferred:
    print(json.dumps(deferred.trigger.serialize()[1]), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies while the task is deferred
"""


def test_the_http_insert_outlives_the_worker_and_the_task_resumes_to_finish_it(
    stack: LocalStack, small: SampleDataset, slow_table: str
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    started = subprocess.run(
        [sys.executable, "-c", _STARTER, small.s3_uri, slow_table, run_id, json.dumps(SLOW_SETTINGS), CONN_ID],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert started.returncode == -signal.SIGKILL, started.stderr[-3000:]
    kwargs = json.loads(started.stdout.strip().splitlines()[-1])
    (query_id,) = kwargs["query_ids"]
    assert kwargs["kind"] == "insert" and kwargs["load"]["query_id"] == query_id
    # The worker is gone; the server runs the load on.
    assert _running(stack, query_id), _log_entries(stack, query_id)
    assert count(stack, slow_table) == 0  # staged: nothing in the target before the task finishes it

    event = _fire(LoadTrigger(**kwargs))
    assert event["status"] == "finished", event
    assert event["written_rows"] == ROWS
    # The task resumes in another process (a fresh operator) and finishes the load.
    result = _operator(small.s3_uri, slow_table).execute_complete(fake_context("load", run_id=run_id), event)

    assert result["query_id"] == query_id
    assert result["written_rows"] == ROWS == count(stack, slow_table)
    assert result["attached_to"] is None and result["mode"] == "append" and len(result["partitions"]) == 2
    assert result["settings"]["function_sleep_max_microseconds_per_block"] == 0  # as the server ran it
    assert _log_entries(stack, query_id) == [("QueryFinish", "HTTP", ROWS, 0)]
    assert _staging_tables(stack, query_id) == 0


def test_a_deferrable_load_returns_the_figures_of_a_load_that_did_not_defer(
    stack: LocalStack, small: SampleDataset, slow_table: str, capfd
) -> None:
    deferred = _run(_operator(small.s3_uri, slow_table), fake_context("load"))
    other = f"{slow_table}_b"
    stack.clickhouse_client().execute(f"CREATE TABLE {other} AS {slow_table}")
    normal = S3ToClickHouseOperator(task_id="load", s3_uri=small.s3_uri, table=other, settings=SLOW_SETTINGS).execute(
        fake_context("load"))
    same = ("written_rows", "written_bytes", "read_rows", "read_bytes", "files", "bytes", "strategy", "mode",
            "table_changes", "warnings")
    assert {k: deferred[k] for k in same} == {k: normal[k] for k in same}
    # The settings as the server ran them (the memory budget follows the server's free memory of the moment;
    # the log_comment tag names the target table and the budget).
    assert deferred["settings"].keys() == normal["settings"].keys()
    assert {k: v for k, v in deferred["settings"].items() if k not in ("max_memory_usage", "log_comment")} == {
        k: v for k, v in normal["settings"].items() if k not in ("max_memory_usage", "log_comment")}
    assert deferred["settings"]["max_memory_usage"] == deferred["budget_bytes"]
    assert [(c["name"], c["status"]) for c in deferred["checks"]] == [
        (c["name"], c["status"]) for c in normal["checks"]
    ]
    assert sorted(deferred) == sorted(normal)
    assert count(stack, slow_table) == count(stack, other) == ROWS
    assert [e[1] for e in _log_entries(stack, deferred["query_id"])] == ["HTTP"]
    assert [e[1] for e in _log_entries(stack, normal["query_id"])] == ["TCP"]
    # The trigger said how far the load was while it ran.
    logged = "".join(capfd.readouterr())
    assert f"{deferred['query_id']} runs: " in logged and "rows read" in logged and "written so far" in logged
    assert "Deferring: the triggerer follows query" in logged
    # Where the time went: the phases before the insert, then (deferred) from its start until the task resumed,
    # the completion; in all wall_ms.
    phases = {"s3", "target", "resume", "complete", "lineage"}
    assert set(deferred["phases_ms"]) == {*phases, "deferred"}
    assert set(normal["phases_ms"]) == {*phases, "insert", "other"}
    for result in (deferred, normal):
        assert all(ms >= 0 for ms in result["phases_ms"].values())
        assert sum(result["phases_ms"].values()) == result["wall_ms"], result["phases_ms"]
    # The log names the same phases in the order they ran: the S3 side first (the profile is read beside it).
    assert list(normal["phases_ms"])[:2] == ["s3", "target"], normal["phases_ms"]
    ran = ", ".join(f"{name} {ms} ms" for name, ms in normal["phases_ms"].items())
    assert f"Time: {normal['wall_ms']} ms in all: {ran}" in logged


def test_a_retry_waits_for_the_earlier_try_in_the_trigger_then_takes_its_figures(
    stack: LocalStack, small: SampleDataset, slow_table: str
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    try1 = _defer(_operator(small.s3_uri, slow_table), fake_context("load", 1, run_id))
    (first,) = try1.trigger.query_ids
    assert _running(stack, first)

    # Try 2 finds try 1 still running: it defers to wait for it, and starts nothing.
    op2 = _operator(small.s3_uri, slow_table)
    try2 = _defer(op2, fake_context("load", 2, run_id))
    assert try2.trigger.kind == "wait" and try2.trigger.query_ids == [first]
    second = str(QueryId.parse(first).model_copy(update={"try_number": 2}))
    assert _log_entries(stack, second) == [] and not _running(stack, second)

    event = _fire(try2.trigger)
    assert event["status"] == "ended", event
    result = op2.execute_complete(fake_context("load", 2, run_id), event)  # looks again: attaches
    assert result["attached_to"] == first and result["written_rows"] == ROWS
    assert count(stack, slow_table) == ROWS

    # Try 1's trigger fires too: its task finds the load finished by try 2 and changes nothing.
    again = _operator(small.s3_uri, slow_table).execute_complete(fake_context("load", 1, run_id),
                                                                  _fire(try1.trigger))
    assert again["written_rows"] == ROWS and again["partitions"] == []
    assert count(stack, slow_table) == ROWS
    assert _log_entries(stack, second) == []


def test_killing_the_trigger_kills_the_query_and_the_retry_loads_afresh(
    stack: LocalStack, small: SampleDataset, slow_table: str
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    try1 = _defer(_operator(small.s3_uri, slow_table), fake_context("load", 1, run_id))
    (first,) = try1.trigger.query_ids
    asyncio.run(try1.trigger.on_kill())  # what the triggerer calls when a user clears the deferred task
    deadline = time.monotonic() + 120
    while _running(stack, first) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(stack, first)
    event = _fire(try1.trigger)
    assert event["status"] == "failed" and event["error_code"] == 394, event  # QUERY_WAS_CANCELLED
    with pytest.raises(LoadError, match="394"):  # transient: the retries apply
        _operator(small.s3_uri, slow_table).execute_complete(fake_context("load", 1, run_id), event)
    assert count(stack, slow_table) == 0
    assert _staging_tables(stack, first) == 0

    result = _run(_operator(small.s3_uri, slow_table), fake_context("load", 2, run_id))
    assert result["attached_to"] is None and result["written_rows"] == ROWS == count(stack, slow_table)
    assert "failed" in result["resume_reason"]


def test_a_load_the_server_lost_names_the_server_and_the_connection(stack: LocalStack) -> None:
    """A query that neither runs nor is logged (as after a server restart, whose in-memory query_log is gone)
    is ``missing`` once the settle time passed; the message says where the trigger looked and through which
    connection, as a synchronous load's errors do."""
    lost = f"s3ch-{uuid.uuid4().hex[:20]}-try1"
    event = _fire(LoadTrigger(clickhouse_conn_id="clickhouse_native_default", query_ids=[lost], poll_interval=1.0))
    node = stack.nodes[0]
    assert event["status"] == "missing", event
    assert f"looked on 127.0.0.1:{node.tcp_port} through connection 'clickhouse_native_default'" in event["message"]
    assert lost in event["message"]


def test_a_statement_the_server_refuses_fails_at_the_start_without_a_retry(
    stack: LocalStack, small: SampleDataset, slow_table: str
) -> None:
    # A name of an enumeration the server does not have: the provider leaves names to the server (an unknown
    # setting, or a value its type does not take, is refused before any statement: test_setting_types.py).
    op = _operator(small.s3_uri, slow_table, settings={"load_balancing": "lots"})
    context = fake_context("load")
    with pytest.raises(ClickHouseQueryError, match="212") as refused:  # UNKNOWN_LOAD_BALANCING: terminal
        op.execute(context)
    assert "lots" in str(refused.value)
    assert count(stack, slow_table) == 0
    query_id = str(op.query_id(context))
    assert _log_entries(stack, query_id) == [("ExceptionBeforeStart", "HTTP", 0, 212)]  # refused over HTTP
    assert _staging_tables(stack, query_id) == 0


def test_no_secret_reaches_the_trigger_the_logs_or_the_query_log(
    stack: LocalStack, small: SampleDataset, slow_table: str, capfd, caplog
) -> None:
    caplog.set_level("DEBUG")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    deferred = _defer(_operator(small.s3_uri, slow_table), fake_context("load", 1, run_id))
    kwargs = json.dumps(deferred.trigger.serialize())
    event = _fire(deferred.trigger)
    result = _operator(small.s3_uri, slow_table).execute_complete(fake_context("load", 1, run_id), event)
    logged = "".join(capfd.readouterr()) + caplog.text
    assert "Deferring" in logged and "SQL: INSERT INTO" in logged
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    rows = client.execute("SELECT * FROM system.query_log WHERE query_id = %(q)s", {"q": result["query_id"]})
    assert rows
    for secret in (stack.s3_secret_key, stack.password):
        assert secret not in kwargs
        assert secret not in json.dumps(event, default=str)
        assert secret not in logged
        assert secret not in json.dumps(result, default=str)
        assert all(secret not in str(value) for row in rows for value in row)


def test_a_distributed_load_defers_and_the_trigger_follows_it_on_every_node(
    cluster_stack: LocalStack, env_conn
) -> None:
    conn = env_conn("clickhouse_cluster_http",
                    cluster_stack.clickhouse_connection(0, http_port=cluster_stack.nodes[0].http_port))
    data = write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=ROWS, months=12, prefix="deferrable-cluster/")
    dist, local = cluster_stack.create_distributed_table(f"slow_{uuid.uuid4().hex[:6]}",
                                                         POSTS_DDL.replace("{engine}", "MergeTree"))
    cluster_stack.execute_on_all(f"ALTER TABLE {local} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP * 3})")
    triggers: list[LoadTrigger] = []
    result = _run(S3ToClickHouseOperator(
        task_id="load", s3_uri=data.s3_uri, table=dist, deferrable=True, poll_interval=0.5, settings=SLOW_SETTINGS,
        clickhouse_conn_id=conn, aws_conn_id="aws_cluster"), fake_context("load"), triggers)

    assert result["strategy"] == "distributed" and result["staging_table"].endswith("_all")  # staged on every shard
    ((trigger,),) = [triggers]  # it deferred once, to follow the insert on the three nodes
    assert trigger.load is not None and trigger.load["steps"]["shards"]["cluster"] == cluster_stack.cluster
    for node in cluster_stack.nodes:  # the resumed task published every shard and dropped its staging tables
        assert not cluster_stack.clickhouse_client(node.index).execute(
            "SELECT name FROM system.tables WHERE startsWith(name, '_s3ch_stage_')")
    assert trigger.kind == "insert" and len(trigger.nodes) == 3
    # Every shard ran a secondary insert; how many of the twelve files each got is s3Cluster's hand-out of the
    # moment (none, on a busy machine). The shares add up, each in its own node's table.
    per_node = {n["node"]: n["written_rows"] for n in result["nodes"]}
    assert sorted(per_node) == sorted(node.address for node in cluster_stack.nodes), per_node
    assert sum(per_node.values()) == result["written_rows"] == ROWS
    for node in cluster_stack.nodes:
        inserts, rows = secondary_inserts(cluster_stack, result["query_id"], node.index)
        assert inserts >= 1, f"no secondary insert on {node.address}"
        assert count(cluster_stack, local, node=node.index) == rows == per_node[node.address]
    initiator = cluster_stack.clickhouse_client(0)
    initiator.execute("SYSTEM FLUSH LOGS")
    assert initiator.execute(
        "SELECT toString(interface) FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'",
        {"q": result["query_id"]}) == [("HTTP",)]


@pytest.fixture(scope="module")
def wl_stack() -> Iterator[LocalStack]:
    """One node with workload scheduling (``loads``, max_memory 3 GiB): a load reserving 2 GiB waits for another."""
    with LocalStack(nodes=1, workload_memory="3Gi") as s:
        s.create_bucket(SAMPLE_BUCKET)
        yield s


def test_under_a_workload_the_task_defers_once_the_server_admitted_the_insert(wl_stack: LocalStack, env_conn) -> None:
    """A query waiting for admission is not in system.processes, and an HTTP insert whose client left while it
    waited still runs once admitted: the task keeps its request open until the server lists the query."""
    conn = env_conn("clickhouse_wl_http", wl_stack.clickhouse_connection(0, http_port=wl_stack.nodes[0].http_port))
    aws = env_conn("aws_wl_http", wl_stack.aws_connection())
    data = write_posts(wl_stack.s3_client(), SAMPLE_BUCKET, rows=ROWS, months=2, prefix="deferrable-wl/")
    table = f"default.slow_{uuid.uuid4().hex[:8]}"
    wl_stack.clickhouse_client().execute(posts_ddl(table))
    wl_stack.clickhouse_client().execute(
        f"ALTER TABLE {table} ADD COLUMN slow UInt8 MATERIALIZED sleepEachRow({SLEEP})"
    )
    triggers: list[LoadTrigger] = []
    # The blocker holds 2 GiB of the workload's 3 GiB until the load has waited in the server's queue for 1.5 s
    # (not for a fixed time from the start: planning the load takes longer on a busy machine).
    with ReservationBlocker(wl_stack, reserve="2Gi") as blocker:
        releaser = threading.Thread(target=blocker.release_once_queued, kwargs={"hold": 1.5})
        releaser.start()
        try:
            result = _run(S3ToClickHouseOperator(
                task_id="load", s3_uri=data.s3_uri, table=table, deferrable=True, poll_interval=0.5,
                memory_cap="2GiB", settings=SLOW_SETTINGS, clickhouse_conn_id=conn, aws_conn_id=aws),
                fake_context("load"), triggers)
        finally:
            blocker.released.set()
            releaser.join()
    assert len(triggers) == 1  # it deferred once, after the wait for admission
    assert result["workload"] == "loads" and result["admission_wait_ms"] >= 1500, result["admission_wait_ms"]
    assert result["written_rows"] == ROWS == count(wl_stack, table)

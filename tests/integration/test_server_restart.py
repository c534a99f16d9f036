"""A server that restarts between two tries: the retry finishes the load from the server's durable state.

Try 1 of a load stops right after the first command of its last step (``append``: the first ``MOVE PARTITION``
of its one ``ALTER``; ``overwrite``: ``EXCHANGE TABLES``), as a worker that died there would; then the
ClickHouse node is SIGKILLed and started again on the same data directory (:meth:`LocalStack.restart_node`).
The restarted node's ``system.query_log`` no longer lists try 1, so the only witness that its insert finished
is the mark it left on the staging table (on the target, after the swap). Try 2 must bring the rest in without
inserting again: every file's rows exactly once, per partition, and the target's own comment back.

Each case runs on the synchronous path and the deferred one (try 1's insert over HTTP, finished in
``execute_complete``). The module has its own stack: it restarts the node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

import airflow_provider_s3ch.load.complete as load_complete
from airflow_provider_s3ch.core.recovery import STAGING_MARKER, STAGING_PREFIX
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import posts_ddl, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import fingerprint, outcome, partition_counts
from tests.integration.support import fake_context
from tests.integration.test_deferrable import _fire

pytestmark = pytest.mark.integration

BUCKET = "s3ch-restart"
ROWS = 60_000
MONTHS = 6
HTTP_CONN = "clickhouse_restart_http"


@dataclass
class Rx:
    stack: LocalStack
    uri: str
    clean: tuple[int, int]
    clean_parts: dict[int, int]


@pytest.fixture(scope="module")
def rx() -> Iterator[Rx]:
    with LocalStack(nodes=1, region="eu-west-3") as stack, stack.environ():
        stack.create_bucket(BUCKET)
        data = write_posts(stack.s3_client(), BUCKET, rows=ROWS, months=MONTHS, prefix="restart/")
        ch = stack.clickhouse_client()
        ch.execute(posts_ddl("default.clean"))
        ch.execute(f"INSERT INTO default.clean SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/restart/*.parquet', "
                   f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')")
        yield Rx(stack, data.s3_uri, fingerprint(stack, "default.clean"), partition_counts(stack, "default.clean"))


class WorkerDied(BaseException):
    """Try 1 stops here, as its worker would have died: nothing after it runs."""


def _stop_after_first(monkeypatch: pytest.MonkeyPatch, words: str) -> list[str]:
    """Make the load's last step stop right after the first command of its first statement that contains
    ``words``: the partitions' one ``ALTER`` applied up to its first ``MOVE PARTITION`` (the server applies an
    ALTER's commands in order, each atomic), as when the worker or the server died during it."""
    ran: list[str] = []
    real = load_complete.run_statements

    def steps_then_die(hook: Any, steps: Any, log: Any) -> None:
        for step in steps:
            if words in step.sql:
                first = step._replace(sql=step.sql.split(f", {words}")[0])
                real(hook, [first], log)
                ran.append(first.sql)
                raise WorkerDied(first.sql)
            real(hook, [step], log)
            ran.append(step.sql)

    monkeypatch.setattr(load_complete, "run_statements", steps_then_die)
    return ran


def _comment(stack: LocalStack, table: str) -> str:
    rows = stack.clickhouse_client().execute(
        "SELECT comment FROM system.tables WHERE database = 'default' AND name = %(n)s", {"n": table.split(".")[1]})
    return str(rows[0][0])


def _staging(stack: LocalStack) -> list[str]:
    rows = stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE database = 'default' AND startsWith(name, %(p)s)", {"p": STAGING_PREFIX})
    return [r[0] for r in rows]


def _operator(rx: Rx, table: str, mode: str, deferred: bool) -> S3ToClickHouseOperator:
    extra: dict[str, Any] = {"deferrable": True, "poll_interval": 0.5, "clickhouse_conn_id": HTTP_CONN} if deferred \
        else {}
    return S3ToClickHouseOperator(task_id="load", s3_uri=rx.uri, table=table, mode=mode, **extra)


def _execute(op: S3ToClickHouseOperator, context: dict[str, Any]) -> dict[str, Any]:
    """What Airflow does with the task: execute; while it defers, fire the trigger and resume."""
    try:
        return op.execute(context)
    except TaskDeferred as deferred:
        event = _fire(deferred.trigger)
        return getattr(op, deferred.method_name)(context, event)


@pytest.mark.parametrize("path", ["sync", "deferred"])
@pytest.mark.parametrize(("mode", "last_step"), [("append", "MOVE PARTITION"), ("overwrite", "EXCHANGE TABLES")])
def test_a_retry_after_a_server_restart_finishes_the_load_without_loading_again(
    rx: Rx, monkeypatch: pytest.MonkeyPatch, env_conn: Any, capfd: pytest.CaptureFixture[str], mode: str,
    last_step: str, path: str,
) -> None:
    stack = rx.stack
    env_conn(HTTP_CONN, stack.clickhouse_connection(0, http_port=stack.nodes[0].http_port))
    table = f"default.r_{mode}_{uuid.uuid4().hex[:6]}"
    ch = stack.clickhouse_client()
    ch.execute(posts_ddl(table))
    ch.execute(f"ALTER TABLE {table} MODIFY COMMENT 'posts by month'")
    if mode == "overwrite":  # rows the swap replaces
        ch.execute(f"INSERT INTO {table} SELECT * FROM default.clean WHERE Id % 3 = 0")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    op = _operator(rx, table, mode, path == "deferred")
    try1, try2 = (str(op.query_id(fake_context("load", n, run_id))) for n in (1, 2))

    ran = _stop_after_first(monkeypatch, last_step)
    with pytest.raises(WorkerDied):
        _execute(op, fake_context("load", 1, run_id))
    monkeypatch.undo()
    assert ran[0].startswith(f"ALTER TABLE `default`.`{STAGING_PREFIX}") and "filled by " + try1 in ran[0], ran
    if mode == "append":  # one month moved, five still in the staging table
        assert len(partition_counts(stack, table)) == 1 and len(_staging(stack)) == 1
    else:  # swapped: the target carries the mark, the old table the target's comment
        assert _comment(stack, table).startswith(STAGING_MARKER)

    stack.restart_node(0)
    assert outcome(stack, try1) is None, "the restarted server still lists try 1: nothing is tested"

    capfd.readouterr()
    result = _execute(_operator(rx, table, mode, path == "deferred"), fake_context("load", 2, run_id))
    logged = "".join(capfd.readouterr())
    assert f"Try 2: earlier try {try1} filled the staging table" in logged
    assert "Try 2: no earlier try" not in logged  # one decision, logged once
    assert fingerprint(stack, table) == rx.clean
    assert partition_counts(stack, table) == rx.clean_parts
    assert result["attached_to"] == try1 and result["written_rows"] == ROWS
    assert outcome(stack, try2) is None, "try 2 inserted again"
    assert _staging(stack) == []
    assert _comment(stack, table) == "posts by month"

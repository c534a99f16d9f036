"""Fault tests on the real local stack: every mode survives a failed try and its retry.

Each scenario runs try 1 of a task instance into a fault, then try 2 (the retry, same
run id), and checks that the target's ``count()`` and ``sum(cityHash64(*))`` equal a
clean load's. In the replace modes a reader thread queries the target the whole time
and must only ever see the state before or the state after the load (per partition
for ``replace_partitions``, for the whole table for ``overwrite``).

The stack is this module's own (one ClickHouse node, one S3 server) because one
scenario stops the S3 server. Loads are slowed with ``max_remote_read_network_bandwidth``
so that faults land mid-load; small insert blocks make try 1 commit parts before the
fault, as a real long load does.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_provider_s3ch.core.marks import FilledMark
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, QueryId, staging_marker, staging_table
from airflow_provider_s3ch.core.sql import quote_literal, render_table
from airflow_provider_s3ch.errors import ClickHouseUnavailableError, LoadError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import posts_ddl, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import (
    BlackholeProxy,
    Reader,
    fingerprint,
    is_running,
    outcome,
    partition_counts,
    start_worker,
    wait_gone,
    wait_running,
)
from tests.integration.support import fake_context

BUCKET = "s3ch-faults"
ROWS = 200_000
MONTHS = 6
MODES = ["append", "replace_partitions", "overwrite"]
#: ~50 MB of Parquet at 6 MB/s: a load of ~8-10 s. One insert thread with small blocks commits
#: a part per file as it goes, so a try that fails mid-load has committed some of its rows.
SLOW = {
    "max_remote_read_network_bandwidth": 6_000_000,
    "max_threads": 1,
    "max_insert_threads": 1,
    "min_insert_block_size_bytes": 1_000_000,
}
U64 = 2**64

#: Every outcome, for the report at the end of the module (and docs/retries-and-modes.md).
OUTCOMES: list[str] = []


@dataclass
class Fx:
    stack: LocalStack
    uri: str
    objects: dict[str, bytes]
    clean: tuple[int, int]  # count, checksum of one clean load
    clean_parts: dict[int, int]
    other: tuple[int, int]  # rows in partitions the files do not touch (replace_partitions before-state)
    tables: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def fx() -> Iterator[Fx]:
    with LocalStack(nodes=1, region="eu-west-3") as stack, stack.environ():
        stack.create_bucket(BUCKET)
        data = write_posts(stack.s3_client(), BUCKET, rows=ROWS, months=MONTHS, prefix="faults/")
        s3 = stack.s3_client()
        objects = {k: s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in data.keys}
        ch = stack.clickhouse_client()
        ch.execute(posts_ddl("default.clean"))
        ch.execute(
            f"INSERT INTO default.clean SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/faults/*.parquet', "
            f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')"
        )
        # Rows a year earlier: partitions 2007-07..2007-12, which the files never touch.
        ch.execute(posts_ddl("default.other"))
        ch.execute(
            "INSERT INTO default.other SELECT * REPLACE (CreationDate - INTERVAL 1 YEAR AS CreationDate) "
            "FROM default.clean WHERE Id % 50 = 0"
        )
        clean = fingerprint(stack, "default.clean")
        assert clean[0] == ROWS
        yield Fx(
            stack, data.s3_uri, objects, clean, partition_counts(stack, "default.clean"),
            fingerprint(stack, "default.other"),
        )
    print("\nFAULT OUTCOMES\n" + "\n".join(OUTCOMES))


@dataclass
class Target:
    table: str
    mode: str
    before: tuple[int, int]
    before_parts: dict[int, int]
    expected: tuple[int, int]
    expected_parts: dict[int, int]


def make_target(fx: Fx, mode: str) -> Target:
    """A fresh target in the mode's before-state, and the state one clean load gives."""
    table = f"default.t_{mode}_{uuid.uuid4().hex[:6]}"
    ch = fx.stack.clickhouse_client()
    ch.execute(posts_ddl(table))
    if mode == "replace_partitions":
        # Half of each month the files hold (stale data to replace), plus other months.
        ch.execute(f"INSERT INTO {table} SELECT * FROM default.clean WHERE Id % 2 = 0")
        ch.execute(f"INSERT INTO {table} SELECT * FROM default.other")
        expected = (fx.clean[0] + fx.other[0], (fx.clean[1] + fx.other[1]) % U64)
        expected_parts = {**partition_counts(fx.stack, "default.other"), **fx.clean_parts}
    elif mode == "overwrite":
        ch.execute(f"INSERT INTO {table} SELECT * FROM default.clean WHERE Id % 3 = 0")
        ch.execute(f"INSERT INTO {table} SELECT * FROM default.other")
        expected, expected_parts = fx.clean, fx.clean_parts
    else:
        expected, expected_parts = fx.clean, fx.clean_parts
    before, before_parts = fingerprint(fx.stack, table), partition_counts(fx.stack, table)
    return Target(table, mode, before, before_parts, expected, expected_parts)


_READERS: list[Reader] = []


@pytest.fixture(autouse=True)
def _stop_readers() -> Iterator[None]:
    yield
    while _READERS:
        _READERS.pop().__exit__()


def reader_for(fx: Fx, t: Target) -> Reader:
    reader = Reader(fx.stack, t.table, per_partition=t.mode != "overwrite")
    _READERS.append(reader)
    return reader


def check_reader(reader: Reader, t: Target) -> str:
    """A reader saw only the before- or the after-state: of the whole table (overwrite) or of
    each partition (replace_partitions, and append, whose partitions move one by one)."""
    if t.mode == "overwrite":
        assert set(reader.seen) <= {t.before[0], t.expected[0]}, reader.seen
        return f"reader: {reader.reads} reads, counts seen {reader.seen}"
    for seen in reader.seen:
        for p in set(seen) | set(t.before_parts) | set(t.expected_parts):
            assert seen.get(p, 0) in {t.before_parts.get(p, 0), t.expected_parts.get(p, 0)}, (p, seen)
    return f"reader: {reader.reads} reads, {len(reader.seen)} distinct per-partition states, all before/after"


def staging_tables(fx: Fx) -> list[str]:
    rows = fx.stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE database = 'default' AND startsWith(name, %(p)s)", {"p": STAGING_PREFIX}
    )
    return [r[0] for r in rows]


def wait_committed(fx: Fx, timeout: float = 60.0) -> int:
    """Wait until the running try has committed rows to its staging table (a partial load); return them."""
    ch = fx.stack.clickhouse_client()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = ch.execute(
            "SELECT sum(rows) FROM system.parts WHERE database = 'default' AND startsWith(table, %(p)s) AND active",
            {"p": STAGING_PREFIX},
        )
        if rows and rows[0][0]:
            return int(rows[0][0])
        time.sleep(0.05)
    raise AssertionError("no rows committed to a staging table")


def operator(fx: Fx, t: Target, **kwargs: Any) -> S3ToClickHouseOperator:
    kwargs.setdefault("settings", SLOW)
    return S3ToClickHouseOperator(task_id="load", s3_uri=fx.uri, table=t.table, mode=t.mode, **kwargs)


def run_in_thread(op: S3ToClickHouseOperator, context: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = op.execute(context)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def qid(op: S3ToClickHouseOperator, run_id: str, try_number: int) -> str:
    """The query id of one try of ``op`` (its stem covers the load's configuration)."""
    return str(op.query_id(fake_context("load", try_number, run_id)))


def retry_and_check(fx: Fx, t: Target, run_id: str, scenario: str, reader: Reader, **kwargs: Any) -> dict[str, Any]:
    """Try 2 of the task instance; the target must equal one clean load."""
    result = operator(fx, t, **kwargs).execute(fake_context("load", 2, run_id))
    reader.__exit__()
    seen = check_reader(reader, t)
    after = fingerprint(fx.stack, t.table)
    assert after == t.expected, (scenario, t.mode, after, t.expected)
    assert partition_counts(fx.stack, t.table) == t.expected_parts
    assert result["written_rows"] == ROWS
    assert staging_tables(fx) == [], "the staging table must be gone"
    OUTCOMES.append(
        f"{scenario:<34} {t.mode:<19} try1 -> {outcome(fx.stack, qid(operator(fx, t, **kwargs), run_id, 1))}; try2 "
        f"{'attached to try1' if result['attached_to'] else 'loaded afresh'}; before {t.before} -> after {after} "
        f"== clean {t.expected}; {seen}"
    )
    return result


def restore_s3(fx: Fx) -> None:
    """moto restarts empty: recreate the bucket and put the files back."""
    fx.stack.start_s3()
    fx.stack.create_bucket(BUCKET)
    s3 = fx.stack.s3_client()
    for key, body in fx.objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


# ---------------------------------------------------------------------- 1. S3 server stopped


@pytest.mark.parametrize("mode", MODES)
def test_s3_server_stopped_mid_load(fx: Fx, mode: str) -> None:
    t = make_target(fx, mode)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    reader = reader_for(fx, t).__enter__()
    # ClickHouse retries S3 errors itself (s3_retry_attempts); 2 attempts make the outage fail the load in seconds.
    settings = {**SLOW, "s3_retry_attempts": 2}
    op = operator(fx, t, settings=settings)
    thread, box = run_in_thread(op, fake_context("load", 1, run_id))
    wait_running(fx.stack, qid(op, run_id, 1))
    partial = wait_committed(fx)
    fx.stack.stop_s3()
    thread.join(timeout=300)
    assert isinstance(box.get("error"), LoadError), box
    assert 0 < partial < ROWS
    assert fingerprint(fx.stack, t.table) == t.before, "a failed try must leave the target untouched"
    assert staging_tables(fx) == [], "the failed try drops its staging table"
    restore_s3(fx)
    result = retry_and_check(fx, t, run_id, f"S3 stopped ({partial} rows staged)", reader, settings=settings)
    assert result["attached_to"] is None


# ---------------------------------------------------------------------- 2. connection dropped


@pytest.fixture
def faulty_conn(fx: Fx, env_conn) -> Iterator[tuple[str, BlackholeProxy]]:
    """Connection ``clickhouse_faulty``: through a proxy that can cut it, with a 3 s client timeout."""
    proxy = BlackholeProxy(fx.stack.nodes[0].tcp_port)
    conn = fx.stack.clickhouse_connection(0, send_receive_timeout=3)
    conn["port"] = proxy.port
    env_conn("clickhouse_faulty", conn)
    yield "clickhouse_faulty", proxy
    proxy.close()



def start_then_cut_connection(fx: Fx, mode: str, faulty_conn: tuple[str, BlackholeProxy]) -> tuple[Target, str, Reader]:
    """Start try 1 through the proxy, cut the network once it runs: the client gives up, the server does not."""
    conn_id, proxy = faulty_conn
    t = make_target(fx, mode)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    reader = reader_for(fx, t).__enter__()
    op = operator(fx, t, clickhouse_conn_id=conn_id)
    thread, box = run_in_thread(op, fake_context("load", 1, run_id))
    wait_running(fx.stack, qid(op, run_id, 1))
    proxy.cut()
    thread.join(timeout=120)
    assert isinstance(box.get("error"), ClickHouseUnavailableError), box
    return t, run_id, reader


@pytest.mark.parametrize("mode", MODES)
def test_connection_dropped_mid_load_retry_attaches_to_running_query(fx: Fx, mode: str, faulty_conn) -> None:
    """The network between worker and server fails: the client gives up, the server's query runs on.

    The retry finds try 1 still running, waits for it and takes its figures: one insert, not two.
    """
    t, run_id, reader = start_then_cut_connection(fx, mode, faulty_conn)
    op = operator(fx, t)
    assert is_running(fx.stack, qid(op, run_id, 1)), "the server should still run try 1 (the load is ~8 s)"
    result = retry_and_check(fx, t, run_id, "ClickHouse connection dropped", reader)
    assert result["attached_to"] == qid(op, run_id, 1)
    assert outcome(fx.stack, qid(op, run_id, 2)) is None, "try 2 must not insert"


# ---------------------------------------------------------------------- 3. task killed


@pytest.mark.parametrize("mode", MODES)
def test_worker_killed_mid_load(fx: Fx, mode: str) -> None:
    """SIGKILL of the worker process: its connection closes, the server aborts the insert.

    Try 1's staging table stays behind (nobody dropped it); the retry drops it and loads afresh.
    """
    t = make_target(fx, mode)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    reader = reader_for(fx, t).__enter__()
    proc = start_worker(
        fx.stack, task_id="load", run_id=run_id, try_number=1, s3_uri=fx.uri, table=t.table, mode=mode, settings=SLOW
    )
    op = operator(fx, t)
    try:
        wait_running(fx.stack, qid(op, run_id, 1))
        partial = wait_committed(fx)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    wait_gone(fx.stack, qid(op, run_id, 1))
    assert fingerprint(fx.stack, t.table) == t.before, "a dead try must leave the target untouched"
    left = staging_tables(fx)
    assert 0 < partial < ROWS and len(left) == 1, (partial, left)  # the dead try's partial rows, kept from the target
    result = retry_and_check(fx, t, run_id, f"worker SIGKILLed ({partial} rows staged)", reader)
    assert result["attached_to"] is None


@pytest.mark.parametrize("mode", MODES)
def test_on_kill_kills_the_query_and_leaves_the_target_untouched(fx: Fx, mode: str) -> None:
    """Airflow's on_kill (task marked failed / timeout): KILL QUERY on the server."""
    t = make_target(fx, mode)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    reader = reader_for(fx, t).__enter__()
    op = operator(fx, t)
    thread, box = run_in_thread(op, fake_context("load", 1, run_id))
    wait_running(fx.stack, qid(op, run_id, 1))
    partial = wait_committed(fx)
    assert 0 < partial < ROWS
    killed_at = time.monotonic()
    op.on_kill()
    wait_gone(fx.stack, qid(op, run_id, 1), timeout=120)  # at once on a quiet machine; a busy one is slower
    gone_after = time.monotonic() - killed_at
    thread.join(timeout=300)
    assert isinstance(box.get("error"), LoadError), box
    assert "QUERY_WAS_CANCELLED" in str(box["error"]) or "394" in str(box["error"]), box["error"]
    assert fingerprint(fx.stack, t.table) == t.before
    assert staging_tables(fx) == []
    retry_and_check(fx, t, run_id, f"on_kill ({partial} staged, gone {gone_after:.1f}s)", reader)


# ---------------------------------------------------------------------- 4. server succeeded, client failed


@pytest.mark.parametrize("mode", MODES)
def test_load_succeeded_on_server_but_failed_on_client(fx: Fx, mode: str, faulty_conn) -> None:
    """The insert finished on the server after the client had given up: the retry must not insert again.

    In the staging modes try 1 never reached its finalizing step: the retry does it.
    """
    t, run_id, reader = start_then_cut_connection(fx, mode, faulty_conn)
    op = operator(fx, t)
    wait_gone(fx.stack, qid(op, run_id, 1))
    assert outcome(fx.stack, qid(op, run_id, 1)) == "QueryFinish(0)"
    assert fingerprint(fx.stack, t.table) == t.before, "the rows wait in the staging table"
    result = retry_and_check(fx, t, run_id, "server succeeded, client failed", reader)
    assert result["attached_to"] == qid(op, run_id, 1)
    assert outcome(fx.stack, qid(op, run_id, 2)) is None, "try 2 must not insert"


@pytest.mark.parametrize("mode", MODES)
def test_retry_after_a_complete_load_changes_nothing(fx: Fx, mode: str) -> None:
    """Try 1 finished everything but Airflow never recorded it (worker lost after execute returned)."""
    t = make_target(fx, mode)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    reader = reader_for(fx, t).__enter__()
    first = operator(fx, t, settings={}).execute(fake_context("load", 1, run_id))
    assert fingerprint(fx.stack, t.table) == t.expected
    result = retry_and_check(fx, t, run_id, "complete load, success lost", reader, settings={})
    assert result["attached_to"] == first["query_id"] and result["partitions"] == []
    assert (result["written_rows"], result["duration_ms"]) == (first["written_rows"], first["duration_ms"])


# ---------------------------------------------------------------------- 5. crash while finishing


def _comment(fx: Fx, t: Target) -> str:
    rows = fx.stack.clickhouse_client().execute(
        "SELECT comment FROM system.tables WHERE database = 'default' AND name = %(n)s", {"n": t.table[8:]})
    return str(rows[0][0])


def _replay_try1_to_its_last_step(fx: Fx, mode: str, *, forgotten: bool) -> tuple[Target, S3ToClickHouseOperator, str]:
    """Try 1 replayed in plain SQL into a target commented 'posts by month': its insert into the staging table,
    the mark that says the insert finished, then half its last step (``append`` moves 2 of 6 partitions,
    ``replace_partitions`` replaces 2, ``overwrite`` swaps the tables and stops there). ``forgotten``: the
    insert runs under another query id, so the server has no ``query_log`` entry of try 1 (as after a
    restart)."""
    t = make_target(fx, mode)
    ch = fx.stack.clickhouse_client()
    ch.execute(f"ALTER TABLE {t.table} MODIFY COMMENT 'posts by month'")
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    op = operator(fx, t, settings={})
    stem = QueryId.parse(qid(op, run_id, 1)).stem
    staging = render_table(staging_table(TableRef.parse(t.table), stem))
    ch.execute(f"CREATE TABLE {staging} AS {t.table}")
    if mode == "overwrite":
        ch.execute(f"ALTER TABLE {staging} MODIFY COMMENT {quote_literal(staging_marker(stem))}")
    try1 = qid(op, run_id, 1)
    ch.execute(f"INSERT INTO {staging} SELECT * FROM default.clean", query_id=None if forgotten else try1)
    figures = {"query_id": try1, "written_rows": ROWS, "written_bytes": 0, "read_rows": ROWS, "read_bytes": 0,
               "duration_ms": 0, "memory_usage": 0}
    ch.execute(f"ALTER TABLE {staging} MODIFY COMMENT "
               f"{quote_literal(FilledMark(stem=stem, query_id=try1, figures=figures).comment())}")
    if mode == "overwrite":
        ch.execute(f"EXCHANGE TABLES {t.table} AND {staging}")
    else:
        for pid in ("200807", "200808"):
            ch.execute(
                f"ALTER TABLE {staging} MOVE PARTITION ID '{pid}' TO TABLE {t.table}" if mode == "append"
                else f"ALTER TABLE {t.table} REPLACE PARTITION ID '{pid}' FROM {staging}"
            )
    return t, op, run_id


@pytest.mark.parametrize("mode", MODES)
def test_worker_died_while_finishing_the_staging_step(fx: Fx, mode: str) -> None:
    """Try 1's insert finished, then the worker died half-way through its last step:
    ``append`` after moving 2 of 6 partitions, ``replace_partitions`` after replacing 2,
    ``overwrite`` after EXCHANGE TABLES but before restoring the comment and dropping the old table.

    Try 1 is replayed with plain SQL under its own query id, exactly as the operator runs it.
    """
    t, op, run_id = _replay_try1_to_its_last_step(fx, mode, forgotten=False)
    reader = reader_for(fx, t).__enter__()
    result = retry_and_check(fx, t, run_id, "died while finishing", reader, settings={})
    assert result["attached_to"] == qid(op, run_id, 1)
    assert outcome(fx.stack, qid(op, run_id, 2)) is None
    expected_parts = {"append": 4, "replace_partitions": 6, "overwrite": 6}[mode]
    assert len(result["partitions"]) == expected_parts, result["partitions"]
    assert _comment(fx, t) == "posts by month"


@pytest.mark.parametrize("mode", MODES)
def test_a_try_the_server_forgot_is_finished_from_its_mark(fx: Fx, mode: str) -> None:
    """Try 1 filled the staging table, marked it, and died half-way through its last step, and the server has
    no ``query_log`` entry of it (a restart empties the local node's log; another replica, the log's TTL):
    the retry reads the mark, brings the rest in without inserting again, and puts the comment back.
    ``test_server_restart`` does the same through a real restart."""
    t, op, run_id = _replay_try1_to_its_last_step(fx, mode, forgotten=True)
    reader = reader_for(fx, t).__enter__()
    result = retry_and_check(fx, t, run_id, "half finished, try forgotten", reader, settings={})
    assert result["attached_to"] == qid(op, run_id, 1)
    assert outcome(fx.stack, qid(op, run_id, 2)) is None
    assert _comment(fx, t) == "posts by month"

"""Attach-don't-repeat and on_kill for a distributed load (s3Cluster into a Distributed table),
on the real three-node local cluster.

A load into a Distributed table is staged on every shard: a retry never runs a second insert beside a running
or finished earlier try, and publishes the earlier try's rows on each shard; loads killed at any statement are
tested in test_cluster_staging.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from airflow_provider_s3ch.errors import ClickHouseUnavailableError, LoadError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import BlackholeProxy, outcome, wait_running
from tests.integration.support import SAMPLE_BUCKET, count, fake_context
from tests.integration.test_faults import run_in_thread

#: ~10 MB per node at 1.5 MB/s: a distributed load of several seconds.
SLOW = {"max_remote_read_network_bandwidth": 1_500_000}


@pytest.fixture(scope="module")
def dfiles(cluster_stack: LocalStack) -> SampleDataset:
    return write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=120_000, months=12, prefix="dfaults/")


@pytest.fixture
def dist(cluster_stack: LocalStack) -> str:
    table, _ = cluster_stack.create_distributed_table(
        f"dposts_{uuid.uuid4().hex[:6]}", POSTS_DDL.replace("{engine}", "MergeTree")
    )
    return table


def _secondary(stack: LocalStack, query_id: str) -> list[int]:
    """How many secondary queries of ``query_id`` run on each node."""
    return [
        int(stack.clickhouse_client(i).execute(
            "SELECT count() FROM system.processes WHERE initial_query_id = %(q)s AND query_id != %(q)s",
            {"q": query_id},
        )[0][0])
        for i in range(len(stack.nodes))
    ]


def _secondary_ends(stack: LocalStack, query_id: str, node: int) -> list[tuple[str, int]]:
    """How each secondary query of ``query_id`` ended on a node: (type, exception code) from its query_log."""
    client = stack.clickhouse_client(node)
    client.execute("SYSTEM FLUSH LOGS")
    return [(str(t), int(code)) for t, code in client.execute(
        "SELECT toString(type), exception_code FROM system.query_log WHERE initial_query_id = %(q)s "
        "AND query_id != %(q)s AND type != 'QueryStart'", {"q": query_id})]


def _wait_started_on_every_node(stack: LocalStack, query_id: str, timeout: float = 120) -> None:
    """Wait until every node has started its secondary query of ``query_id``: it runs now, or it has already
    ended (its query_log says so: s3Cluster hands the files out on demand, and a node left none is done at once)."""
    started: set[int] = set()
    deadline = time.monotonic() + timeout
    looked_at_logs = time.monotonic()
    while time.monotonic() < deadline:
        started |= {i for i, n in enumerate(_secondary(stack, query_id)) if n}
        if len(started) == len(stack.nodes):
            return
        if time.monotonic() - looked_at_logs > 1:  # now and then: the nodes whose secondary query has ended
            started |= {i for i in range(len(stack.nodes)) if i not in started and _secondary_ends(stack, query_id, i)}
            looked_at_logs = time.monotonic()
        time.sleep(0.05)
    raise AssertionError(f"secondary queries of {query_id} started on nodes {sorted(started)} only")


@pytest.fixture
def faulty_cluster_conn(cluster_stack: LocalStack, env_conn) -> Iterator[tuple[str, BlackholeProxy]]:
    proxy = BlackholeProxy(cluster_stack.nodes[0].tcp_port)
    conn = cluster_stack.clickhouse_connection(0, send_receive_timeout=2)
    conn["port"] = proxy.port
    env_conn("clickhouse_cluster_faulty", conn)
    yield "clickhouse_cluster_faulty", proxy
    proxy.close()


def test_distributed_retry_waits_for_the_running_load_on_every_node(
    cluster_stack: LocalStack, dfiles: SampleDataset, dist: str, faulty_cluster_conn
) -> None:
    conn_id, proxy = faulty_cluster_conn
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    kwargs = {"s3_uri": dfiles.s3_uri, "table": dist, "aws_conn_id": "aws_cluster", "settings": SLOW}
    op = S3ToClickHouseOperator(task_id="load", clickhouse_conn_id=conn_id, **kwargs)
    try1, try2 = (str(op.query_id(fake_context("load", n, run_id))) for n in (1, 2))
    thread, box = run_in_thread(op, fake_context("load", 1, run_id))
    wait_running(cluster_stack, try1, min_written=0)
    _wait_started_on_every_node(cluster_stack, try1)
    proxy.cut()
    thread.join(timeout=60)
    assert isinstance(box.get("error"), ClickHouseUnavailableError), box
    assert any(_secondary(cluster_stack, try1)), "the load should still run on the nodes"

    result = S3ToClickHouseOperator(task_id="load", clickhouse_conn_id="clickhouse_cluster", **kwargs).execute(
        fake_context("load", 2, run_id)
    )
    assert result["strategy"] == "distributed" and result["mode"] == "append"
    assert result["staging_table"].endswith("_all")  # staged on every shard: the retry published try 1's rows
    assert result["attached_to"] == try1
    assert outcome(cluster_stack, try2) is None, "try 2 must not insert"
    assert result["written_rows"] == dfiles.rows == count(cluster_stack, dist)
    assert len(result["nodes"]) == 3


def test_distributed_on_kill_kills_the_query_on_every_node(
    cluster_stack: LocalStack, dfiles: SampleDataset, dist: str
) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    op = S3ToClickHouseOperator(
        task_id="load", s3_uri=dfiles.s3_uri, table=dist, clickhouse_conn_id="clickhouse_cluster",
        aws_conn_id="aws_cluster", settings=SLOW,
    )
    try1 = str(op.query_id(fake_context("load", 1, run_id)))
    thread, box = run_in_thread(op, fake_context("load", 1, run_id))
    wait_running(cluster_stack, try1, min_written=0)
    _wait_started_on_every_node(cluster_stack, try1)
    # Every shard starts a secondary insert, but s3Cluster hands the files out on demand: a node that got none
    # (a busy machine) is done at once. The kill must end every secondary insert that still runs.
    running = [i for i, n in enumerate(_secondary(cluster_stack, try1)) if n]
    assert running, "the load should run on the nodes"
    op.on_kill()
    deadline = time.monotonic() + 120
    while any(_secondary(cluster_stack, try1)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_secondary(cluster_stack, try1)), "KILL QUERY must reach every node"
    thread.join(timeout=120)
    assert isinstance(box.get("error"), LoadError), box
    for i in running:  # each secondary insert the kill found running ended without finishing
        ends = _secondary_ends(cluster_stack, try1, i)
        assert ends and all(t != "QueryFinish" for t, _ in ends), (i, ends)
    partial = count(cluster_stack, dist)
    assert partial < dfiles.rows  # direct insert: what the killed try committed stays (documented)
    print(f"\ndistributed on_kill: killed on nodes {running}; {partial} of {dfiles.rows} rows committed before the "
          f"kill stay; secondary ends {[_secondary_ends(cluster_stack, try1, i) for i in running]}")

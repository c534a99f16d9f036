"""Many loads on one server: workload scheduling admits them by their memory caps (real local ClickHouse 26.9).

The stack's nodes have ``CREATE RESOURCE memory (MEMORY RESERVATION)``, ``CREATE WORKLOAD all
SETTINGS max_memory = '3Gi'`` and ``CREATE WORKLOAD loads IN all``; its connection names ``loads``.
A query waiting for admission is not in ``system.processes`` yet (seen on this engine); a finished one
stays listed there for a moment after its reservation is released, so how many loads the server has
admitted at once is read from its scheduler (``system.scheduler``: the memory limit's ``allocations``
and ``allocated``), and ``system.processes`` shows which loads run.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_s3ch.errors import PlanError, S3chTerminalError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, posts_ddl, write_posts
from airflow_provider_s3ch.local.stack import WORKLOAD
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import ReservationBlocker, count, fake_context, query_log

pytestmark = pytest.mark.integration

GiB = 1024**3
MAX_MEMORY = 3 * GiB
BUCKET = "s3ch-workload"
CONNS = {"clickhouse_conn_id": "clickhouse_wl", "aws_conn_id": "aws_wl"}
CLUSTER_CONNS = {"clickhouse_conn_id": "clickhouse_wl_cluster", "aws_conn_id": "aws_wl_cluster"}
#: Rows written once; the files are then copied under the same glob, so each insert takes ~1-2 s here.
UNIQUE_ROWS, MONTHS, COPIES = 30_000, 3, 12


@pytest.fixture(scope="module")
def wl_stack() -> Iterator[LocalStack]:
    """One node with workload scheduling for loads (max_memory 3 GiB); connections ``clickhouse_wl``, ``aws_wl``."""
    with LocalStack(nodes=1, workload_memory="3Gi") as s, s.environ(*CONNS.values()):
        s.create_bucket(BUCKET)
        yield s


@pytest.fixture(scope="module")
def big_posts(wl_stack: LocalStack) -> SampleDataset:
    """Posts large enough that one insert takes a second or two: written once, copied under the same glob."""
    data = write_posts(wl_stack.s3_client(), BUCKET, rows=UNIQUE_ROWS, months=MONTHS, prefix="big/")
    client = wl_stack.s3_client()
    keys = list(data.keys)
    for copy in range(1, COPIES):
        for key in data.keys:
            target = key.replace(".parquet", f"-copy{copy}.parquet")
            client.copy_object(Bucket=BUCKET, Key=target, CopySource={"Bucket": BUCKET, "Key": key})
            keys.append(target)
    return SampleDataset(bucket=BUCKET, prefix="big/", keys=keys, rows=UNIQUE_ROWS * COPIES, bytes=data.bytes * COPIES)


def new_table(stack: LocalStack) -> str:
    name = f"default.posts_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client().execute(posts_ddl(name))
    return name


class AdmissionSampler(threading.Thread):
    """Samples, while loads run, the reservations the server holds and the loads ``system.processes`` lists."""

    def __init__(self, stack: LocalStack) -> None:
        super().__init__(daemon=True)
        self.client = stack.clickhouse_client()
        self.stop = threading.Event()
        self.admitted: list[tuple[int, int]] = []  # (reservations held, bytes they hold) under max_memory
        self.running: list[list[tuple[str, str]]] = []  # (query id, reserve_memory) of the loads listed

    def run(self) -> None:
        while not self.stop.is_set():
            (held,) = self.client.execute(
                "SELECT allocations, allocated FROM system.scheduler "
                "WHERE resource = 'memory' AND type = 'allocation_limit'"
            )
            self.admitted.append((int(held[0]), int(held[1])))
            self.running.append(self.client.execute(
                "SELECT query_id, Settings['reserve_memory'] FROM system.processes "
                "WHERE Settings['workload'] = %(w)s AND is_initial_query AND query_kind = 'Insert'",
                {"w": WORKLOAD},
            ))
            time.sleep(0.01)


def test_concurrent_loads_are_admitted_by_their_caps_and_report_their_wait(
    wl_stack: LocalStack, big_posts: SampleDataset
) -> None:
    tables = [new_table(wl_stack) for _ in range(3)]
    results: dict[int, dict[str, Any]] = {}
    errors: dict[int, BaseException] = {}

    def load(i: int) -> None:
        op = S3ToClickHouseOperator(
            task_id=f"load_{i}", s3_uri=big_posts.s3_uri, table=tables[i], memory_cap="2GiB", **CONNS
        )
        try:
            results[i] = op.execute(fake_context(task_id=f"load_{i}"))
        except BaseException as exc:  # noqa: BLE001 - the assertion below names it
            errors[i] = exc

    sampler = AdmissionSampler(wl_stack)
    sampler.start()
    # A blocker holds 2 GiB of the 3 GiB until the three loads wait in the server's queue: each then waits for
    # certain (left to the threads, whether the loads overlapped at all was the machine's scheduling).
    with ReservationBlocker(wl_stack, reserve="2Gi") as blocker:
        releaser = threading.Thread(target=blocker.release_once_queued, kwargs={"waiting": 3, "hold": 0.5})
        releaser.start()
        threads = [threading.Thread(target=load, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        blocker.released.set()
        releaser.join()
    sampler.stop.set()
    sampler.join()

    # Three loads with caps of 2 GiB each (6 GiB in all, past max_memory): all finish, none with a memory error.
    assert not errors, errors
    for i, result in results.items():
        assert result["written_rows"] == big_posts.rows == count(wl_stack, tables[i])
        assert result["settings"]["workload"] == WORKLOAD and result["settings"]["reserve_memory"] == 2 * GiB
        assert result["workload"] == WORKLOAD
        (check,) = [c for c in result["checks"] if c["name"] == "workload"]
        assert check["status"] == "ok" and "1 such load at once" in check["message"]
        # The wait is the server's own figure, apart from the run: together the query's duration.
        assert result["admission_wait_ms"] >= 0 and result["run_ms"] > 0
        assert result["admission_wait_ms"] + result["run_ms"] == result["duration_ms"]
    # The server never admitted more than the workload allows: one 2 GiB load in 3 GiB at a time.
    assert max(n for n, _ in sampler.admitted) == 1, sorted(set(sampler.admitted))
    assert max(held for _, held in sampler.admitted) == 2 * GiB <= MAX_MEMORY
    # What the sampler saw run were these loads, with their reservation, never the three together. (Which of them
    # it caught between two samples is the machine's scheduling: a busy machine may miss a short one.)
    seen = {query_id for rows in sampler.running for query_id, _ in rows}
    assert seen and seen <= {r["query_id"] for r in results.values()}
    assert {reserve for rows in sampler.running for _, reserve in rows} == {str(2 * GiB)}
    assert max(len(rows) for rows in sampler.running) < 3
    # Each load waited in the queue, behind the blocker or another load: the server's own figure says so.
    waits = sorted(r["admission_wait_ms"] for r in results.values())
    assert waits[0] > 0, waits
    print(f"admission waits (ms): {waits}; runs (ms): {sorted(r['run_ms'] for r in results.values())}")


def test_a_cap_above_max_memory_fails_before_inserting(wl_stack: LocalStack, big_posts: SampleDataset) -> None:
    table = new_table(wl_stack)
    op = S3ToClickHouseOperator(task_id="too_big", s3_uri=big_posts.s3_uri, table=table, memory_cap="4GiB", **CONNS)
    context = fake_context(task_id="too_big")
    with pytest.raises(PlanError) as info:
        op.execute(context)
    assert isinstance(info.value, S3chTerminalError)
    message = str(info.value)
    assert "the load reserves 4 GiB per node, above the limit of workload 'loads', 3 GiB" in message
    assert "error 776" in message and "lower memory_cap to at most 3 GiB" in message
    assert count(wl_stack, table) == 0
    client = wl_stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    query_id = str(op.query_id(context))
    assert client.execute("SELECT count() FROM system.query_log WHERE query_id = %(q)s", {"q": query_id}) == [(0,)]


def test_the_server_refuses_such_a_reservation_with_776_which_is_terminal(
    wl_stack: LocalStack, big_posts: SampleDataset
) -> None:
    """The server's own answer to a reservation above max_memory, through the hook: error 776, terminal."""
    from airflow_provider_s3ch.errors import ClickHouseQueryError
    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

    hook = ClickHouseHook(CONNS["clickhouse_conn_id"])
    try:
        with pytest.raises(ClickHouseQueryError) as info:
            hook.execute("SELECT 1", settings={"workload": WORKLOAD, "reserve_memory": 4 * GiB})
    finally:
        hook.close()
    message = str(info.value)
    assert "ClickHouse error 776" in message and "RESOURCE_LIMIT_EXCEEDED" in message
    assert "exceeds the limit of 3.00 GiB" in message


def test_a_missing_workload_fails_with_the_ddl(wl_stack: LocalStack, big_posts: SampleDataset) -> None:
    table = new_table(wl_stack)
    op = S3ToClickHouseOperator(
        task_id="nightly", s3_uri=big_posts.s3_uri, table=table, memory_cap="1GiB", workload="nightly", **CONNS
    )
    with pytest.raises(PlanError) as info:
        op.execute(fake_context(task_id="nightly"))
    message = str(info.value)
    assert "workload 'nightly' is not set up" in message and "system.workloads lists: all, loads" in message
    assert "CREATE WORKLOAD nightly IN all;" in message
    assert count(wl_stack, table) == 0


def test_without_a_workload_the_plan_says_none_is_configured(
    wl_stack: LocalStack, big_posts: SampleDataset, env_conn
) -> None:
    conn = wl_stack.clickhouse_connection(0)
    conn["extra"].pop("workload")
    plain = env_conn("clickhouse_wl_plain", conn)
    table = new_table(wl_stack)
    result = S3ToClickHouseOperator(
        task_id="plain", s3_uri=big_posts.s3_uri, table=table, memory_cap="4GiB", clickhouse_conn_id=plain,
        aws_conn_id=CONNS["aws_conn_id"],
    ).execute(fake_context(task_id="plain"))
    (check,) = [c for c in result["checks"] if c["name"] == "workload"]
    assert check["status"] == "skipped" and "no workload is configured" in check["message"]
    assert result["workload"] is None and result["admission_wait_ms"] == 0
    assert "workload" not in result["settings"] and "reserve_memory" not in result["settings"]
    assert "workload" not in query_log(wl_stack, result["query_id"])["Settings"]
    assert result["written_rows"] == big_posts.rows

    # workload='' turns the connection's workload off for one task.
    off = S3ToClickHouseOperator(
        task_id="off", s3_uri=big_posts.s3_uri, table=table, memory_cap="4GiB", workload="", dry_run=True, **CONNS
    ).execute(fake_context(task_id="off"))
    (check,) = [c for c in off["plan"]["checks"] if c["name"] == "workload"]
    assert check["status"] == "skipped" and "the connection's workload 'loads' is not used" in check["message"]


# --- a distributed load on three nodes, each with its own workload ----------------------------------


@pytest.fixture(scope="module")
def wl_cluster() -> Iterator[LocalStack]:
    """Three nodes, each with workload scheduling for loads (max_memory 3 GiB): no Keeper, so each its own DDL."""
    with LocalStack(nodes=3, workload_memory="3Gi") as s, s.environ(*CLUSTER_CONNS.values()):
        s.create_bucket(BUCKET)
        yield s


def test_a_distributed_load_reserves_on_every_node(wl_cluster: LocalStack) -> None:
    data = write_posts(wl_cluster.s3_client(), BUCKET, rows=6_000, months=12, prefix="twelve/")
    dist, local = wl_cluster.create_distributed_table(
        f"posts_{uuid.uuid4().hex[:6]}", POSTS_DDL.replace("{engine}", "MergeTree")
    )
    result = S3ToClickHouseOperator(
        task_id="dist", s3_uri=data.s3_uri, table=dist, memory_cap="3GiB", **CLUSTER_CONNS
    ).execute(fake_context(task_id="dist"))
    assert result["strategy"] == "distributed" and result["written_rows"] == data.rows
    assert result["settings"]["reserve_memory"] == GiB  # the cap's per-node share
    (check,) = [c for c in result["checks"] if c["name"] == "workload"]
    assert check["status"] == "ok" and "on 3 nodes" in check["message"] and "2 x 1 GiB" in check["message"]
    assert len(result["nodes"]) == 3 and all("admission_wait_ms" in n for n in result["nodes"])
    # Every node's share ran in its own node's workload with the load's reservation.
    for i in range(3):
        client = wl_cluster.clickhouse_client(i)
        client.execute("SYSTEM FLUSH LOGS")
        rows = client.execute(
            "SELECT Settings['workload'], Settings['reserve_memory'], ProfileEvents['MemoryReservationIncreases'] "
            "FROM system.query_log WHERE initial_query_id = %(q)s AND NOT is_initial_query AND type = 'QueryFinish'",
            {"q": result["query_id"]},
        )
        assert rows and all(r == (WORKLOAD, str(GiB), 1) for r in rows), (i, rows)

    # 2 GiB per node: the initiator would hold 4 GiB (its own query and its share) in 3 GiB.
    with pytest.raises(PlanError, match="two reservations on its initiator"):
        S3ToClickHouseOperator(
            task_id="dist_big", s3_uri=data.s3_uri, table=dist, memory_cap="6GiB", **CLUSTER_CONNS
        ).execute(fake_context(task_id="dist_big"))
    assert (
        count(wl_cluster, local, node=0) + count(wl_cluster, local, node=1) + count(wl_cluster, local, node=2)
        == data.rows
    )

"""Staged loads into a Distributed table on the three-node local cluster, killed at a random statement.

A load into a Distributed table over MergeTree tables writes into a staging table on every shard and publishes
shard by shard (docs/distributed.md). Here a load (``append``, ``replace_partitions``, ``overwrite``, or ``append``
or ``replace_partitions`` with the ledger, ``skip_loaded=True``, after the older files were loaded so that the
months they share are rebuilt from both; ``s3Cluster`` or through the Distributed table) is cut short just before its
n-th statement to ClickHouse by a SIGKILL of:

- the worker (the load runs in a process of its own, which is killed);
- the initiator, the node the connection talks to (node 0), restarted before the retry: its
  ``system.query_log`` starts empty, so what the retry knows of the first try is what the shards keep;
- another node (node 1 or 2), restarted before the retry.

A load that ended well despite the kill (the killed node had nothing left to do) is not tried again: Airflow
retries only a task that failed.

The retry (try 2, and try 3 where try 2 itself meets a node still starting) must end with every partition of the
Distributed table equal to ClickHouse's own read of the files (count and ``sum(cityHash64(*))`` over all shards:
nothing doubled, nothing lost; ``replace_partitions``: the partitions the files do not hold keep their old rows)
and no staging table on any node; a ledger load also with every file ``loaded`` in the ledger (on node 0, the first
shard's), no claim left, and a later run that loads nothing. ``S3CH_CLUSTER_KILLS`` sets how many loads (8 by
default; ``make cluster-kills`` runs 150) and ``S3CH_CLUSTER_KILLS_REPORT`` a file the run's counts go to.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, counting, fake_context, kill_node, report_counts

pytestmark = pytest.mark.integration

KILLS = int(os.environ.get("S3CH_CLUSTER_KILLS", "8"))
CONNS = {"clickhouse_conn_id": "clickhouse_cluster", "aws_conn_id": "aws_cluster"}
#: The most statements a load here sends (a kill beyond them lets the load finish: that must hold too).
MOST_STATEMENTS = 45
#: What the loads met: kills by victim, mode and strategy; how many failed and were retried; the retries' outcomes.
STATS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def stats() -> Iterator[Counter[str]]:
    """The loads' counts, printed (and written to ``S3CH_CLUSTER_KILLS_REPORT``) after the module."""
    STATS.clear()
    yield STATS
    report_counts("cluster kills", STATS, "S3CH_CLUSTER_KILLS_REPORT")


@pytest.fixture(scope="module")
def new_files(cluster_stack: LocalStack) -> SampleDataset:
    """Six monthly files, 2008-07 to 2008-12: more files than nodes, so ``auto`` goes distributed."""
    return write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=3_000, months=6, prefix="cluster-kills/new/")


@pytest.fixture(scope="module")
def old_files(cluster_stack: LocalStack) -> SampleDataset:
    """Seven months of other rows, 2008-06 to 2008-12: what the table holds before a ``replace_partitions``."""
    return write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=2_100, months=7, prefix="cluster-kills/old/",
                       start=(2008, 6), seed=1)


def _read(stack: LocalStack, data: SampleDataset) -> dict[str, tuple[int, int]]:
    """ClickHouse's own read of the files: (count, sum(cityHash64(*))) per month."""
    url = f"{stack.s3_endpoint}/{SAMPLE_BUCKET}/{data.s3_uri.split('/', 3)[3]}"
    rows = stack.clickhouse_client(0).execute(
        f"SELECT toString(toYYYYMM(CreationDate)) AS p, count(), sum(cityHash64(*)) FROM s3('{url}', "
        f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet') GROUP BY p")
    return {str(p): (int(c), int(h)) for p, c, h in rows}


def _table(stack: LocalStack, dist: str) -> dict[str, tuple[int, int]]:
    rows = stack.clickhouse_client(0).execute(
        f"SELECT toString(toYYYYMM(CreationDate)) AS p, count(), sum(cityHash64(*)) FROM {dist} GROUP BY p")
    return {str(p): (int(c), int(h)) for p, c, h in rows}


def _staging_left(stack: LocalStack) -> list[str]:
    return [f"node {node.index}: {name}" for node in stack.nodes for (name,) in stack.clickhouse_client(
        node.index).execute(f"SELECT name FROM system.tables WHERE startsWith(name, '{STAGING_PREFIX}')")]


def _killed_worker(env: dict[str, str], kwargs: dict[str, Any], run_id: str, die_at: int, in_flight_ms: int
                   ) -> None:
    """In a process of its own: the load, SIGKILLed just before its ``die_at``-th statement (``in_flight_ms``
    after it was sent)."""
    os.environ.update(env)
    try:
        with counting(die_at, in_flight_ms):
            S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 1, run_id))
    except BaseException:  # noqa: BLE001 - the retry says what the run must do
        os._exit(1)


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["airflow_provider_s3ch.operators.s3_to_clickhouse", __name__])


def _try(kwargs: dict[str, Any], run_id: str, try_number: int) -> dict[str, Any] | Exception:
    try:
        return S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", try_number, run_id))
    except Exception as exc:  # noqa: BLE001 - the caller decides
        return exc


@settings(max_examples=KILLS, deadline=None, derandomize=False, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mode=st.sampled_from(["append", "replace_partitions", "overwrite", "skip_loaded", "skip_loaded_replace"]),
       victim=st.sampled_from(["worker", "initiator", "node"]), strategy=st.sampled_from(["distributed", "single"]),
       die_at=st.integers(1, MOST_STATEMENTS), in_flight_ms=st.sampled_from([0, 0, 5, 30, 150]),
       other=st.sampled_from([1, 2]))
def test_a_load_killed_at_any_statement_is_finished_by_its_retry_exactly_once(
    cluster_stack: LocalStack, stats: Counter[str], new_files: SampleDataset, old_files: SampleDataset, mode: str,
    victim: str,
    strategy: str, die_at: int, in_flight_ms: int, other: int,
) -> None:
    stack = cluster_stack
    dist, _ = stack.create_distributed_table(f"kills_{uuid.uuid4().hex[:8]}", POSTS_DDL.replace("{engine}",
                                                                                                 "MergeTree"))
    old = _read(stack, old_files)
    if mode in ("replace_partitions", "overwrite"):  # the table holds other rows of the same months
        url = f"{stack.s3_endpoint}/{SAMPLE_BUCKET}/{old_files.s3_uri.split('/', 3)[3]}"
        stack.clickhouse_client(0).execute(
            f"INSERT INTO {dist} SELECT * FROM s3('{url}', '{stack.s3_access_key}', '{stack.s3_secret_key}', "
            "'Parquet') SETTINGS distributed_foreground_insert = 1")
        assert _table(stack, dist) == old
    kwargs = {"s3_uri": new_files.s3_uri, "table": dist, "mode": mode, "strategy": strategy, **CONNS}
    if mode.startswith("skip_loaded"):  # the ledger on the first shard's node: claims, pending, loaded
        kwargs.update(mode="append", skip_loaded=True, claim_heartbeat=0.5)
    if mode == "skip_loaded_replace":  # the old files loaded first: the new ones' months are rebuilt from both
        kwargs.update(mode="replace_partitions")
        first = _try({**kwargs, "s3_uri": old_files.s3_uri}, f"old-{uuid.uuid4().hex[:8]}", 1)
        assert not isinstance(first, Exception), first
        assert _table(stack, dist) == old
    run_id = f"kill-{uuid.uuid4().hex[:8]}"
    if mode == "skip_loaded_replace":  # twice the statements: the earlier files' rebuild on every shard
        die_at *= 2
    what = f"{mode}, {strategy}, {victim} killed " + (
        f"{in_flight_ms} ms after statement {die_at} was sent" if in_flight_ms else f"before statement {die_at}")

    if victim == "worker":
        worker = _FORKS.Process(target=_killed_worker, args=(dict(os.environ), kwargs, run_id, die_at,
                                                                    in_flight_ms))
        worker.start()
        worker.join(timeout=300)
        assert worker.exitcode is not None, f"{what}: the worker did not end"
        failed = worker.exitcode != 0
    else:
        index = 0 if victim == "initiator" else other
        with counting(die_at, in_flight_ms, act=lambda: kill_node(stack, index)):
            failed = isinstance(_try(kwargs, run_id, 1), Exception)
        stack.restart_node(index)

    stats["loads"] += 1
    stats[f"loads: {mode}, {strategy}, {victim} killed"] += 1
    stats["first try failed (retried)" if failed else "first try succeeded (killed after its last statement)"] += 1
    if failed:  # Airflow retries a task that failed (a task that succeeded is not run again)
        result = _try(kwargs, run_id, 2)
        if isinstance(result, Exception):  # a node that was still starting; the next try finds it up
            stats["retries that needed a third try"] += 1
            result = _try(kwargs, run_id, 3)
        assert not isinstance(result, Exception), f"{what}: the retry failed: {result}"
        stats[f"retries that attached to the first try's insert ({victim})" if result.get("attached_to")
              else f"retries that loaded afresh ({victim})"] += 1

    want = _read(stack, new_files)
    if mode == "replace_partitions":
        want = {**old, **want}
    if mode == "skip_loaded_replace":  # a month holds the rows of every file loaded into it
        want = {p: tuple(map(sum, zip(old.get(p, (0, 0)), want.get(p, (0, 0)), strict=True))) for p in {*old, *want}}
        want = {p: (c, h % 2**64) for p, (c, h) in want.items()}
    assert _table(stack, dist) == want, f"{what}: the table is not the files' rows once"
    assert _staging_left(stack) == [], f"{what}: staging tables left"
    if mode.startswith("skip_loaded"):
        rows = stack.clickhouse_client(0).execute(
            f"SELECT key, toString(state) FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s", {"t": dist})
        keys = new_files.keys + (old_files.keys if mode == "skip_loaded_replace" else [])
        assert sorted(k for k, state in rows if state == "loaded") == sorted(keys), f"{what}: {rows}"
        assert all(state in ("loaded", "released") for _, state in rows), f"{what}: claims left: {rows}"
        again = _try(kwargs, f"again-{run_id}", 1)  # a later run finds every file loaded
        assert not isinstance(again, Exception) and again["written_rows"] == 0, f"{what}: {again}"
        assert _table(stack, dist) == want, f"{what}: a later run loaded again"
    stats["loads that ended exactly once, no staging table left"] += 1

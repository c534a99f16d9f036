"""Distributed loads on a real three-node local cluster: s3Cluster + parallel_distributed_insert_select = 2."""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_s3ch.errors import PlanError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, count, fake_context, query_log, secondary_inserts

CONNS = {"clickhouse_conn_id": "clickhouse_cluster", "aws_conn_id": "aws_cluster"}


@pytest.fixture(scope="module")
def twelve_months(cluster_stack: LocalStack) -> SampleDataset:
    return write_posts(cluster_stack.s3_client(), SAMPLE_BUCKET, rows=36_000, months=12, prefix="twelve/")


@pytest.fixture
def dist_table(cluster_stack: LocalStack) -> tuple[str, str]:
    """A fresh Distributed posts table over a MergeTree table on each node."""
    return cluster_stack.create_distributed_table(
        f"posts_{uuid.uuid4().hex[:6]}", POSTS_DDL.replace("{engine}", "MergeTree")
    )


def _node_index(stack: LocalStack, address: str) -> int:
    return next(n.index for n in stack.nodes if n.address == address)


def test_auto_goes_distributed_for_12_files_and_every_node_runs_its_insert(
    cluster_stack: LocalStack, twelve_months: SampleDataset, dist_table: tuple[str, str]
) -> None:
    dist, local = dist_table
    op = S3ToClickHouseOperator(task_id="load", s3_uri=twelve_months.s3_uri, table=dist, memory_cap="3GiB", **CONNS)
    result = op.execute(fake_context())

    assert result["strategy"] == "distributed"
    assert "12 files" in result["strategy_reason"] and "3 nodes" in result["strategy_reason"]
    assert result["settings"]["parallel_distributed_insert_select"] == 2
    assert result["settings"]["max_memory_usage"] == 1024**3  # the cap's per-node share
    assert query_log(cluster_stack, result["query_id"])["Settings"]["parallel_distributed_insert_select"] == "2"
    # Every shard runs a secondary insert; s3Cluster hands the files to whichever node asks first, so a node's
    # share may be none of the twelve (a busy machine): the shares add up, each in its own node's table.
    assert len(result["nodes"]) == 3
    per_node = {_node_index(cluster_stack, n["node"]): n["written_rows"] for n in result["nodes"]}
    assert sorted(per_node) == [0, 1, 2]
    for index, written in per_node.items():
        inserts, rows = secondary_inserts(cluster_stack, result["query_id"], index)
        assert inserts >= 1, f"no secondary insert on node {index}"
        assert count(cluster_stack, local, node=index) == rows == written, (index, rows, written)
    assert sum(per_node.values()) == result["written_rows"] == twelve_months.rows
    assert count(cluster_stack, dist) == twelve_months.rows


def test_each_node_ran_its_share_with_the_planned_settings(
    cluster_stack: LocalStack, twelve_months: SampleDataset, dist_table: tuple[str, str]
) -> None:
    dist, _ = dist_table
    result = S3ToClickHouseOperator(
        task_id="load", s3_uri=twelve_months.s3_uri, table=dist, memory_cap="1500MiB", **CONNS
    ).execute(fake_context())
    for node in result["nodes"]:
        client = cluster_stack.clickhouse_client(_node_index(cluster_stack, node["node"]))
        client.execute("SYSTEM FLUSH LOGS")
        rows = client.execute(
            "SELECT written_rows, Settings['max_memory_usage'], Settings['insert_deduplicate'] FROM system.query_log "
            "WHERE initial_query_id = %(q)s AND is_initial_query = 0 "
            "AND type = 'QueryFinish' AND query_kind = 'Insert'",
            {"q": result["query_id"]},
        )
        assert rows, f"no secondary insert on {node['node']}"
        assert sum(r[0] for r in rows) == node["written_rows"]
        assert all(r[1] == str(500 * 1024**2) and r[2] == "0" for r in rows)


def test_auto_stays_single_for_2_files(cluster_stack: LocalStack, twelve_months: SampleDataset, dist_table) -> None:
    dist, _ = dist_table
    two = f"s3://{SAMPLE_BUCKET}/twelve/2008-0{{7,8}}.parquet"
    result = S3ToClickHouseOperator(task_id="load", s3_uri=two, table=dist, **CONNS).execute(fake_context())
    assert result["strategy"] == "single"
    assert "2 files" in result["strategy_reason"] and "3 nodes" in result["strategy_reason"]
    assert "parallel_distributed_insert_select" not in result["settings"]
    assert result["written_rows"] == count(cluster_stack, dist) == 6_000
    # Rows went through the Distributed table, in the foreground: each shard's share is in the figures.
    assert result["settings"]["distributed_foreground_insert"] == 1
    _, local = dist_table
    for node in result["nodes"]:
        assert count(cluster_stack, local, node=_node_index(cluster_stack, node["node"])) == node["written_rows"]


def test_plain_mergetree_target_stays_single_and_forcing_distributed_fails(
    cluster_stack: LocalStack, twelve_months: SampleDataset
) -> None:
    table = f"default.plain_{uuid.uuid4().hex[:6]}"
    cluster_stack.clickhouse_client(0).execute(POSTS_DDL.format(table=table, engine="MergeTree"))
    with pytest.raises(PlanError, match="Distributed"):
        S3ToClickHouseOperator(
            task_id="load", s3_uri=twelve_months.s3_uri, table=table, strategy="distributed", **CONNS
        ).execute(fake_context())
    assert count(cluster_stack, table) == 0
    result = S3ToClickHouseOperator(task_id="load", s3_uri=twelve_months.s3_uri, table=table, **CONNS).execute(
        fake_context()
    )
    assert result["strategy"] == "single" and "MergeTree" in result["strategy_reason"]
    assert result["written_rows"] == count(cluster_stack, table) == twelve_months.rows


def test_forced_single_on_a_cluster(cluster_stack: LocalStack, twelve_months: SampleDataset, dist_table) -> None:
    dist, _ = dist_table
    result = S3ToClickHouseOperator(
        task_id="load", s3_uri=twelve_months.s3_uri, table=dist, strategy="single", **CONNS
    ).execute(fake_context())
    assert result["strategy"] == "single"
    assert result["written_rows"] == count(cluster_stack, dist) == twelve_months.rows

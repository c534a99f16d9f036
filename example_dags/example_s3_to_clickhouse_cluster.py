"""Posts by month into a cluster: a Distributed table over a MergeTree table on every node.

The load is distributed:
``INSERT INTO posts SELECT * FROM s3Cluster(cluster, …) SETTINGS parallel_distributed_insert_select = 2``,
so every node reads its share of the files and writes into its own local table.
The cluster comes from the ``clickhouse_native_default`` connection's extra ``cluster``
(``s3ch-local up --nodes 3`` prints such a connection).

Run it with ``airflow dags test s3_to_clickhouse_posts_cluster -c '{"s3_uri": "s3://bucket/prefix/*.parquet"}'``.
"""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3_to_clickhouse_posts_cluster",
    schedule=None,
    start_date=datetime.datetime(2024, 1, 1),
    catchup=False,
    params={
        "s3_uri": Param("s3://s3ch-sample/stackoverflow/parquet/posts/by_month/*.parquet", type="string"),
        "memory_cap": Param("6GiB", type="string", description="for the whole load: each node gets its share"),
    },
    tags=["s3ch", "example", "cluster"],
) as dag:

    load_posts = S3ToClickHouseOperator(
        task_id="load_posts",
        s3_uri="{{ params.s3_uri }}",
        table="default.posts",
        memory_cap="{{ params.memory_cap }}",
        strategy="distributed",
        # The first run creates ``posts_local`` on every node (ON CLUSTER where the cluster has Keeper,
        # node by node where it has none) and ``posts`` (Distributed) over them, from the files' columns.
        create_table="if_missing",
        order_by="(PostTypeId, toDate(CreationDate), CreationDate)",
        partition_by="toYYYYMM(CreationDate)",
    )

    @task
    def report(figures: dict) -> None:
        """Log the per-node figures from each node's system.query_log."""
        print(f"strategy {figures['strategy']}: {figures['strategy_reason']}")
        for node in figures["nodes"]:
            print(f"  {node['node']}: {node['written_rows']} rows in {node['duration_ms']} ms")

    report(load_posts.output)

"""Posts by month into a cluster: a Distributed table over a MergeTree table on every node.

With more files than nodes, the operator goes distributed by itself:
``INSERT INTO posts SELECT * FROM s3Cluster(cluster, …) SETTINGS parallel_distributed_insert_select = 2``,
so every node reads its share of the files and writes into its own local table.
The cluster comes from the ``clickhouse`` connection's extra ``cluster``
(``s3ch-local up --nodes 3`` prints such a connection).

Run it with ``airflow dags test s3_to_clickhouse_posts_cluster -c '{"s3_uri": "s3://bucket/prefix/*.parquet"}'``.
"""

from __future__ import annotations

import datetime

from airflow.sdk import DAG, Param, task

from airflow_provider_s3ch.core.sql import quote_identifier, quote_literal
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local.sample import posts_ddl
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

    @task
    def create_tables() -> dict:
        """``posts_local`` (MergeTree) on every node and ``posts`` (Distributed) over them.

        Uses ``ON CLUSTER`` where the cluster has Keeper; otherwise creates them node by node.
        """
        hook = ClickHouseHook()
        cluster = hook.cluster
        if not cluster:
            raise ValueError("set the clickhouse connection's extra 'cluster' to run this DAG")
        local = f"`default`.{quote_identifier('posts_local')}"
        dist = f"""CREATE TABLE IF NOT EXISTS `default`.`posts` AS {local}
            ENGINE = Distributed({quote_literal(cluster)}, 'default', 'posts_local', rand())"""
        try:
            on_cluster = f" ON CLUSTER {quote_identifier(cluster)}"
            hook.execute(posts_ddl(local + on_cluster))
            hook.execute(dist.replace(" AS ", on_cluster + " AS ", 1))
        except Exception:  # noqa: BLE001 - no Keeper: create the tables on each node
            nodes = hook.cluster_nodes(cluster)
            for _, client in hook.node_clients(nodes):
                hook.execute(posts_ddl(local), client=client)
                hook.execute(dist, client=client)
        return {"cluster": cluster}

    load_posts = S3ToClickHouseOperator(
        task_id="load_posts",
        s3_uri="{{ params.s3_uri }}",
        table="default.posts",
        memory_cap="{{ params.memory_cap }}",
        strategy="auto",
    )

    @task
    def report(figures: dict) -> None:
        """Log the per-node figures from each node's system.query_log."""
        print(f"strategy {figures['strategy']}: {figures['strategy_reason']}")
        for node in figures["nodes"]:
            print(f"  {node['node']}: {node['written_rows']} rows in {node['duration_ms']} ms")

    create_tables() >> load_posts
    report(load_posts.output)

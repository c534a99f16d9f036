"""OpenLineage facets and asset events of real loads on the local stack (the openlineage provider installed)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from airflow.providers.common.compat.sdk import Asset

try:  # the accessors a task's context holds as outlet_events
    from airflow.sdk.execution_time.context import OutletEventAccessors  # noqa: TID251 - Airflow 3's
except ImportError:  # Airflow 2
    from airflow.utils.context import OutletEventAccessors  # type: ignore[no-redef]
from openlineage.client.serde import Serde

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, count, fake_context, query_log


def _columns(stack: LocalStack, table: str) -> list[tuple[str, str]]:
    database, name = table.split(".")
    rows = stack.clickhouse_client().execute(
        "SELECT name, type FROM system.columns WHERE database = %(d)s AND table = %(t)s ORDER BY position",
        {"d": database, "t": name},
    )
    return [(str(n), str(t)) for n, t in rows]


def _serialized(lineage) -> str:
    return json.dumps(
        [json.loads(Serde.to_json(x)) for x in (*lineage.inputs, *lineage.outputs)]
        + [json.loads(Serde.to_json(f)) for f in (*lineage.run_facets.values(), *lineage.job_facets.values())]
    )


def test_a_load_names_its_files_and_its_table_with_the_columns_and_the_rows(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    asset = Asset(f"clickhouse://127.0.0.1:{stack.nodes[0].tcp_port}/{posts_table.replace('.', '/')}")
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, outlets=[asset])
    context = {**fake_context(), "outlet_events": OutletEventAccessors()}
    result = op.execute(context)
    lineage = op.get_openlineage_facets_on_complete(None)

    s3 = stack.s3_client()
    sizes = {key: s3.head_object(Bucket=posts.bucket, Key=key)["ContentLength"] for key in posts.keys}
    assert [(d.namespace, d.name) for d in lineage.inputs] == [(f"s3://{posts.bucket}", key) for key in posts.keys]
    for dataset in lineage.inputs:
        stats = dataset.inputFacets["inputStatistics"]
        assert (stats.fileCount, stats.size) == (1, sizes[dataset.name])

    (output,) = lineage.outputs
    assert output.namespace == f"clickhouse://127.0.0.1:{stack.nodes[0].tcp_port}"
    assert output.name == posts_table
    assert [(f.name, f.type) for f in output.facets["schema"].fields] == _columns(stack, posts_table)
    assert len(output.facets["schema"].fields) >= 3
    stats = output.outputFacets["outputStatistics"]
    assert stats.rowCount == count(stack, posts_table) == posts.rows
    assert stats.size == query_log(stack, result["query_id"])["written_bytes"]
    assert lineage.run_facets["externalQuery"].externalQueryId == result["query_id"]
    assert lineage.job_facets["sql"].query.startswith("INSERT INTO `default`.")
    assert stack.s3_secret_key not in _serialized(lineage)

    # The asset event's extra: the load's figures, for the outlet in its normalized form.
    extra = context["outlet_events"][asset].extra
    assert extra["rows"] == posts.rows == count(stack, posts_table)
    assert extra["query_id"] == result["query_id"] and extra["table"] == posts_table
    assert extra["files"] == len(posts.keys) and extra["source_bytes"] == posts.bytes
    assert stack.s3_secret_key not in json.dumps(extra)


def test_a_dry_run_has_no_lineage_and_no_asset_event(stack: LocalStack, posts: SampleDataset, posts_table: str) -> None:
    asset = Asset(f"clickhouse://127.0.0.1/{posts_table.replace('.', '/')}")
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, dry_run=True, outlets=[asset])
    context = {**fake_context(), "outlet_events": OutletEventAccessors()}
    assert op.execute(context)["dry_run"] is True
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.inputs == [] and lineage.outputs == []
    assert op.outlets == []  # what the task runner emits events for
    assert len(context["outlet_events"]) == 0
    assert count(stack, posts_table) == 0


def test_a_created_table_and_an_overwrite_say_so(stack: LocalStack) -> None:
    prefix, name = f"lineage-{uuid.uuid4().hex[:8]}", f"created_{uuid.uuid4().hex[:8]}"
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]}), buf)
    stack.s3_client().put_object(Bucket=SAMPLE_BUCKET, Key=f"{prefix}/a.parquet", Body=buf.getvalue().to_pybytes())
    args = {"s3_uri": f"s3://{SAMPLE_BUCKET}/{prefix}/*.parquet", "table": f"default.{name}"}

    created = S3ToClickHouseOperator(task_id="load", create_table="if_missing", order_by="id", **args)
    created.execute(fake_context())
    lineage = created.get_openlineage_facets_on_complete(None)
    (output,) = lineage.outputs
    assert output.facets["lifecycleStateChange"].lifecycleStateChange.value == "CREATE"
    assert [(f.name, f.type) for f in output.facets["schema"].fields] == _columns(stack, f"default.{name}")
    assert [f.name for f in output.facets["schema"].fields] == ["id", "name"]
    assert lineage.inputs[0].inputFacets["inputStatistics"].rowCount == 3  # one input: the rows read

    replaced = S3ToClickHouseOperator(task_id="load", mode="overwrite", **args)
    replaced.execute(fake_context())
    (output,) = replaced.get_openlineage_facets_on_complete(None).outputs
    assert output.facets["lifecycleStateChange"].lifecycleStateChange.value == "OVERWRITE"
    assert output.outputFacets["outputStatistics"].rowCount == count(stack, f"default.{name}") == 3

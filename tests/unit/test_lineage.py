"""Lineage decisions (core.lineage) and the OpenLineage facets built from them."""

from __future__ import annotations

import json

from openlineage.client.serde import Serde

from airflow_provider_s3ch.core.lineage import LoadFacts, input_groups, outlet_extra
from airflow_provider_s3ch.core.models import S3Object
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.lineage import operator_lineage


def _objects(keys: list[str], size: int = 10) -> list[S3Object]:
    return [S3Object(key=k, size=size) for k in keys]


def test_up_to_the_limit_each_file_is_a_dataset() -> None:
    inputs = input_groups("b", _objects([f"posts/{i:03}.parquet" for i in range(5)]), limit=5)
    assert inputs.namespace == "s3://b" and inputs.granularity == "file"
    assert [g.name for g in inputs.groups] == [f"posts/{i:03}.parquet" for i in range(5)]
    assert all((g.files, g.bytes) == (1, 10) for g in inputs.groups)


def test_beyond_the_limit_files_are_grouped_by_directory() -> None:
    keys = [f"events/day={d}/part-{p}.parquet" for d in (1, 2, 3) for p in range(4)] + ["root.parquet"]
    inputs = input_groups("b", _objects(keys), limit=5)
    assert inputs.granularity == "directory"
    assert {g.name: (g.files, g.bytes) for g in inputs.groups} == {
        "events/day=1": (4, 40),
        "events/day=2": (4, 40),
        "events/day=3": (4, 40),
        "/": (1, 10),
    }


def test_beyond_the_limit_of_directories_one_dataset_for_their_common_directory() -> None:
    keys = [f"events/2024/day={d}/part.parquet" for d in range(7)]
    inputs = input_groups("b", _objects(keys, size=3), limit=5)
    assert inputs.granularity == "prefix"
    assert [(g.name, g.files, g.bytes) for g in inputs.groups] == [("events/2024", 7, 21)]
    spread = input_groups("b", _objects([f"d{i}/f" for i in range(7)]), limit=5)
    assert [g.name for g in spread.groups] == ["/"]


def _facts(**update: object) -> LoadFacts:
    facts = LoadFacts(
        bucket="s3ch-sample",
        objects=_objects(["posts/2008-07.parquet", "posts/2008-08.parquet"], size=1000),
        host="CH.internal",
        port=9000,
        database="analytics",
        table="posts",
        columns=[Column(name="id", type="UInt64"), Column(name="title", type="String", default_kind="DEFAULT")],
        query_id="s3ch-abc-try1",
        written_rows=42,
        written_bytes=4200,
        read_rows=42,
        read_bytes=2000,
        mode="append",
        partitions=["200807"],
        sql="INSERT INTO `analytics`.`posts` SELECT * FROM s3('…', 'AKIA…', '[redacted]')",
    )
    return facts.model_copy(update=update)


def test_the_facets_name_the_files_and_the_table_with_its_schema_and_figures() -> None:
    lineage = operator_lineage(_facts())
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("s3://s3ch-sample", "posts/2008-07.parquet"),
        ("s3://s3ch-sample", "posts/2008-08.parquet"),
    ]
    assert lineage.inputs[0].inputFacets["inputStatistics"].size == 1000
    assert lineage.inputs[0].inputFacets["inputStatistics"].rowCount is None  # rows are not known per file
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("clickhouse://ch.internal:9000", "analytics.posts")
    assert [(f.name, f.type) for f in out.facets["schema"].fields] == [("id", "UInt64"), ("title", "String")]
    stats = out.outputFacets["outputStatistics"]
    assert (stats.rowCount, stats.size) == (42, 4200)
    assert "lifecycleStateChange" not in out.facets
    assert lineage.run_facets["externalQuery"].externalQueryId == "s3ch-abc-try1"
    assert "[redacted]" in lineage.job_facets["sql"].query
    serialized = json.loads(Serde.to_json(out))
    assert serialized["outputFacets"]["outputStatistics"]["rowCount"] == 42
    assert json.loads(Serde.to_json(lineage.inputs[1]))["inputFacets"]["inputStatistics"]["size"] == 1000


def test_one_input_carries_the_rows_read_and_a_created_or_replaced_table_says_so() -> None:
    one = operator_lineage(_facts(objects=_objects(["posts/2008-07.parquet"]), created=True))
    assert one.inputs[0].inputFacets["inputStatistics"].rowCount == 42
    assert one.outputs[0].facets["lifecycleStateChange"].lifecycleStateChange.value == "CREATE"
    replaced = operator_lineage(_facts(mode="overwrite"))
    assert replaced.outputs[0].facets["lifecycleStateChange"].lifecycleStateChange.value == "OVERWRITE"


def test_nothing_loaded_means_no_lineage() -> None:
    lineage = operator_lineage(None)
    assert lineage.inputs == [] and lineage.outputs == [] and lineage.run_facets == {}


def test_the_asset_event_extra_holds_the_figures() -> None:
    extra = outlet_extra(_facts())
    assert extra == {
        "table": "analytics.posts",
        "query_id": "s3ch-abc-try1",
        "rows": 42,
        "bytes": 4200,
        "files": 2,
        "source_bytes": 2000,
        "mode": "append",
        "partitions": ["200807"],
        "attached_to": None,
    }
    json.dumps(extra)

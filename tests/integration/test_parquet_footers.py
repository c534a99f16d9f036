"""Parquet footers read by build_manifest on the real local S3 (moto's server)."""

from __future__ import annotations

import io
import logging

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_s3ch.core.manifest import FOOTER_SAMPLE
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset
from tests.integration.faults import SuffixRangeProxy


def test_footers_give_uncompressed_sizes(stack: LocalStack, posts: SampleDataset) -> None:
    client = stack.s3_client()
    manifest = build_manifest(client, LoadRequest(s3_uri=posts.s3_uri, table="t"))
    sampled = min(FOOTER_SAMPLE, len(posts.keys))
    assert manifest.footer_files == sampled
    # GetBucketLocation + one ListObjectsV2 page + one ranged GET per sampled footer.
    assert manifest.list_calls == 2 + sampled
    assert manifest.uncompressed_bytes is not None and manifest.uncompressed_bytes > manifest.total_bytes
    largest = max(posts.keys, key=lambda k: client.head_object(Bucket=posts.bucket, Key=k)["ContentLength"])
    body = client.get_object(Bucket=posts.bucket, Key=largest)["Body"].read()
    meta = pq.ParquetFile(io.BytesIO(body)).metadata
    expected = max(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    assert manifest.max_row_group_bytes is not None and manifest.max_row_group_bytes >= expected


def test_footers_can_be_skipped(stack: LocalStack, posts: SampleDataset) -> None:
    manifest = build_manifest(stack.s3_client(), LoadRequest(s3_uri=posts.s3_uri, table="t"), footer_sample=0)
    assert manifest.uncompressed_bytes is None and manifest.max_row_group_bytes is None
    assert manifest.list_calls == 2


def test_footers_survive_a_server_that_answers_suffix_ranges_with_the_first_bytes(
    stack: LocalStack, posts: SampleDataset, caplog
) -> None:
    import boto3

    caplog.set_level(logging.INFO)
    request = LoadRequest(s3_uri=posts.s3_uri, table="t")
    direct = build_manifest(stack.s3_client(), request)
    with SuffixRangeProxy(stack.s3_endpoint) as proxy:
        client = boto3.client(
            "s3", endpoint_url=proxy.url, aws_access_key_id=stack.s3_access_key,
            aws_secret_access_key=stack.s3_secret_key, region_name=stack.region,
        )
        manifest = build_manifest(client, request)
    assert proxy.suffix_requests == direct.footer_files > 0, "the footers were asked for with suffix ranges"
    assert manifest.footer_files == direct.footer_files
    assert manifest.uncompressed_bytes == direct.uncompressed_bytes
    assert manifest.max_row_group_bytes == direct.max_row_group_bytes
    assert manifest.list_calls == direct.list_calls + direct.footer_files  # one explicit range per footer
    assert "answered the suffix range" in caplog.text


def test_the_first_files_schema_is_read_beside_the_largest(stack: LocalStack) -> None:
    """The schema check describes the first file that is not empty: its footer is read too when it is not among
    the largest, and kept as its schema alone (the same columns, no row groups)."""
    client, bucket = stack.s3_client(), "footer-first"
    stack.create_bucket(bucket)
    for i in range(FOOTER_SAMPLE + 2):  # the first file is the smallest, so not sampled for the sizes
        sink = io.BytesIO()
        pq.write_table(pa.table({"id": pa.array(range(10 * (i + 1)), pa.int64()), f"c{i}": ["x"] * 10 * (i + 1)}),
                       sink)
        client.put_object(Bucket=bucket, Key=f"p/{i:02d}.parquet", Body=sink.getvalue())
    client.put_object(Bucket=bucket, Key="p/-empty.parquet", Body=b"")
    manifest = build_manifest(client, LoadRequest(s3_uri=f"s3://{bucket}/p/*.parquet", table="t"))
    assert manifest.footer_files == FOOTER_SAMPLE
    assert manifest.list_calls == 2 + FOOTER_SAMPLE + 1
    assert manifest.sample_schema is not None and manifest.sample_schema[0] == "p/00.parquet"
    schema = pq.read_schema(io.BytesIO(manifest.sample_schema[1]))
    assert schema.names == ["id", "c0"] and pq.read_metadata(io.BytesIO(manifest.sample_schema[1])).num_row_groups == 0
    assert "sample_schema" not in manifest.model_dump() and "PAR1" not in manifest.model_dump_json()


def test_a_big_listing_reads_the_block_rules_window(stack: LocalStack, monkeypatch) -> None:
    """From ``WINDOW_FROM_BYTES`` on (lowered here), the first files in key order and the last are read too: their
    row groups' ranges of the date column are pyarrow's, and with the server's partition key of a table partitioned
    by month they give the partitions a block spans and the load's."""
    import datetime
    import uuid

    from airflow_provider_s3ch.core import manifest as policy
    from airflow_provider_s3ch.core.plan.partition_spans import partition_figures
    from airflow_provider_s3ch.core.sizes import MiB
    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
    from airflow_provider_s3ch.hooks.server import get_profile

    client, bucket = stack.s3_client(), "footer-window"
    stack.create_bucket(bucket)
    start = datetime.date(2020, 1, 1)
    expected: dict[str, list[tuple[int, int]]] = {}
    for i in range(8):  # each file one quarter, three row groups of a month each
        days = [start + datetime.timedelta(days=91 * i + j % 90) for j in range(3000)]
        sink = io.BytesIO()
        pq.write_table(pa.table({"d": pa.array(sorted(days), pa.date32()), "n": pa.array(range(3000), pa.int64())}),
                       sink, row_group_size=1000)
        client.put_object(Bucket=bucket, Key=f"w/{i:02d}.parquet", Body=sink.getvalue())
        meta = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata
        expected[f"w/{i:02d}.parquet"] = [
            ((meta.row_group(g).column(0).statistics.min - datetime.date(1970, 1, 1)).days,
             (meta.row_group(g).column(0).statistics.max - datetime.date(1970, 1, 1)).days)
            for g in range(meta.num_row_groups)]
    request = LoadRequest(s3_uri=f"s3://{bucket}/w/*.parquet", table=f"default.window_{uuid.uuid4().hex[:8]}")
    assert build_manifest(client, request).key_window is None  # a small listing reads no window
    monkeypatch.setattr(policy, "WINDOW_FROM_BYTES", 0)
    monkeypatch.setattr(policy, "WINDOW_BYTES", 1)  # the window: the first file alone
    manifest = build_manifest(client, request)
    window = manifest.key_window
    assert window is not None and window.units == {"d": "day", "n": "int"}
    assert [ranges["d"] for _, ranges in window.files[0]] == expected["w/00.parquet"]
    assert window.spans["d"] == (expected["w/00.parquet"][0][0], expected["w/07.parquet"][-1][1])
    assert manifest.list_calls == 2 + FOOTER_SAMPLE + 1  # the last file's footer is read too
    assert "key_window" not in manifest.model_dump()

    stack.clickhouse_client().execute(
        f"CREATE TABLE {request.table} (d Date, n Int64) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY n")
    partition_key = get_profile(ClickHouseHook(), request.table).table.partition_key
    figures = partition_figures(partition_key, window, 4 * 256 * MiB, 256 * MiB)
    # The first file's three months fill a block; the load's range, 2020-01 to 2021-12, holds 24 months.
    assert figures is not None and (figures.partitions_per_block, figures.partitions) == (3.0, 24)
    assert figures.parts_per_partition == 0.5 and figures.part_bytes == 256 * MiB // 3

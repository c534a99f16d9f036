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

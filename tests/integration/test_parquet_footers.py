"""Parquet footers read by build_manifest on the real local S3 (moto's server)."""

from __future__ import annotations

import io
import logging

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

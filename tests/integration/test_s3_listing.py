"""Listing, region and manifest checks against a real S3 API server (moto's standalone server).

The server runs in a thread of the test process and is reached over HTTP by a plain boto3 client,
exactly as the operator reaches S3; nothing in boto3 or botocore is patched.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.errors import BucketError, FormatError, NoObjectsError
from airflow_provider_s3ch.hooks.s3 import bucket_region, build_manifest, list_matching
from airflow_provider_s3ch.local.stack import free_port

moto_server = pytest.importorskip("moto.server")

pytestmark = pytest.mark.integration

SECRET = "not-a-real-secret-key"
MANY = 2500


def _make_client(endpoint: str, region: str = "us-east-1") -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="AKIDTESTING",
        aws_secret_access_key=SECRET,
    )


def _create_bucket(client: Any, name: str, region: str = "us-east-1") -> None:
    if region == "us-east-1":
        client.create_bucket(Bucket=name)
    else:
        client.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})


def _put(client: Any, bucket: str, keys: list[str], body: bytes = b"1\n") -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=body), keys))


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(s3_endpoint: str) -> Any:
    """A client on a server holding the buckets the tests read (created once)."""
    c = _make_client(s3_endpoint)
    _create_bucket(c, "ls-many")
    _put(c, "ls-many", [f"p/{i:04d}.csv" for i in range(MANY)] + ["p/README.md", "q/0000.csv"])
    _create_bucket(c, "ls-globs-eu", "eu-west-3")
    _put(
        c,
        "ls-globs-eu",
        [
            "data/2024/01/a.parquet", "data/2024/01/b.parquet", "data/2024/02/a.parquet",
            "data/2024/a.parquet", "data/x+y (1).parquet", "data/01.parquet", "data/02.parquet",
            "data/10.parquet", "data/notes.txt",
        ],
    )  # fmt: skip
    c.put_object(Bucket="ls-globs-eu", Key="data/2024/03/", Body=b"")  # a "folder" marker
    _create_bucket(c, "ls-mixed")
    _put(c, "ls-mixed", ["m/a.parquet", "m/b.csv", "m/c.parquet", "u/a.dat", "z/a.csv", "z/b.csv.gz", "k/a.csv"])
    _create_bucket(c, "ls-gzipped")
    _put(c, "ls-gzipped", ["g/a.csv.gz", "g/B.CSV.GZ"])
    return c


def _request(uri: str, **kwargs: Any) -> LoadRequest:
    return LoadRequest(s3_uri=uri, table="db.t", **kwargs)


def _keys(client: Any, bucket: str, pattern: str) -> list[str]:
    objects, _ = list_matching(client, bucket, pattern)
    return [o.key for o in objects]


# ------------------------------------------------------------------------------------- listing


def test_pagination_lists_every_page(client: Any) -> None:
    objects, calls = list_matching(client, "ls-many", "p/*.csv")
    assert len(objects) == MANY
    assert [o.key for o in objects] == sorted(f"p/{i:04d}.csv" for i in range(MANY))
    assert calls >= 3
    assert all(o.size == 2 and o.format == "CSVWithNames" and o.compression is None for o in objects)


def test_pagination_with_a_range_glob(client: Any) -> None:
    objects, calls = list_matching(client, "ls-many", "p/{0990..1010}.csv")
    assert [o.key for o in objects] == [f"p/{i:04d}.csv" for i in range(990, 1011)]
    assert calls >= 3  # the prefix 'p/' holds every object: all pages are read


def test_manifest_counts_the_location_call(client: Any) -> None:
    manifest = build_manifest(client, _request("s3://ls-many/p/*.csv"))
    _, calls = list_matching(client, "ls-many", "p/*.csv")
    assert manifest.list_calls == calls + 1
    assert manifest.file_count == MANY
    assert manifest.total_bytes == 2 * MANY
    assert manifest.prefix == "p/"
    assert manifest.format == "CSVWithNames"
    assert manifest.compression is None
    assert manifest.region == "us-east-1"


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("data/*.parquet", ["data/01.parquet", "data/02.parquet", "data/10.parquet", "data/x+y (1).parquet"]),
        ("data/2024/*/*.parquet", ["data/2024/01/a.parquet", "data/2024/01/b.parquet", "data/2024/02/a.parquet"]),
        (
            "data/**.parquet",
            [
                "data/01.parquet", "data/02.parquet", "data/10.parquet", "data/2024/01/a.parquet",
                "data/2024/01/b.parquet", "data/2024/02/a.parquet", "data/2024/a.parquet", "data/x+y (1).parquet",
            ],
        ),
        ("data/2024/**/a.parquet", ["data/2024/01/a.parquet", "data/2024/02/a.parquet", "data/2024/a.parquet"]),
        ("data/2024/0?/a.parquet", ["data/2024/01/a.parquet", "data/2024/02/a.parquet"]),
        ("data/2024/{01,02}/b.parquet", ["data/2024/01/b.parquet"]),
        ("data/{01..10}.parquet", ["data/01.parquet", "data/02.parquet", "data/10.parquet"]),
        ("data/{1..10}.parquet", ["data/10.parquet"]),  # no zero padding: 01 and 02 are not read
        ("data/x+y (1).parquet", ["data/x+y (1).parquet"]),
        ("data/x+y (?).parquet", ["data/x+y (1).parquet"]),
        ("data/2024/a.parquet", ["data/2024/a.parquet"]),
        ("data/2024", []),  # a key without globs matches only itself, not what it prefixes
        ("data/2024/**", [
            "data/2024/01/a.parquet", "data/2024/01/b.parquet", "data/2024/02/a.parquet", "data/2024/a.parquet",
        ]),  # the folder marker 'data/2024/03/' is skipped
    ],
)  # fmt: skip
def test_glob_cases(client: Any, pattern: str, expected: list[str]) -> None:
    assert _keys(client, "ls-globs-eu", pattern) == expected


def test_list_matching_sorts_and_detects(client: Any) -> None:
    objects, calls = list_matching(client, "ls-mixed", "*/*")
    assert [o.key for o in objects] == sorted(o.key for o in objects)
    by_key = {o.key: o for o in objects}
    assert (by_key["z/b.csv.gz"].format, by_key["z/b.csv.gz"].compression) == ("CSVWithNames", "gzip")
    assert by_key["m/a.parquet"].format == "Parquet"
    assert by_key["u/a.dat"].format is None
    assert calls == 1


# -------------------------------------------------------------------------------------- region


def test_region_of_a_bucket_outside_us_east_1(client: Any) -> None:
    assert bucket_region(client, "ls-globs-eu") == "eu-west-3"
    assert build_manifest(client, _request("s3://ls-globs-eu/data/*.parquet")).region == "eu-west-3"


def test_region_of_us_east_1_is_named(client: Any) -> None:
    assert bucket_region(client, "ls-many") == "us-east-1"


def test_region_from_a_client_of_another_region(s3_endpoint: str, client: Any) -> None:
    assert bucket_region(_make_client(s3_endpoint, "ap-south-1"), "ls-globs-eu") == "eu-west-3"


# -------------------------------------------------------------------------------------- errors


def test_no_match_names_prefix_count_and_examples(client: Any) -> None:
    with pytest.raises(NoObjectsError) as err:
        build_manifest(client, _request("s3://ls-globs-eu/data/*.csv"))
    message = str(err.value)
    assert "bucket 'ls-globs-eu'" in message
    assert "'data/*.csv'" in message
    assert "listed prefix 'data/'" in message
    assert "9 objects, none matching" in message  # the folder marker is not counted
    assert message.count("'data/") >= 1 + 3  # the prefix and three example keys
    assert "check the s3_uri" in message


def test_no_match_under_an_empty_prefix(client: Any) -> None:
    with pytest.raises(NoObjectsError, match=r"listed prefix 'nowhere/': no objects"):
        build_manifest(client, _request("s3://ls-globs-eu/nowhere/*.parquet"))


def test_missing_single_key(client: Any) -> None:
    with pytest.raises(NoObjectsError, match=r"matches 'data/missing.parquet'"):
        build_manifest(client, _request("s3://ls-globs-eu/data/missing.parquet"))


def test_missing_key_of_a_selector_group(client: Any) -> None:
    with pytest.raises(NoObjectsError) as err:
        build_manifest(client, _request("s3://ls-globs-eu/data/{01,02,03}.parquet"))
    assert "'data/03.parquet'" in str(err.value)
    assert "s3_ignore_file_doesnt_exist" in str(err.value)
    manifest = build_manifest(
        client, _request("s3://ls-globs-eu/data/{01,02,03}.parquet", settings={"s3_ignore_file_doesnt_exist": 1})
    )
    assert [o.key for o in manifest.objects] == ["data/01.parquet", "data/02.parquet"]


def test_missing_bucket(client: Any) -> None:
    with pytest.raises(BucketError, match=r"bucket 'no-such-bucket' does not exist.*check the bucket name in s3_uri"):
        build_manifest(client, _request("s3://no-such-bucket/data/*.parquet"))
    with pytest.raises(BucketError, match="does not exist"):
        list_matching(client, "no-such-bucket", "data/*.parquet")


def test_mixed_formats(client: Any) -> None:
    with pytest.raises(FormatError) as err:
        build_manifest(client, _request("s3://ls-mixed/m/*"))
    message = str(err.value)
    assert "CSVWithNames (e.g. 'm/b.csv')" in message
    assert "Parquet (e.g. 'm/a.parquet')" in message
    assert "narrow the glob" in message and "format=" in message


def test_format_argument_overrides_detection(client: Any) -> None:
    manifest = build_manifest(client, _request("s3://ls-mixed/m/*", format="Parquet"))
    assert manifest.format == "Parquet"
    assert manifest.file_count == 3
    unknown = build_manifest(client, _request("s3://ls-mixed/u/*", format="TSV"))
    assert unknown.format == "TSV"


def test_unknown_format(client: Any) -> None:
    with pytest.raises(FormatError, match=r"format of 'u/a.dat'.*pass format="):
        build_manifest(client, _request("s3://ls-mixed/u/*"))


def test_mixed_compression(client: Any) -> None:
    with pytest.raises(FormatError) as err:
        build_manifest(client, _request("s3://ls-mixed/z/*"))
    assert "gzip (e.g. 'z/b.csv.gz')" in str(err.value)
    assert "none (e.g. 'z/a.csv')" in str(err.value)
    assert "compression=" in str(err.value)
    manifest = build_manifest(client, _request("s3://ls-mixed/z/*", compression="auto"))
    assert (manifest.format, manifest.compression) == ("CSVWithNames", "auto")


def test_compression_detected_in_any_case(client: Any) -> None:
    manifest = build_manifest(client, _request("s3://ls-gzipped/g/*"))
    assert (manifest.format, manifest.compression) == ("CSVWithNames", "gzip")
    assert [o.key for o in manifest.objects] == ["g/B.CSV.GZ", "g/a.csv.gz"]


def test_single_key_manifest(client: Any) -> None:
    manifest = build_manifest(client, _request("s3://ls-mixed/k/a.csv"))
    assert [o.key for o in manifest.objects] == ["k/a.csv"]
    assert manifest.prefix == "k/a.csv"
    assert manifest.summary()["files"] == 1


def test_messages_hold_no_secret(client: Any) -> None:
    for uri in ("s3://no-such-bucket/x/*", "s3://ls-mixed/m/*", "s3://ls-mixed/u/*", "s3://ls-globs-eu/x/*"):
        with pytest.raises((BucketError, FormatError, NoObjectsError)) as err:
            build_manifest(client, _request(uri))
        assert SECRET not in str(err.value)
        assert "AKIDTESTING" not in str(err.value)

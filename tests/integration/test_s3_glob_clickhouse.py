"""Our glob matcher selects exactly the objects ClickHouse's own ``s3()`` reads.

ClickHouse runs in-process (chdb, the embedded engine); the objects live on a real S3 API server
(moto's standalone server, over HTTP). For each glob we ask ClickHouse which objects
``s3('http://…/bucket/<glob>')`` reads, and compare with :func:`list_matching`.

The ``file()`` table function is not used as the reference: it walks directories one path segment
at a time, so its ``**`` is recursive and a ``$`` in a segment without globs is literal, whereas
``s3()`` matches the whole key against one regex. The ``s3()`` engine is the one the operator runs.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from types import ModuleType

import boto3
import pytest

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.formats import detect_compression
from airflow_provider_s3ch.core.glob import compile_glob, expand_keys, object_url
from airflow_provider_s3ch.hooks.s3 import list_matching
from airflow_provider_s3ch.local.stack import free_port

moto_server = pytest.importorskip("moto.server")

pytestmark = pytest.mark.integration

BUCKET = "ch-globs"
KEYS = [
    "a.csv", "b.csv", "ab.csv", "a/c.csv", "a/b/d.csv", "a/b/c/e.csv", "a.tsv",
    "x/0.csv", "x/00.csv", "x/1.csv", "x/2.csv", "x/3.csv", "x/01.csv", "x/02.csv", "x/09.csv",
    "x/10.csv", "x/010.csv", "x/11.csv", "x/100.csv",
    "y/w.csv", "y/z/w.csv", "y/z/z2/w.csv", "y/zw.csv",
    "br{a}.csv", "bra.csv", "c{x}/d.csv", "cx/d.csv", "q/b{r}/z.csv", "q/br/z.csv",
    "p$q.csv", "p^q.csv", "p+q.csv", "p(q).csv", "p[q].csv", "p|q.csv", "p-q.csv", "p.q.csv", "pxq.csv",
    "m/2024-01-01/part-0.parquet", "m/2024-01-02/part-1.parquet", "m/2024-02-01/part-0.parquet",
    "u/\u00fcn\u00ef.csv", "u/ab.csv",
    "e/a,b.csv", "e/,a.csv", "e/{a,b.csv", "e/a}.csv",
    "o/a b.csv", "o/a+b.csv", "o/a%20b.csv", "o/100%.csv", "o/100%25.csv", "o/h#sh.csv", "o/h", "o/q?m.csv",
    "o/it's.csv", 'o/say "hi".csv', "o/\u65e5\u672c.csv", "o/c:d::e.csv", "o/a%2Fb.csv",
]  # fmt: skip

PATTERNS = [
    # '*' and '?' stay within one path segment
    "*.csv", "*", "a/*", "a/*.csv", "?.csv", "??.csv", "a/?/*.csv", "x/?.csv", "x/??.csv",
    # '**' crosses '/'; '**/' as a whole segment also matches zero directories
    "**", "**.csv", "a/**", "a/**.csv", "**/*.csv", "y/**/w.csv", "y/**w.csv", "a/**/e.csv", "***",
    "q/**", "c**",
    # a '*' after '*?' crosses '/' too (ClickHouse keeps the previous '*')
    "*?*", "a*?*.csv", "y/*?*",
    # {a,b} alternatives, with globs inside and around
    "{a,b}.csv", "{a,b}*", "{a,b}/*.csv", "a/{b/d,c}.csv", "{ab,b}.{csv,tsv}", "x/{1,01}.csv",
    "{a?,b}.csv", "m/2024-{01-01,02-01}/*.parquet", "e/{a,b}*", "e/*,*",
    # {N..M} ranges: leading zeros, descending, combined
    "x/{1..3}.csv", "x/{0..10}.csv", "x/{00..10}.csv", "x/{01..10}.csv", "x/{1..010}.csv",
    "x/{10..1}.csv", "x/{3..1}.csv", "x/{9..01}.csv", "x/{2..2}.csv", "x/{0..100}.csv",
    "x/{1..2}*", "m/2024-{01..02}-*/*.parquet",
    # braces that are not groups: one character, a leading ',', unclosed
    "br{a}*", "br{a}.csv", "c{x}/*.csv", "q/b{r}/*", "q/b{r}*", "e/{,a}*",
    "e/{a,b.csv", "e/{a,b}}.csv",
    # regex metacharacters are literal ...
    "p+*", "p(q)*", "p[q]*", "p|*", "p-*", "p.*", "p.q*",
    # ... except '$' and '^', which ClickHouse leaves as anchors in a glob
    "p$*", "p^*",
    # non-ASCII
    "u/*", "u/?n?.csv",
    # no glob at all, and a single {a,b} group: read directly, not listed
    "a.csv", "p$q.csv", "nothing.csv", "{a,b,nothing}.csv", "x/{1}.csv",
    # matching nothing
    "nothing*.csv", "z/**",
    # keys that need percent-encoding in the URL: literal in the s3_uri, decoded back by the server
    "o/*", "o/a b.csv", "o/a%20b.csv", "o/100%.csv", "o/100%25.csv", "o/100%*", "o/h#sh.csv", "o/h#*", "o/h",
    "o/q?m.csv", "o/it's.csv", 'o/say "hi".csv', "o/\u65e5*", "o/c:d::e.csv", "o/a%2Fb.csv", "o/{a b,a+b}.csv",
    "o/*{%,#}*",
]  # fmt: skip


@pytest.fixture(scope="module")
def chdb(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The embedded ClickHouse engine, imported from an empty directory (it probes ./config.xml)."""
    here = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("chdb"))
    try:
        return pytest.importorskip("chdb")
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server holding one tiny CSV object per key of :data:`KEYS`."""
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        client = _client(endpoint)
        client.create_bucket(Bucket=BUCKET)
        for key in KEYS:
            client.put_object(Bucket=BUCKET, Key=key, Body=b"1\n")
        yield endpoint
    finally:
        server.stop()


def _client(endpoint: str) -> object:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def clickhouse_reads(chdb: ModuleType, endpoint: str, pattern: str, **settings: int) -> set[str]:
    """The keys ClickHouse's ``s3()`` reads for the literal glob (each object holds one row), through the
    URL the operator builds (:func:`object_url`)."""
    url = object_url(BUCKET, pattern, endpoint_url=endpoint, region=None)
    extra = "".join(f", {name} = {value}" for name, value in settings.items())
    sql = (
        f"SELECT DISTINCT _path FROM s3({_sql_string(url)}, 'testing', 'testing', 'CSV', 'a String', 'none') "
        f"SETTINGS s3_throw_on_zero_files_match = 0{extra}"
    )
    out = chdb.query(sql, "TSVRaw").bytes().decode()
    return {line.split("/", 1)[1] for line in out.splitlines() if line}


@pytest.mark.parametrize("pattern", PATTERNS)
def test_list_matching_reads_what_clickhouse_reads(chdb: ModuleType, s3_endpoint: str, pattern: str) -> None:
    expected = clickhouse_reads(chdb, s3_endpoint, pattern, s3_ignore_file_doesnt_exist=1)
    objects, _ = list_matching(_client(s3_endpoint), BUCKET, pattern)
    assert {o.key for o in objects} == expected


@pytest.mark.parametrize("pattern", PATTERNS)
def test_regex_agrees_with_clickhouse_on_every_key(chdb: ModuleType, s3_endpoint: str, pattern: str) -> None:
    expected = clickhouse_reads(chdb, s3_endpoint, pattern, s3_ignore_file_doesnt_exist=1)
    glob = compile_glob(pattern)
    assert {k for k in KEYS if glob.fullmatch(k)} == expected


def test_patterns_exercise_both_outcomes(chdb: ModuleType, s3_endpoint: str) -> None:
    """Guard against a vacuous comparison: most patterns match something, some match nothing."""
    counts = [len(clickhouse_reads(chdb, s3_endpoint, p, s3_ignore_file_doesnt_exist=1)) for p in PATTERNS]
    assert sum(1 for c in counts if c) > len(PATTERNS) * 0.75
    assert 0 in counts


def test_clickhouse_fails_on_a_missing_key_of_a_single_group(chdb: ModuleType, s3_endpoint: str) -> None:
    """Why build_manifest refuses ``{a,b,nothing}``: ClickHouse reads each key directly."""
    assert expand_keys("{a,b,nothing}.csv") == ["a.csv", "b.csv", "nothing.csv"]
    with pytest.raises(Exception, match="(?i)(not exist|not found|NoSuchKey|404)"):
        clickhouse_reads(chdb, s3_endpoint, "{a,b,nothing}.csv")


def test_clickhouse_rejects_what_we_reject(chdb: ModuleType, s3_endpoint: str) -> None:
    for pattern in ("e/,{a,b}.csv", "e/}{a,b}.csv"):
        with pytest.raises(InvalidRequestError):
            compile_glob(pattern)
        with pytest.raises(Exception, match="Unexpected"):
            clickhouse_reads(chdb, s3_endpoint, pattern)


def test_clickhouse_detects_the_same_compression(chdb: ModuleType, s3_endpoint: str) -> None:
    """``X.CSV.GZ`` is gzip for ClickHouse's compression='auto' (upper case too), as for detect_compression."""
    client = _client(s3_endpoint)
    client.create_bucket(Bucket="ch-gzipped")
    client.put_object(Bucket="ch-gzipped", Key="X.CSV.GZ", Body=gzip.compress(b"7\n"))
    assert detect_compression("X.CSV.GZ") == "gzip"
    url = f"{s3_endpoint}/ch-gzipped/X.CSV.GZ"
    out = chdb.query(f"SELECT a FROM s3({_sql_string(url)}, 'testing', 'testing', 'CSV', 'a String')", "TSVRaw")
    assert out.bytes().decode().strip() == "7"

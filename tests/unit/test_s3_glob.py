"""Pure tests of glob matching and format/compression detection (no server).

Agreement with the real ClickHouse engine is proved in tests/integration/test_s3_glob_clickhouse.py.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.formats import detect_compression, detect_format
from airflow_provider_s3ch.core.glob import clickhouse_regex, expand_keys, glob_to_regex, has_glob, literal_prefix
from airflow_provider_s3ch.errors import BucketError
from airflow_provider_s3ch.hooks.s3 import _bucket_error


def matches(pattern: str, key: str) -> bool:
    return glob_to_regex(pattern).fullmatch(key) is not None


# ------------------------------------------------------------------------ ClickHouse's own cases

# From ClickHouse's src/Common/tests/gtest_makeRegexpPatternFromGlobs.cpp (makeRegexpPatternFromGlobs).
CLICKHOUSE_GTEST = [
    ("?", "[^/]"),
    ("*", "[^/]*"),
    ("/?", "/[^/]"),
    ("/*", "/[^/]*"),
    ("{123}", "(123)"),
    ("{test}", "(test)"),
    ("{test.tar.gz}", "(test\\.tar\\.gz)"),
    ("*_{{a,b,c,d}}/?.csv", "[^/]*_\\{(a|b|c|d)\\}/[^/]\\.csv"),
    ("f{1..9}", "f(1|2|3|4|5|6|7|8|9)"),
    ("f{0..10}", "f(0|1|2|3|4|5|6|7|8|9|10)"),
    ("f{10..20}", "f(10|11|12|13|14|15|16|17|18|19|20)"),
    ("f{00..10}", "f(00|01|02|03|04|05|06|07|08|09|10)"),
    ("f{0001..0009}", "f(0001|0002|0003|0004|0005|0006|0007|0008|0009)"),
    ("f{01..9}", "f(01|02|03|04|05|06|07|08|09)"),
    ("f{000..9}", "f(000|001|002|003|004|005|006|007|008|009)"),
    ("f{95..103}", "f(95|96|97|98|99|100|101|102|103)"),
    ("f{99..109}", "f(99|100|101|102|103|104|105|106|107|108|109)"),
    ("f{001..0009}", "f(0001|0002|0003|0004|0005|0006|0007|0008|0009)"),
    ("f{20..15}", "f(15|16|17|18|19|20)"),
    ("f{200..199}", "f(199|200)"),
    ("f{0009..0001}", "f(0001|0002|0003|0004|0005|0006|0007|0008|0009)"),
    ("f{100..90}", "f(90|91|92|93|94|95|96|97|98|99|100)"),
    ("f{103..95}", "f(95|96|97|98|99|100|101|102|103)"),
    ("f{9..01}", "f(01|02|03|04|05|06|07|08|09)"),
    ("f{9..000}", "f(000|001|002|003|004|005|006|007|008|009)"),
    ("f{1..2}{1..2}", "f(1|2)(1|2)"),
    ("f{1..1}{1..1}", "f(1)(1)"),
    ("f{0..0}{0..0}", "f(0)(0)"),
    ("file{1..5}", "file(1|2|3|4|5)"),
    ("file{1,2,3}", "file(1|2|3)"),
    (
        "{1,2,3}blabla{a.x,b.x,c.x}smth[]_else{aa,bb}?*",
        "(1|2|3)blabla(a\\.x|b\\.x|c\\.x)smth\\[\\]_else(aa|bb)[^/][^/]*",
    ),
    # globstar, src/Common/parseGlobs.cpp: '**/' as a whole segment; other '**' keep the legacy form
    ("**/", "([^/]*/)*"),
    ("a/**/b", "a/([^/]*/)*b"),
    ("a**/b", "a[^/]*[^{}]*/b"),
    ("**", "[^/]*[^{}]*"),
    ("*?*", "[^/]*[^/][^{}]*"),
]


@pytest.mark.parametrize(("glob", "regex"), CLICKHOUSE_GTEST)
def test_clickhouse_regex_matches_clickhouse_unit_tests(glob: str, regex: str) -> None:
    assert clickhouse_regex(glob) == regex


# ------------------------------------------------------------------------------------ matching

CASES = [
    # '*' does not cross '/', may be empty
    ("data/*.csv", "data/a.csv", True),
    ("data/*.csv", "data/.csv", True),
    ("data/*.csv", "data/x/a.csv", False),
    ("data/*", "data/x/a.csv", False),
    ("*", "a", True),
    ("*", "a/b", False),
    ("data/*/*.csv", "data/2024/a.csv", True),
    ("data/*/*.csv", "data/a.csv", False),
    # '**' crosses '/'
    ("data/**", "data/a/b/c.csv", True),
    ("data/**.csv", "data/a/b/c.csv", True),
    ("data/**.csv", "data/c.csv", True),
    ("data/**.csv", "data/c.tsv", False),
    ("data/**", "other/a.csv", False),
    # '**/' as a segment: zero or more directories
    ("data/**/a.csv", "data/a.csv", True),
    ("data/**/a.csv", "data/x/y/a.csv", True),
    ("data/**/a.csv", "data/xa.csv", False),
    ("**/a.csv", "a.csv", True),
    ("**/a.csv", "x/a.csv", True),
    # legacy '**' does not cross a brace after the first '/'
    ("data/**", "data/x/{y}.csv", False),
    ("**", "d{x}/a.csv", True),
    # '*' after '*?' crosses '/'
    ("*?*", "a/b/c", True),
    ("a*?*.csv", "ab/c/d.csv", True),
    # '?'
    ("data/?.csv", "data/a.csv", True),
    ("data/?.csv", "data/ab.csv", False),
    ("data/?.csv", "data/.csv", False),
    ("data?a.csv", "data/a.csv", False),
    ("u/?.csv", "u/\u00fc.csv", True),
    # {a,b}
    ("{a,b}.csv", "a.csv", True),
    ("{a,b}.csv", "c.csv", False),
    ("data/{a,b}/*.csv", "data/b/x.csv", True),
    ("data/{a,b}/*.csv", "data/c/x.csv", False),
    ("x/{b/d,c}.csv", "x/b/d.csv", True),
    ("{a?,b}*.csv", "ax.csv", True),
    ("{a?,b}*.csv", "a/.csv", False),
    ("{a.x,b}*", "aXx", False),
    ("{a,,b}*", "x", True),
    # braces that are no group are literal (unless the key is read directly)
    ("br{a}*", "br{a}.csv", True),
    ("br{a}*", "bra.csv", False),
    ("br{a}.csv", "bra.csv", True),
    ("br{a}.csv", "br{a}.csv", False),
    ("e/{,a}*", "e/{,a}.csv", True),
    ("e/{a*,b}", "e/{axx,b}", True),
    ("e/{a,b", "e/{a,b", True),
    # {N..M}
    ("x/{1..3}.csv", "x/2.csv", True),
    ("x/{1..3}.csv", "x/4.csv", False),
    ("x/{1..3}.csv", "x/02.csv", False),
    ("x/{01..10}.csv", "x/01.csv", True),
    ("x/{01..10}.csv", "x/10.csv", True),
    ("x/{01..10}.csv", "x/1.csv", False),
    ("x/{0..10}.csv", "x/1.csv", True),
    ("x/{0..10}.csv", "x/01.csv", False),
    ("x/{1..010}.csv", "x/5.csv", True),
    ("x/{1..010}.csv", "x/005.csv", False),
    ("x/{10..1}.csv", "x/7.csv", True),
    ("x/{10..1}.csv", "x/10.csv", True),
    ("x/{10..01}.csv", "x/07.csv", True),
    ("x/{10..01}.csv", "x/7.csv", False),
    ("x/{1..3,5}*", "x/1..3", True),
    ("m/{2023..2024}-{01..12}/*.parquet", "m/2024-07/a.parquet", True),
    ("m/{2023..2024}-{01..12}/*.parquet", "m/2025-07/a.parquet", False),
    # regex metacharacters are literal
    ("p+*", "p+q", True),
    ("p+*", "ppq", False),
    ("p(q)*", "p(q).csv", True),
    ("p.q*", "pxq", False),
    ("p.q*", "p.q", True),
    ("p[q]*", "p[q].csv", True),
    ("p[q]*", "pq.csv", False),
    ("p|q*", "p|q", True),
    ("p|q*", "q", False),
    ("p-q*", "p-q", True),
    ("p\\q*", "p\\q", True),
    # ... but '$' and '^' are anchors in a ClickHouse glob, so these match nothing
    ("p$*", "p$q", False),
    ("p^*", "p^q", False),
    # without globs: the key itself, metacharacters included
    ("p$q.csv", "p$q.csv", True),
    ("a.csv", "a.csv", True),
    ("a.csv", "axcsv", False),
    ("data/a.csv", "data/a.csv.gz", False),
]


@pytest.mark.parametrize(("pattern", "key", "expected"), CASES)
def test_glob_matching(pattern: str, key: str, expected: bool) -> None:
    assert matches(pattern, key) is expected


def test_full_match_for_every_method() -> None:
    regex = glob_to_regex("data/*.csv")
    assert regex.match("data/a.csv.gz") is None
    assert regex.search("x/data/a.csv") is None
    assert regex.fullmatch("data/a.csv")


def test_no_trailing_newline_match() -> None:
    assert not matches("a*.csv", "ab.csv\n")


def test_huge_range_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="more than 100000 values"):
        glob_to_regex("x/{0..100000}.csv")
    assert glob_to_regex("x/{0..99999}.csv").fullmatch("x/99999.csv")


@pytest.mark.parametrize("pattern", ["e/,{a,b}.csv", "e/}{a,b}.csv"])
def test_rejected_selector(pattern: str) -> None:
    with pytest.raises(InvalidRequestError, match="ClickHouse rejects"):
        glob_to_regex(pattern)


# ------------------------------------------------------------------------------- expand_keys


@pytest.mark.parametrize(
    ("pattern", "keys"),
    [
        ("a.csv", ["a.csv"]),
        ("{a,b}.csv", ["a.csv", "b.csv"]),
        ("d/{a,b/c}.csv", ["d/a.csv", "d/b/c.csv"]),
        ("br{a}.csv", ["bra.csv"]),
        ("e/{a,,b}", ["e/a", "e/", "e/b"]),
        ("e/{a,b}}.csv", ["e/a}.csv", "e/b}.csv"]),
        ("e/{a,b.csv", ["e/{a,b.csv"]),
        ("e/{,a}", ["e/{,a}"]),
        ("{a,b}*.csv", None),
        ("{a,b}?.csv", None),
        ("{a,b}/{c,d}", None),
        ("x/{1..3}", None),
        ("*.csv", None),
    ],
)
def test_expand_keys(pattern: str, keys: list[str] | None) -> None:
    assert expand_keys(pattern) == keys


# ----------------------------------------------------------------------- prefix and has_glob


@pytest.mark.parametrize(
    ("pattern", "prefix", "glob"),
    [
        ("data/2024/*.parquet", "data/2024/", True),
        ("data/2024/0?/x", "data/2024/0", True),
        ("data/{a,b}/x", "data/", True),
        ("data/x{1..3}", "data/x", True),
        ("**", "", True),
        ("data/a.csv", "data/a.csv", False),
        ("p+q[1](x).csv", "p+q[1](x).csv", False),
        ("br{a}.csv", "br", True),
    ],
)
def test_literal_prefix_and_has_glob(pattern: str, prefix: str, glob: bool) -> None:
    assert literal_prefix(pattern) == prefix
    assert has_glob(pattern) is glob


# ------------------------------------------------------------------------ format / compression


@pytest.mark.parametrize(
    ("key", "compression"),
    [
        ("x.csv.gz", "gzip"),
        ("x.gzip", "gzip"),
        ("X.CSV.GZ", "gzip"),
        ("x.br", "br"),
        ("x.brotli", "br"),
        ("x.xz", "xz"),
        ("x.lzma", "xz"),
        ("x.zst", "zstd"),
        ("x.zstd", "zstd"),
        ("x.lz4", "lz4"),
        ("x.bz2", "bz2"),
        ("x.deflate", "deflate"),
        ("x.snappy", "snappy"),
        ("x.sz", None),
        ("x.csv", None),
        ("x.parquet", None),
        ("gz", None),
        ("dir.gz/x", None),
        ("x.gz.csv", None),
    ],
)
def test_detect_compression(key: str, compression: str | None) -> None:
    assert detect_compression(key) == compression


@pytest.mark.parametrize(
    ("key", "fmt"),
    [
        ("x.parquet", "Parquet"),
        ("X.PARQUET", "Parquet"),
        ("x.csv", "CSVWithNames"),
        ("x.csv.gz", "CSVWithNames"),
        ("x.CSV.ZST", "CSVWithNames"),
        ("x.tsv", "TSVWithNames"),
        ("x.tsv.xz", "TSVWithNames"),
        ("x.json", "JSONEachRow"),
        ("x.ndjson", "JSONEachRow"),
        ("x.jsonl.bz2", "JSONEachRow"),
        ("x.orc", "ORC"),
        ("x.avro", "Avro"),
        ("x.arrow", "Arrow"),
        ("x.native", "Native"),
        ("x.bson", "BSONEachRow"),
        ("x.arrowstream", "ArrowStream"),
        ("x.csvwithnamesandtypes", "CSVWithNamesAndTypes"),
        ("x.rowbinary", "RowBinary"),
        ("x.gz", None),
        ("x", None),
        ("x.dat", None),
        ("x.txt", None),
        ("dir.csv/x", None),
        ("x.parquet.tmp", None),
    ],
)
def test_detect_format(key: str, fmt: str | None) -> None:
    assert detect_format(key) == fmt


# ---------------------------------------------------------------------- S3 error translation


def _client_error(code: str, status: int) -> ClientError:
    response = {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "ListObjectsV2")  # type: ignore[arg-type]


def test_access_denied_names_the_permission() -> None:
    err = _bucket_error(_client_error("AccessDenied", 403), "b", "list", "x/")
    assert isinstance(err, BucketError)
    assert "access denied" in str(err) and "s3://b/x/" in str(err)
    assert "s3:ListBucket" in str(err) and "arn:aws:s3:::b" in str(err)


def test_bare_403_is_access_denied() -> None:
    err = _bucket_error(_client_error("", 403), "b", "list", "")
    assert isinstance(err, BucketError) and "s3:ListBucket" in str(err)


def test_no_such_bucket() -> None:
    err = _bucket_error(_client_error("NoSuchBucket", 404), "b", "list", "")
    assert isinstance(err, BucketError) and "bucket 'b' does not exist" in str(err)


def test_other_errors_stay_transient() -> None:
    exc = _client_error("SlowDown", 503)
    assert _bucket_error(exc, "b", "list", "") is exc

"""Pure tests of glob matching and format/compression detection (no server).

Agreement with the real ClickHouse engine is proved in tests/integration/test_s3_glob_clickhouse.py.
"""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from botocore.exceptions import ClientError

from airflow_provider_s3ch.core.errors import InvalidRequestError, NoObjectsError
from airflow_provider_s3ch.core.formats import detect_compression, detect_format
from airflow_provider_s3ch.core.glob import (
    archive_path_syntax,
    check_key_pattern,
    clickhouse_regex,
    compile_glob,
    expand_keys,
    has_glob,
    key_url,
    literal_prefix,
    object_url,
    split_archive,
    unreadable_key,
    url_key,
)
from airflow_provider_s3ch.core.manifest import Listing, check_listing
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.errors import BucketError, S3chTransientError, S3UnavailableError
from airflow_provider_s3ch.hooks.s3 import _bucket_error


def matches(pattern: str, key: str) -> bool:
    return compile_glob(pattern).fullmatch(key)


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


def test_full_match_only() -> None:
    glob = compile_glob("data/*.csv")
    assert glob.fullmatch("data/a.csv")
    assert not glob.fullmatch("data/a.csv.gz")
    assert not glob.fullmatch("x/data/a.csv")


def test_no_trailing_newline_match() -> None:
    assert not matches("a*.csv", "ab.csv\n")


def test_glob_reports_how_clickhouse_reads() -> None:
    listed = compile_glob("x/*.csv")
    assert (listed.keys, listed.regex) == (None, "x/[^/]*\\.csv")
    direct = compile_glob("x/{a,b}.csv")
    assert (direct.keys, direct.regex) == (["x/a.csv", "x/b.csv"], None)
    assert direct.fullmatch("x/a.csv") and not direct.fullmatch("x/c.csv")


def test_a_range_too_large_to_build_is_refused_at_once() -> None:
    with pytest.raises(InvalidRequestError, match="holds 10000001 values.*CANNOT_COMPILE_REGEXP"):
        compile_glob("x/{0..10000000}.csv")
    with pytest.raises(InvalidRequestError, match="CANNOT_COMPILE_REGEXP"):
        compile_glob("x/{0..99999999999999999999}.csv")


def test_a_large_range_that_clickhouse_reads_is_taken() -> None:
    """ClickHouse 26.9 reads {0..100000} and more (see tests/integration/test_keys.py for the real limit)."""
    glob = compile_glob("x/{0..100000}.csv")
    assert glob.fullmatch("x/100000.csv") and glob.fullmatch("x/0.csv")
    assert not glob.fullmatch("x/100001.csv") and not glob.fullmatch("x/00.csv")


@pytest.mark.parametrize("pattern", ["e/,{a,b}.csv", "e/}{a,b}.csv"])
def test_rejected_selector(pattern: str) -> None:
    with pytest.raises(InvalidRequestError, match="ClickHouse rejects"):
        compile_glob(pattern)


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


# ------------------------------------------------------------------------------------- the URL

# The s3_uri is literal; ClickHouse percent-decodes the URL's path before it matches, so the key is
# encoded: the server decodes it back to the literal pattern (checked on the engine in
# tests/integration/test_keys.py).
URL_KEYS = [
    ("k/plain-name_1.csv", "k/plain-name_1.csv"),
    ("k/a b.csv", "k/a%20b.csv"),
    ("k/a+b.csv", "k/a%2Bb.csv"),
    ("k/100%.csv", "k/100%25.csv"),
    ("k/100%25.csv", "k/100%2525.csv"),
    ("k/h#sh.csv", "k/h%23sh.csv"),
    ("k/q?m.csv", "k/q%3Fm.csv"),  # decoded, '?' is the glob again, as the user wrote it
    ("k/s'q.csv", "k/s%27q.csv"),
    ('k/d"q.csv', "k/d%22q.csv"),
    ("k/\u00fcn\u00ef.csv", "k/%C3%BCn%C3%AF.csv"),
    ("k/\U0001f600.csv", "k/%F0%9F%98%80.csv"),
    ("k/tab\tx.csv", "k/tab%09x.csv"),
    ("k/c:d::e.csv", "k/c%3Ad%3A%3Ae.csv"),  # no '::' reaches the server: not an archive
    ("day=2024-01-01/*.parquet", "day=2024-01-01/*.parquet"),
    ("x/{a,b}/{1..3}*.csv", "x/{a,b}/{1..3}*.csv"),
    ("x/a.tar :: m*.csv", "x/a.tar :: m*.csv"),
    ("x/a b/*.tar::m#1 %.csv", "x/a%20b/*.tar :: m#1 %.csv"),  # the member pattern is not decoded
]


@pytest.mark.parametrize(("pattern", "encoded"), URL_KEYS)
def test_url_key(pattern: str, encoded: str) -> None:
    assert url_key(pattern) == encoded


def test_object_url_path_style_and_virtual_hosted() -> None:
    assert object_url("b", "k/a b.csv", endpoint_url="http://h:9000/", region=None) == "http://h:9000/b/k/a%20b.csv"
    assert object_url("b", "k/*.csv", endpoint_url=None, region="eu-west-3") == (
        "https://b.s3.eu-west-3.amazonaws.com/k/*.csv"
    )
    assert object_url("b", "k/#", endpoint_url=None, region=None) == "https://b.s3.us-east-1.amazonaws.com/k/%23"


def test_archive_syntax_can_be_switched_off() -> None:
    assert url_key("x/a.tar :: m.csv", archive_syntax=False) == "x/a.tar%20%3A%3A%20m.csv"
    assert archive_path_syntax({}) and archive_path_syntax({"allow_archive_path_syntax": 1})
    assert not archive_path_syntax({"allow_archive_path_syntax": 0})
    assert not archive_path_syntax({"allow_archive_path_syntax": "false"})


def test_a_line_break_cannot_go_in_a_path_style_url() -> None:
    with pytest.raises(InvalidRequestError, match="line break"):
        object_url("b", "k/a\nb.csv", endpoint_url="http://h:9000", region=None)
    assert object_url("b", "k/a\nb.csv", endpoint_url=None, region=None).endswith("/k/a%0Ab.csv")


def test_key_url_puts_one_key_in_place_of_the_glob() -> None:
    url = object_url("b", "k/*.csv", endpoint_url="http://h:9000", region=None)
    assert key_url(url, "k/*.csv", "k/a b#1.csv") == "http://h:9000/b/k/a%20b%231.csv"
    url = object_url("b", "k/*.tar :: m*.csv", endpoint_url="http://h:9000", region=None)
    assert key_url(url, "k/*.tar :: m*.csv", "k/a b.tar") == "http://h:9000/b/k/a%20b.tar :: m*.csv"
    with pytest.raises(ValueError, match="is not the URL"):
        key_url(url, "other/*.csv", "other/a.csv")


# -------------------------------------------------------------------------------------- archives


@pytest.mark.parametrize(
    ("pattern", "archive", "member"),
    [
        ("a/x.tar :: m*.csv", "a/x.tar", "m*.csv"),
        ("a/x.tar::m*.csv", "a/x.tar", "m*.csv"),  # an archive extension needs no spaces
        ("a/x.tar.gz::m.csv", "a/x.tar.gz", "m.csv"),
        ("a/x.zip ::m.csv", "a/x.zip", "m.csv"),
        ("a/*.7z::m.csv", "a/*.7z", "m.csv"),
        ("a/*::m.csv", "a/*", "m.csv"),  # a glob before '::' names archives too
        ("a/x :: m.csv", "a/x", "m.csv"),  # spaces around '::' name an archive whatever its name
        ("a/x::y.csv", "a/x::y.csv", None),  # no extension, no glob, no spaces: one key
        ("a/x.TAR::y.csv", "a/x.TAR::y.csv", None),  # extensions are case-sensitive
        ("a/x.tar::", "a/x.tar::", None),
        (" :: m.csv", " :: m.csv", None),
        ("a/x.tar :: m::n.csv", "a/x.tar", "m::n.csv"),  # the first '::' splits
    ],
)
def test_split_archive(pattern: str, archive: str, member: str | None) -> None:
    assert split_archive(pattern) == (archive, member)
    assert split_archive(pattern, enabled=False) == (pattern, None)


def test_archive_listing_takes_the_format_from_the_member_pattern() -> None:
    listing = Listing("a/*.tar :: part-*.csv.gz")
    assert (listing.pattern, listing.member, listing.prefix) == ("a/*.tar", "part-*.csv.gz", "a/")
    listing.add_page([{"Key": "a/1.tar", "Size": 10}, {"Key": "a/1.zip", "Size": 10}])
    assert [(o.key, o.format, o.compression) for o in listing.objects] == [("a/1.tar", "CSVWithNames", "gzip")]


def test_a_question_mark_in_a_member_pattern_is_refused() -> None:
    with pytest.raises(InvalidRequestError, match="holds '\\?'.*use '\\*'"):
        Listing("a/x.tar :: m?.csv")


# ------------------------------------------------------------------------- keys S3 reads as named


@pytest.mark.parametrize("pattern", ["/a.csv", "/*.csv", "a//b.csv", "a//*.csv", "a/{b,c}//d"])
def test_keys_clickhouse_reads_under_another_name_are_refused(pattern: str) -> None:
    with pytest.raises(InvalidRequestError, match="no s3_uri can load it as named"):
        check_key_pattern(pattern)


def test_unreadable_listed_keys() -> None:
    assert unreadable_key("a/b.csv") is None
    assert "'//'" in (unreadable_key("a//b.csv") or "")
    assert "'/'" in (unreadable_key("/a.csv") or "")
    assert "carriage return" in (unreadable_key("a\rb.csv") or "")
    listing = Listing("k/**")
    listing.add_page([{"Key": "k/a.csv", "Size": 1}, {"Key": "k/x//y.csv", "Size": 1}])
    with pytest.raises(InvalidRequestError, match="matches 1 key.*'k/x//y.csv' holds '//'.*narrow the glob"):
        check_listing(LoadRequest(s3_uri="s3://b/k/**", table="t"), listing)


# ------------------------------------------------------------------------ keys read without listing


def test_direct_keys_are_looked_up_not_listed() -> None:
    listing = Listing("d/{a,b,a}.csv")
    assert listing.direct == ["d/a.csv", "d/b.csv", "d/a.csv"]
    listing.add_head("d/a.csv", {"ContentLength": 3})
    listing.add_head("d/b.csv", None)
    assert [o.key for o in listing.objects] == ["d/a.csv", "d/a.csv"]  # ClickHouse reads 'a' twice
    assert (listing.calls, listing.missing) == (2, ["d/b.csv"])
    with pytest.raises(NoObjectsError, match="1 of the 2 keys.*'d/b.csv'"):
        check_listing(LoadRequest(s3_uri="s3://b/d/{a,b,a}.csv", table="t"), listing)


def test_a_missing_direct_key_says_it_was_looked_up() -> None:
    listing = Listing("d/x.csv")
    listing.add_head("d/x.csv", None)
    with pytest.raises(NoObjectsError, match="matches 'd/x.csv' \\(read directly, without listing"):
        check_listing(LoadRequest(s3_uri="s3://b/d/x.csv", table="t"), listing)


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
    err = _bucket_error(_client_error("SlowDown", 503), "b", "list", "")
    assert isinstance(err, S3UnavailableError) and isinstance(err, S3chTransientError) and "SlowDown" in str(err)
    assert not isinstance(err, AirflowFailException)


def test_head_denied_names_get_object() -> None:
    err = _bucket_error(_client_error("403", 403), "b", "head", "k/a.csv")
    assert isinstance(err, BucketError)
    assert "s3:GetObject" in str(err) and "arn:aws:s3:::b/k/a.csv" in str(err) and "s3://b/k/a.csv" in str(err)

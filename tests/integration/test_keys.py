"""Every key S3 allows loads exactly that key, on the real local stack (ClickHouse 26.9, moto's S3 server).

The ``s3_uri`` is literal, as in the AWS CLI; ClickHouse percent-decodes the URL's path before it matches
(``Poco::URI``), so the operator encodes the key and the server decodes it back to exactly the pattern.
Each object holds its own ids; a load must land exactly the ids of the object it names. Beside the
operator's loads, ClickHouse's own ``s3()`` is asked which objects (``_path``) it reads for a glob, and
the answer compared with the manifest.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from clickhouse_driver.errors import ServerException

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.glob import compile_glob, object_url
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.errors import BucketError, NoObjectsError
from airflow_provider_s3ch.hooks.s3 import build_manifest, list_matching
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import free_port
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context, wait_answering

pytestmark = pytest.mark.integration

BUCKET = "s3ch-keys"

#: The odd keys: each object holds one row whose id is its index here.
ODD_KEYS = {
    "space": "k/a b.csv",
    "plus": "k/a+b.csv",
    "percent": "k/100%.csv",
    "percent25": "k/100%25.csv",
    "percent20": "k/a%20b.csv",
    "percent-slash": "k/a%2Fb.csv",
    "hash": "k/h#sh.csv",
    "question": "k/q?m.csv",
    "single-quote": "k/it's.csv",
    "double-quote": 'k/say "hi".csv',
    "non-ascii": "k/\u00fcn\u00efc\u00f6d\u00e9/\u65e5\u672c\u8a9e \u20ac.csv",
    "emoji": "k/\U0001f600.csv",
    "colons": "k/c:d::e.csv",
    "backslash": "k/back\\slash.csv",
    "query-like": "k/a&b=c;d.csv",
    "tab": "k/tab\tx.csv",
    "anchors": "k/$x^.csv",
    "dots": "k/./../x.csv",
}
#: Objects a wrong URL would read instead (the text before '#', the decoded form of an escape, ...).
DECOYS = [
    "k/h", "k/h#sh", "k/a", "k/a/b.csv", "k/100", "k/q", "k/q/m.csv", "k/q??m.csv", "k/its.csv",
    "k/say", "k/\u00fcn\u00efc\u00f6d\u00e9/", "k/tab", "k/c", "k/x.csv",
]  # fmt: skip
DECOY_ID = 1000


def _csv(*ids: int) -> bytes:
    return ("id,name\n" + "".join(f"{i},row{i}\n" for i in ids)).encode()


@pytest.fixture(scope="module")
def keys(stack: LocalStack) -> dict[str, int]:
    """The bucket with every odd key and the decoys; key -> the id its object holds."""
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    ids = {key: i for i, key in enumerate(ODD_KEYS.values())}
    ids.update({key: DECOY_ID + i for i, key in enumerate(DECOYS)})
    for key, i in ids.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=_csv(i))
    return ids


@pytest.fixture
def table(stack: LocalStack) -> str:
    name = f"default.keys_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client().execute(f"CREATE TABLE {name} (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    return name


def _ids(stack: LocalStack, table: str) -> list[int]:
    return [int(r[0]) for r in stack.clickhouse_client().execute(f"SELECT id FROM {table} ORDER BY id")]


def _load(s3_uri: str, table: str, **kwargs: Any) -> dict[str, Any]:
    op = S3ToClickHouseOperator(task_id="keys", s3_uri=s3_uri, table=table, **kwargs)
    return op.execute(fake_context("keys"))


def engine_paths(stack: LocalStack, bucket: str, pattern: str, **settings: Any) -> list[str]:
    """The keys ClickHouse's own ``s3()`` reads for the literal pattern (one row per object read)."""
    url = object_url(bucket, pattern, endpoint_url=stack.s3_endpoint, region=None)
    rows = stack.clickhouse_client().execute(
        "SELECT _path FROM s3(%(url)s, %(k)s, %(s)s, 'CSVWithNames', 'id UInt32, name String')",
        {"url": url, "k": stack.s3_access_key, "s": stack.s3_secret_key},
        settings={"s3_throw_on_zero_files_match": 0, **settings},
    )
    return sorted(str(r[0]).split("/", 1)[1] for r in rows)


def _manifest_keys(stack: LocalStack, bucket: str, pattern: str) -> list[str]:
    objects, _ = list_matching(stack.s3_client(), bucket, pattern)
    return [o.key for o in objects]


# ------------------------------------------------------------------------------ odd keys, loaded


@pytest.mark.parametrize("name", list(ODD_KEYS))
def test_each_odd_key_loads_exactly_its_object(stack: LocalStack, keys: dict[str, int], table: str, name: str) -> None:
    key = ODD_KEYS[name]
    result = _load(f"s3://{BUCKET}/{key}", table)
    assert _ids(stack, table) == [keys[key]], f"{key!r} loaded another object's rows"
    assert result["files"] == 1 and result["written_rows"] == 1


def test_a_glob_over_the_odd_keys_loads_each_object_once(stack: LocalStack, keys: dict[str, int], table: str) -> None:
    result = _load(f"s3://{BUCKET}/k/**", table, format="CSVWithNames")
    expected = sorted(keys[path] for path in engine_paths(stack, BUCKET, "k/**"))
    assert expected == sorted(i for key, i in keys.items() if compile_glob("k/**").fullmatch(key))
    assert _ids(stack, table) == expected
    assert result["files"] == len(expected) > len(ODD_KEYS)


GLOBS_OVER_ODD_KEYS = [
    "k/*", "k/**", "k/*.csv", "k/*%*", "k/100%*", "k/*#*", "k/h#*", "k/a?b.csv", "k/{a b,a+b,h#sh}.csv",
    "k/{a b,a+b}*", "k/\u00fcn\u00efc\u00f6d\u00e9/*", "k/*'*", 'k/*"*', "k/*\t*", "k/?.csv", "k/*:*",
    "k/{100%,100%25}.csv", "k/**/*.csv", "k/\U0001f600*", "k/*&*=*",
]  # fmt: skip


@pytest.mark.parametrize("pattern", GLOBS_OVER_ODD_KEYS)
def test_manifest_agrees_with_clickhouse_over_odd_keys(stack: LocalStack, keys: dict[str, int], pattern: str) -> None:
    expected = engine_paths(stack, BUCKET, pattern, s3_ignore_file_doesnt_exist=1)
    assert _manifest_keys(stack, BUCKET, pattern) == expected
    assert expected, "a vacuous comparison"


def test_question_mark_in_a_key_is_the_glob_and_both_sides_read_the_same(stack: LocalStack, table: str) -> None:
    """A glob has no escape: the key 'g/q?m.csv' also selects 'g/qxm.csv', in the manifest and on the server."""
    s3 = stack.s3_client()
    stack.create_bucket(BUCKET)
    for i, key in enumerate(["g/q?m.csv", "g/qxm.csv", "g/q/m.csv", "g/qxxm.csv"]):
        s3.put_object(Bucket=BUCKET, Key=key, Body=_csv(100 + i))
    assert engine_paths(stack, BUCKET, "g/q?m.csv") == ["g/q?m.csv", "g/qxm.csv"]
    result = _load(f"s3://{BUCKET}/g/q?m.csv", table)
    assert result["files"] == 2 and _ids(stack, table) == [100, 101]


def test_a_group_naming_a_key_twice_reads_it_twice(stack: LocalStack, keys: dict[str, int], table: str) -> None:
    pattern = "k/{a b,a b,a+b}.csv"
    assert engine_paths(stack, BUCKET, pattern) == ["k/a b.csv", "k/a b.csv", "k/a+b.csv"]
    manifest = build_manifest(stack.s3_client(), LoadRequest(s3_uri=f"s3://{BUCKET}/{pattern}", table="t"))
    assert [o.key for o in manifest.objects] == ["k/a b.csv", "k/a b.csv", "k/a+b.csv"]
    assert manifest.list_calls == 1 + 2  # the location, and one HeadObject per distinct key
    _load(f"s3://{BUCKET}/{pattern}", table)
    assert _ids(stack, table) == sorted([keys["k/a b.csv"]] * 2 + [keys["k/a+b.csv"]])


# ------------------------------------------------------------------- keys ClickHouse reads otherwise


def test_double_slash_and_leading_slash_keys_are_refused(stack: LocalStack) -> None:
    """ClickHouse's S3 client reads 'd/x//y.csv' as 'd/x/y.csv' and '/y.csv' as 'y.csv': refused up front."""
    s3 = stack.s3_client()
    stack.create_bucket(BUCKET)
    for key, i in [("d/x//y.csv", 1), ("d/x/y.csv", 2), ("/top.csv", 3), ("top.csv", 4)]:
        s3.put_object(Bucket=BUCKET, Key=key, Body=_csv(i))
    client = stack.clickhouse_client()
    sql = "SELECT id FROM s3(%(url)s, %(k)s, %(s)s, 'CSVWithNames', 'id UInt32, name String') ORDER BY id"
    creds = {"k": stack.s3_access_key, "s": stack.s3_secret_key}
    # The engine: '//' in the URL is an invalid key; listed, 'd/x//y.csv' yields the rows of 'd/x/y.csv'.
    with pytest.raises(ServerException, match="Invalid S3 key"):
        client.execute(sql, {"url": f"{stack.s3_endpoint}/{BUCKET}/d/x//y.csv", **creds})
    rows = client.execute(sql, {"url": f"{stack.s3_endpoint}/{BUCKET}/d/x/**", **creds},
                          settings={"s3_validate_etag_on_read": 0})
    assert [r[0] for r in rows] == [2, 2]
    # '%2Ftop.csv' is the key '/top.csv', read as 'top.csv'.
    assert [r[0] for r in client.execute(sql, {"url": f"{stack.s3_endpoint}/{BUCKET}/%2Ftop.csv", **creds})] == [4]
    # The provider refuses each before ClickHouse runs anything.
    for pattern, match in [
        ("d/x//y.csv", "holds '//'"),
        ("/top.csv", "starts with '/'"),
        ("d/x/**", "narrow the glob"),
    ]:
        with pytest.raises(InvalidRequestError, match=match):
            build_manifest(s3, LoadRequest(s3_uri=f"s3://{BUCKET}/{pattern}", table="t"))


def test_a_line_break_cuts_a_path_style_key_on_the_server(stack: LocalStack) -> None:
    """Why object_url refuses a key with a line break on a path-style endpoint: the server reads another object."""
    stack.create_bucket(BUCKET)
    stack.s3_client().put_object(Bucket=BUCKET, Key="nl/a", Body=_csv(7))
    rows = stack.clickhouse_client().execute(
        "SELECT id FROM s3(%(url)s, %(k)s, %(s)s, 'CSVWithNames', 'id UInt32, name String')",
        {"url": f"{stack.s3_endpoint}/{BUCKET}/nl/a%0Ab.csv", "k": stack.s3_access_key, "s": stack.s3_secret_key},
    )
    assert [r[0] for r in rows] == [7]
    with pytest.raises(InvalidRequestError, match="line break"):
        object_url(BUCKET, "nl/a\nb.csv", endpoint_url=stack.s3_endpoint, region=None)


# ---------------------------------------------------------------------------------------- archives


def _tar(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def archives(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    s3.put_object(Bucket=BUCKET, Key="arch/a.tar", Body=_tar(
        {"member1.csv": _csv(1), "member2.csv": _csv(2), "other.txt": b"x\n", "d/member9.csv": _csv(9)}))
    s3.put_object(Bucket=BUCKET, Key="arch/b.tar", Body=_tar({"member1.csv": _csv(11)}))
    s3.put_object(Bucket=BUCKET, Key="arch/sp ace#1.tar", Body=_tar({"member1.csv": _csv(21)}))
    s3.put_object(Bucket=BUCKET, Key="arch/not-a.csv", Body=_csv(99))
    s3.put_object(Bucket=BUCKET, Key="lit/a.tar :: m.csv", Body=_csv(31))  # a key that reads as an archive path
    return BUCKET


@pytest.mark.parametrize(
    ("pattern", "ids", "files"),
    [
        ("arch/*.tar :: member*.csv", [1, 2, 11, 21], 3),
        ("arch/a.tar :: member1.csv", [1], 1),
        ("arch/a.tar::member*.csv", [1, 2], 1),
        ("arch/{a,b}.tar :: member1.csv", [1, 11], 2),
        ("arch/sp ace#1.tar :: *.csv", [21], 1),
        ("arch/a.tar :: d/*.csv", [9], 1),
    ],
)
def test_archive_members_load(stack: LocalStack, archives: str, table: str, pattern: str, ids: list[int],
                              files: int) -> None:
    result = _load(f"s3://{archives}/{pattern}", table)
    assert _ids(stack, table) == ids
    assert result["files"] == files and result["format"] == "CSVWithNames"


def test_archive_manifest_lists_the_archives_clickhouse_opens(stack: LocalStack, archives: str) -> None:
    paths = engine_paths(stack, archives, "arch/*.tar :: member*.csv")
    assert paths == ["arch/a.tar::member1.csv", "arch/a.tar::member2.csv", "arch/b.tar::member1.csv",
                     "arch/sp ace#1.tar::member1.csv"]
    assert _manifest_keys(stack, archives, "arch/*.tar :: member*.csv") == sorted({p.split("::")[0] for p in paths})


def test_a_question_mark_in_a_member_pattern_is_refused(stack: LocalStack, archives: str) -> None:
    """The server reads nothing for it (a raw '?' makes it take the whole text as the key): refused up front."""
    assert engine_paths(stack, archives, "arch/a.tar :: member?.csv") == []
    with pytest.raises(InvalidRequestError, match="holds '\\?'"):
        build_manifest(stack.s3_client(), LoadRequest(s3_uri=f"s3://{archives}/arch/a.tar :: member?.csv", table="t"))


def test_archive_syntax_switched_off_reads_the_literal_key(stack: LocalStack, archives: str, table: str) -> None:
    with pytest.raises(NoObjectsError, match="'lit/a.tar'"):
        _load(f"s3://{archives}/lit/a.tar :: m.csv", table)
    _load(f"s3://{archives}/lit/a.tar :: m.csv", table, settings={"allow_archive_path_syntax": 0})
    assert _ids(stack, table) == [31]


# ----------------------------------------------------------------------------------- range limit


def test_range_limit_is_the_engines(stack: LocalStack) -> None:
    """RE2 compiles ``r/{0..2246749}.csv`` and refuses ``r/{0..2246750}.csv`` (pattern too large), on the
    server and here: the limit is the size of the compiled regex, not a count of values."""
    stack.create_bucket(BUCKET)
    stack.s3_client().put_object(Bucket=BUCKET, Key="r/5.csv", Body=_csv(5))
    below, above = "r/{0..2246749}.csv", "r/{0..2246750}.csv"
    started = time.monotonic()
    assert engine_paths(stack, BUCKET, below) == ["r/5.csv"]
    assert _manifest_keys(stack, BUCKET, below) == ["r/5.csv"]
    with pytest.raises(ServerException, match="CANNOT_COMPILE_REGEXP|pattern too large") as err:
        engine_paths(stack, BUCKET, above)
    assert err.value.code == 427
    with pytest.raises(InvalidRequestError, match="pattern too large.*CANNOT_COMPILE_REGEXP"):
        build_manifest(stack.s3_client(), LoadRequest(s3_uri=f"s3://{BUCKET}/{above}", table="t"))
    print(f"both sides of the range limit, engine and manifest: {time.monotonic() - started:.1f} s")


def test_a_hundred_thousand_values_load(stack: LocalStack, table: str) -> None:
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    for n in (0, 99999, 100000, 100001):
        s3.put_object(Bucket=BUCKET, Key=f"h/{n}.csv", Body=_csv(n))
    assert engine_paths(stack, BUCKET, "h/{0..100000}.csv") == ["h/0.csv", "h/100000.csv", "h/99999.csv"]
    _load(f"s3://{BUCKET}/h/{{0..100000}}.csv", table)
    assert _ids(stack, table) == [0, 99999, 100000]


def test_a_backtracking_glob_answers_like_the_engine(stack: LocalStack) -> None:
    """``**a**a**a**a**aX`` against a 40-character key: the engine (RE2) answers at once, and so does the manifest."""
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    hit, miss = "redos/" + "a" * 34 + "X.parquet", "redos/" + "a" * 40
    for key in (hit, miss):
        s3.put_object(Bucket=BUCKET, Key=key, Body=_csv(1))
    pattern = "redos/**a**a**a**a**aX.parquet"
    started = time.monotonic()
    assert _manifest_keys(stack, BUCKET, pattern) == [hit] == engine_paths(stack, BUCKET, pattern)
    print(f"{pattern!r}: manifest and engine in {time.monotonic() - started:.3f} s")


# -------------------------------------------------------------------- a connection with GetObject only


GET_ONLY_POLICY = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::s3ch-get-only/in/*"}],
}
#: moto's S3 server enforces IAM after this many requests: the setup below makes exactly these.
SETUP_REQUESTS = 7


@pytest.fixture(scope="module")
def get_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server enforcing IAM, a bucket, and keys of a user allowed s3:GetObject on ``in/*`` only."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto-iam") / "moto.log"
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(SETUP_REQUESTS))
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{endpoint}/moto-api/")
        admin = {"endpoint_url": endpoint, "region_name": "us-east-1", "aws_access_key_id": "setup",
                 "aws_secret_access_key": "setup"}
        s3, iam = boto3.client("s3", **admin), boto3.client("iam", **admin)
        s3.create_bucket(Bucket="s3ch-get-only")  # 1
        s3.put_object(Bucket="s3ch-get-only", Key="in/a b#1.csv", Body=_csv(1))  # 2
        s3.put_object(Bucket="s3ch-get-only", Key="in/c.csv", Body=_csv(3))  # 3
        s3.put_object(Bucket="s3ch-get-only", Key="out/d.csv", Body=_csv(4))  # 4
        iam.create_user(UserName="reader")  # 5
        iam.put_user_policy(UserName="reader", PolicyName="get", PolicyDocument=json.dumps(GET_ONLY_POLICY))  # 6
        key = iam.create_access_key(UserName="reader")["AccessKey"]  # 7
        yield {"endpoint": endpoint, "login": key["AccessKeyId"], "password": key["SecretAccessKey"]}
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def get_only_conns(stack: LocalStack, get_only: dict[str, str], env_conn: Any) -> dict[str, str]:
    aws = env_conn("aws_get_only", {"conn_type": "aws", "login": get_only["login"], "password": get_only["password"],
                                    "extra": {"endpoint_url": get_only["endpoint"], "region_name": "us-east-1"}})
    ch = env_conn("clickhouse_get_only", stack.clickhouse_connection(0, s3_endpoint_url=get_only["endpoint"]))
    return {"aws_conn_id": aws, "clickhouse_conn_id": ch}


def _reader(get_only: dict[str, str]) -> Any:
    return boto3.client("s3", endpoint_url=get_only["endpoint"], region_name="us-east-1",
                        aws_access_key_id=get_only["login"], aws_secret_access_key=get_only["password"])


def test_get_object_permission_is_enough_for_keys_read_directly(
    stack: LocalStack, get_only: dict[str, str], get_only_conns: dict[str, str], table: str
) -> None:
    reader = _reader(get_only)
    with pytest.raises(reader.exceptions.ClientError, match="AccessDenied"):
        reader.list_objects_v2(Bucket="s3ch-get-only", Prefix="in/")  # the user may not list
    manifest = build_manifest(reader, LoadRequest(s3_uri="s3://s3ch-get-only/in/{a b#1,c}.csv", table="t"))
    assert [o.key for o in manifest.objects] == ["in/a b#1.csv", "in/c.csv"]
    assert manifest.list_calls == 1 + 2 and manifest.region is None  # GetBucketLocation (denied), two HeadObject
    _load("s3://s3ch-get-only/in/{a b#1,c}.csv", table, **get_only_conns)
    assert _ids(stack, table) == [1, 3]


def test_get_object_only_errors(get_only: dict[str, str]) -> None:
    reader = _reader(get_only)
    with pytest.raises(NoObjectsError, match="matches 'in/nope.csv' \\(read directly"):
        build_manifest(reader, LoadRequest(s3_uri="s3://s3ch-get-only/in/nope.csv", table="t"))
    with pytest.raises(BucketError, match="access denied.*s3://s3ch-get-only/out/d.csv.*s3:GetObject"):
        build_manifest(reader, LoadRequest(s3_uri="s3://s3ch-get-only/out/d.csv", table="t"))
    with pytest.raises(BucketError, match="s3:ListBucket"):
        build_manifest(reader, LoadRequest(s3_uri="s3://s3ch-get-only/in/*.csv", table="t"))

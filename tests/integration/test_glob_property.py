"""Property: for generated keys and globs, the manifest is exactly the set of objects ClickHouse's ``s3()`` reads.

Keys are drawn from an alphabet of the characters that trouble URLs and globs (space, ``+``, ``%``,
``#``, ``?``, quotes, non-ASCII, regex metacharacters, glob characters); globs are derived from them
(a character turned into ``?``, a run into ``*``, a tail into ``**``, ``{a,b}`` groups of two keys, a
range) or built from glob tokens. Each example puts its keys under a prefix of its own on the local
stack's S3 server and, for every glob, compares :func:`list_matching` with the ``_path`` of every
row the ClickHouse node reads. A glob the provider refuses must be one the server refuses too.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from clickhouse_driver.errors import ServerException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.glob import object_url
from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.hooks.s3 import list_matching
from airflow_provider_s3ch.local import LocalStack

pytestmark = pytest.mark.integration

BUCKET = "s3ch-glob-property"
EXAMPLES = 60
MIN_CASES = 300

ALPHABET = "ab01.-_ +%#?'\"\u00fc\u00e9\u65e5\U0001f600=:,&$^()[]|\\~!@;*{}\t"
SEGMENT = st.text(alphabet=ALPHABET, min_size=1, max_size=6)
RELATIVE_KEY = st.lists(SEGMENT, min_size=1, max_size=3).map("/".join).filter(lambda k: "::" not in k)
GLOB_TOKENS = st.sampled_from(
    ["*", "**", "?", "/", "**/", "{a,b}", "{a,b/0}", "{0..12}", "{01..3}", "{1}", "a", "b", "0", "1", ".", " ",
     "%", "#", "+", "'", "\u00fc", "$", "^", "(", "|", ",", "{", "}"]
)  # fmt: skip


def _derived_globs(data: st.DataObject, keys: list[str]) -> list[str]:
    """Globs made from the keys: the key, one character as '?', a run as '*', a tail as '**', a group."""
    globs: list[str] = []
    for key in keys:
        globs.append(key)
        i = data.draw(st.integers(0, len(key) - 1), label="?-at")
        globs.append(key[:i] + "?" + key[i + 1 :])
        j = data.draw(st.integers(i, len(key)), label="*-to")
        globs.append(key[:i] + "*" + key[j:])
        cut = key.find("/")
        globs.append((key[: cut + 1] if cut >= 0 else "") + "**")
    first, second = data.draw(st.permutations(keys), label="pair")[:2]
    globs.append("{" + first + "," + second + "}")
    globs.append("{" + first + "," + second + "}*")
    globs.append(data.draw(st.lists(GLOB_TOKENS, min_size=1, max_size=6).map("".join), label="tokens"))
    globs.append(data.draw(st.lists(GLOB_TOKENS, min_size=1, max_size=4).map("".join), label="tokens") + "*")
    return [g for g in dict.fromkeys(globs) if "::" not in g]


def _clickhouse_reads(stack: LocalStack, client: Any, pattern: str) -> list[str] | str:
    # The column's name is one no key segment can spell: under use_hive_partitioning a segment ``a=`` is a
    # partition column ``a``, and a file whose only column is a partition column is refused (error 117).
    url = object_url(BUCKET, pattern, endpoint_url=stack.s3_endpoint, region=None)
    try:
        rows = client.execute(
            "SELECT _path FROM s3(%(url)s, %(k)s, %(s)s, 'CSV', 'line String')",
            {"url": url, "k": stack.s3_access_key, "s": stack.s3_secret_key},
            settings={"s3_throw_on_zero_files_match": 0, "s3_ignore_file_doesnt_exist": 1},
        )
    except ServerException as exc:
        return f"refused: {exc.code}"
    return sorted(str(r[0]).split("/", 1)[1] for r in rows)


def _manifest(s3: Any, pattern: str) -> list[str] | str:
    try:
        objects, _ = list_matching(s3, BUCKET, pattern)
    except (InvalidRequestError, S3chError) as exc:
        return f"refused: {type(exc).__name__}"
    return [o.key for o in objects]


def test_manifest_equals_what_clickhouse_reads(stack: LocalStack) -> None:
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    client = stack.clickhouse_client()
    cases: list[tuple[str, int]] = []
    refused: list[str] = []
    started = time.monotonic()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(relative=st.lists(RELATIVE_KEY, min_size=2, max_size=6, unique=True), data=st.data())
    def prop(relative: list[str], data: st.DataObject) -> None:
        prefix = f"p{uuid.uuid4().hex[:10]}/"
        keys = [prefix + k for k in relative]
        for key in keys:
            s3.put_object(Bucket=BUCKET, Key=key, Body=b"1\n")
        for glob in _derived_globs(data, relative):
            pattern = prefix + glob
            expected = _clickhouse_reads(stack, client, pattern)
            got = _manifest(s3, pattern)
            if isinstance(got, str):
                refused.append(pattern)
                assert isinstance(expected, str), f"{pattern!r}: refused ({got}) but ClickHouse reads {expected}"
            else:
                assert got == expected, f"{pattern!r} over {keys!r}"
            cases.append((pattern, len(got) if isinstance(got, list) else -1))

    prop()
    elapsed = time.monotonic() - started
    matched = sum(1 for _, n in cases if n > 0)
    print(f"{len(cases)} globs over {EXAMPLES} generated key sets in {elapsed:.1f} s: {matched} read objects, "
          f"{len(refused)} refused by both sides")
    assert len(cases) >= MIN_CASES
    assert matched >= len(cases) // 2, "most generated globs should select something"

"""Key matching is linear in the key, as on the server (RE2), whatever the glob.

Python's backtracking ``re`` did not finish ``**a**a**a**a**aX`` against a 40-character key in 30 s;
ClickHouse answers in 0.01 s. These tests assert the outcome; the timings are printed for reference.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_s3ch.core.glob import clickhouse_regex, compile_glob

REDOS = "redos/**a**a**a**a**aX.parquet"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("redos/" + "a" * 40, False),  # no 'X.parquet': every split of the a's fails
        ("redos/" + "a" * 34 + "X.parquet", True),
        ("redos/" + "a" * 1000, False),  # S3 keys are at most 1024 bytes
        ("redos/" + "a/" * 500 + "aX.parquet", True),
        ("redos/" + "ab" * 500, False),
    ],
)
def test_the_redos_glob_answers_in_linear_time(key: str, expected: bool) -> None:
    glob = compile_glob(REDOS)
    assert glob.regex == clickhouse_regex(REDOS)
    started = time.perf_counter()
    assert glob.fullmatch(key) is expected
    print(f"{REDOS!r} against a {len(key)}-character key: {time.perf_counter() - started:.6f} s")


@pytest.mark.parametrize(
    ("pattern", "miss", "hit"),
    [
        ("*?*?*?*?*?*?*?*?*?*?X", "a" * 1000, "a" * 1000 + "X"),
        ("**/**/**/**/**/**/X", "a/" * 500, "a/" * 500 + "X"),
        ("{a?,?a}{a?,?a}{a?,?a}{a?,?a}{a?,?a}*X", "a" * 1000, "a" * 1000 + "X"),
        ("*a*a*a*a*a*a*a*a*aX", "a" * 1000, "a" * 1000 + "X"),
    ],
)
def test_other_nested_globs_answer(pattern: str, miss: str, hit: str) -> None:
    glob = compile_glob(pattern)
    started = time.perf_counter()
    assert glob.fullmatch(miss) is False
    assert glob.fullmatch(hit) is True
    print(f"{pattern!r} against keys of {len(miss)} characters: {time.perf_counter() - started:.6f} s")


def test_matching_scales_linearly() -> None:
    """Doubling the key does not square the work: 16 keys of 1000 characters in well under a second."""
    glob = compile_glob(REDOS)
    started = time.perf_counter()
    results = {glob.fullmatch("redos/" + "a" * n) for n in range(500, 1016)}
    elapsed = time.perf_counter() - started
    assert results == {False}
    print(f"516 keys of 506..1021 characters: {elapsed:.4f} s")

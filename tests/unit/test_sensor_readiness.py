"""The sensor's rule (core/readiness.py): when the files of a glob are ready, and that it agrees with the
operator's own check of the same listing."""

from __future__ import annotations

import itertools

import pytest

from airflow_provider_s3ch.core.errors import InvalidRequestError, NoObjectsError
from airflow_provider_s3ch.core.manifest import Listing, check_listing
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.readiness import WaitRequest, readiness

BUCKET = "b"


def _listing(pattern: str, store: dict[str, int]) -> Listing:
    """The listing the S3 shell fills (hooks/s3.py ``_fill``): HeadObject per direct key, else the prefix's pages."""
    listing = Listing(pattern)
    if listing.direct is not None:
        for key in dict.fromkeys(listing.direct):
            listing.add_head(key, {"ContentLength": store[key]} if key in store else None)
    else:
        listing.add_page([{"Key": k, "Size": s} for k, s in sorted(store.items()) if k.startswith(listing.prefix)])
    return listing


def _ready(pattern: str, store: dict[str, int], **kwargs: object) -> bool:
    request = WaitRequest.build(s3_uri=f"s3://{BUCKET}/{pattern}", **kwargs)
    return readiness(request, _listing(pattern, store).objects, marker_found=bool(kwargs.get("success_marker"))).ready


def test_a_range_glob_waits_for_files_in_its_range() -> None:
    pattern = "m/{01..12}.csv"
    assert not _ready(pattern, {})
    assert not _ready(pattern, {"m/1.csv": 5, "m/13.csv": 5, "m/01.csv.tmp": 5})  # not padded, out of range, longer
    assert _ready(pattern, {"m/07.csv": 5})
    assert not _ready(pattern, {"m/07.csv": 5}, min_files=2)
    assert _ready(pattern, {"m/07.csv": 5, "m/12.csv": 1}, min_files=2)


def test_empty_files_are_in_the_manifest_but_do_not_count() -> None:
    request = WaitRequest.build(s3_uri="s3://b/m/*.csv", min_files=2)
    state = readiness(request, _listing("m/*.csv", {"m/a.csv": 0, "m/b.csv": 7, "m/c.csv": 0}).objects)
    assert (state.files, state.bytes, state.non_empty_files, state.ready) == (3, 7, 1, False)
    assert state.waiting_for == ["2 file(s) that are not empty, 1 so far"]
    state = readiness(request, _listing("m/*.csv", {"m/a.csv": 3, "m/b.csv": 7, "m/c.csv": 0}).objects)
    assert state.ready and state.summary() == {
        "s3_uri": "s3://b/m/*.csv",
        "files": 3,
        "bytes": 10,
        "non_empty_files": 2,
        "success_marker": None,
    }


def test_a_key_list_read_directly_waits_for_every_key() -> None:
    """``{a,b}`` alone is read key by key by ClickHouse, which fails on a missing one: the sensor waits for all."""
    pattern = "k/{a,b}.csv"
    state = readiness(WaitRequest.build(s3_uri=f"s3://b/{pattern}"), _listing(pattern, {"k/a.csv": 4}).objects)
    assert not state.ready and state.missing == ["k/b.csv"]
    assert "'k/b.csv'" in state.reason
    assert _ready(pattern, {"k/a.csv": 4, "k/b.csv": 4})
    # with another glob the list is matched against the listing: one key is enough
    assert _ready("k/{a,b}*.csv", {"k/a.csv": 4})


def test_a_key_named_twice_counts_twice_as_in_the_manifest() -> None:
    state = readiness(
        WaitRequest.build(s3_uri="s3://b/k/{a,a}.csv", min_files=2), _listing("k/{a,a}.csv", {"k/a.csv": 4}).objects
    )
    assert state.ready and (state.files, state.bytes) == (2, 8)


@pytest.mark.parametrize(
    ("pattern", "marker"),
    [
        ("exports/2024-01/part-*.parquet", "exports/2024-01/_SUCCESS"),
        ("exports/{2024-01,2024-02}/x.csv", "exports/_SUCCESS"),
        ("exports/2024-0{1..3}/x.csv", "exports/_SUCCESS"),
        ("exports/x.csv", "exports/_SUCCESS"),
        ("top-*.csv", "_SUCCESS"),
        ("a/b/archive.zip :: *.csv", "a/b/_SUCCESS"),
    ],
)
def test_the_marker_is_relative_to_the_globs_fixed_prefix(pattern: str, marker: str) -> None:
    assert WaitRequest.build(s3_uri=f"s3://b/{pattern}", success_marker="_SUCCESS").marker_key == marker


def test_the_marker_and_the_files_are_both_needed() -> None:
    request = WaitRequest.build(s3_uri="s3://b/d/*.csv", success_marker="_SUCCESS")
    files = _listing("d/*.csv", {"d/a.csv": 1}).objects
    absent = readiness(request, files, marker_found=False)
    assert not absent.ready and absent.waiting_for == ["the success marker 'd/_SUCCESS'"]
    assert readiness(request, files, marker_found=True).ready
    nothing = readiness(request, [], marker_found=True)
    assert not nothing.ready and nothing.waiting_for == ["1 file(s) that are not empty, 0 so far"]
    assert readiness(request, files, marker_found=True).summary()["success_marker"] == "d/_SUCCESS"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"s3_uri": "b/x.csv"}, "is not an S3 URI"),
        ({"s3_uri": "s3://b/"}, "names no key"),
        ({"s3_uri": "s3://b/x.csv", "min_files": 0}, "min_files=0"),
        ({"s3_uri": "s3://b/x.csv", "min_files": "many"}, "min_files='many'"),
        ({"s3_uri": "s3://b/x.csv", "success_marker": ""}, "is not a key"),
        ({"s3_uri": "s3://b/x.csv", "success_marker": "/_SUCCESS"}, "is not a key"),
        ({"s3_uri": "s3://b/x.csv", "success_marker": "_SUCCESS*"}, "is not a key"),
        ({"s3_uri": "s3://b/x.csv", "success_marker": "a//_SUCCESS"}, "'//'"),
        ({"s3_uri": "s3://b/r/{0..2246750}.csv"}, "CANNOT_COMPILE_REGEXP"),
        ({"s3_uri": "s3://b/k/x,y}{a,b}.csv"}, "outside a {...} group"),
    ],
)
def test_malformed_arguments_are_refused_before_any_look(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        WaitRequest.build(**kwargs)
    assert needle in str(info.value)


def test_templated_min_files_renders_as_text() -> None:
    assert WaitRequest.build(s3_uri="s3://b/x.csv", min_files="3").min_files == 3


PATTERNS = [
    "p/{a,b}.csv",
    "p/{a,b,c}.csv",
    "p/{01..03}.csv",
    "p/{1..3}.csv",
    "p/*.csv",
    "p/{a,b}/*.csv",
    "p/**.csv",
    "p/?.csv",
    "p/a.csv",
]
KEYS = ["p/a.csv", "p/b.csv", "p/c.csv", "p/01.csv", "p/2.csv", "p/a/x.csv", "p/b/y/z.csv", "q/a.csv"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_ready_exactly_when_the_operators_check_of_the_same_listing_passes(pattern: str) -> None:
    """Every subset of KEYS (non-empty files): the sensor is ready iff the operator would build its manifest."""
    for n in range(len(KEYS) + 1):
        for keys in itertools.combinations(KEYS, n):
            store = dict.fromkeys(keys, 10)
            listing = _listing(pattern, store)
            try:
                check_listing(LoadRequest(s3_uri=f"s3://{BUCKET}/{pattern}", table="t"), listing)
                operator_builds = True
            except NoObjectsError:
                operator_builds = False
            assert _ready(pattern, store) is operator_builds, (pattern, keys)

"""core/events.py: S3 notifications to files, the glob's files, bounded events, one run's union of them."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from urllib.parse import quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from airflow_provider_s3ch.core.errors import FormatError, InvalidRequestError, NothingMatchedError
from airflow_provider_s3ch.core.events import (
    MAX_FILES_PER_EVENT,
    EventFile,
    EventPayload,
    check_events_request,
    collapse,
    event_payloads,
    manifest_of,
    matching,
    notification_files,
    payloads,
    run_files,
    union,
)
from airflow_provider_s3ch.core.models import LoadRequest

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def file(key: str, etag: str = "e1", size: int = 10, seconds: int = 0) -> EventFile:
    return EventFile(key=key, size=size, etag=etag, last_modified=T0 + timedelta(seconds=seconds))


def record(key: str, event: str = "ObjectCreated:Put", bucket: str = "b", etag: str = "abc", size: int = 5) -> dict:
    """One record as moto's server (and S3) send it: the key encoded with ``quote_plus``."""
    return {"eventVersion": "2.1", "eventSource": "aws:s3", "eventTime": "2026-01-01T00:00:01.500Z",
            "eventName": event, "s3": {"bucket": {"name": bucket}, "object": {
                "key": quote_plus(key), "size": size, "eTag": etag}}}


def test_notification_files_decode_keys_and_keep_only_created_objects() -> None:
    body = json.dumps({"Records": [
        record("in/a b+c/ü.csv"), record("in/gone.csv", event="ObjectRemoved:Delete"),
        record("in/x.csv", bucket="other"), record("in/y.csv", event="s3:ObjectCreated:CompleteMultipartUpload"),
    ]})
    files = notification_files(body, bucket="b")
    assert [f.key for f in files] == ["in/a b+c/ü.csv", "in/y.csv"]
    assert files[0].etag == "abc" and files[0].size == 5
    assert files[0].last_modified == datetime(2026, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)


def test_the_test_event_names_no_file() -> None:
    test_event = {"Service": "Amazon S3", "Event": "s3:TestEvent", "Time": "2026-01-01T00:00:00Z", "Bucket": "b"}
    assert notification_files(json.dumps(test_event)) == []


def test_matching_is_clickhouses_glob() -> None:
    files = [file("d/2026/a.csv"), file("d/2026/sub/b.csv"), file("d/x.parquet"), file("d/2026/"),
             file("d/2026/c.csv", size=0)]
    assert [f.key for f in matching(files, "d/*/*.csv")] == ["d/2026/a.csv", "d/2026/c.csv"]
    assert [f.key for f in matching(files, "d/**.csv")] == ["d/2026/a.csv", "d/2026/sub/b.csv", "d/2026/c.csv"]
    # a key without globs and a {a,b} group: the keys ClickHouse reads directly
    assert [f.key for f in matching(files, "d/x.parquet")] == ["d/x.parquet"]
    assert [f.key for f in matching(files, "d/{x.parquet,y.csv}")] == ["d/x.parquet"]


def test_collapse_keeps_one_entry_per_key_and_etag() -> None:
    files = [file("a"), file("b"), file("a", seconds=5), file("a", etag="e2")]
    assert [(f.key, f.etag, f.last_modified) for f in collapse(files)] == [
        ("a", "e1", T0), ("b", "e1", T0), ("a", "e2", T0)]


def test_payloads_are_bounded_and_say_what_is_pending() -> None:
    files = [file(f"k{i:04d}") for i in range(MAX_FILES_PER_EVENT + 7)] + [file("k0000")]
    events = payloads("b", files)
    assert [len(e.files) for e in events] == [MAX_FILES_PER_EVENT, 7]
    assert [e.pending for e in events] == [7, 0]
    assert [len(e.files) for e in payloads("b", files, limit=500)] == [500, 500, 7]
    with pytest.raises(ValidationError):
        EventPayload(bucket="b", files=files)
    assert payloads("b", []) == []


def test_union_takes_the_latest_version_of_each_key_ordered_by_key() -> None:
    one = EventPayload(bucket="b", files=[file("z"), file("a", etag="old", seconds=1)])
    two = EventPayload(bucket="b", files=[file("a", etag="new", seconds=2), file("m")])
    late = EventPayload(bucket="b", files=[file("a", etag="older", seconds=0)])
    assert [(f.key, f.etag) for f in union([one, two, late])] == [("a", "new"), ("m", "e1"), ("z", "e1")]
    assert union([late, two, one]) == union([one, two, late])


def test_event_payloads_take_this_providers_events_of_the_bucket() -> None:
    ours = payloads("b", [file("a")])[0].to_event()
    elsewhere = payloads("c", [file("a")])[0].to_event()
    extras = [{"from_trigger": True, "payload": ours}, {"from_trigger": True, "payload": elsewhere},
              {"from_trigger": True, "payload": {"messages": []}}, None, {}]
    assert [[f.key for f in e.files] for e in event_payloads(extras, "b")] == [["a"]]


def test_manifest_of_is_what_a_listing_of_the_same_files_makes() -> None:
    request = LoadRequest.from_arguments(s3_uri="s3://b/in/*.csv.gz", table="t")
    manifest = manifest_of(request, [file("in/b.csv.gz", size=7, seconds=3), file("in/a.csv.gz", etag="x"),
                                     file("in/other.parquet")], region="eu-west-3", calls=1)
    assert [(o.key, o.size, o.etag) for o in manifest.objects] == [("in/a.csv.gz", 10, "x"), ("in/b.csv.gz", 7, "e1")]
    assert (manifest.format, manifest.compression, manifest.region, manifest.list_calls) == (
        "CSVWithNames", "gzip", "eu-west-3", 1)
    assert manifest.objects[1].last_modified == T0 + timedelta(seconds=3)
    with pytest.raises(NothingMatchedError, match="none of the 1 file"):
        manifest_of(request, [file("in/other.parquet")], region=None, calls=0)
    mixed = LoadRequest.from_arguments(s3_uri="s3://b/in/*", table="t")
    with pytest.raises(FormatError):
        manifest_of(mixed, [file("in/a.csv"), file("in/b.parquet")], region=None, calls=0)


_KEYS = st.sampled_from([f"in/{name}.csv" for name in "abcdefgh"] + ["in/x.parquet", "out/a.csv"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[EventFile], list[EventFile]]:
    """A clean stream of file versions, and what a notification channel made of it: some dropped, some
    delivered two or three times, all shuffled."""
    clean = [file(key, etag=f"e{n}", seconds=n) for n, key in enumerate(draw(st.lists(_KEYS, max_size=30)))]
    kept = [f for f in clean if draw(st.booleans()) or draw(st.booleans())]
    delivered = [f for f in kept for _ in range(draw(st.integers(1, 3)))]
    random.Random(draw(st.integers(0, 2**32))).shuffle(delivered)
    return kept, delivered


@settings(max_examples=200, deadline=None)
@given(streams(), st.integers(1, 7))
def test_a_bad_stream_gives_the_clean_streams_files_that_it_kept(stream: tuple, limit: int) -> None:
    kept, delivered = stream
    events = payloads("b", matching(delivered, "in/*.csv"), limit=limit)
    clean = union([EventPayload(bucket="b", files=matching(kept, "in/*.csv"))])
    assert union(events) == clean
    assert all(len(e.files) <= limit for e in events)
    # a run given every event twice, in any order, loads the same files
    assert union(events[::-1] + events) == clean


def events_request(**kwargs: object) -> LoadRequest:
    return LoadRequest.from_arguments(s3_uri="s3://b/in/*.csv", table="t", skip_loaded=True, **kwargs)


@given(st.lists(st.lists(st.sampled_from(["in/a.csv", "in/b.csv", "in/c.csv", "in/x.txt"]), max_size=4), max_size=5),
       st.integers(0, 3), st.sampled_from(["b", "other"]))
def test_run_files_lists_unless_a_watchers_event_of_the_bucket_names_files(
        named: list[list[str]], foreign: int, bucket: str) -> None:
    extras = [{"from_trigger": True, "payload": p.to_event()} for keys in named
              for p in payloads(bucket, [file(k) for k in keys])]
    extras += [{"note": "posted by hand"}] * foreign + [None]
    chosen = run_files(events_request(), extras)
    assert chosen.events == len(extras)
    ours = [e for e in extras if e and e.get("payload") and bucket == "b"]
    assert chosen.watcher_events == len(ours)
    if not ours:
        assert chosen.files is None and "listing s3://b/in/*.csv" in chosen.note
    else:  # every key any event named, once; the glob is the manifest's to apply
        assert [f.key for f in chosen.files] == sorted({k for keys in named for k in keys})
        assert f"{len(chosen.files)} file(s), no listing" in chosen.note


def test_run_files_without_events_lists() -> None:
    assert run_files(events_request(), []).files is None


def test_a_run_from_events_needs_the_ledger_and_refuses_on_changed_fail() -> None:
    with pytest.raises(InvalidRequestError, match="needs skip_loaded=True"):
        check_events_request(LoadRequest.from_arguments(s3_uri="s3://b/in/*.csv", table="t"))
    with pytest.raises(InvalidRequestError, match="on_changed='fail' cannot run with files_from='events'"):
        check_events_request(events_request(on_changed="fail"))
    check_events_request(events_request(on_changed="skip"))


def test_run_files_takes_the_files_of_the_events_stored_since_once() -> None:
    def extra(*keys: str) -> dict:
        return {"from_trigger": True, "payload": payloads("b", [file(k) for k in keys])[0].to_event()}

    chosen = run_files(events_request(), [extra("in/a.csv", "in/b.csv")], [extra("in/b.csv", "in/c.csv"), None])
    assert [f.key for f in chosen.files] == ["in/a.csv", "in/b.csv", "in/c.csv"]
    assert (chosen.watcher_events, chosen.waiting_events) == (1, 1) and "and 1 stored since" in chosen.note
    # without a watcher's event among the triggering ones, the run lists, whatever waits
    assert run_files(events_request(), [{"note": "by hand"}], [extra("in/c.csv")]).files is None


def test_files_as_now_take_s3s_version_and_leave_out_the_gone() -> None:
    from datetime import UTC, datetime

    from airflow_provider_s3ch.core.events import EventFile, as_now
    from airflow_provider_s3ch.core.ledger_reads import moved_on
    from airflow_provider_s3ch.core.models import S3Object

    when = datetime(2026, 1, 1, tzinfo=UTC)
    later = datetime(2026, 1, 2, tzinfo=UTC)
    files = [EventFile(key=k, size=1, etag="e1", last_modified=when) for k in ("a", "b", "c", "d")]
    now = {"a": S3Object(key="a", size=1, etag="e1", last_modified=when),
           "b": S3Object(key="b", size=9, etag="e2", last_modified=later), "c": None}
    current, gone, changed = as_now(files, now)
    assert (gone, changed) == (["c"], ["b"])
    assert [(f.key, f.size, f.etag, f.last_modified) for f in current] == [
        ("a", 1, "e1", when), ("b", 9, "e2", later), ("d", 1, "e1", when)]  # d not looked up: the event's
    listed = [S3Object(key=f.key, size=f.size, etag=f.etag) for f in files]
    out, over = moved_on(listed, now)
    assert ([o.key for o in out], [o.key for o in over]) == (["c"], ["b"])

"""core/freshness.py: the lag, the pending files, the latency and the queue depth of a ledger run."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.events import EventFile, EventPayload, events_pending, payloads, run_files
from airflow_provider_s3ch.core.freshness import (
    Freshness,
    QueueDepth,
    freshness,
    lag,
    latency,
    percentile,
    queue_of,
    standing,
    summary_line,
)
from airflow_provider_s3ch.core.ledger import Selection
from airflow_provider_s3ch.core.models import LoadRequest, S3Object
from airflow_provider_s3ch.hooks import stats

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def obj(n: int, seconds: float = 0, size: int = 100) -> S3Object:
    return S3Object(key=f"k/{n:04d}.csv", size=size, etag=f"e{n}", last_modified=T0 + timedelta(seconds=seconds))


def event_file(n: int) -> EventFile:
    return EventFile(key=f"k/{n:04d}.csv", size=10, etag=f"e{n}", last_modified=T0)


def test_the_lag_is_the_age_of_the_oldest_file_and_zero_without_one() -> None:
    files = [obj(1, 30), obj(2, 10), obj(3, 50)]
    assert lag(files, T0 + timedelta(seconds=70)) == 60.0
    assert lag([], T0) == 0.0
    assert lag([S3Object(key="k", size=1)], T0) == 0.0  # LastModified unknown


def test_a_run_that_loaded_everything_leaves_no_lag_and_reports_each_files_latency() -> None:
    files = [obj(1, 0), obj(2, 10), obj(3, 20)]
    visible = {f.key: T0 + timedelta(seconds=30) for f in files}
    f = freshness(files, visible, started=T0 + timedelta(seconds=25), ended=T0 + timedelta(seconds=31))
    assert (f.lag_s, f.lag_left_s, f.pending_files, f.pending_bytes, f.loaded_files) == (25.0, 0.0, 0, 0, 3)
    assert f.latency is not None and (f.latency.files, f.latency.p50_s, f.latency.max_s) == (3, 20.0, 30.0)


def test_files_held_changed_and_left_are_pending_and_keep_the_lag() -> None:
    files = [obj(1, 0, 7), obj(2, 5, 11), obj(3, 10, 13), obj(4, 20, 17)]
    visible = {files[3].key: T0 + timedelta(seconds=40)}
    f = freshness(files, visible, held=[files[0].key], changed=[files[1].key], started=T0 + timedelta(seconds=30),
                  ended=T0 + timedelta(seconds=45), queue=QueueDepth(events=2, watcher_events=2, files=4, pending=5))
    assert (f.pending_held, f.pending_changed, f.pending_later, f.pending_files) == (1, 1, 1 + 5, 8)
    assert f.pending_bytes == 7 + 11 + 13  # the 5 files the events only counted have no known size
    assert (f.lag_s, f.lag_left_s) == (30.0, 45.0)  # file 1, held by another load, is still the oldest
    assert f.latency is not None and f.latency.max_s == 20.0


def test_a_file_landed_after_the_servers_now_counts_no_negative_latency_or_lag() -> None:
    files = [obj(1, 100)]
    f = freshness(files, {files[0].key: T0}, started=T0, ended=T0)
    assert f.lag_s == 0.0 and f.latency is not None and f.latency.max_s == 0.0


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_values_of_the_list_in_order(values: list[float]) -> None:
    p50, p95 = percentile(values, 0.5), percentile(values, 0.95)
    assert p50 in values and p95 in values and min(values) <= p50 <= p95 <= max(values)
    assert sum(v <= p95 for v in values) >= 0.95 * len(values)


@settings(max_examples=200)
@given(
    ages=st.lists(st.integers(min_value=-3600, max_value=86400), min_size=0, max_size=40),
    fate=st.data(),
    pending=st.integers(min_value=0, max_value=5000),
    run_s=st.integers(min_value=0, max_value=600),
)
def test_the_figures_add_up_and_are_never_negative(ages: list[int], fate: st.DataObject, pending: int,
                                                   run_s: int) -> None:
    started = T0 + timedelta(days=2)
    files = [obj(n, -age, size=n + 1) for n, age in enumerate(ages)]
    ends = fate.draw(st.lists(st.sampled_from(["loaded", "held", "changed", "left"]), min_size=len(files),
                              max_size=len(files)))
    visible = {f.key: started + timedelta(seconds=run_s / 2) for f, end in zip(files, ends, strict=True)
               if end == "loaded"}
    held = [f.key for f, end in zip(files, ends, strict=True) if end == "held"]
    changed = [f.key for f, end in zip(files, ends, strict=True) if end == "changed"]
    f = freshness(files, visible, held=held, changed=changed, started=started,
                  ended=started + timedelta(seconds=run_s), queue=QueueDepth(pending=pending))
    assert min(f.lag_s, f.lag_left_s, f.pending_files, f.pending_bytes) >= 0
    assert f.pending_files == f.pending_held + f.pending_changed + f.pending_later
    assert f.pending_files == len(files) - len(visible) + pending
    assert f.loaded_files + f.pending_files - pending == f.unloaded_files == len(files)
    assert f.pending_bytes == sum(o.size for o in files if o.key not in visible)
    if len(visible) < len(files):  # what is left is at least as old as when the run started looking at it
        oldest_left = min(o.last_modified for o in files if o.key not in visible)
        assert f.lag_left_s == max(0.0, (started + timedelta(seconds=run_s) - oldest_left).total_seconds())
    else:
        assert f.lag_left_s == 0.0
    if f.latency is not None:
        assert 0 <= f.latency.p50_s <= f.latency.p95_s <= f.latency.max_s


@given(st.integers(min_value=0, max_value=3500), st.integers(min_value=1, max_value=1000), st.data())
def test_the_events_pending_is_what_the_look_has_not_handed_on_yet(n: int, limit: int, data: st.DataObject) -> None:
    events = payloads("b", [event_file(i) for i in range(n)], limit=limit)
    taken = data.draw(st.integers(min_value=0, max_value=len(events)))
    assert events_pending(events[:taken]) == (n - sum(len(e.files) for e in events[:taken]) if taken else 0)
    assert events_pending(events) == 0


def test_events_of_two_looks_each_count_what_they_left() -> None:
    first = payloads("b", [event_file(i) for i in range(5)], limit=2)  # pending 3, 1, 0
    second = payloads("b", [event_file(i) for i in range(10, 17)], limit=3, full_listing=True)  # pending 4, 1, 0
    assert events_pending([first[0], second[0]]) == 3 + 4
    assert events_pending([first[0], second[0], first[1], second[1]]) == 1 + 1


def test_the_queue_depth_counts_the_events_and_the_files_of_the_loads_bucket() -> None:
    request = LoadRequest(s3_uri="s3://b/k/*.csv", table="t", skip_loaded=True)
    look = payloads("b", [event_file(i) for i in range(5)], limit=2)  # pending 3, 1, 0
    other = EventPayload(bucket="other", files=[event_file(1)])
    extras = [{"from_trigger": True, "payload": p.to_event()} for p in [look[0], other]] + [{"note": "by hand"}, None]
    chosen = run_files(request, extras, [{"payload": look[1].to_event()}])
    assert queue_of(chosen) == QueueDepth(events=4, watcher_events=1, waiting_events=1, files=4, pending=1)
    whole = run_files(request, [{"payload": p.to_event()} for p in look])  # the whole look: nothing to come
    assert queue_of(whole) == QueueDepth(events=3, watcher_events=3, files=5, pending=0)
    assert queue_of(run_files(request, [])) is None  # no event triggered the run


def test_the_standing_of_a_selection_leaves_out_the_loaded_files() -> None:
    files = [obj(n) for n in range(5)]
    sel = Selection(files=[files[0]], skipped_loaded=[files[1].key], skipped_claimed=[files[2].key],
                    skipped_changed=[files[3].key])
    now = standing(files, sel, lost=[files[4]])
    assert [o.key for o in now.unloaded] == [files[n].key for n in (0, 2, 3, 4)]
    assert (now.held, now.changed) == ([files[2].key, files[4].key], [files[3].key])


def test_the_log_line_and_the_metrics_name_every_figure() -> None:
    f = Freshness(lag_s=12.5, lag_left_s=3.0, unloaded_files=4, loaded_files=3, pending_files=2, pending_bytes=10,
                  pending_held=1, pending_changed=0, pending_later=1, latency=latency([1.0, 2.0, 9.0]),
                  queue_depth=QueueDepth(events=2, watcher_events=2, files=4, pending=1), clock="server")
    line = summary_line(f)
    assert "lag 12.5 s at the start, 3.0 s left" in line and "p95 9.0 s" in line and "2 asset event(s)" in line
    assert stats.gauges(f) == {"s3ch.lag": 12.5, "s3ch.lag_left": 3.0, "s3ch.pending_files": 2,
                               "s3ch.pending_bytes": 10, "s3ch.pending_held": 1, "s3ch.pending_changed": 0,
                               "s3ch.pending_later": 1, "s3ch.loaded_files": 3, "s3ch.queue.events": 2,
                               "s3ch.queue.files": 4, "s3ch.queue.pending": 1}
    assert stats.timings(f) == {"s3ch.latency.p50": timedelta(seconds=2), "s3ch.latency.p95": timedelta(seconds=9),
                                "s3ch.latency.max": timedelta(seconds=9)}


def test_the_metrics_go_to_airflows_stats_tagged_with_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, object, dict]] = []
    monkeypatch.setattr(stats.Stats, "gauge", lambda name, value, *a, tags=None, **k: sent.append(
        ("gauge", name, value, tags)))
    monkeypatch.setattr(stats.Stats, "timing", lambda name, dt, *a, tags=None, **k: sent.append(
        ("timing", name, dt, tags)))
    monkeypatch.setattr(stats, "get_current_context", lambda: {"ti": types.SimpleNamespace(dag_id="d", task_id="t")})
    f = freshness([obj(1)], {obj(1).key: T0 + timedelta(seconds=4)}, started=T0, ended=T0 + timedelta(seconds=5))
    stats.emit(f, __import__("logging").getLogger("test"))
    assert ("gauge", "s3ch.lag_left", 0.0, {"dag_id": "d", "task_id": "t"}) in sent
    assert ("timing", "s3ch.latency.max", timedelta(seconds=4), {"dag_id": "d", "task_id": "t"}) in sent
    assert all(name.startswith("s3ch.") for _, name, _, _ in sent)

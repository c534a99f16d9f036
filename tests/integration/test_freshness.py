"""A ledger run's ``freshness`` on the real local stack: the lag of the files it found, what it left pending, each
file's latency to rows visible on the server's clock, and the triggering events' depth."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.events import EventFile, payloads
from airflow_provider_s3ch.local import LocalStack
from tests.integration.faults import fingerprint
from tests.integration.test_ledger import BUCKET, Files, _ledger_run, bucket, new_files
from tests.integration.test_run_from_events import clean_of, triggered_by, versions

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not AIRFLOW_3, reason="asset events: Airflow 3")]

HOURS_2 = 7200.0


__all__ = ["bucket"]  # the module's bucket fixture, test_ledger's


@pytest.fixture
def files(stack: LocalStack, bucket: str) -> Files:
    return new_files(stack)


def aged(found: list[EventFile], seconds: float) -> list[EventFile]:
    """The files as an event names them that landed ``seconds`` ago (a late event, a backlog)."""
    moment = datetime.now(UTC) - timedelta(seconds=seconds)
    return [f.model_copy(update={"last_modified": moment}) for f in found]


def server_now(stack: LocalStack) -> datetime:
    ((micros,),) = stack.clickhouse_client().execute("SELECT toUnixTimestamp64Micro(now64(6))")
    return datetime.fromtimestamp(micros / 1e6, UTC)


def test_old_files_show_their_age_as_the_lag_and_in_their_latency(stack: LocalStack, files: Files) -> None:
    files.put(1, 2, 3)
    old, recent = aged(versions(stack, files, 1), HOURS_2), aged(versions(stack, files, 2, 3), 60)
    context = triggered_by(old, recent)
    xcom = files.operator(files_from="events").execute(context)
    after = server_now(stack)
    fresh = xcom["freshness"]
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2, 3)
    assert fresh["clock"] == "server"
    assert HOURS_2 <= fresh["lag_s"] <= (after - old[0].last_modified).total_seconds()
    assert (fresh["lag_left_s"], fresh["pending_files"], fresh["pending_bytes"]) == (0, 0, 0)
    assert (fresh["unloaded_files"], fresh["loaded_files"]) == (3, 3)
    latency = fresh["latency"]
    assert latency["files"] == 3
    assert HOURS_2 <= latency["max_s"] <= (after - old[0].last_modified).total_seconds()  # file 1's
    assert 60 <= latency["p50_s"] <= (after - recent[0].last_modified).total_seconds()  # files 2 and 3's
    assert fresh["queue_depth"] == {"events": 2, "watcher_events": 2, "waiting_events": 0, "files": 3, "pending": 0}


def test_files_another_load_holds_and_files_still_to_come_are_pending(stack: LocalStack, files: Files) -> None:
    files.put(1, 2, 3, 4)
    other, manifest = _ledger_run(files, "other", files.uri)  # another load claimed files 1 and 2 a moment ago
    other.create()
    other.write([o for o in manifest.objects if o.key in (files.key(1), files.key(2))], "claimed",
                query_id=str(other.query_id))
    named = aged(versions(stack, files, 1), HOURS_2) + aged(versions(stack, files, 2, 3, 4), 30)
    # the watcher's look found 4 more files (not put yet) and hands them on in later events: limit 4 of 8
    later = [EventFile(key=files.key(n), size=10, etag="e", last_modified=datetime.now(UTC)) for n in range(5, 9)]
    first, second = payloads(BUCKET, [*named, *later], limit=4)
    assert (first.pending, second.pending) == (4, 0)
    context = triggered_by([])
    context["triggering_asset_events"] = {"landing": [types.SimpleNamespace(extra={"payload": first.to_event()})]}
    xcom = files.operator(files_from="events").execute(context)
    after = server_now(stack)
    fresh = xcom["freshness"]
    assert xcom["ledger"]["skipped_claimed"] == 2 and fingerprint(stack, files.table) == clean_of(stack, files, 3, 4)
    sizes = {o.key: o.size for o in manifest.objects}
    assert (fresh["pending_held"], fresh["pending_changed"], fresh["pending_later"]) == (2, 0, 4)
    assert fresh["pending_files"] == 6 and fresh["pending_bytes"] == sizes[files.key(1)] + sizes[files.key(2)]
    assert fresh["loaded_files"] == 2 and fresh["latency"]["files"] == 2
    # file 1, two hours old, is held by the other load: the lag it makes is still there after the run
    assert fresh["lag_s"] >= HOURS_2
    assert HOURS_2 <= fresh["lag_left_s"] <= (after - named[0].last_modified).total_seconds()
    assert fresh["queue_depth"] == {"events": 1, "watcher_events": 1, "waiting_events": 0, "files": 4, "pending": 4}
    other.hook.close()


def test_a_run_that_finds_every_file_held_reports_the_lag_left_on_the_workers_clock(stack: LocalStack,
                                                                                   files: Files) -> None:
    files.put(1, 2)
    other, manifest = _ledger_run(files, "other", files.uri)
    other.create()
    other.write(manifest.objects, "claimed", query_id=str(other.query_id))
    xcom = files.run()  # a listing run (no events), nothing to load: the report says why
    fresh = xcom["freshness"]
    assert xcom["written_rows"] == 0 and xcom["ledger"]["skipped_claimed"] == 2
    assert (fresh["pending_held"], fresh["pending_files"], fresh["loaded_files"]) == (2, 2, 0)
    assert fresh["pending_bytes"] == sum(o.size for o in manifest.objects)
    assert fresh["latency"] is None and fresh["clock"] == "worker" and fresh["queue_depth"] is None
    oldest = min(o.last_modified for o in manifest.objects)
    assert 0 <= fresh["lag_s"] <= fresh["lag_left_s"] <= (datetime.now(UTC) - oldest).total_seconds()
    other.hook.close()

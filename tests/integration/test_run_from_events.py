"""A run from asset events on the real local stack: it loads the files the events name that match its glob and
that the ledger does not hold, each once, and lists nothing."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.events import EventFile, payloads
from airflow_provider_s3ch.errors import InvalidRequestError
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.local import LocalStack
from tests.integration.faults import fingerprint
from tests.integration.support import fake_context
from tests.integration.test_ledger import BUCKET, STRUCTURE, Files, bucket, new_files

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not AIRFLOW_3, reason="asset watchers: Airflow 3")]


__all__ = ["bucket"]  # the module's bucket fixture, test_ledger's


@pytest.fixture
def files(stack: LocalStack, bucket: str) -> Files:
    return new_files(stack)


@pytest.fixture
def s3_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The S3 operations the worker's clients send, in order (each client counted as S3 receives its calls)."""
    calls: list[str] = []
    made = S3Source.client

    def client(self: S3Source) -> Any:
        out = made(self)
        out.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
        return out

    monkeypatch.setattr(S3Source, "client", client)
    yield calls


def versions(stack: LocalStack, files: Files, *numbers: int, key: str | None = None) -> list[EventFile]:
    """The files as S3 holds them now (what a watcher's event names)."""
    s3, out = stack.s3_client(), []
    for n in numbers:
        name = key or files.key(n)
        head = s3.head_object(Bucket=BUCKET, Key=name)
        out.append(EventFile(key=name, size=head["ContentLength"], etag=head["ETag"].strip('"'),
                             last_modified=head["LastModified"].astimezone(UTC)))
    return out


def triggered_by(*events: list[EventFile], run_id: str | None = None) -> dict[str, Any]:
    """A task context whose DAG run the given events' payloads triggered, as Airflow 3 hands them over."""
    context = fake_context("load", 1, run_id)
    extras = [{"from_trigger": True, "payload": p.to_event()} for files in events for p in payloads(BUCKET, files)]
    context["triggering_asset_events"] = {"landing": [types.SimpleNamespace(extra=e) for e in extras]}
    return context


def clean_of(stack: LocalStack, files: Files, *numbers: int) -> tuple[int, int]:
    """count() and sum(cityHash64(*)) of one plain load of exactly these files, by ClickHouse."""
    ch, name = stack.clickhouse_client(), f"default.clean_{uuid.uuid4().hex[:8]}"
    keys = ",".join(files.key(n) for n in numbers)
    ch.execute(f"CREATE TABLE {name} ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
    ch.execute(f"INSERT INTO {name} SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{{{keys}}}', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")
    out = fingerprint(stack, name)
    ch.execute(f"DROP TABLE {name} SYNC")
    return out


def test_a_run_loads_the_new_matching_files_its_events_name_and_lists_nothing(
        stack: LocalStack, files: Files, s3_calls: list[str]) -> None:
    files.put(1, 2, 3, 4, 5)
    stack.s3_client().put_object(Bucket=BUCKET, Key=f"{files.prefix}notes.txt", Body=b"not a csv\n")
    first = files.operator(files_from="events").execute(triggered_by(versions(stack, files, 1)))
    assert first["written_rows"] == files.rows and fingerprint(stack, files.table) == clean_of(stack, files, 1)
    assert "ListObjectsV2" not in s3_calls and s3_calls.count("HeadObject") == 1
    s3_calls.clear()

    # two events: one file named twice, one not matching the glob, one loaded by the run before; file 5 is in
    # the bucket but no event names it
    one = versions(stack, files, 2, 3) + versions(stack, files, 0, key=f"{files.prefix}notes.txt")
    two = versions(stack, files, 3, 1, 4)
    xcom = files.operator(files_from="events").execute(triggered_by(one, two))
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2, 3, 4)
    assert xcom["written_rows"] == 3 * files.rows
    assert xcom["ledger"]["new_keys"] == [files.key(n) for n in (2, 3, 4)]
    assert xcom["ledger"]["skipped_loaded_keys"] == [files.key(1)]
    # no ListObjectsV2: one HeadObject per named file the glob selects (the version S3 holds now), beside the location
    assert sorted(s3_calls) == ["GetBucketLocation", *["HeadObject"] * 4]
    assert files.loaded_once() == {f"{k}@{e[:6]}": 1 for k, e, *_ in files.ledger()}
    assert sorted({k for k, *_ in files.ledger()}) == [files.key(n) for n in (1, 2, 3, 4)]

    # the same run again (a retry of the task): nothing new, nothing loaded twice
    again = files.operator(files_from="events").execute(triggered_by(one, two))
    assert (again["written_rows"], again["ledger"]["new"]) == (0, 0)
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2, 3, 4)


def test_a_run_no_watchers_event_triggered_lists_the_glob(stack: LocalStack, files: Files, s3_calls: list[str]) -> None:
    files.put(1, 2)
    xcom = files.operator(files_from="events").execute(fake_context())
    assert xcom["written_rows"] == 2 * files.rows and fingerprint(stack, files.table) == clean_of(stack, files, 1, 2)
    assert "ListObjectsV2" in s3_calls
    # asset events, but none of them an S3 watcher's (one posted by hand): the run lists too
    files.put(3)
    s3_calls.clear()
    context = fake_context()
    context["triggering_asset_events"] = {"landing": [types.SimpleNamespace(extra={"note": "by hand"})]}
    xcom = files.operator(files_from="events").execute(context)
    assert xcom["ledger"]["new_keys"] == [files.key(3)] and "ListObjectsV2" in s3_calls
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2, 3)


def test_events_without_the_ledger_are_refused_before_any_server_call(files: Files, s3_calls: list[str]) -> None:
    operator = files.operator(files_from="events", clickhouse_conn_id="no_such_connection")
    operator.skip_loaded = False
    with pytest.raises(InvalidRequestError, match="files_from='events' needs skip_loaded=True"):
        operator.execute(triggered_by([EventFile(key=files.key(1), size=1, etag="e",
                                                 last_modified=datetime(2026, 1, 1, tzinfo=UTC))]))
    assert s3_calls == []


def test_an_overwritten_file_is_reported_and_left_out_while_the_others_flow(
        stack: LocalStack, files: Files, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    files.put(1, 2)
    files.operator(files_from="events").execute(triggered_by(versions(stack, files, 1, 2)))
    files.put(1, version=2)  # overwritten: another ETag
    files.put(3)
    same = versions(stack, files, 2)  # a re-upload of the same bytes: the same ETag
    files.put(2)
    xcom = files.operator(files_from="events").execute(triggered_by(versions(stack, files, 1, 3), same))
    assert xcom["ledger"]["new_keys"] == [files.key(3)]
    assert xcom["ledger"]["skipped_changed_keys"] == [files.key(1)]
    assert xcom["ledger"]["skipped_loaded_keys"] == [files.key(2)]
    assert sorted(files.loaded_once().values()) == [1, 1, 1]
    out = capsys.readouterr()
    assert "1 file(s) overwritten since they were loaded" in caplog.text + out.out + out.err
    # the table holds the first version of file 1 (its rows unchanged), and files 2 and 3 once
    files.put(1)
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2, 3)


def test_on_changed_fail_is_refused_for_a_run_from_events_before_any_server_call(
        files: Files, s3_calls: list[str]) -> None:
    operator = files.operator(files_from="events", on_changed="fail", clickhouse_conn_id="no_such_connection")
    with pytest.raises(InvalidRequestError, match="on_changed='fail' cannot run with files_from='events'"):
        operator.execute(triggered_by(versions_of_nothing()))
    assert s3_calls == []


def versions_of_nothing() -> list[EventFile]:
    return [EventFile(key="landing/none.csv", size=1, etag="e", last_modified=datetime(2026, 1, 1, tzinfo=UTC))]


def ledger_of(files: Files) -> dict[str, tuple[str, str]]:
    """(ETag, state) of each key's latest ledger row."""
    return {key: (etag, state) for key, etag, state, _ in files.ledger()}


def test_a_file_overwritten_after_its_event_is_loaded_and_recorded_as_the_version_s3_holds(
        stack: LocalStack, files: Files) -> None:
    files.put(1, 2)
    event_v1 = versions(stack, files, 1, 2)
    files.put(1, version=2, rows=files.rows + 7)  # overwritten before the run: another ETag, more rows
    v2 = versions(stack, files, 1)[0]
    first = files.operator(files_from="events").execute(triggered_by(event_v1))
    assert first["written_rows"] == 2 * files.rows + 7
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2)  # file 1 as S3 holds it: v2
    assert ledger_of(files)[files.key(1)] == (v2.etag, "loaded")  # the version loaded, not the event's
    # v2's own event: loaded already; no changed file, nothing pending
    second = files.operator(files_from="events").execute(triggered_by([v2]))
    assert second["written_rows"] == 0
    assert (second["ledger"]["skipped_loaded_keys"], second["ledger"]["skipped_changed"]) == ([files.key(1)], 0)
    assert second["freshness"]["pending_changed"] == 0
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 2)
    assert sorted(files.loaded_once().values()) == [1, 1]


def test_a_file_deleted_after_its_event_is_left_out_and_named_while_the_others_load(
        stack: LocalStack, files: Files) -> None:
    files.put(1, 2, 3)
    event = versions(stack, files, 1, 2, 3)
    stack.s3_client().delete_object(Bucket=BUCKET, Key=files.key(2))
    xcom = files.operator(files_from="events").execute(triggered_by(event))
    assert xcom["written_rows"] == 2 * files.rows
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 3)
    assert (xcom["ledger"]["gone"], xcom["ledger"]["gone_keys"]) == (1, [files.key(2)])
    assert xcom["ledger"]["new_keys"] == [files.key(1), files.key(3)]
    assert files.key(2) not in ledger_of(files)  # nothing recorded for it: never claimed, never loaded
    # every file of the event gone: the run ends with nothing new, naming them
    files.put(4)
    only = versions(stack, files, 4)
    stack.s3_client().delete_object(Bucket=BUCKET, Key=files.key(4))
    empty = files.operator(files_from="events").execute(triggered_by(only))
    assert (empty["written_rows"], empty["ledger"]["gone_keys"]) == (0, [files.key(4)])
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 3)


def test_a_later_chunks_file_deleted_or_overwritten_after_the_listing_is_left_out_not_recorded(
        stack: LocalStack, files: Files, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listed run in chunks: what S3 does to a file between the listing and its chunk's insert."""
    from airflow_provider_s3ch.load.ledger import LedgerRun

    files.put(1, 2, 3)
    begin = LedgerRun.begin

    def meanwhile(self: LedgerRun, chunk: Any) -> Any:
        if chunk.number == 2:  # after chunk 1's insert: file 2 deleted, file 3 overwritten
            stack.s3_client().delete_object(Bucket=BUCKET, Key=files.key(2))
            files.put(3, version=2)
        return begin(self, chunk)

    monkeypatch.setattr(LedgerRun, "begin", meanwhile)
    xcom = files.run(max_files_per_load=1)
    monkeypatch.undo()
    assert xcom["written_rows"] == files.rows
    assert (xcom["ledger"]["gone_keys"], xcom["ledger"]["overwritten_keys"]) == ([files.key(2)], [files.key(3)])
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1)
    assert {k: s for k, (_, s) in ledger_of(files).items()} == {files.key(1): "loaded", files.key(2): "released",
                                                                 files.key(3): "released"}
    # the next listing loads file 3 as the version it is now
    again = files.run()
    assert again["ledger"]["new_keys"] == [files.key(3)]
    assert fingerprint(stack, files.table) == clean_of(stack, files, 1, 3)


def test_a_skipped_run_leaves_its_ledger_figures_as_its_xcom(stack: LocalStack, files: Files) -> None:
    """skip_when_empty: a run with nothing new is skipped, and its XCom still names what it left out and why."""
    from airflow_provider_s3ch.compat import AirflowSkipException

    files.put(1)
    files.operator(files_from="events").execute(triggered_by(versions(stack, files, 1)))
    files.put(1, version=2)  # overwritten after it was loaded: a changed file, skipped
    context = triggered_by(versions(stack, files, 1))
    with pytest.raises(AirflowSkipException, match="no new file"):
        files.operator(files_from="events", skip_when_empty=True).execute(context)
    xcom = context["ti"].pushed["return_value"]
    assert (xcom["written_rows"], xcom["ledger"]["skipped_changed_keys"]) == (0, [files.key(1)])
    assert xcom["freshness"]["pending_changed"] == 1

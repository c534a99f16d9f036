"""S3ListingEventTrigger on moto's S3 server: events name exactly the new matching files, the backstop's full
listing hands on what the cursor went past, and no cursor is part of the trigger's identity."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.events import EventPayload
from airflow_provider_s3ch.errors import NeedsNewerAirflowError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.triggers.s3_events import S3ListingEventTrigger, listing_watcher

pytestmark = pytest.mark.integration

BUCKET = "s3ch-events"


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


@pytest.fixture
def prefix(bucket: str) -> str:
    return f"ev-{uuid.uuid4().hex[:8]}/"


def put(stack: LocalStack, *keys: str) -> None:
    for key in keys:
        stack.s3_client().put_object(Bucket=BUCKET, Key=key, Body=f"{key}\n".encode())


async def next_event(events: AsyncIterator[Any]) -> EventPayload:
    event = await asyncio.wait_for(events.__anext__(), timeout=30)
    return EventPayload.model_validate(event.payload)


def keys(event: EventPayload) -> list[str]:
    return [f.key for f in event.files]


def test_events_name_exactly_the_new_matching_files(stack: LocalStack, prefix: str) -> None:
    put(stack, f"{prefix}a.csv", f"{prefix}b.csv", f"{prefix}skip.parquet", f"{prefix}sub/c.csv")
    trigger = S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{prefix}*.csv", poll_interval=0.05)
    identity = trigger.serialize()

    async def scenario() -> list[EventPayload]:
        events = trigger.run().__aiter__()
        first = await next_event(events)
        put(stack, f"{prefix}d.csv", f"{prefix}e.txt")  # while the trigger waits on its first event
        second = await next_event(events)
        put(stack, f"{prefix}a.csv")  # written again with the same body: the same ETag, not handed on again
        put(stack, f"{prefix}f.csv")
        third = await next_event(events)
        await events.aclose()
        return [first, second, third]

    first, second, third = asyncio.run(scenario())
    assert keys(first) == [f"{prefix}a.csv", f"{prefix}b.csv"]
    assert keys(second) == [f"{prefix}d.csv"]
    assert keys(third) == [f"{prefix}f.csv"]
    assert first.bucket == BUCKET and first.pending == 0 and all(f.etag and f.size for f in first.files)
    # its identity is its arguments: no cursor in them, before or after it ran
    assert trigger.serialize() == identity
    assert set(identity[1]) == {"s3_uri", "aws_conn_id", "poll_interval", "full_listing_every",
                                "keys_sort_by_arrival", "max_files_per_event"}
    assert trigger.cursor.looks == 2  # the third event is handed on during the third look


def test_a_new_version_of_a_file_is_handed_on_again(stack: LocalStack, prefix: str) -> None:
    put(stack, f"{prefix}a.csv")
    trigger = S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{prefix}*.csv", poll_interval=0.05)
    first = trigger.look()
    trigger.cursor.emitted.update((f.key, f.etag) for f in first.files)
    assert trigger.look().files == []
    stack.s3_client().put_object(Bucket=BUCKET, Key=f"{prefix}a.csv", Body=b"other\n")
    again = trigger.look().files
    assert [f.key for f in again] == [f"{prefix}a.csv"] and again[0].etag != first.files[0].etag


def test_events_are_bounded(stack: LocalStack, prefix: str) -> None:
    put(stack, *(f"{prefix}{n:02d}.csv" for n in range(5)))
    trigger = S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{prefix}*.csv", poll_interval=0.05,
                                    max_files_per_event=2)

    async def scenario() -> list[EventPayload]:
        events = trigger.run().__aiter__()
        out = [await next_event(events) for _ in range(3)]
        await events.aclose()
        return out

    events = asyncio.run(scenario())
    assert [len(e.files) for e in events] == [2, 2, 1]
    assert [e.pending for e in events] == [3, 1, 0]
    assert sorted(k for e in events for k in keys(e)) == [f"{prefix}{n:02d}.csv" for n in range(5)]


def test_the_full_listing_hands_on_what_the_cursor_went_past(stack: LocalStack, prefix: str) -> None:
    put(stack, f"{prefix}k-002.csv")
    trigger = S3ListingEventTrigger(s3_uri=f"s3://{BUCKET}/{prefix}*.csv", poll_interval=0.05,
                                    keys_sort_by_arrival=True, full_listing_every=3)

    async def scenario() -> list[EventPayload]:
        events = trigger.run().__aiter__()
        first = await next_event(events)
        put(stack, f"{prefix}k-001.csv", f"{prefix}k-003.csv")  # one sorts before the cursor
        out = [first, await next_event(events), await next_event(events)]
        await events.aclose()
        return out

    first, after_cursor, backstop = asyncio.run(scenario())
    assert keys(first) == [f"{prefix}k-002.csv"] and first.full_listing
    assert keys(after_cursor) == [f"{prefix}k-003.csv"] and not after_cursor.full_listing
    assert keys(backstop) == [f"{prefix}k-001.csv"] and backstop.full_listing
    assert trigger.cursor.looks == 3  # the backstop was the fourth look


class StateStore:
    """The watched asset's state store as Airflow 3.3.2 gives it to a trigger (``aget``/``aset``)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = value


def test_the_cursor_lives_in_the_state_store(stack: LocalStack, prefix: str) -> None:
    put(stack, f"{prefix}k-001.csv", f"{prefix}k-002.csv")
    store, uri = StateStore(), f"s3://{BUCKET}/{prefix}*.csv"

    async def first_look() -> EventPayload:
        """A trigger's first look, up to the save of its cursor; then it stops (a triggerer that dies)."""
        trigger = S3ListingEventTrigger(s3_uri=uri, poll_interval=0.05, keys_sort_by_arrival=True)
        trigger.asset_state_store = store
        events = trigger.run().__aiter__()
        event = await next_event(events)
        assert store.values == {}  # saved once the look's events are handed on, not before
        rest = asyncio.ensure_future(events.__anext__())
        while not store.values:
            await asyncio.sleep(0.01)
        rest.cancel()
        return event

    async def after_restart() -> EventPayload:
        trigger = S3ListingEventTrigger(s3_uri=uri, poll_interval=0.05, keys_sort_by_arrival=True)
        trigger.asset_state_store = store
        events = trigger.run().__aiter__()
        event = await next_event(events)
        await events.aclose()
        return event

    assert keys(asyncio.run(first_look())) == [f"{prefix}k-001.csv", f"{prefix}k-002.csv"]
    assert list(store.values.values()) == [{"start_after": f"{prefix}k-002.csv", "looks": 1}]
    put(stack, f"{prefix}k-003.csv")
    assert keys(asyncio.run(after_restart())) == [f"{prefix}k-003.csv"]  # not the files before the cursor


@pytest.mark.skipif(not AIRFLOW_3, reason="Airflow 3's asset watchers")
def test_listing_watcher_on_airflow_3() -> None:
    watcher = listing_watcher("landing", s3_uri=f"s3://{BUCKET}/in/*.csv")
    assert watcher.name == "landing" and isinstance(watcher.trigger, S3ListingEventTrigger)


@pytest.mark.skipif(AIRFLOW_3, reason="Airflow 2 has no asset watchers")
def test_listing_watcher_needs_airflow_3() -> None:
    with pytest.raises(NeedsNewerAirflowError, match=r"needs Apache Airflow 3\.0 or later"):
        listing_watcher("landing", s3_uri=f"s3://{BUCKET}/in/*.csv")

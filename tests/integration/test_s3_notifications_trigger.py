"""S3NotificationEventTrigger on moto's server (S3, and SQS with S3's event notifications): events name exactly
the created files the glob selects, once each, with their keys decoded; every message is deleted once its event
is handed on, and only then: a trigger that stops before leaves the messages for the next one."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.events import EventPayload
from airflow_provider_s3ch.errors import NeedsNewerAirflowError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.triggers.s3_notifications import (
    ACK_MODE,
    S3NotificationEventTrigger,
    notification_watcher,
)

pytestmark = pytest.mark.integration

#: Seconds a received message stays hidden in these tests' queues: short, so that one not deleted comes back soon.
VISIBILITY = 2


@pytest.fixture
def notified(stack: LocalStack) -> tuple[str, str]:
    """A fresh bucket whose created objects are notified to a fresh queue: (bucket, queue URL)."""
    name = f"s3ch-sqs-{uuid.uuid4().hex[:8]}"
    stack.create_bucket(name)
    return name, stack.notify_queue(name, name, visibility_timeout=VISIBILITY)


def put(stack: LocalStack, bucket: str, *keys: str) -> float:
    """Put each key (its body: its name); the time the last ``put_object`` returned."""
    for key in keys:
        stack.s3_client().put_object(Bucket=bucket, Key=key, Body=f"{key}\n".encode())
    return time.monotonic()


def in_queue(stack: LocalStack, url: str) -> int:
    """The messages in the queue, visible or not (received and not deleted)."""
    attributes = stack.sqs_client().get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])
    return sum(int(v) for v in attributes["Attributes"].values())


def wait_for_messages(stack: LocalStack, url: str, count: int) -> None:
    deadline = time.monotonic() + 10
    while in_queue(stack, url) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert in_queue(stack, url) == count


async def until_empty(stack: LocalStack, url: str, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while (left := await asyncio.to_thread(in_queue, stack, url)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


async def next_event(events: AsyncIterator[Any]) -> EventPayload:
    event = await asyncio.wait_for(events.__anext__(), timeout=30)
    return EventPayload.model_validate(event.payload)


def keys(event: EventPayload) -> list[str]:
    return [f.key for f in event.files]


def trigger_of(bucket: str, url: str, pattern: str = "in/*.csv", **kwargs: Any) -> S3NotificationEventTrigger:
    return S3NotificationEventTrigger(queue_url=url, s3_uri=f"s3://{bucket}/{pattern}", wait_time=1, **kwargs)


async def resumed_until_empty(stack: LocalStack, url: str, events: AsyncIterator[Any]) -> int:
    """Let the trigger go on past its last event (where it deletes) until the queue is empty; what is left."""
    going = asyncio.ensure_future(events.__anext__())
    left = await until_empty(stack, url)
    going.cancel()
    await asyncio.gather(going, return_exceptions=True)
    return left


def test_events_name_the_matching_files_once_and_every_message_is_deleted(
        stack: LocalStack, notified: tuple[str, str]) -> None:
    bucket, url = notified
    odd = "in/the dog é+ü.csv"
    put(stack, bucket, "in/a.csv", "in/b.csv", "in/skip.parquet", "in/sub/c.csv", odd)
    put(stack, bucket, "in/a.csv")  # the same bytes again: a second notification, the same ETag
    stack.sqs_client().send_message(QueueUrl=url, MessageBody="no notification")  # logged and deleted
    wait_for_messages(stack, url, 8)  # S3's test event first, then one per put, and the stray message
    trigger = trigger_of(bucket, url)
    latencies: list[float] = []

    async def scenario() -> tuple[EventPayload, list[EventPayload], int]:
        events = trigger.run().__aiter__()
        first = await next_event(events)
        later = []
        for name in ("in/d.csv", "in/e.csv", "in/f.csv"):
            put(stack, bucket, f"{name}.txt")  # not the glob's: deleted without an event
            landed = put(stack, bucket, name)
            later.append(await next_event(events))
            latencies.append(time.monotonic() - landed)
        return first, later, await resumed_until_empty(stack, url, events)

    first, later, left = asyncio.run(scenario())
    assert sorted(keys(first)) == sorted(["in/a.csv", "in/b.csv", odd])  # decoded, once each, glob's only
    assert first.bucket == bucket and first.pending == 0 and all(f.etag and f.size for f in first.files)
    assert [keys(e) for e in later] == [["in/d.csv"], ["in/e.csv"], ["in/f.csv"]]
    assert left == 0  # every message deleted: the test event, the glob's files, the others, the stray one
    print(f"put_object -> event: {', '.join(f'{s:.3f}' for s in latencies)} s")


def test_a_trigger_that_stops_before_its_event_is_taken_leaves_the_messages(
        stack: LocalStack, notified: tuple[str, str]) -> None:
    bucket, url = notified
    put(stack, bucket, "in/a.csv", "in/b.csv")
    wait_for_messages(stack, url, 3)

    async def stopped_after_the_first_yield() -> EventPayload:
        events = trigger_of(bucket, url).run().__aiter__()
        event = await next_event(events)
        await events.aclose()  # the triggerer died before it took the event
        return event

    async def the_next_trigger() -> tuple[EventPayload, int]:
        events = trigger_of(bucket, url).run().__aiter__()
        event = await next_event(events)
        return event, await resumed_until_empty(stack, url, events)

    assert keys(asyncio.run(stopped_after_the_first_yield())) == ["in/a.csv", "in/b.csv"]
    assert in_queue(stack, url) == 3  # none deleted
    event, left = asyncio.run(the_next_trigger())  # once their visibility timeout is over
    assert keys(event) == ["in/a.csv", "in/b.csv"] and left == 0


def test_events_are_bounded(stack: LocalStack, notified: tuple[str, str]) -> None:
    bucket, url = notified
    put(stack, bucket, *(f"in/{n:02d}.csv" for n in range(5)))
    wait_for_messages(stack, url, 6)

    async def scenario() -> list[EventPayload]:
        events = trigger_of(bucket, url, max_files_per_event=2).run().__aiter__()
        out = [await next_event(events) for _ in range(3)]
        await events.aclose()
        return out

    events = asyncio.run(scenario())
    assert [len(e.files) for e in events] == [2, 2, 1] and [e.pending for e in events] == [3, 1, 0]
    assert sorted(k for e in events for k in keys(e)) == [f"in/{n:02d}.csv" for n in range(5)]


def test_files_landing_within_batch_wait_share_one_event(stack: LocalStack, notified: tuple[str, str]) -> None:
    """Files put one after another, 0.2 s apart, while a batch waits 8 s after its first message: one event."""
    bucket, url = notified
    wait_for_messages(stack, url, 1)  # S3's test event

    async def scenario() -> EventPayload:
        events = trigger_of(bucket, url, batch_wait=8).run().__aiter__()
        first = asyncio.ensure_future(next_event(events))
        for n in range(5):
            await asyncio.to_thread(put, stack, bucket, f"in/{n:02d}.csv")
            await asyncio.sleep(0.2)
        event = await first
        await events.aclose()
        return event

    event = asyncio.run(scenario())
    assert keys(event) == [f"in/{n:02d}.csv" for n in range(5)] and event.pending == 0


@pytest.mark.skipif(not ACK_MODE, reason="Airflow 3.3's shared-stream ack mode")
def test_with_the_ack_mode_messages_are_deleted_once_their_events_are_stored(
        stack: LocalStack, notified: tuple[str, str]) -> None:
    """Through Airflow's own shared-stream manager, as the triggerer drives it: the trigger's events are bound to
    the batch they came from, and Airflow's confirmation that they are stored is what deletes its messages."""
    from airflow.triggers.shared_stream import SharedStreamManager

    bucket, url = notified
    put(stack, bucket, "in/a.csv", "in/skip.txt")
    wait_for_messages(stack, url, 3)

    async def run(*, stored: bool) -> tuple[EventPayload, int]:
        manager = SharedStreamManager(ack_timeout=60)
        trigger = trigger_of(bucket, url)
        key = trigger.shared_stream_key()
        events = trigger.filter_shared_stream(manager.subscribe(trigger_id=1, trigger=trigger, key=key))
        event = await next_event(events)
        seq = manager.bind_pending_event(trigger_id=1, key=key)  # as the triggerer does, before it queues it
        assert seq is not None
        left = -1
        if stored:
            manager.confirm_persisted([seq])
            left = await resumed_until_empty(stack, url, events)
        await events.aclose()
        await manager.unsubscribe(1, key)
        return event, left

    event, _ = asyncio.run(run(stored=False))  # the triggerer died before the event was stored
    assert keys(event) == ["in/a.csv"]
    assert in_queue(stack, url) == 3  # none deleted, not even the test event's or skip.txt's
    event, left = asyncio.run(run(stored=True))  # once their visibility timeout is over
    assert keys(event) == ["in/a.csv"] and left == 0


@pytest.mark.skipif(not ACK_MODE, reason="Airflow 3.3's shared-stream ack mode")
def test_triggers_on_one_queue_share_its_reader(stack: LocalStack, notified: tuple[str, str]) -> None:
    """Two globs on one queue: each trigger gets its own files from the one reader, and a message is deleted only
    once both moved past it with their events stored."""
    from airflow.triggers.shared_stream import SharedStreamManager

    bucket, url = notified
    put(stack, bucket, "in/a.csv", "in/b.txt")
    wait_for_messages(stack, url, 3)
    csv, txt = trigger_of(bucket, url), trigger_of(bucket, url, "in/*.txt")
    key = csv.shared_stream_key()
    assert key is not None and txt.shared_stream_key() == key

    async def scenario() -> tuple[list[list[str]], int, int]:
        manager = SharedStreamManager(ack_timeout=60)
        streams = [t.filter_shared_stream(manager.subscribe(trigger_id=n, trigger=t, key=key))
                   for n, t in enumerate((csv, txt))]
        got, seqs = [], []
        for n, stream in enumerate(streams):
            got.append(keys(await next_event(stream)))
            seqs.append(manager.bind_pending_event(trigger_id=n, key=key))
        manager.confirm_persisted(seqs[:1])  # the first trigger's event stored, not yet the second's
        going = [asyncio.ensure_future(stream.__anext__()) for stream in streams]
        await asyncio.sleep(0.5)
        before = await asyncio.to_thread(in_queue, stack, url)
        manager.confirm_persisted(seqs[1:])
        left = await until_empty(stack, url)
        for task in going:
            task.cancel()
        await asyncio.gather(*going, return_exceptions=True)
        for n, stream in enumerate(streams):
            await stream.aclose()
            await manager.unsubscribe(n, key)
        return got, before, left

    got, before, left = asyncio.run(scenario())
    assert got == [["in/a.csv"], ["in/b.txt"]]
    assert before == 3 and left == 0  # kept while one trigger's event was not stored, then deleted


def test_the_identity_is_the_arguments_without_credentials(notified: tuple[str, str]) -> None:
    bucket, url = notified
    trigger = trigger_of(bucket, url)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_s3ch.triggers.s3_notifications.S3NotificationEventTrigger"
    assert set(kwargs) == {"queue_url", "s3_uri", "aws_conn_id", "region_name", "wait_time", "poll_interval",
                           "max_messages", "visibility_timeout", "max_files_per_event", "batch_wait"}
    json.dumps(kwargs)  # plain values only
    assert S3NotificationEventTrigger(**kwargs).serialize() == (classpath, kwargs)


@pytest.mark.skipif(not AIRFLOW_3, reason="Airflow 3's asset watchers")
def test_notification_watcher_on_airflow_3() -> None:
    watcher = notification_watcher("landing", queue_url="https://sqs.eu-west-3.amazonaws.com/1/q",
                                   s3_uri="s3://b/in/*.csv")
    assert watcher.name == "landing" and isinstance(watcher.trigger, S3NotificationEventTrigger)


@pytest.mark.skipif(AIRFLOW_3, reason="Airflow 2 has no asset watchers")
def test_notification_watcher_needs_airflow_3() -> None:
    with pytest.raises(NeedsNewerAirflowError, match=r"needs Apache Airflow 3\.0 or later"):
        notification_watcher("landing", queue_url="https://sqs.eu-west-3.amazonaws.com/1/q", s3_uri="s3://b/in/*.csv")

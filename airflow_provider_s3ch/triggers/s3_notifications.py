"""S3NotificationEventTrigger: an asset watcher's trigger that reads S3 event notifications from an SQS queue and
hands on the files they name that the operator's glob selects, as events of the listing watcher's shape
(:class:`~airflow_provider_s3ch.core.events.EventPayload`); test events and other files are deleted without one.

A message is deleted only once its events were handed on: on Airflow 3.3 through the shared-stream ack mode (one
reader per queue, :class:`SqsProducer`; deleted once Airflow stored the events), on 3.0-3.2 once the ``yield``
returned (a triggerer dying in between loses that receive's events; the listing watcher is the backstop). When each
version deletes, and why the file ledger makes repeats harmless: docs/continuous.md. boto3's calls run in a thread.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_s3ch.compat import AIRFLOW, AdvanceItem, AssetWatcher, BaseEventTrigger, SharedStreamProducer
from airflow_provider_s3ch.core.events import MAX_FILES_PER_EVENT, EventPayload, matching, message_files, payloads
from airflow_provider_s3ch.core.models import LoadRequest, bucket_of, key_pattern_of
from airflow_provider_s3ch.errors import provider_errors, require
from airflow_provider_s3ch.hooks.sqs import (
    SQS_MAX_MESSAGES,
    SQS_MAX_WAIT,
    Batch,
    Message,
    Receiving,
    SqsQueue,
    delete,
    receive,
)
from airflow_provider_s3ch.triggers.s3_events import WATCHERS_SINCE, missing_pieces

log = logging.getLogger(__name__)

#: Whether this Airflow has the shared-stream ack mode (3.3): messages are deleted once their events are stored.
ACK_MODE = SharedStreamProducer is not None


class SqsProducer(SharedStreamProducer or object):  # type: ignore[misc]
    """The one reader of a queue on Airflow 3.3 (the shared-stream ack mode): it yields each receive's batch to the
    triggers on the queue, and deletes a batch's messages when Airflow advances it, that is once every trigger
    moved past it and the events they made from it are stored. A batch that a trigger failed on (its events never
    confirmed stored) is not deleted: SQS hands its messages out again after their visibility timeout."""

    def __init__(self, settings: Receiving) -> None:
        self.queue = SqsQueue(settings)

    async def open_stream(self) -> AsyncIterator[tuple[Batch, tuple[Message, ...]]]:
        while True:
            batch = await receive(self.queue)
            yield batch, batch.messages
            if batch.messages:
                # An empty batch right after: the triggers move past the one before at once, so its messages
                # are deleted as soon as their events are stored, not after the next receive's wait.
                yield Batch(), ()

    async def advance(self, batch: Sequence[AdvanceItem]) -> None:
        done = [m for item in batch if item.outcome.is_clean for m in item.broker_payload]
        kept = sum(len(item.broker_payload) for item in batch if not item.outcome.is_clean)
        if kept:
            log.warning("%d message(s) of %s kept: an event made from them was not stored; SQS hands them out again",
                        kept, self.queue.settings.queue_url)
        await delete(self.queue, done)


class S3NotificationEventTrigger(BaseEventTrigger):
    """Read S3 event notifications from an SQS queue and yield the created files ``s3_uri`` selects as events.

    :param queue_url: the SQS queue the bucket sends its event notifications to (``s3:ObjectCreated:*``).
    :param s3_uri: ``s3://bucket/glob``, the operator's own: the files are those ClickHouse's ``s3()`` reads.
    :param aws_conn_id: the ``aws`` connection that reads the queue.
    :param region_name: the queue's region; None: the connection's.
    :param wait_time: seconds one receive waits for a message to land (SQS long polling, at most 20).
    :param poll_interval: seconds between a receive that found nothing and the next (long polling already waits).
    :param max_messages: the most messages one receive returns (at most 10, SQS's limit).
    :param visibility_timeout: seconds a received message stays hidden from other receives; one not deleted by then
        (its event not yet stored) is received again. None: the queue's own (SQS's default: 30 s).
    :param max_files_per_event: the most files one event names (at most
        :data:`~airflow_provider_s3ch.core.events.MAX_FILES_PER_EVENT`).
    :param batch_wait: seconds a batch keeps receiving after its first message, so that files landing close
        together share an event; 0: only while receives come back full.
    """

    def __init__(
        self,
        *,
        queue_url: str,
        s3_uri: str,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        wait_time: int = SQS_MAX_WAIT,
        poll_interval: float = 0.0,
        max_messages: int = SQS_MAX_MESSAGES,
        visibility_timeout: int | None = None,
        max_files_per_event: int = MAX_FILES_PER_EVENT,
        batch_wait: float = 1.0,
    ) -> None:
        super().__init__()
        with provider_errors():
            LoadRequest._uri(s3_uri)
        self.queue_url = queue_url
        self.s3_uri = s3_uri
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.wait_time = max(0, min(int(wait_time), SQS_MAX_WAIT))
        self.poll_interval = max(0.0, float(poll_interval))
        self.max_messages = max(1, min(int(max_messages), SQS_MAX_MESSAGES))
        self.visibility_timeout = None if visibility_timeout is None else max(0, int(visibility_timeout))
        self.max_files_per_event = max(1, min(int(max_files_per_event), MAX_FILES_PER_EVENT))
        self.batch_wait = max(0.0, min(float(batch_wait), 60.0))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "queue_url": self.queue_url,
                "s3_uri": self.s3_uri,
                "aws_conn_id": self.aws_conn_id,
                "region_name": self.region_name,
                "wait_time": self.wait_time,
                "poll_interval": self.poll_interval,
                "max_messages": self.max_messages,
                "visibility_timeout": self.visibility_timeout,
                "max_files_per_event": self.max_files_per_event,
                "batch_wait": self.batch_wait,
            },
        )

    @property
    def bucket(self) -> str:
        return bucket_of(self.s3_uri)

    @classmethod
    def receiving(cls, kwargs: dict[str, Any]) -> Receiving:
        """How the queue is read, from a trigger's serialized arguments."""
        trigger = cls(**kwargs)
        return Receiving(queue_url=trigger.queue_url, aws_conn_id=trigger.aws_conn_id,
                         region_name=trigger.region_name, wait_time=trigger.wait_time,
                         poll_interval=trigger.poll_interval, max_messages=trigger.max_messages,
                         visibility_timeout=trigger.visibility_timeout, batch_wait=trigger.batch_wait,
                         max_receives=max(10, -(-trigger.max_files_per_event // trigger.max_messages)))

    def events(self, batch: Batch) -> list[EventPayload]:
        """The events of one batch: the created files of the bucket that the glob selects, one entry per key and
        ETag, cut into bounded events. Messages that are no S3 notification are logged."""
        files = []
        for message in batch.messages:
            named = message_files(message.body, self.bucket)
            if named is None:
                log.warning("message %s of %s is no S3 event notification; dropped", message.id, self.queue_url)
            else:
                files.extend(named)
        selected = matching(files, key_pattern_of(self.s3_uri))
        events = payloads(self.bucket, selected, limit=self.max_files_per_event)
        if batch.messages:
            log.info("%d message(s) from %s: %d file(s) for %s in %d event(s)", len(batch.messages),
                     self.queue_url, len({(f.key, f.etag) for f in selected}), self.s3_uri, len(events))
        return events

    # ------------------------------------------------------------------ Airflow 3.3: the ack mode
    def shared_stream_key(self) -> Any:
        """Where Airflow has the ack mode, the triggers on one queue share its one reader (:class:`SqsProducer`):
        a message is deleted once every one of them moved past it."""
        return ("s3ch.sqs", self.queue_url, self.region_name, self.aws_conn_id) if ACK_MODE else None

    @classmethod
    def create_shared_stream_producer(cls, kwargs: dict[str, Any]) -> Any:
        return SqsProducer(cls.receiving(kwargs))

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        async for batch in shared_stream:
            for event in self.events(batch):
                yield TriggerEvent(event.to_event())

    # ------------------------------------------------------------------ elsewhere: delete after the yield
    async def run(self) -> AsyncIterator[TriggerEvent]:
        queue = SqsQueue(self.receiving(self.serialize()[1]))
        while True:
            batch = await receive(queue)
            for event in self.events(batch):
                yield TriggerEvent(event.to_event())
            await delete(queue, batch.messages)


def notification_watcher(name: str, **trigger: Any) -> Any:
    """An ``AssetWatcher`` named ``name`` whose trigger is an :class:`S3NotificationEventTrigger` of ``trigger``'s
    arguments, for ``Asset(..., watchers=[...])``.

    :raises NeedsNewerAirflowError: on Airflow 2, which has no asset watchers.
    """
    require("an S3 notification watcher (AssetWatcher)", WATCHERS_SINCE)
    if note := missing_pieces("notification", AIRFLOW):
        warnings.warn(note, stacklevel=2)
    return AssetWatcher(name=name, trigger=S3NotificationEventTrigger(**trigger))

"""S3NotificationEventTrigger: an asset watcher's trigger that reads S3 event notifications from an SQS queue and
hands on the files they name that the operator's glob selects, as events of the listing watcher's shape
(:class:`~airflow_provider_s3ch.core.events.EventPayload`); test events and other files are deleted without one.

A message is deleted only once its events were handed on: on Airflow 3.3 through the shared-stream ack mode (one
reader per queue, :class:`SqsProducer`; deleted once Airflow stored the events), on 3.0-3.2 once the ``yield``
returned (a triggerer dying in between loses that receive's events; the listing watcher is the backstop). When each
version deletes, and why the file ledger makes repeats harmless: docs/continuous.md. boto3's calls run in a thread.

A queue that does not exist, access denied, credentials SQS does not take: the trigger fails (through the shared
reader too) with an error naming the queue and the fix (:func:`~airflow_provider_s3ch.hooks.sqs.queue_error`), and
Airflow's triggerer, which starts it again, finds it waiting (:class:`~.s3_events.Restarts`); a queue_url that is
no URL fails when the DAG is parsed. SQS failing for now is paused and tried again. The trigger says once, when it
starts, what it watches, so that a typo in the bucket or the glob shows in the triggerer's log.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_provider_s3ch.compat import AIRFLOW, AdvanceItem, AssetWatcher, BaseEventTrigger, SharedStreamProducer
from airflow_provider_s3ch.core.events import MAX_FILES_PER_EVENT, EventPayload, matching, message_files, payloads
from airflow_provider_s3ch.core.glob import literal_prefix
from airflow_provider_s3ch.core.models import LoadRequest, bucket_of, key_pattern_of
from airflow_provider_s3ch.errors import S3chTerminalError, provider_errors, require
from airflow_provider_s3ch.hooks.sqs import (
    SQS_MAX_MESSAGES,
    SQS_MAX_WAIT,
    Batch,
    Message,
    Receiving,
    SqsQueue,
    check_queue_url,
    delete,
    receive,
)
from airflow_provider_s3ch.triggers.s3_events import RESTARTS, WATCHERS_SINCE, missing_pieces

log = logging.getLogger(__name__)

#: Whether this Airflow has the shared-stream ack mode (3.3): messages are deleted once their events are stored.
ACK_MODE = SharedStreamProducer is not None


def _restart_key(settings: Receiving) -> tuple[str, str, str | None, str | None]:
    """The queue's reader, as :data:`~.s3_events.RESTARTS` knows it (a trigger's own, or the shared one)."""
    return ("s3ch.sqs", settings.queue_url, settings.region_name, settings.aws_conn_id)


async def _receive(queue: SqsQueue) -> Batch:
    """:func:`receive`, a failure for good remembered for the trigger's next start."""
    try:
        return await receive(queue)
    except S3chTerminalError as exc:
        RESTARTS.failed(_restart_key(queue.settings), exc)
        raise


async def _delete(queue: SqsQueue, messages: Sequence[Message]) -> int:
    """:func:`delete`, a failure for good remembered for the trigger's next start; a delete that got through
    forgets the failures."""
    try:
        deleted = await delete(queue, messages)
    except S3chTerminalError as exc:
        RESTARTS.failed(_restart_key(queue.settings), exc)
        raise
    if deleted:
        RESTARTS.succeeded(_restart_key(queue.settings))
    return deleted


class SqsProducer(SharedStreamProducer or object):  # type: ignore[misc]
    """The one reader of a queue on Airflow 3.3 (the shared-stream ack mode): it yields each receive's batch to the
    triggers on the queue, and deletes a batch's messages when Airflow advances it, that is once every trigger
    moved past it and the events they made from it are stored. A batch that a trigger failed on (its events never
    confirmed stored) is not deleted: SQS hands its messages out again after their visibility timeout."""

    def __init__(self, settings: Receiving) -> None:
        self.queue = SqsQueue(settings)

    async def open_stream(self) -> AsyncIterator[tuple[Batch, tuple[Message, ...]]]:
        settings = self.queue.settings
        await RESTARTS.wait(_restart_key(settings), f"the reader of SQS queue {settings.queue_url}", log)
        while True:
            batch = await _receive(self.queue)
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
        await _delete(self.queue, done)


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
        together share an event; 0 (the default): only while receives come back full, so a burst still makes
        few events and a lone file's event is not held back (it was 1 s: 1 s of a lone file's latency).
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
        batch_wait: float = 0.0,
    ) -> None:
        super().__init__()
        with provider_errors():
            LoadRequest._uri(s3_uri)
        self.queue_url = check_queue_url(queue_url)
        self.s3_uri = s3_uri
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.wait_time = max(0, min(int(wait_time), SQS_MAX_WAIT))
        self.poll_interval = max(0.0, float(poll_interval))
        self.max_messages = max(1, min(int(max_messages), SQS_MAX_MESSAGES))
        self.visibility_timeout = None if visibility_timeout is None else max(0, int(visibility_timeout))
        self.max_files_per_event = max(1, min(int(max_files_per_event), MAX_FILES_PER_EVENT))
        self.batch_wait = max(0.0, min(float(batch_wait), 60.0))
        self._told_other_bucket = False

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
                continue
            files.extend(named)
            if not named and not self._told_other_bucket and message_files(message.body):
                self._told_other_bucket = True  # said once: a queue may carry several buckets' notifications
                log.warning("message %s of %s names files of another bucket than %r, which this watcher's s3_uri "
                            "names: dropped; if they are the ones to load, fix the bucket in s3_uri", message.id,
                            self.queue_url, self.bucket)
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

    def _say_what_it_watches(self, reader: str) -> None:
        pattern = key_pattern_of(self.s3_uri)
        self.log.info("notification watcher: SQS queue %s (%s; region %s, aws connection %r), files of bucket %r whose "
                      "keys match %r; the bucket's event notification to this queue (s3:ObjectCreated:*) must cover "
                      "the prefix %r. Until a file matches, nothing is handed on: check these for a typo",
                      self.queue_url, reader, self.region_name or "the connection's", self.aws_conn_id, self.bucket,
                      pattern, literal_prefix(pattern))

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        """The events of the shared reader's batches; the reader's failure (a queue that does not exist, access
        denied) is raised here, in every trigger on the queue (Airflow's shared stream hands it on), and fails it."""
        self._say_what_it_watches("one reader shared by the triggers on the queue")
        async for batch in shared_stream:
            for event in self.events(batch):
                yield TriggerEvent(event.to_event())

    # ------------------------------------------------------------------ elsewhere: delete after the yield
    async def run(self) -> AsyncIterator[TriggerEvent]:
        self._say_what_it_watches("this trigger's own reader")
        queue = SqsQueue(self.receiving(self.serialize()[1]))
        await RESTARTS.wait(_restart_key(queue.settings), f"the notification watcher of {self.s3_uri}", self.log)
        while True:
            batch = await _receive(queue)
            for event in self.events(batch):
                yield TriggerEvent(event.to_event())
            await _delete(queue, batch.messages)


def notification_watcher(name: str, **trigger: Any) -> Any:
    """An ``AssetWatcher`` named ``name`` whose trigger is an :class:`S3NotificationEventTrigger` of ``trigger``'s
    arguments, for ``Asset(..., watchers=[...])``.

    :raises NeedsNewerAirflowError: on Airflow 2, which has no asset watchers.
    """
    require("an S3 notification watcher (AssetWatcher)", WATCHERS_SINCE)
    if note := missing_pieces("notification", AIRFLOW):
        warnings.warn(note, stacklevel=2)
    return AssetWatcher(name=name, trigger=S3NotificationEventTrigger(**trigger))

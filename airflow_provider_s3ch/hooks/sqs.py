"""An SQS queue of S3 event notifications, read the way the notification watcher needs: long-polled receives
gathered into batches, deletes ten at a time, failures paused with a doubling backoff. Blocking boto3 calls; the
async helpers run them in a thread (docs/continuous.md)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from airflow_provider_s3ch.errors import provider_errors

log = logging.getLogger(__name__)

#: The most messages one SQS receive returns, and the longest it may wait (long polling).
SQS_MAX_MESSAGES, SQS_MAX_WAIT = 10, 20
#: The longest pause after receives that failed one after another (the pause doubles from 1 s).
MAX_BACKOFF = 60.0


@dataclass(frozen=True)
class Message:
    """One SQS message: its id, the receipt that deletes it, its body (the notification)."""

    id: str
    receipt: str
    body: str


@dataclass(frozen=True)
class Batch:
    """What one receive brought (and the receives that followed at once while they came back full)."""

    messages: tuple[Message, ...] = ()


@dataclass(frozen=True)
class Receiving:
    """How the queue is read: the queue, the connection, and the receive's settings."""

    queue_url: str
    aws_conn_id: str | None = "aws_default"
    region_name: str | None = None
    wait_time: int = SQS_MAX_WAIT
    poll_interval: float = 0.0
    max_messages: int = SQS_MAX_MESSAGES
    visibility_timeout: int | None = None
    #: Receives one batch may gather (while they come back full, or within ``batch_wait``).
    max_receives: int = 10
    #: Seconds a batch keeps receiving after its first message, so that files landing close together share an
    #: event (and so a run and an insert); 0: only while receives come back full.
    batch_wait: float = 0.0


class SqsQueue:
    """The queue's boto3 client, from the Airflow ``aws`` connection (its ``endpoint_url``, or the one its
    ``service_config`` gives ``sqs``). Blocking: callers run the calls in a thread."""

    def __init__(self, settings: Receiving) -> None:
        self.settings = settings
        self._client: Any = None
        self.failures = 0

    def client(self) -> Any:
        if self._client is None:
            from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

            with provider_errors():
                hook = AwsBaseHook(aws_conn_id=self.settings.aws_conn_id, client_type="sqs")
                self._client = hook.get_client_type(region_name=self.settings.region_name)
        return self._client

    def receive(self) -> Batch:
        """Receive the messages waiting (long polling: at most ``wait_time`` seconds until one lands); then, while a
        receive comes back full or ``batch_wait`` seconds have not passed since the first message, receive again,
        up to ``max_receives`` receives."""
        s, messages, first = self.settings, [], None
        extra = {} if s.visibility_timeout is None else {"VisibilityTimeout": int(s.visibility_timeout)}
        for n in range(max(1, s.max_receives)):
            left = 0.0 if first is None else s.batch_wait - (time.monotonic() - first)
            wait = s.wait_time if n == 0 else max(0, min(SQS_MAX_WAIT, math.ceil(left)))
            answer = self.client().receive_message(QueueUrl=s.queue_url, MaxNumberOfMessages=s.max_messages,
                                                   WaitTimeSeconds=wait, **extra)
            got = answer.get("Messages") or []
            messages.extend(Message(m["MessageId"], m["ReceiptHandle"], m.get("Body") or "") for m in got)
            if first is None and got:
                first = time.monotonic()
            if len(got) < s.max_messages and (first is None or time.monotonic() - first >= s.batch_wait):
                break
        return Batch(tuple(messages))

    def delete(self, messages: Sequence[Message]) -> int:
        """Delete the messages (ten a call); the number deleted. A message SQS refuses to delete is logged: it comes
        back after its visibility timeout, a duplicate hint the ledger ignores."""
        deleted = 0
        for i in range(0, len(messages), SQS_MAX_MESSAGES):
            chunk = messages[i:i + SQS_MAX_MESSAGES]
            answer = self.client().delete_message_batch(
                QueueUrl=self.settings.queue_url,
                Entries=[{"Id": str(n), "ReceiptHandle": m.receipt} for n, m in enumerate(chunk)])
            failed = answer.get("Failed") or []
            for entry in failed:
                log.warning("SQS did not delete message %s of %s: %s", chunk[int(entry["Id"])].id,
                            self.settings.queue_url, entry.get("Message") or entry.get("Code"))
            deleted += len(chunk) - len(failed)
        return deleted


async def receive(queue: SqsQueue) -> Batch:
    """One batch from the queue, in a thread; a receive that fails is logged and makes an empty batch after a pause
    that doubles from 1 s up to :data:`MAX_BACKOFF` (no retry storm while SQS is away)."""
    try:
        batch = await asyncio.to_thread(queue.receive)
    except (ClientError, BotoCoreError) as exc:
        queue.failures += 1
        pause = min(MAX_BACKOFF, 2.0 ** (queue.failures - 1))
        log.warning("receiving from %s failed (%s); next receive in %.0f s", queue.settings.queue_url, exc, pause)
        await asyncio.sleep(pause)
        return Batch()
    queue.failures = 0
    if not batch.messages and queue.settings.poll_interval > 0:
        await asyncio.sleep(queue.settings.poll_interval)
    return batch


async def delete(queue: SqsQueue, messages: Sequence[Message]) -> int:
    """Delete the messages, in a thread; a failure is logged (the messages come back after their visibility timeout)
    and deletes none."""
    if not messages:
        return 0
    try:
        return await asyncio.to_thread(queue.delete, messages)
    except (ClientError, BotoCoreError) as exc:
        log.warning("deleting %d message(s) from %s failed (%s); they come back after their visibility timeout",
                    len(messages), queue.settings.queue_url, exc)
        return 0

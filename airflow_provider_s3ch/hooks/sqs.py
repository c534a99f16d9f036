"""An SQS queue of S3 event notifications, read the way the notification watcher needs: long-polled receives
gathered into batches, deletes ten at a time, failures paused with a doubling backoff. Blocking boto3 calls; the
async helpers run them in a thread (docs/continuous.md).

A failure no retry gets past (a queue that does not exist, access denied, credentials SQS does not take: SQS's
error codes in :data:`~airflow_provider_s3ch.errors.SQS_TERMINAL_CODES`) raises :class:`QueueError`, naming the
queue and the fix, so that the trigger fails where users look (the triggerer's log); any other failure is paused
and tried again."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BaseEndpointResolverError,
    BotoCoreError,
    ClientError,
    InvalidEndpointConfigurationError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)
from botocore.exceptions import ValidationError as BotoValidationError

from airflow_provider_s3ch.errors import (
    InvalidRequestError,
    QueueError,
    QueueUnavailableError,
    S3chError,
    S3chTerminalError,
    provider_errors,
    sqs_failure,
)

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

    def error(self, exc: BaseException, action: str) -> S3chError:
        """:func:`queue_error` of a failed ``action``, with the client's region."""
        region = getattr(getattr(self._client, "meta", None), "region_name", None) or self.settings.region_name
        return queue_error(exc, self.settings, action, region)


async def receive(queue: SqsQueue) -> Batch:
    """One batch from the queue, in a thread; a receive that fails for now (throttling, a server error, the network)
    is logged and makes an empty batch after a pause that doubles from 1 s up to :data:`MAX_BACKOFF` (no retry storm
    while SQS is away).

    :raises QueueError: a failure no retry gets past (:func:`queue_error`): the queue does not exist, access denied.
    """
    try:
        batch = await asyncio.to_thread(queue.receive)
    except (ClientError, BotoCoreError) as exc:
        error = queue.error(exc, "receive")
        if isinstance(error, S3chTerminalError):
            raise error from exc
        queue.failures += 1
        pause = min(MAX_BACKOFF, 2.0 ** (queue.failures - 1))
        log.warning("receiving from %s failed for now (%s); next receive in %.0f s", queue.settings.queue_url, error,
                    pause)
        await asyncio.sleep(pause)
        return Batch()
    queue.failures = 0
    if not batch.messages and queue.settings.poll_interval > 0:
        await asyncio.sleep(queue.settings.poll_interval)
    return batch


async def delete(queue: SqsQueue, messages: Sequence[Message]) -> int:
    """Delete the messages, in a thread; a failure for now is logged (the messages come back after their visibility
    timeout) and deletes none.

    :raises QueueError: a failure no retry gets past (no ``sqs:DeleteMessage``, the queue deleted meanwhile): the
        messages would come back, and be handed on again, for ever.
    """
    if not messages:
        return 0
    try:
        return await asyncio.to_thread(queue.delete, messages)
    except (ClientError, BotoCoreError) as exc:
        error = queue.error(exc, "delete")
        if isinstance(error, S3chTerminalError):
            raise error from exc
        log.warning("deleting %d message(s) from %s failed for now (%s); they come back after their visibility "
                    "timeout", len(messages), queue.settings.queue_url, error)
        return 0


# ---------------------------------------------------------------------- what a failure means
#: The permission each call needs, in an IAM policy's words.
_PERMISSIONS = {"receive": "sqs:ReceiveMessage", "delete": "sqs:DeleteMessage"}
_VERBS = {"receive": "receive messages from", "delete": "delete messages from"}
SETUP = ("docs/continuous.md#when-a-watcher-cannot-work; on the local stack: "
         "s3ch-local queue --bucket BUCKET --prefix PREFIX")


def check_queue_url(queue_url: Any) -> str:
    """``queue_url`` when it is a queue's URL (checked when the DAG is parsed: no network).

    :raises InvalidRequestError: an ARN, a bare queue name, anything but an ``http(s)://host/...`` URL.
    """
    url = queue_url.strip() if isinstance(queue_url, str) else ""
    example = "https://sqs.<region>.amazonaws.com/<account>/<queue name>"
    if url.startswith("arn:"):
        parts = url.split(":")
        if len(parts) == 6 and parts[2] == "sqs":
            example = f"https://sqs.{parts[3]}.amazonaws.com/{parts[4]}/{parts[5]}"
        raise InvalidRequestError(f"queue_url={queue_url!r} is the queue's ARN; give its URL: {example}")
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path.strip("/") == "":
        raise InvalidRequestError(
            f"queue_url={queue_url!r} is no SQS queue URL; give the URL `aws sqs get-queue-url --queue-name NAME` "
            f"prints: {example}")
    return url


def queue_arn(queue_url: str, region: str | None) -> str | None:
    """The queue's ARN (an IAM policy's resource) from its URL ``.../<account>/<name>``; None when unknown."""
    parts = urllib.parse.urlsplit(queue_url).path.strip("/").split("/")
    if len(parts) < 2 or not region or not all(parts[-2:]):
        return None
    return f"arn:aws:sqs:{region}:{parts[-2]}:{parts[-1]}"


def _answer(exc: ClientError) -> tuple[str, int | None, str]:
    """SQS's error code, HTTP status and message. An XML error body that the JSON client could not read (an
    S3-compatible server's 403) is read for its ``<Code>`` and ``<Message>``."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code, message = str(error.get("Code") or status or ""), str(error.get("Message") or "")
    if message.lstrip().startswith("<"):
        inner, text = re.search(r"<Code>([^<]+)</Code>", message), re.search(r"<Message>([^<]*)</Message>", message)
        code, message = (inner.group(1) if inner else code), (text.group(1) if text else "")
    return code, status, message


def queue_error(exc: BaseException, settings: Receiving, action: str, region: str | None = None) -> S3chError:
    """The provider's error for a failed ``action`` (``receive`` or ``delete``) on the queue: :class:`QueueError`
    (terminal, naming the queue and the fix) when no retry gets past it
    (:func:`~airflow_provider_s3ch.errors.sqs_failure`), else :class:`QueueUnavailableError`.

    :param region: the client's region, for the message and the queue's ARN.
    """
    url, conn, verb = settings.queue_url, settings.aws_conn_id, _VERBS.get(action, action)
    where = f"region {region}" if region else "the connection's region"
    if isinstance(exc, ClientError):
        code, status, message = _answer(exc)
        said = f"{code}: {message}" if message else code
        kind = sqs_failure(code, status)
        if kind == "missing":
            return QueueError(
                f"the SQS queue {url} does not exist in {where} ({said}); check the watcher's queue_url (the URL "
                "`aws sqs get-queue-url --queue-name NAME` prints) and region_name, or create the queue and the "
                f"bucket's event notification to it ({SETUP})")
        if kind == "denied":
            return QueueError(
                f"access denied ({said}) to {verb} the SQS queue {url}; give the aws connection {conn!r} "
                f"{_PERMISSIONS.get(action, 'access')} on {queue_arn(url, region) or url} (the watcher needs "
                "sqs:ReceiveMessage and sqs:DeleteMessage, and kms:Decrypt when the queue has a KMS key)")
        if kind == "credentials":
            return QueueError(f"SQS does not take the credentials of the aws connection {conn!r} to {verb} {url} "
                              f"({said}); fix its keys, token or role")
        if kind == "refused":
            return QueueError(f"SQS refused to {verb} {url} ({said}); fix the queue (its KMS key) or the watcher's "
                              "arguments")
        return QueueUnavailableError(f"SQS answered the {action} of {url} with {said}")
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return QueueError(f"the aws connection {conn!r} yields no usable credentials to {verb} {url} ({exc}); fix "
                          "its keys or role")
    if isinstance(exc, ParamValidationError | BaseEndpointResolverError | BotoValidationError
                  | InvalidEndpointConfigurationError):
        return QueueError(f"no SQS client can {verb} {url} ({exc}); fix the watcher's queue_url and region_name, or "
                          "the aws connection's region and endpoint_url")
    return QueueUnavailableError(f"SQS did not answer the {action} of {url} ({exc})")

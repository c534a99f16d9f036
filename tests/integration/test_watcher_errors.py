"""Watchers that cannot work say so, on moto's server (S3 and SQS): a queue that does not exist, access denied to the
queue or the bucket, a bucket that does not exist fail the trigger (its ``run()``, and on Airflow 3.3 every trigger
on the shared reader, through Airflow's own shared-stream manager) with an error that names the queue or the bucket
and the fix; a trigger started again after such a failure (as Airflow's triggerer does) waits first; SQS that does
not answer is retried; a glob that matches nothing yet is waited on, the trigger saying at its start what it
watches. No ClickHouse: the watchers do not talk to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any
from unittest import mock

import boto3
import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch.errors import BucketError, QueueError
from airflow_provider_s3ch.hooks.sqs import Receiving, SqsQueue, receive
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import free_port
from airflow_provider_s3ch.triggers.s3_events import S3ListingEventTrigger
from airflow_provider_s3ch.triggers.s3_notifications import ACK_MODE, S3NotificationEventTrigger
from tests.integration.support import locked_moto

pytestmark = pytest.mark.integration

REGION = "eu-west-3"
#: The connection to the module's S3 server.
CONN = "aws_watch"


def _connections(**conns: dict[str, Any]) -> Any:
    """``AIRFLOW_CONN_<ID>`` for each connection, restored afterwards."""
    return mock.patch.dict(os.environ, {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)
                                        for conn_id, conn in conns.items()})


@pytest.fixture(scope="module")
def moto() -> Iterator[LocalStack]:
    """moto's S3 and SQS server as the local stack runs it (no ClickHouse node), with connection ``aws_watch``."""
    stack = LocalStack(region=REGION)
    stack.workdir.mkdir(parents=True, exist_ok=True)
    try:
        stack.start_s3()
        with _connections(**{CONN: stack.aws_connection()}):
            yield stack
    finally:
        stack.stop()


def _unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def _no_event_until(trigger: Any, done: Any, what: str, then: float = 0.0) -> None:
    """Run the trigger until ``done()`` holds (however busy the machine; at most 120 s), ``then`` seconds more:
    no event may come meanwhile."""
    events = trigger.run().__aiter__()
    waiting = asyncio.ensure_future(events.__anext__())
    deadline = time.monotonic() + 120
    while not done() and time.monotonic() < deadline and not waiting.done():
        await asyncio.sleep(0.05)
    await asyncio.sleep(then)
    if waiting.done():
        raise AssertionError(f"an event for {what}: {waiting.result()!r}")
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await events.aclose()


def _raised(events: AsyncIterator[Any], timeout: float = 15) -> BaseException:
    """What the trigger's event stream raised (a timeout when it went on waiting instead)."""

    async def go() -> BaseException:
        try:
            event = await asyncio.wait_for(events.__anext__(), timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - what the trigger raised is the test's subject
            return exc
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()
        raise AssertionError(f"the trigger fired {event!r} instead of failing")

    return asyncio.run(go())


def _said(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> str:
    """What was logged: a trigger's own log is structlog's on Airflow 3 (printed), the standard library's before."""
    return "\n".join(r.getMessage() for r in caplog.records) + "\n" + capsys.readouterr().out


def _sqs_trigger(url: str, pattern: str = "s3://landing/in/*.csv", conn: str = CONN) -> S3NotificationEventTrigger:
    return S3NotificationEventTrigger(queue_url=url, s3_uri=pattern, aws_conn_id=conn, wait_time=1)


# ---------------------------------------------------------------------- a queue that does not exist
def test_a_queue_that_does_not_exist_fails_the_trigger_naming_the_queue_and_the_fix(moto: LocalStack) -> None:
    url = f"{moto.s3_endpoint}/123456789012/{_unique('no-such-queue')}"
    exc = _raised(_sqs_trigger(url).run().__aiter__())
    assert isinstance(exc, QueueError), f"{type(exc).__name__}: {exc}"
    assert isinstance(exc, AirflowFailException), "terminal: the same queue URL fails again"
    text = str(exc)
    assert f"the SQS queue {url} does not exist" in text and f"region {REGION}" in text, text
    assert "check the watcher's queue_url" in text and "s3ch-local queue --bucket" in text, text

    # Airflow's triggerer starts a failed watcher again at once: the new trigger waits before it calls SQS again.
    t0 = time.monotonic()
    again = _raised(_sqs_trigger(url).run().__aiter__())
    assert isinstance(again, QueueError) and time.monotonic() - t0 >= 0.9


@pytest.mark.skipif(not ACK_MODE, reason="Airflow 3.3's shared-stream ack mode")
def test_with_the_ack_mode_the_readers_failure_fails_every_trigger_on_the_queue(moto: LocalStack) -> None:
    """Through Airflow's own shared-stream manager, as the triggerer drives it: the one reader's error reaches each
    trigger's ``filter_shared_stream``, which raises it (the triggerer fails the trigger with it)."""
    from airflow.triggers.shared_stream import SharedStreamManager

    url = f"{moto.s3_endpoint}/123456789012/{_unique('no-such-queue')}"
    triggers = [_sqs_trigger(url), _sqs_trigger(url, "s3://landing/in/*.json")]
    key = triggers[0].shared_stream_key()
    assert key is not None and triggers[1].shared_stream_key() == key

    async def scenario() -> list[BaseException]:
        manager = SharedStreamManager(ack_timeout=60)
        streams = [t.filter_shared_stream(manager.subscribe(trigger_id=n, trigger=t, key=key))
                   for n, t in enumerate(triggers)]
        raised: list[BaseException] = []
        for n, stream in enumerate(streams):
            try:
                await asyncio.wait_for(stream.__anext__(), timeout=15)
            except Exception as exc:  # noqa: BLE001
                raised.append(exc)
            await manager.unsubscribe(n, key)
        return raised

    raised = asyncio.run(scenario())
    assert len(raised) == 2
    for exc in raised:
        assert isinstance(exc, QueueError), f"{type(exc).__name__}: {exc}"
        assert f"the SQS queue {url} does not exist" in str(exc)


def test_a_queue_url_that_is_no_url_fails_when_the_dag_is_parsed() -> None:
    from airflow_provider_s3ch.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match=r"the queue's ARN; give its URL: "
                                                  r"https://sqs\.eu-west-3\.amazonaws\.com/123456789012/landing"):
        _sqs_trigger("arn:aws:sqs:eu-west-3:123456789012:landing")
    with pytest.raises(InvalidRequestError, match="is no SQS queue URL"):
        _sqs_trigger("landing")


# ---------------------------------------------------------------------- SQS that does not answer: retried
def test_sqs_that_does_not_answer_is_retried_after_a_pause(moto: LocalStack, caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    conn = {**moto.aws_connection(), "extra": {"endpoint_url": closed, "region_name": REGION,
                                               "config_kwargs": {"retries": {"max_attempts": 1}}}}
    queue = SqsQueue(Receiving(queue_url=f"{closed}/123456789012/landing", aws_conn_id="aws_closed", wait_time=0))

    async def twice() -> list[int]:
        out = []
        for _ in range(2):
            batch = await receive(queue)
            out.append(len(batch.messages))
        return out

    with _connections(aws_closed=conn), caplog.at_level(logging.WARNING, logger="airflow_provider_s3ch.hooks.sqs"):
        t0 = time.monotonic()
        assert asyncio.run(twice()) == [0, 0]  # no error raised: empty batches
        took = time.monotonic() - t0
    assert queue.failures == 2 and took >= 3.0 - 0.1  # paused 1 s, then 2 s
    said = [r.getMessage() for r in caplog.records if "failed for now" in r.getMessage()]
    assert len(said) == 2 and "next receive in 1 s" in said[0] and "next receive in 2 s" in said[1], said


# ---------------------------------------------------------------------- the listing watcher
def test_a_bucket_that_does_not_exist_fails_the_listing_watcher_naming_it(moto: LocalStack) -> None:
    bucket = _unique("no-such-bucket")
    uri = f"s3://{bucket}/in/*.csv"
    exc = _raised(S3ListingEventTrigger(s3_uri=uri, aws_conn_id=CONN, poll_interval=0.05).run().__aiter__())
    assert isinstance(exc, BucketError) and isinstance(exc, AirflowFailException), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert f"the listing watcher of {uri} failed" in text and f"bucket {bucket!r} does not exist" in text, text
    assert "check the bucket name in s3_uri" in text, text


def test_a_glob_that_matches_nothing_yet_is_waited_on_and_the_start_says_what_it_watches(
        moto: LocalStack, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = _unique("watched")
    moto.create_bucket(bucket)
    moto.s3_client().put_object(Bucket=bucket, Key="in/a.txt", Body=b"not the glob's\n")
    trigger = S3ListingEventTrigger(s3_uri=f"s3://{bucket}/in/*.csvv", aws_conn_id=CONN, poll_interval=0.05)

    with caplog.at_level(logging.INFO):
        asyncio.run(_no_event_until(trigger, lambda: trigger.cursor.looks >= 3, "a glob that matches nothing"))
    assert trigger.cursor.looks >= 3  # it went on looking
    text = _said(caplog, capsys)
    assert f"listing watcher: bucket {bucket!r}, prefix 'in/', keys matching 'in/*.csvv'" in text, text
    once = f"no key under s3://{bucket}/in/ matches 'in/*.csvv' yet"  # said once (Airflow 2 echoes logs to stdout)
    assert (sum(m.count(once) for m in caplog.messages) or text.count(once)) == 1, text


def test_the_notification_watcher_says_what_it_watches(moto: LocalStack, caplog: pytest.LogCaptureFixture,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bucket = _unique("notified")
    moto.create_bucket(bucket)
    url = moto.notify_queue(bucket, bucket, prefix="in/")
    trigger = _sqs_trigger(url, f"s3://{bucket}/in/*.csv")

    async def until_it_says() -> None:
        """The watcher says what it watches when it starts; no notification comes, so it waits (5 s here)."""
        events = trigger.run().__aiter__()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(events.__anext__(), timeout=5)
        await events.aclose()

    with caplog.at_level(logging.INFO):
        asyncio.run(until_it_says())
    text = _said(caplog, capsys)
    assert f"notification watcher: SQS queue {url}" in text and f"files of bucket {bucket!r}" in text, text
    assert "keys match 'in/*.csv'" in text and "must cover the prefix 'in/'" in text, text


def test_notifications_of_another_bucket_are_said_once(moto: LocalStack, caplog: pytest.LogCaptureFixture) -> None:
    """A typo in the notification watcher's bucket: the queue's notifications name another bucket's files, which the
    watcher drops; it says so once (a queue may carry several buckets' notifications on purpose)."""
    bucket = _unique("notifying")
    moto.create_bucket(bucket)
    url = moto.notify_queue(bucket, bucket, prefix="in/")
    for key in ("in/a.csv", "in/b.csv"):
        moto.s3_client().put_object(Bucket=bucket, Key=key, Body=b"x\n")
    trigger = _sqs_trigger(url, f"s3://{bucket}-typo/in/*.csv")

    def warned() -> list[str]:
        return [m for m in caplog.messages if "names files of another bucket" in m]

    with caplog.at_level(logging.WARNING, logger="airflow_provider_s3ch.triggers.s3_notifications"):
        # both notifications are in the first receives: a second warning would follow within the second after
        asyncio.run(_no_event_until(trigger, warned, "another bucket's files", then=1.0))
    said = [m for m in caplog.messages if "names files of another bucket" in m]
    assert len(said) == 1 and f"another bucket than '{bucket}-typo'" in said[0], caplog.messages


# ---------------------------------------------------------------------- access denied (moto enforcing IAM)
LOCKED_BUCKET = "s3ch-watch-locked"


class Locked:
    """The module's IAM-enforcing server: its queue and its users' connections."""

    def __init__(self, endpoint: str, queue_url: str) -> None:
        self.endpoint = endpoint
        self.queue_url = queue_url


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Locked]:
    """moto's server enforcing credentials and IAM policies once set up (``/moto-api/reset-auth`` with 0): a bucket
    and a queue holding one message; ``aws_nobody`` may do nothing, ``aws_receiver`` may receive but not delete."""
    made: dict[str, str] = {}

    def setup(endpoint: str, kwargs: dict[str, Any]) -> None:
        s3, sqs = boto3.client("s3", **kwargs), boto3.client("sqs", **kwargs)
        s3.create_bucket(Bucket=LOCKED_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        made["url"] = sqs.create_queue(QueueName="locked", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
        sqs.send_message(QueueUrl=made["url"], MessageBody="a message the receiver may not delete")

    log = tmp_path_factory.mktemp("locked-watch") / "moto.log"
    with locked_moto(log, REGION, {"nobody": [], "receiver": ["sqs:ReceiveMessage"]}, setup) as (endpoint, keys):
        conns = {f"aws_{user}": {"conn_type": "aws", "login": key, "password": secret,
                                 "extra": {"endpoint_url": endpoint, "region_name": REGION}}
                 for user, (key, secret) in keys.items()}
        with _connections(**conns):
            yield Locked(endpoint, made["url"])


def test_access_denied_to_receive_fails_the_trigger_naming_the_permission(locked: Locked) -> None:
    exc = _raised(_sqs_trigger(locked.queue_url, conn="aws_nobody").run().__aiter__())
    assert isinstance(exc, QueueError), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert "access denied (AccessDenied: User: arn:aws:iam::123456789012:user/nobody is not authorized" in text, text
    assert f"to receive messages from the SQS queue {locked.queue_url}" in text, text
    assert "give the aws connection 'aws_nobody' sqs:ReceiveMessage on arn:aws:sqs:eu-west-3:123456789012:locked" \
        in text, text


def test_access_denied_to_delete_fails_the_trigger_rather_than_receive_the_messages_for_ever(locked: Locked) -> None:
    """Without sqs:DeleteMessage every message would come back after its visibility timeout, and be handed on
    again, for ever: the trigger fails on its first delete."""
    exc = _raised(_sqs_trigger(locked.queue_url, conn="aws_receiver").run().__aiter__())
    assert isinstance(exc, QueueError), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert f"to delete messages from the SQS queue {locked.queue_url}" in text and "sqs:DeleteMessage on" in text, text


def test_access_denied_to_the_bucket_fails_the_listing_watcher_naming_it(locked: Locked) -> None:
    uri = f"s3://{LOCKED_BUCKET}/in/*.csv"
    exc = _raised(S3ListingEventTrigger(s3_uri=uri, aws_conn_id="aws_nobody", poll_interval=0.05).run().__aiter__())
    assert isinstance(exc, BucketError) and isinstance(exc, AirflowFailException), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert f"the listing watcher of {uri} failed: access denied" in text, text
    assert f"s3:ListBucket on arn:aws:s3:::{LOCKED_BUCKET}" in text, text

"""What an SQS failure means for a notification watcher, without a server: botocore's errors as SQS and the network
raise them, classified terminal (the trigger fails, naming the queue and the fix) or transient (paused, tried
again); a queue_url checked when the DAG is parsed; the pause of a watcher that Airflow starts again after it
failed for good."""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ReadTimeoutError,
)

from airflow_provider_s3ch.errors import (
    SQS_TERMINAL_CODES,
    InvalidRequestError,
    QueueError,
    QueueUnavailableError,
    S3chTerminalError,
    S3chTransientError,
    sqs_failure,
)
from airflow_provider_s3ch.hooks.sqs import MAX_BACKOFF, Receiving, check_queue_url, queue_arn, queue_error
from airflow_provider_s3ch.triggers.s3_events import Restarts

URL = "https://sqs.eu-west-3.amazonaws.com/123456789012/landing"
SETTINGS = Receiving(queue_url=URL, aws_conn_id="aws_landing")


def client_error(code: str, status: int, message: str = "", operation: str = "ReceiveMessage") -> ClientError:
    """The error botocore raises for an SQS answer with ``code`` (JSON protocol: ``Error.Code`` is the query
    protocol's code where SQS sends one, as ``x-amzn-query-error``)."""
    return ClientError({"Error": {"Code": code, "Message": message},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


@pytest.mark.parametrize(("code", "status", "kind"), [
    ("AWS.SimpleQueueService.NonExistentQueue", 400, "missing"),  # botocore's code (SQS's query-protocol code)
    ("QueueDoesNotExist", 400, "missing"),                       # the JSON protocol's own
    ("InvalidAddress", 400, "missing"),
    ("AccessDenied", 403, "denied"),
    ("AccessDeniedException", 400, "denied"),
    ("KMS.AccessDeniedException", 400, "denied"),
    ("403", 403, "denied"),                                      # an answer without a code of its own
    ("InvalidClientTokenId", 403, "credentials"),
    ("UnrecognizedClientException", 400, "credentials"),
    ("SignatureDoesNotMatch", 403, "credentials"),
    ("KMS.DisabledException", 400, "refused"),
    ("InvalidParameterValue", 400, "refused"),
])
def test_codes_no_retry_gets_past_are_terminal(code: str, status: int, kind: str) -> None:
    assert sqs_failure(code, status) == kind
    error = queue_error(client_error(code, status, "said"), SETTINGS, "receive", "eu-west-3")
    assert isinstance(error, QueueError) and isinstance(error, S3chTerminalError)
    assert isinstance(error, AirflowFailException) and URL in str(error)


@pytest.mark.parametrize(("code", "status"), [
    ("AWS.SimpleQueueService.RequestThrottled", 400), ("RequestThrottled", 400), ("ThrottlingException", 400),
    ("OverLimit", 400), ("KmsThrottled", 400), ("KMS.ThrottlingException", 400), ("ServiceUnavailable", 503),
    ("InternalError", 500), ("InternalFailure", 500), ("500", 500), ("RequestTimeout", 408), ("SomethingNew", 400),
])
def test_throttling_server_errors_and_unknown_codes_are_transient(code: str, status: int) -> None:
    assert sqs_failure(code, status) is None
    error = queue_error(client_error(code, status, "slow down"), SETTINGS, "receive")
    assert isinstance(error, QueueUnavailableError) and isinstance(error, S3chTransientError)
    assert not isinstance(error, AirflowFailException)


@pytest.mark.parametrize("exc", [
    EndpointConnectionError(endpoint_url="https://sqs.eu-west-3.amazonaws.com/"),
    ConnectTimeoutError(endpoint_url="https://sqs.eu-west-3.amazonaws.com/"),
    ReadTimeoutError(endpoint_url="https://sqs.eu-west-3.amazonaws.com/"),
])
def test_a_network_that_fails_is_transient(exc: Exception) -> None:
    assert isinstance(queue_error(exc, SETTINGS, "receive"), QueueUnavailableError)


def test_no_credentials_or_no_region_is_terminal() -> None:
    error = queue_error(NoCredentialsError(), SETTINGS, "receive")
    assert isinstance(error, QueueError) and "'aws_landing' yields no usable credentials" in str(error)
    error = queue_error(NoRegionError(), SETTINGS, "receive")
    assert isinstance(error, QueueError) and "region_name" in str(error)


def test_the_messages_name_the_queue_and_the_fix() -> None:
    missing = str(queue_error(client_error("AWS.SimpleQueueService.NonExistentQueue", 400,
                                           "The specified queue does not exist."), SETTINGS, "receive", "eu-west-3"))
    assert missing.startswith(f"the SQS queue {URL} does not exist in region eu-west-3 "
                              "(AWS.SimpleQueueService.NonExistentQueue: The specified queue does not exist.)")
    assert "check the watcher's queue_url" in missing and "region_name" in missing and "s3ch-local queue" in missing
    denied = str(queue_error(client_error("AccessDenied", 403, "not authorized"), SETTINGS, "delete", "eu-west-3"))
    assert denied.startswith(f"access denied (AccessDenied: not authorized) to delete messages from the SQS queue "
                             f"{URL}; give the aws connection 'aws_landing' sqs:DeleteMessage on "
                             "arn:aws:sqs:eu-west-3:123456789012:landing")


def test_an_xml_error_body_is_read_for_its_code() -> None:
    """moto's SQS answers a JSON client's denied call with the query protocol's XML: botocore's code is ``403``."""
    body = ('<?xml version="1.0" encoding="utf-8"?>\n<ErrorResponse><Errors><Error><Code>AccessDenied</Code>'
            "<Message>User: u is not authorized</Message><Type>Sender</Type></Error></Errors></ErrorResponse>")
    error = queue_error(client_error("403", 403, body), SETTINGS, "receive", "eu-west-3")
    assert isinstance(error, QueueError) and "access denied (AccessDenied: User: u is not authorized)" in str(error)
    assert "<?xml" not in str(error)


def test_the_terminal_codes_are_told_apart() -> None:
    seen = [code for codes in SQS_TERMINAL_CODES.values() for code in codes]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("url", [
    URL, "http://127.0.0.1:5000/123456789012/landing", "https://vpce-1a2b.sqs.us-east-1.vpce.amazonaws.com/1/q",
    "http://localhost:9324/queue/landing",
])
def test_queue_urls_are_taken(url: str) -> None:
    assert check_queue_url(url) == url


@pytest.mark.parametrize(("url", "says"), [
    ("arn:aws:sqs:eu-west-3:123456789012:landing", f"is the queue's ARN; give its URL: {URL}"),
    ("landing", "is no SQS queue URL"),
    ("", "is no SQS queue URL"),
    ("sqs.eu-west-3.amazonaws.com/123456789012/landing", "is no SQS queue URL"),
    ("https://sqs.eu-west-3.amazonaws.com/", "is no SQS queue URL"),
])
def test_what_is_no_queue_url_is_refused_when_the_dag_is_parsed(url: str, says: str) -> None:
    with pytest.raises(InvalidRequestError, match=says.replace(".", r"\.")):
        check_queue_url(url)


def test_the_queue_arn_of_its_url() -> None:
    assert queue_arn(URL, "eu-west-3") == "arn:aws:sqs:eu-west-3:123456789012:landing"
    assert queue_arn("https://sqs.eu-west-3.amazonaws.com/", "eu-west-3") is None
    assert queue_arn(URL, None) is None


def test_a_watcher_started_again_after_failing_for_good_waits_doubling_up_to_a_minute() -> None:
    restarts, key = Restarts(), ("s3ch.sqs", URL)
    assert restarts.pause(key) == 0
    pauses = []
    for _ in range(9):
        restarts.failed(key, QueueError("gone"))
        pauses.append(restarts.pause(key))
    assert pauses == [1, 2, 4, 8, 16, 32, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF]
    restarts.succeeded(key)
    assert restarts.pause(key) == 0 and restarts.pause(("another",)) == 0


def test_failures_long_ago_are_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    restarts, key, now = Restarts(), ("k",), time.monotonic()
    for _ in range(5):
        restarts.failed(key, QueueError("gone"))
    monkeypatch.setattr(time, "monotonic", lambda: now + 2 * MAX_BACKOFF + 1)
    assert restarts.pause(key) == 0
    restarts.failed(key, QueueError("gone"))  # counted from one again
    assert restarts.pause(key) == 1


def test_the_wait_says_why(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    restarts, key, logger = Restarts(), ("k",), logging.getLogger("s3ch.test.restarts")
    restarts.failed(key, QueueError("the SQS queue q does not exist"))
    with caplog.at_level(logging.WARNING, logger=logger.name):
        t0 = time.monotonic()
        asyncio.run(restarts.wait(key, "the notification watcher of s3://b/*.csv", logger))
    assert time.monotonic() - t0 >= 0.9
    assert caplog.messages == ["the notification watcher of s3://b/*.csv: next try in 1 s, after 1 failure(s) in a "
                               "row; the last: the SQS queue q does not exist"]

"""core/events.py's message_files: an SQS message's body, straight from S3 or through an SNS topic, to files."""

from __future__ import annotations

import json
from urllib.parse import quote_plus

import pytest

from airflow_provider_s3ch.core.events import message_files


def notification(key: str, bucket: str = "b") -> dict:
    return {"Records": [{"eventTime": "2026-01-01T00:00:01Z", "eventName": "ObjectCreated:Put", "s3": {
        "bucket": {"name": bucket}, "object": {"key": quote_plus(key), "size": 5, "eTag": '"abc"'}}}]}


def test_a_notification_straight_from_s3() -> None:
    files = message_files(json.dumps(notification("in/a b.csv")), bucket="b")
    assert files is not None and [(f.key, f.etag, f.size) for f in files] == [("in/a b.csv", "abc", 5)]


def test_a_notification_through_an_sns_topic() -> None:
    body = json.dumps({"Type": "Notification", "TopicArn": "arn:aws:sns:eu-west-3:1:t",
                       "Message": json.dumps(notification("in/ü.csv"))})
    files = message_files(body, bucket="b")
    assert files is not None and [f.key for f in files] == ["in/ü.csv"]


def test_another_buckets_files_and_the_test_event_name_none() -> None:
    assert message_files(json.dumps(notification("in/a.csv", bucket="other")), bucket="b") == []
    assert message_files(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})) == []


@pytest.mark.parametrize("body", [
    "not json", "[1, 2]", json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": {}}}]}),
    json.dumps({"Type": "Notification", "Message": "not json"}),
])
def test_a_body_that_is_no_s3_notification(body: str) -> None:
    assert message_files(body) is None

"""``s3ch-local queue`` as a real process, on the local stack's S3/SQS server: it makes the bucket, the queue and the
bucket's notification for the prefix, prints the queue's URL alone on stdout, and the queue then hears of the
objects created under the prefix and of no other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import main, queue_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def moto() -> Iterator[LocalStack]:
    """The local stack's S3/SQS server alone (the command needs no ClickHouse)."""
    stack = LocalStack(region="eu-west-3")
    stack.workdir.mkdir(parents=True, exist_ok=True)
    try:
        stack.start_s3()
        yield stack
    finally:
        stack.stop()


def s3ch_local(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """``s3ch-local ARGS`` with the connection ``s3ch-local up`` exports (``AIRFLOW_CONN_AWS_DEFAULT``)."""
    env = dict(os.environ, AIRFLOW_CONN_AWS_DEFAULT=json.dumps(stack.aws_connection()))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "airflow_provider_s3ch.local.cli", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def notified_keys(stack: LocalStack, url: str) -> list[str]:
    """The keys of the created objects the queue's messages name (S3's test event names none); each deleted."""
    sqs, keys = stack.sqs_client(), []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages"):
        for message in messages:
            body = json.loads(message["Body"])
            keys += [urllib.parse.unquote_plus(r["s3"]["object"]["key"]) for r in body.get("Records", [])]
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return sorted(keys)


def test_the_queue_hears_of_the_objects_created_under_the_prefix_only(moto: LocalStack) -> None:
    bucket = "s3ch-queue-cli"
    made = s3ch_local(moto, "queue", "--bucket", bucket, "--prefix", "in/")
    assert made.returncode == 0, made.stderr
    url = made.stdout.strip()
    assert made.stdout == url + "\n", "the URL alone on stdout: QUEUE=$(s3ch-local queue ...)"
    assert url == f"{moto.s3_endpoint}/123456789012/{queue_name(bucket, 'in/')}" == \
        f"{moto.s3_endpoint}/123456789012/s3ch-s3ch-queue-cli-in"
    assert f"bucket {bucket} notifies queue s3ch-s3ch-queue-cli-in of s3:ObjectCreated:* under 'in/'" in made.stderr

    s3 = moto.s3_client()  # the bucket did not exist: the command made it
    for key in ("in/a.csv", "out/b.csv", "inside.csv", "in/sub/c.csv"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x\n")
    assert notified_keys(moto, url) == ["in/a.csv", "in/sub/c.csv"]

    again = s3ch_local(moto, "queue", "--bucket", bucket, "--prefix", "in/")
    assert again.returncode == 0 and again.stdout.strip() == url, again.stderr
    config = s3.get_bucket_notification_configuration(Bucket=bucket)["QueueConfigurations"]
    assert len(config) == 1, "run twice, the bucket notifies the queue once"
    s3.put_object(Bucket=bucket, Key="in/d.csv", Body=b"x\n")
    assert notified_keys(moto, url) == ["in/d.csv"]


def test_a_named_queue_beside_another_on_the_same_bucket(moto: LocalStack) -> None:
    bucket = "s3ch-queue-cli-two"
    urls = []
    for prefix, name in (("a/", "first"), ("b/", "second")):
        made = s3ch_local(moto, "queue", "--bucket", bucket, "--prefix", prefix, "--name", name)
        assert made.returncode == 0, made.stderr
        urls.append(made.stdout.strip())
    assert [u.rsplit("/", 1)[1] for u in urls] == ["first", "second"]
    for key in ("a/1.csv", "b/2.csv"):
        moto.s3_client().put_object(Bucket=bucket, Key=key, Body=b"x\n")
    assert [notified_keys(moto, u) for u in urls] == [["a/1.csv"], ["b/2.csv"]]


def test_a_connection_to_aws_itself_is_refused(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_REAL", json.dumps({"conn_type": "aws", "login": "AKIAEXAMPLE000000000",
                                                            "password": "secret-of-the-example"}))
    assert main(["queue", "--bucket", "landing", "--prefix", "in/", "--aws-conn-id", "aws_real"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "the aws connection 'aws_real' has no endpoint_url: s3ch-local queue makes queues on the local stack only" \
        in captured.err

"""docs/continuous.md quotes the notification watcher's defaults as the code sets them."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from airflow_provider_s3ch.hooks.sqs import MAX_BACKOFF
from airflow_provider_s3ch.triggers.s3_notifications import S3NotificationEventTrigger

PAGE = (Path(__file__).parents[2] / "docs" / "continuous.md").read_text()
TRIGGER = inspect.signature(S3NotificationEventTrigger.__init__).parameters


@pytest.mark.parametrize("phrase", [
    f"| `aws_conn_id` | `{TRIGGER['aws_conn_id'].default}` | the connection that reads the queue |",
    f"| `region_name` | `{TRIGGER['region_name'].default}` |",
    f"| `wait_time` | {TRIGGER['wait_time'].default} s |",
    f"| `poll_interval` | {TRIGGER['poll_interval'].default:g} s |",
    f"| `max_messages` | {TRIGGER['max_messages'].default} |",
    f"| `visibility_timeout` | `{TRIGGER['visibility_timeout'].default}` |",
    f"| `max_files_per_event` | {TRIGGER['max_files_per_event'].default} | the most files one event names |",
    f"1 s up to {MAX_BACKOFF:g} s",
])
def test_the_page_quotes_the_codes_figures(phrase: str) -> None:
    assert phrase in PAGE

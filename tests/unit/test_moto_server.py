"""The local stack's S3/SQS server: moto's, with its SQS message clock on ``time.time()``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from moto.sqs.models import Message

from airflow_provider_s3ch.local.moto_server import patch_sqs_clock


@pytest.fixture(scope="module")
def moto_properties() -> Iterator[tuple[property, property]]:
    original = Message.__dict__["visible"], Message.__dict__["delayed"]
    patch_sqs_clock()
    try:
        yield original
    finally:
        Message.visible, Message.delayed = original  # type: ignore[method-assign,assignment]


@settings(max_examples=200, deadline=None)
@given(visible_in_ms=st.integers(-10**9, 10**9).filter(lambda ms: abs(ms) > 1000),
       delayed_in_ms=st.integers(-10**9, 10**9).filter(lambda ms: abs(ms) > 1000))
def test_a_message_is_visible_and_delayed_exactly_when_moto_says(
    moto_properties: tuple[property, property], visible_in_ms: int, delayed_in_ms: int,
) -> None:
    visible, delayed = moto_properties
    message = Message("id", "body")
    now = time.time() * 1000
    message.visible_at = now + visible_in_ms
    message.delayed_until = now + delayed_in_ms
    assert message.visible == visible.fget(message) == (visible_in_ms < 0)
    assert message.delayed == delayed.fget(message) == (delayed_in_ms > 0)

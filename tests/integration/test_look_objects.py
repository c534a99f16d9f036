"""A listed run's files looked up again by a listing of their range (hooks.s3_events.look_objects) say what one
HeadObject per key says, on moto's S3: whatever keys are asked, deleted or overwritten since, or spread thinly over
other keys (the listing then stops early and the rest are looked up one by one)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.hooks.s3 import head_objects
from airflow_provider_s3ch.hooks.s3_events import LIST_FROM_KEYS, look_objects
from airflow_provider_s3ch.local import LocalStack

pytestmark = pytest.mark.integration

BUCKET = "s3ch-look"
KEYS = [f"in/{d}/f-{n:04d}{suffix}" for d in ("a", "b ü") for n in range(150) for suffix in (".csv",)]


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    s3 = stack.s3_client()
    for key in KEYS:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"1\n")
    return BUCKET


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(asked=st.sets(st.sampled_from(KEYS), min_size=LIST_FROM_KEYS, max_size=len(KEYS)),
       missing=st.lists(st.text("xyz/.", min_size=1, max_size=5), max_size=5), change=st.data())
def test_a_listing_of_the_range_says_what_head_object_says(stack: LocalStack, bucket: str, asked: set[str],
                                                            missing: list[str], change: st.DataObject) -> None:
    s3 = stack.s3_client()
    overwritten = change.draw(st.sets(st.sampled_from(sorted(asked)), max_size=3))
    for key in overwritten:
        s3.put_object(Bucket=bucket, Key=key, Body=uuid.uuid4().bytes)
    keys = sorted(asked) + [f"in/{m}" for m in missing]
    listed = look_objects(s3, bucket, keys, may_list=True)
    headed = head_objects(s3, bucket, keys)
    assert {k: (o.size, o.etag) if o else None for k, o in listed.items()} == {
        k: (o.size, o.etag) if o else None for k, o in headed.items()}
    assert all(listed[k] is not None for k in asked)

"""Fixtures on the real local stack: chdb-core ClickHouse nodes and moto's S3 server. No mocks."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset, posts_ddl, write_posts
from tests.integration.support import SAMPLE_BUCKET

if not AIRFLOW_3:  # pragma: no cover - Airflow 2
    # Airflow 2's guard on direct ``execute`` calls keeps its callers in a thread-local filled in the
    # importing thread only, so ``op.execute`` in any other thread fails with "'_thread._local' object has
    # no attribute 'callers'". A task process calls execute in its main thread; these tests run loads in
    # threads (faults, concurrent loads), so each thread gets its own empty slot, as the main thread has.
    from airflow.models.baseoperator import ExecutorSafeguard

    class _Callers(threading.local):
        def __init__(self) -> None:
            self.callers: dict[str, object] = {}

    ExecutorSafeguard._sentinel = _Callers()

SAMPLE_ROWS = 30_000
SAMPLE_MONTHS = 6


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    """One ClickHouse node and an S3 server; AIRFLOW_CONN_* point the default connections at them."""
    with LocalStack(nodes=1, region="eu-west-3") as s, s.environ():
        s.create_bucket(SAMPLE_BUCKET)
        yield s


@pytest.fixture(scope="session")
def posts(stack: LocalStack) -> SampleDataset:
    """Sample posts: SAMPLE_ROWS rows in SAMPLE_MONTHS monthly Parquet files."""
    return write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=SAMPLE_ROWS, months=SAMPLE_MONTHS)


@pytest.fixture
def posts_table(stack: LocalStack) -> str:
    """A fresh, empty posts table (unique name) in database ``default``."""
    name = f"posts_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client().execute(posts_ddl(f"default.{name}"))
    return f"default.{name}"


@pytest.fixture
def env_conn():
    """Set extra AIRFLOW_CONN_* variables for one test."""
    saved: dict[str, str | None] = {}

    def _set(conn_id: str, conn: dict[str, Any]) -> str:
        key = f"AIRFLOW_CONN_{conn_id.upper()}"
        saved.setdefault(key, os.environ.get(key))
        os.environ[key] = json.dumps(conn)
        return conn_id

    yield _set
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def cluster_stack() -> Iterator[LocalStack]:
    """Three ClickHouse nodes in one cluster; connections ``clickhouse_cluster`` and ``aws_cluster``."""
    with LocalStack(nodes=3, region="eu-west-3") as s, s.environ("clickhouse_cluster", "aws_cluster"):
        s.create_bucket(SAMPLE_BUCKET)
        yield s

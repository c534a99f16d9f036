"""These tests run Airflow 3's own processes (api-server, dag-processor, scheduler, triggerer, task SDK
runtime): on Airflow 2 they are skipped with that reason, and the DAG tests (``airflow dags test``) cover
the operator there."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3, AIRFLOW_VERSION

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if AIRFLOW_3:
        return
    skip = pytest.mark.skip(reason=f"needs Airflow 3's api-server and dag-processor; this is Airflow {AIRFLOW_VERSION}")
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(skip)

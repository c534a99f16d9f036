"""Test-wide setup: Airflow runs from a throwaway AIRFLOW_HOME, set before Airflow is imported."""

from __future__ import annotations

import os
import tempfile

_HOME = tempfile.mkdtemp(prefix="s3ch-test-airflow-")
os.environ.setdefault("AIRFLOW_HOME", _HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
for _var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(_var, None)

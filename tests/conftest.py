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

# Hypothesis: no per-example deadline anywhere. On a busy machine one example of a pure function can take
# seconds; a deadline would fail the test on the machine's load, not on the property.
from hypothesis import settings  # noqa: E402 - after the environment above

settings.register_profile("s3ch", deadline=None)
settings.load_profile("s3ch")

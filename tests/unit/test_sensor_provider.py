"""S3GlobSensor and S3GlobTrigger as Airflow sees them: registered, serializable, deferrable by Airflow's default."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_provider_s3ch import get_provider_info
from airflow_provider_s3ch.errors import BucketError, S3chTerminalError, S3chTransientError, S3UnavailableError
from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor
from airflow_provider_s3ch.triggers.s3_glob import S3GlobTrigger


def test_the_provider_info_names_the_sensor_and_the_trigger_modules() -> None:
    info = get_provider_info()
    (sensors,) = info["sensors"]  # type: ignore[misc]
    triggers = info["triggers"][0]  # type: ignore[index]
    assert sensors["python-modules"] == ["airflow_provider_s3ch.sensors.s3_glob"]
    assert "airflow_provider_s3ch.triggers.s3_glob" in triggers["python-modules"]


def test_airflow_lists_the_trigger() -> None:
    code = (
        "import json; from airflow.providers_manager import ProvidersManager as P; "
        "print(json.dumps([t.trigger_class_name for t in P().trigger if t.package_name == 'airflow-provider-s3ch']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert sorted(json.loads(out.stdout.strip().splitlines()[-1])) == [
        "airflow_provider_s3ch.triggers.load", "airflow_provider_s3ch.triggers.s3_events",
        "airflow_provider_s3ch.triggers.s3_glob", "airflow_provider_s3ch.triggers.s3_notifications",
    ]


def test_the_trigger_serializes_to_what_rebuilds_it() -> None:
    trigger = S3GlobTrigger(
        s3_uri="s3://b/m/{01..12}.csv", min_files=3, success_marker="_SUCCESS", aws_conn_id="aws_x", poke_interval=5
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_s3ch.triggers.s3_glob.S3GlobTrigger"
    json.dumps(kwargs)  # what the trigger table stores
    assert S3GlobTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert kwargs == {
        "s3_uri": "s3://b/m/{01..12}.csv",
        "min_files": 3,
        "success_marker": "_SUCCESS",
        "aws_conn_id": "aws_x",
        "poke_interval": 5.0,
    }


@pytest.mark.parametrize(("setting", "expected"), [(None, False), ("True", True), ("False", False)])
def test_deferrable_defaults_to_airflows_default_deferrable(setting: str | None, expected: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"}
    if setting is not None:
        env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = setting
    code = (
        "from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor; "
        "print(S3GlobSensor(task_id='w', s3_uri='s3://b/k').deferrable)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(expected)


def test_templated_fields() -> None:
    assert set(S3GlobSensor.template_fields) == {"s3_uri", "min_files", "success_marker", "aws_conn_id"}


def test_resuming_returns_the_summary_or_raises_the_triggers_error() -> None:
    sensor = S3GlobSensor(task_id="w", s3_uri="s3://b/k/*.csv")
    summary = {"s3_uri": "s3://b/k/*.csv", "files": 2, "bytes": 10, "non_empty_files": 2, "success_marker": None}
    assert sensor.execute_complete({}, {"status": "success", "summary": summary, "message": "ready"}) == summary
    with pytest.raises(BucketError, match="does not exist") as terminal:
        sensor.execute_complete({}, {"status": "error", "error": "BucketError", "message": "bucket 'b' does not exist"})
    assert isinstance(terminal.value, S3chTerminalError)
    with pytest.raises(S3UnavailableError):
        sensor.execute_complete({}, {"status": "error", "error": "S3UnavailableError", "message": "S3 did not answer"})
    for event in ({"status": "error", "error": "KeyError", "message": "?"}, None):
        with pytest.raises(S3chTransientError):
            sensor.execute_complete({}, event)

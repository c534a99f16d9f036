"""S3GlobSensor on the real local stack: it waits for exactly the files the operator's manifest holds.

Each check puts objects on moto's S3 server, asks the sensor (a poke, the trigger, or a whole DAG run
through ``airflow dags test``) and, beside it, builds the operator's own manifest for the same ``s3_uri``.
"""

from __future__ import annotations

import asyncio
import json
import queue
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowSensorTimeout

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.errors import BucketError, NoObjectsError
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.sensors.s3_glob import S3GlobSensor
from airflow_provider_s3ch.triggers.s3_glob import S3GlobTrigger
from tests.dags.test_dags import airflow_env
from tests.integration.support import SAMPLE_BUCKET, count, fake_context

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "tests" / "dags" / "dags"


def _prefix() -> str:
    return f"sensor-{uuid.uuid4().hex[:8]}/"


def _put(stack: LocalStack, key: str, body: bytes = b"id,name\n1,a\n", bucket: str = SAMPLE_BUCKET) -> None:
    stack.s3_client().put_object(Bucket=bucket, Key=key, Body=body)


def _poke(s3_uri: str, **kwargs: Any) -> dict[str, Any] | None:
    """One poke: the XCom when the files are ready, else None."""
    result = S3GlobSensor(task_id="wait", s3_uri=s3_uri, deferrable=False, **kwargs).poke(fake_context())
    return result.xcom_value if result else None


def _manifest(s3_uri: str) -> tuple[int, int] | None:
    """The operator's manifest for the same URI: (files, bytes), or None when it would refuse to load."""
    try:
        manifest = build_manifest(S3Source().client(), LoadRequest(s3_uri=s3_uri, table="t"), footer_sample=0)
    except NoObjectsError:
        return None
    return manifest.file_count, manifest.total_bytes


def _agree(s3_uri: str, **kwargs: Any) -> dict[str, Any] | None:
    """The sensor's answer, checked against the operator's manifest."""
    xcom = _poke(s3_uri, **kwargs)
    manifest = _manifest(s3_uri)
    if xcom is not None:
        assert manifest == (xcom["files"], xcom["bytes"]), (s3_uri, xcom, manifest)
    elif kwargs.get("min_files", 1) == 1 and "success_marker" not in kwargs:
        assert manifest is None, (s3_uri, manifest)
    return xcom


def test_a_range_glob_waits_for_the_files_the_operator_reads(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}m{{01..12}}.csv"
    for decoy in ("m1.csv", "m13.csv", "m00.csv", "m01.csv.tmp", "m7.csv"):
        _put(stack, p + decoy)
    assert _agree(uri) is None
    _put(stack, p + "m07.csv", b"id,name\n7,g\n")
    xcom = _agree(uri)
    assert xcom == {"s3_uri": uri, "files": 1, "bytes": 12, "non_empty_files": 1, "success_marker": None}
    _put(stack, p + "m12.csv")
    assert _agree(uri)["files"] == 2  # type: ignore[index]


def test_airflows_wildcard_sensor_sees_none_of_these_files(stack: LocalStack) -> None:
    """What the sensor is for: fnmatch reads ``{01..12}`` and ``{a,b}`` as literal text."""
    from airflow.providers.amazon.aws.sensors.s3 import S3KeySensor

    p = _prefix()
    for key in ("m07.csv", "a.csv", "b.csv"):
        _put(stack, p + key)
    for glob in ("m{01..12}.csv", "{a,b}.csv"):
        uri = f"s3://{SAMPLE_BUCKET}/{p}{glob}"
        assert S3KeySensor(task_id="k", bucket_key=uri, wildcard_match=True).poke(fake_context()) is False
        assert _agree(uri) is not None


def test_a_key_list_waits_for_every_key_as_clickhouse_reads_them_directly(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}{{a,b}}.csv"
    _put(stack, p + "a.csv")
    _put(stack, p + "c.csv")
    assert _agree(uri) is None  # the operator refuses it too: b.csv is missing
    _put(stack, p + "b.csv", b"id,name\n2,b\n3,c\n")
    assert _agree(uri) == {"s3_uri": uri, "files": 2, "bytes": 28, "non_empty_files": 2, "success_marker": None}


def test_a_key_list_under_another_glob_is_matched_against_the_listing(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}{{eu,us}}/*.csv"
    _put(stack, p + "ap/x.csv")
    _put(stack, p + "eu.csv")
    assert _agree(uri) is None
    _put(stack, p + "us/part-0.csv")
    assert _agree(uri)["files"] == 1  # type: ignore[index]


def test_min_files_counts_the_files_that_are_not_empty(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}part-*.csv"
    _put(stack, p + "part-0.csv")
    _put(stack, p + "part-1.csv", b"")
    _put(stack, p + "other-2.csv")
    assert _agree(uri, min_files=2) is None
    assert _manifest(uri) == (2, 12)  # the operator would load the two it has
    _put(stack, p + "part-2.csv")
    assert _agree(uri, min_files=2) == {
        "s3_uri": uri,
        "files": 3,
        "bytes": 24,
        "non_empty_files": 2,
        "success_marker": None,
    }
    assert _agree(uri, min_files=3) is None


def test_the_success_marker_is_waited_for_beside_the_files(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}2024-01/part-*.csv"
    assert _agree(uri, success_marker="_SUCCESS") is None
    _put(stack, p + "2024-01/part-0.csv")
    _put(stack, p + "_SUCCESS", b"")  # not the glob's folder
    assert _agree(uri, success_marker="_SUCCESS") is None
    _put(stack, p + "2024-01/_SUCCESS", b"")
    assert _agree(uri, success_marker="_SUCCESS") == {
        "s3_uri": uri,
        "files": 1,
        "bytes": 12,
        "non_empty_files": 1,
        "success_marker": f"{p}2024-01/_SUCCESS",
    }
    assert _agree(uri, success_marker="_DONE") is None


def test_poke_mode_waits_and_times_out(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}*.csv"
    with pytest.raises(AirflowSensorTimeout):
        S3GlobSensor(task_id="wait", s3_uri=uri, deferrable=False, poke_interval=0.2, timeout=1).execute(fake_context())
    later = threading.Timer(1.5, _put, (stack, p + "late.csv"))
    later.start()
    started = time.monotonic()
    sensor = S3GlobSensor(task_id="wait", s3_uri=uri, deferrable=False, poke_interval=0.2, timeout=30)
    xcom = sensor.execute(fake_context())
    later.join()
    assert time.monotonic() - started >= 1.5
    assert xcom["files"] == 1 and xcom["bytes"] == 12


def test_a_missing_bucket_fails_without_a_retry(stack: LocalStack) -> None:
    with pytest.raises(BucketError, match="does not exist"):
        _poke("s3://s3ch-no-such-bucket/k/*.csv")


def _run_trigger(trigger: S3GlobTrigger, upload: Any = None, after: float = 0.0) -> tuple[dict[str, Any], float]:
    """Run the trigger to its event in an event loop, uploading ``after`` seconds in; (payload, seconds)."""

    async def main() -> tuple[dict[str, Any], float]:
        started = time.monotonic()
        if upload is not None:
            asyncio.get_running_loop().call_later(after, lambda: threading.Thread(target=upload).start())
        event = await asyncio.wait_for(anext(trigger.run()), timeout=60)
        return event.payload, time.monotonic() - started

    return asyncio.run(main())


def test_the_trigger_looks_until_the_files_arrive(stack: LocalStack) -> None:
    p = _prefix()
    uri = f"s3://{SAMPLE_BUCKET}/{p}{{01..12}}.csv"
    _put(stack, p + "13.csv")
    trigger = S3GlobTrigger(s3_uri=uri, min_files=2, success_marker="_SUCCESS", poke_interval=0.2)

    def upload() -> None:
        _put(stack, p + "01.csv")
        _put(stack, p + "02.csv")
        _put(stack, p + "_SUCCESS", b"")

    payload, seconds = _run_trigger(trigger, upload, after=1.0)
    assert seconds >= 1.0
    assert payload["status"] == "success"
    assert payload["summary"] == {
        "s3_uri": uri,
        "files": 2,
        "bytes": 24,
        "non_empty_files": 2,
        "success_marker": f"{p}_SUCCESS",
    }
    assert _manifest(uri) == (2, 24)


def test_the_trigger_reports_a_terminal_error_by_its_class() -> None:
    payload, _ = _run_trigger(S3GlobTrigger(s3_uri="s3://s3ch-no-such-bucket/k/*.csv", poke_interval=0.2))
    assert payload["status"] == "error" and payload["error"] == "BucketError"
    assert "does not exist" in payload["message"]


# ------------------------------------------------------------------------------ through Airflow itself


def test_a_dag_run_defers_the_sensor_until_the_files_arrive_then_loads_them(tmp_path: Path, stack: LocalStack) -> None:
    """``airflow dags test`` runs the trigger in its own process: the files are put while the trigger waits."""
    bucket, table = "s3ch-sensor", "default.sensor_events"
    stack.create_bucket(bucket)
    ch = stack.clickhouse_client()
    ch.execute(f"DROP TABLE IF EXISTS {table}")
    ch.execute(f"CREATE TABLE {table} (id UInt32, name String) ENGINE = MergeTree ORDER BY id")
    _put(stack, "events/13/part-0.csv", b"id,name\n13,decoy\n", bucket)  # out of {01..12}
    _put(stack, "events/01/part-0.csv", b"id,name\n1,a\n2,b\n", bucket)  # one file: min_files=2

    home = tmp_path / "airflow"
    home.mkdir()
    env = airflow_env(home, DAGS, stack)
    for args in (("db", "migrate"), ("dags", "reserialize")):
        out = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True, timeout=600, check=False
        )
        assert out.returncode == 0, out.stderr[-3000:]

    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow", "dags", "test", "s3ch_glob_sensor"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in proc.stdout], daemon=True  # type: ignore[union-attr]
    ).start()
    log: list[str] = []
    uploaded_at = None
    deadline = time.monotonic() + 400
    try:
        while proc.poll() is None or not lines.empty():
            assert time.monotonic() < deadline, "".join(log)[-5000:]
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            log.append(line)
            # The trigger has looked once and found the month incomplete: now the rest of it arrives.
            if uploaded_at is None and "waiting for" in line and "next look in" in line:
                _put(stack, "events/02/part-0.csv", b"id,name\n3,c\n", bucket)
                _put(stack, "events/_SUCCESS", b"", bucket)
                uploaded_at = len(log)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    text = "".join(log)
    (tmp_path / "dags-test.log").write_text(text)
    assert proc.returncode == 0, text[-5000:]
    assert uploaded_at is not None, text[-5000:]

    with sqlite3.connect(home / "airflow.db") as db:
        states = dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = 's3ch_glob_sensor'"))
        triggers = db.execute("SELECT classpath, kwargs FROM trigger").fetchall()
    assert states == {"wait": "success", "load": "success"}, text[-5000:]
    if AIRFLOW_3:  # Airflow 2's dags test runs the trigger in line without a row in its trigger table
        assert [classpath for classpath, _ in triggers] == ["airflow_provider_s3ch.triggers.s3_glob.S3GlobTrigger"]
    assert "Deferring to the triggerer" in text and "[DAG TEST] running trigger in line" in text
    assert "is ready" in "".join(log[uploaded_at:])

    wait = read_xcom(home, "s3ch_glob_sensor", "wait")
    assert wait == {
        "s3_uri": "s3://s3ch-sensor/events/{01..12}/part-*.csv",
        "files": 2,
        "bytes": 28,
        "non_empty_files": 2,
        "success_marker": "events/_SUCCESS",
    }
    load = read_xcom(home, "s3ch_glob_sensor", "load")
    assert load["files"] == wait["files"] and load["bytes"] == wait["bytes"]
    assert load["written_rows"] == 3 == count(stack, table)
    assert json.loads(json.dumps(wait)) == wait

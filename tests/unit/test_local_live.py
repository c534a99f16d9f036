"""The live demo's figures (airflow_provider_s3ch.local.live) and the continuous benchmark's table, without servers."""

from __future__ import annotations

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3, AIRFLOW_VERSION
from airflow_provider_s3ch.local.cli import main
from airflow_provider_s3ch.local.live import LiveResult
from bench.continuous import table


def test_percentiles_are_nearest_rank_over_the_latencies() -> None:
    result = LiveResult(latencies=[float(x) for x in range(20, 0, -1)])
    assert (result.percentile(50), result.percentile(95), result.percentile(100)) == (10.0, 19.0, 20.0)
    assert LiveResult(latencies=[3.0]).percentile(95) == 3.0
    assert LiveResult().percentile(50) is None


def test_summary_and_table_name_each_figure() -> None:
    result = LiveResult(put=3, loaded=3, exactly_once=True, rows=300, latencies=[1.234, 2.0, 9.87],
                        runs={"asset_triggered/success": 2}, inserts=2)  # fmt: skip
    summary = result.summary()
    assert summary == {"files_put": 3, "files_loaded": 3, "exactly_once": True, "missing": 0, "doubled": 0,
                       "rows": 300, "p50_s": 2.0,
                       "p95_s": 9.87, "max_s": 9.87, "runs": {"asset_triggered/success": 2}, "inserts": 2,
                       "stopped_by": None}  # fmt: skip
    row = {**summary, "mode": "sqs", "listing_poll_s": 300.0, "goals": {"p50_s": 10.0, "p95_s": 20.0},
           "meets_goals": True}  # fmt: skip
    text = table([row, {**row, "mode": "listing", "p95_s": 31.0, "goals": {"p95_s": 30.0}, "meets_goals": False}])
    lines = text.splitlines()
    assert lines[2].split()[:10] == ["sqs", "300s", "3", "3", "yes", "2.0", "9.9", "9.9", "2", "2"]
    assert lines[2].endswith("p50 <= 10 s, p95 <= 20 s: met")
    assert lines[3].endswith("p95 <= 30 s: NOT met")


@pytest.mark.skipif(AIRFLOW_3, reason="Airflow 3 runs the live demo (tests/scheduler/test_live.py)")
def test_on_airflow_2_the_command_names_the_airflow_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["live", "--seconds", "1"]) == 2
    assert f"needs Apache Airflow 3.0 or later; this is Airflow {AIRFLOW_VERSION}" in capsys.readouterr().err

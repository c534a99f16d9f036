"""The live demo's figures (airflow_provider_s3ch.local.live) and the continuous benchmark's table, without servers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3, AIRFLOW_VERSION
from airflow_provider_s3ch.local.airflow import signals_held
from airflow_provider_s3ch.local.cli import main
from airflow_provider_s3ch.local.live import COLUMNS, LiveOptions, LiveResult, Tally, summary_lines, tally
from airflow_provider_s3ch.local.phases import PHASES
from bench.continuous import phase_table, table

OPTIONS = LiveOptions(dag_file=Path("example_dags/example_continuous.py"), rows_per_file=100, drain_timeout=120)


def test_percentiles_are_nearest_rank_over_the_latencies() -> None:
    result = LiveResult(latencies=[float(x) for x in range(20, 0, -1)])
    assert (result.percentile(50), result.percentile(95), result.percentile(100)) == (10.0, 19.0, 20.0)
    assert LiveResult(latencies=[3.0]).percentile(95) == 3.0
    assert LiveResult().percentile(50) is None


def test_summary_and_table_name_each_figure() -> None:
    result = LiveResult(put=3, loaded=3, exactly_once=True, rows=300, latencies=[1.234, 2.0, 9.87],
                        runs={"asset_triggered/success": 2}, inserts=2)  # fmt: skip
    summary = result.summary()
    assert summary == {"files_put": 3, "files_loaded": 3, "exactly_once": True, "not_loaded_yet": 0, "lost": 0,
                       "doubled": 0, "rows": 300, "p50_s": 2.0,
                       "p95_s": 9.87, "max_s": 9.87, "runs": {"asset_triggered/success": 2}, "inserts": 2,
                       "stopped_by": None, "drain_timed_out": False, "phases": {}}  # fmt: skip
    row = {**summary, "mode": "sqs", "listing_poll_s": 300.0, "goals": {"p50_s": 10.0, "p95_s": 20.0},
           "meets_goals": True}  # fmt: skip
    text = table([row, {**row, "mode": "listing", "p95_s": 31.0, "goals": {"p95_s": 30.0}, "meets_goals": False}])
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["mode", "poll", "put", "loaded", "unld"]
    assert lines[2].split()[:11] == ["sqs", "300s", "3", "3", "0", "yes", "2.0", "9.9", "9.9", "2", "2"]
    assert lines[2].endswith("p50 <= 10 s, p95 <= 20 s: met")
    each = {"p50_s": 0.5, "p95_s": 1.0, "mean_share": 0.125}
    phased = phase_table([{**row, "phases": {"files": 3, "mean_latency_s": 4.0, **dict.fromkeys(PHASES, each)}},
                          {**row, "mode": "listing"}])
    assert phased.splitlines()[2].startswith("| sqs | 3 | 0.50 / 1.00 s (12%) |")
    assert phased.splitlines()[3] == "| listing | 0 | " + " | ".join("-" for _ in PHASES) + " | - |"
    assert lines[3].endswith("p95 <= 30 s: NOT met")


@pytest.mark.skipif(AIRFLOW_3, reason="Airflow 3 runs the live demo (tests/scheduler/test_live.py)")
def test_on_airflow_2_the_command_names_the_airflow_it_needs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["live", "--seconds", "1"]) == 2
    assert f"needs Apache Airflow 3.0 or later; this is Airflow {AIRFLOW_VERSION}" in capsys.readouterr().err


def test_tally_tells_not_loaded_yet_from_lost_and_doubled() -> None:
    put, n = range(1, 8), 100
    # 1, 2 loaded once; 3 doubled; 4 partly there; 5 readable once, gone since; 6, 7 never readable, none there;
    # 9 never put
    counts = {1: 100, 2: 100, 3: 200, 4: 40, 9: 5}
    assert tally(counts, put, seen={1, 2, 3, 5}, rows_per_file=n) == Tally(not_loaded_yet=2, lost=2, doubled=2)
    assert not tally(counts, put, {1, 2, 3, 5}, n).exactly_once
    cut_short = tally({1: 100, 2: 100}, put, {1, 2}, n)
    assert (cut_short, cut_short.exactly_once) == (Tally(not_loaded_yet=5, lost=0, doubled=0), True)


def _lines(**figures: object) -> list[str]:
    return summary_lines(LiveResult(**figures), OPTIONS)  # type: ignore[arg-type]


def test_a_run_cut_short_says_which_files_are_not_loaded_yet_not_that_they_are_missing() -> None:
    lines = _lines(put=12, loaded=5, exactly_once=True, not_loaded_yet=7, rows=500, stopped_by="SIGINT")
    assert lines[1] == ("files put: 12, loaded: 5, rows: 500 (100 per file); each file loaded so far exactly once: "
                        "yes; not loaded yet: 7 (the run was stopped (SIGINT) before their rows were in)")
    assert "NO" not in "\n".join(lines) and "missing" not in "\n".join(lines)
    assert LiveResult(put=12, loaded=5, exactly_once=True, not_loaded_yet=7).complete is False


def test_a_timed_out_wait_and_a_complete_run_say_so() -> None:
    timed_out = _lines(put=10, loaded=9, exactly_once=True, not_loaded_yet=1, rows=900, drain_timed_out=True)
    assert timed_out[1].endswith("not loaded yet: 1 (their rows were not in 120 s after the last put)")
    done = _lines(put=3, loaded=3, exactly_once=True, rows=300, latencies=[1.0, 2.0, 3.0],
                  runs={"asset_triggered/success": 2}, inserts=2)  # fmt: skip
    assert done == ["\n=== summary ===",
                    "files put: 3, loaded: 3, rows: 300 (100 per file); each file exactly once: yes",
                    "put -> readable latency over 3 files: p50 2.0 s, p95 3.0 s, max 3.0 s",
                    "DAG runs: 2 (asset_triggered/success 2); inserts from S3: 2"]  # fmt: skip
    assert LiveResult(put=3, loaded=3, exactly_once=True).complete


def test_doubled_and_lost_files_are_named_apart_from_those_not_loaded_yet() -> None:
    lines = _lines(put=10, loaded=9, exactly_once=False, doubled=2, lost=1, not_loaded_yet=1, rows=1000,
                   stopped_by="SIGTERM")  # fmt: skip
    assert lines[1] == ("files put: 10, loaded: 9, rows: 1000 (100 per file); each file loaded so far exactly once: "
                        "NO (2 doubled (more rows in the table than the file holds), 1 lost (fewer rows than the file "
                        "holds)); not loaded yet: 1 (the run was stopped (SIGTERM) before their rows were in)")
    assert _lines(put=4, loaded=4, exactly_once=False, doubled=1, rows=500)[1].endswith(
        "each file exactly once: NO (1 doubled (more rows in the table than the file holds))")


def test_the_columns_line_explains_each_figure_of_a_progress_line() -> None:
    for figure in ("seconds since the first put", "rows in the table", "files put", "files loaded", "lag = now minus"):
        assert figure in COLUMNS
    assert OPTIONS.listing_poll == 10.0  # docs/continuous.md's figures


def test_stop_signals_in_a_held_block_arrive_once_it_ends() -> None:
    ran_to_the_end = False
    with pytest.raises(KeyboardInterrupt), signals_held():
        signal.raise_signal(signal.SIGINT)
        ran_to_the_end = True
    assert ran_to_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

"""The phase account of a live run, pure: each file's phases add up to its latency, in the path's order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.local.phases import PHASES, account, summarize

STEM = "0123456789abcdef0123"


@given(st.lists(st.floats(min_value=0.0, max_value=30.0), min_size=7, max_size=7), st.floats(0, 1e9))
def test_a_files_phases_add_up_to_its_latency(gaps: list[float], t0: float) -> None:
    marks = [t0]
    for gap in gaps:
        marks.append(marks[-1] + gap)
    key, query_id = "landing/f-000001.csv", f"s3ch-{STEM}-try1"
    runs = {STEM: {"run_id": "r", "queued": marks[2], "started": marks[3], "operator_s": marks[5] - marks[4]}}
    got = account({key: marks[0]}, {key: marks[7]}, {key: query_id}, {query_id: (marks[5], marks[6])}, runs,
                  {key: marks[1]})
    assert list(got[key]) == list(PHASES)
    assert abs(sum(got[key].values()) - (marks[7] - marks[0])) < 0.01
    summary = summarize(got)
    assert summary["files"] == 1 and abs(sum(summary[p]["p50_s"] for p in PHASES) - summary["mean_latency_s"]) < 0.01


def test_a_file_some_piece_did_not_record_is_left_out() -> None:
    key, query_id = "landing/f-000001.csv", f"s3ch-{STEM}-try1"
    runs = {STEM: {"run_id": "r", "queued": 2.0, "started": 3.0}}
    # no event named it (the safety net's run listed it)
    assert account({key: 0.0}, {key: 9.0}, {key: query_id}, {query_id: (4.0, 5.0)}, runs, {}) == {}
    assert account({key: 0.0}, {}, {key: query_id}, {query_id: (4.0, 5.0)}, runs, {key: 1.0}) == {}  # not readable
    assert summarize({}) == {"files": 0}


def test_a_file_whose_event_came_after_its_run_was_queued_waits_in_no_run() -> None:
    key, query_id = "landing/f-000001.csv", f"s3ch-{STEM}-try1"
    runs = {STEM: {"run_id": "r", "queued": 1.0, "started": 3.0, "operator_s": 0.25}}  # queued before its event
    got = account({key: 0.5}, {key: 6.0}, {key: query_id}, {query_id: (4.0, 5.0)}, runs, {key: 2.0})[key]
    assert got == {"event": 1.5, "run": 0.0, "task": 1.0, "startup": 0.75, "operator": 0.25, "insert": 1.0,
                   "publish": 1.0}

"""docs/lag.md names every figure and metric the code reports, quotes its log line and statement as the code
writes them, and its check task does what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3, AirflowFailException
from airflow_provider_s3ch.core.freshness import SERVER_NOW_SQL, Freshness, Latency, QueueDepth, summary_line
from airflow_provider_s3ch.core.ledger import DEFAULT_CLAIM_TIMEOUT
from airflow_provider_s3ch.hooks import stats

ROOT = Path(__file__).parents[2]
PAGE = (ROOT / "docs" / "lag.md").read_text()

FULL = Freshness(lag_s=7.9, lag_left_s=0.0, unloaded_files=12, loaded_files=12, pending_files=0, pending_bytes=0,
                 pending_held=0, pending_changed=0, pending_later=0,
                 latency=Latency(files=12, p50_s=2.0, p95_s=3.0, max_s=3.5),
                 queue_depth=QueueDepth(events=3, watcher_events=3, waiting_events=0, files=12, pending=0),
                 clock="server")


@pytest.mark.parametrize("field", [*Freshness.model_fields, *Latency.model_fields, *QueueDepth.model_fields])
def test_the_page_names_every_figure(field: str) -> None:
    assert f"`{field}`" in PAGE


@pytest.mark.parametrize("metric", [*stats.gauges(FULL), *stats.timings(FULL)])
def test_the_page_names_every_metric(metric: str) -> None:
    assert f"`{metric}`" in PAGE


def test_the_alerting_rules_name_metrics_the_code_sends() -> None:
    exported = {f"airflow_{m.replace('.', '_')}" for m in [*stats.gauges(FULL), *stats.timings(FULL)]}
    named = set(re.findall(r"\bairflow_s3ch_\w+", PAGE))
    assert named and named <= exported


def test_the_page_quotes_the_log_line_and_the_clocks_statement_as_the_code_writes_them() -> None:
    quoted = re.search(r"`(Freshness: [^`]*?) …`", PAGE)
    assert quoted is not None and f"Freshness: {summary_line(FULL)}".startswith(quoted.group(1))
    assert f"`{SERVER_NOW_SQL}`" in PAGE
    assert f"`claim_timeout`, {DEFAULT_CLAIM_TIMEOUT / 3600:g} h" in PAGE


def test_the_page_is_in_the_nav_and_continuous_ingestion_links_it() -> None:
    assert "- Lag you can see: lag.md" in (ROOT / "mkdocs.yml").read_text()
    assert "(lag.md)" in (ROOT / "docs" / "continuous.md").read_text()


@pytest.mark.skipif(not AIRFLOW_3, reason="the page's check task imports airflow.sdk")
def test_the_check_task_fails_a_run_that_falls_behind_and_passes_one_that_does_not() -> None:
    block = PAGE.split("### A check task", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(block, "docs/lag.md", "exec"), scope)
    check = scope["check_freshness"].function
    ok = FULL.model_dump(mode="json")
    check({"freshness": ok})
    check({"written_rows": 0})  # no freshness (not a ledger load): nothing to say
    behind = {**ok, "lag_left_s": 900.0, "pending_files": 4}
    with pytest.raises(AirflowFailException, match="4 file"):
        check({"freshness": behind})
    with pytest.raises(AirflowFailException, match="p95 latency 75 s"):
        check({"freshness": {**ok, "latency": {**ok["latency"], "p95_s": 75.0}}})
    with pytest.raises(AirflowFailException, match="1 overwritten"):
        check({"freshness": {**ok, "pending_changed": 1}})

"""docs/continuous.md quotes the watcher's defaults and the event's bound as the code sets them."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from airflow_provider_s3ch.core.events import FILES_FROM, MAX_FILES_PER_EVENT
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from airflow_provider_s3ch.triggers.s3_events import S3ListingEventTrigger

PAGE = (Path(__file__).parents[2] / "docs" / "continuous.md").read_text()
README = (Path(__file__).parents[2] / "README.md").read_text()
TRIGGER = inspect.signature(S3ListingEventTrigger.__init__).parameters
OPERATOR = inspect.signature(S3ToClickHouseOperator.__init__).parameters


@pytest.mark.parametrize("phrase", [
    f"| `poll_interval` | {TRIGGER['poll_interval'].default:g} s |",
    f"| `full_listing_every` | {TRIGGER['full_listing_every'].default} |",
    f"| `keys_sort_by_arrival` | `{TRIGGER['keys_sort_by_arrival'].default}` |",
    f"| `aws_conn_id` | `{TRIGGER['aws_conn_id'].default}` |",
    f"| `max_files_per_event` | {TRIGGER['max_files_per_event'].default} (`MAX_FILES_PER_EVENT`, also the most) |",
    f"events of at most {MAX_FILES_PER_EVENT} files (`MAX_FILES_PER_EVENT`)",
])
def test_the_page_quotes_the_codes_figures(phrase: str) -> None:
    assert phrase in PAGE


def test_the_readme_gives_files_from_its_default_and_values() -> None:
    assert OPERATOR["files_from"].default == FILES_FROM[0]
    row = next(line for line in README.splitlines() if line.startswith("| `files_from` |"))
    assert f"| `{FILES_FROM[0]}` |" in row and all(f"`{value}`" in row for value in FILES_FROM)


@pytest.mark.parametrize("version", ["3.0.6", "3.1.0", "3.2.1"])
def test_watchers_say_at_parse_time_what_airflow_3_0_to_3_2_lacks(version: str) -> None:
    from packaging.version import Version

    from airflow_provider_s3ch.triggers.s3_events import missing_pieces

    listing, notification = (missing_pieces(w, Version(version)) for w in ("listing", "notification"))
    assert f"Airflow {version} has no asset state store (Airflow 3.3)" in listing and "in memory" in listing
    assert f"Airflow {version} has no shared-stream ack mode (Airflow 3.3)" in notification
    assert "loses that event" in notification and "listing watcher too" in notification
    assert missing_pieces("listing", Version("3.3.0")) is None
    assert missing_pieces("notification", Version("3.3.2")) is None


@pytest.mark.skipif(not __import__("airflow_provider_s3ch.compat", fromlist=["AIRFLOW_3"]).AIRFLOW_3,
                    reason="asset watchers: Airflow 3")
def test_the_pages_first_example_runs_as_written() -> None:
    """The page's first example, pasted into a DAG file, builds its DAG (every name it uses is imported)."""
    example = PAGE.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {}
    exec(compile(example + "\nbuilt = load.dag\n", "continuous.md", "exec"), scope)
    dag = scope["built"]
    assert dag.dag_id == "events_to_clickhouse" and [t.task_id for t in dag.tasks] == ["load"]

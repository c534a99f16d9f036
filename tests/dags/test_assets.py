"""Asset events and OpenLineage events through Airflow itself (`airflow dags test`), on the real local stack.

One run of ``s3ch_assets`` (tests/dags/dags/assets_dag.py): a dry run, then a load, both with the target's
``clickhouse://`` asset as their outlet, with the OpenLineage listener writing its events to a file.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import SampleDataset, posts_ddl, write_posts
from tests.dags.test_dags import _airflow, prepare_home

DAGS = Path(__file__).parent / "dags"
DAG_ID = "s3ch_assets"


@dataclass
class Run:
    home: Path
    stack: LocalStack
    data: SampleDataset
    lineage: list[dict[str, Any]]
    log: str


@pytest.fixture(scope="module")
def assets_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("assets")
    home, events = tmp / "airflow", tmp / "openlineage.jsonl"
    home.mkdir()
    transport = json.dumps({"type": "file", "log_file_path": str(events), "append": True})
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        stack.create_bucket("s3ch-assets")
        data = write_posts(stack.s3_client(), "s3ch-assets", rows=6_000, months=3, prefix="posts/")
        stack.clickhouse_client().execute(posts_ddl("default.asset_posts"))
        with pytest.MonkeyPatch.context() as env:  # the OpenLineage listener of these commands only
            env.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", transport)
            env.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "s3ch-tests")
            prepare_home(home, lambda *args: _airflow(home, DAGS, stack, *args))
            out = _airflow(home, DAGS, stack, "dags", "test", DAG_ID)
        log = out.stdout + out.stderr
        assert out.returncode == 0 and "state=success" in log, log[-5000:]
        lineage = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
        yield Run(home, stack, data, lineage, log)


def _asset_events(home: Path) -> list[tuple[str, str, dict[str, Any]]]:
    asset = "asset" if AIRFLOW_3 else "dataset"  # Airflow 2 keeps assets under their old name, datasets
    with sqlite3.connect(home / "airflow.db") as db:
        rows = db.execute(
            f"SELECT a.uri, e.source_task_id, e.extra FROM {asset}_event e JOIN {asset} a ON a.id = e.{asset}_id "
            "WHERE e.source_dag_id = ?",
            (DAG_ID,),
        ).fetchall()
    return [(uri, task, json.loads(extra) if extra else {}) for uri, task, extra in rows]


def _states(home: Path) -> dict[str, str]:
    with sqlite3.connect(home / "airflow.db") as db:
        return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (DAG_ID,)).fetchall())


def test_the_load_emits_one_asset_event_with_its_figures_and_the_dry_run_none(assets_run: Run) -> None:
    stack, port = assets_run.stack, assets_run.stack.nodes[0].tcp_port
    rows = stack.clickhouse_client().execute("SELECT count() FROM default.asset_posts")[0][0]
    xcom = read_xcom(assets_run.home, DAG_ID, "load")

    events = _asset_events(assets_run.home)
    assert [(uri, task) for uri, task, _ in events] == [(f"clickhouse://127.0.0.1:{port}/default/asset_posts", "load")]
    extra = events[0][2]
    assert extra["rows"] == rows == assets_run.data.rows
    assert extra["query_id"] == xcom["query_id"] and extra["table"] == "default.asset_posts"
    assert extra["files"] == len(assets_run.data.keys) and extra["bytes"] == xcom["written_bytes"]
    assert stack.s3_secret_key not in json.dumps(extra)
    # The dry run succeeded: no event, and the state downstream tasks see is success, not skipped.
    assert _states(assets_run.home) == {"dry_run": "success", "load": "success"}
    assert read_xcom(assets_run.home, DAG_ID, "dry_run")["dry_run"] is True


def _complete(run: Run, task_id: str) -> dict[str, Any]:
    (event,) = [e for e in run.lineage if e["eventType"] == "COMPLETE" and e["job"]["name"] == f"{DAG_ID}.{task_id}"]
    return event


def test_the_openlineage_complete_event_names_the_files_and_the_table(assets_run: Run) -> None:
    stack, port = assets_run.stack, assets_run.stack.nodes[0].tcp_port
    event = _complete(assets_run, "load")
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        ("s3://s3ch-assets", key) for key in assets_run.data.keys
    ]
    (output,) = event["outputs"]
    assert (output["namespace"], output["name"]) == (f"clickhouse://127.0.0.1:{port}", "default.asset_posts")
    columns = stack.clickhouse_client().execute(
        "SELECT name, type FROM system.columns WHERE database = 'default' AND table = 'asset_posts' ORDER BY position"
    )
    assert [(f["name"], f["type"]) for f in output["facets"]["schema"]["fields"]] == [tuple(c) for c in columns]
    rows = stack.clickhouse_client().execute("SELECT count() FROM default.asset_posts")[0][0]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == rows == assets_run.data.rows
    assert event["run"]["facets"]["externalQuery"]["externalQueryId"] == read_xcom(
        assets_run.home, DAG_ID, "load")["query_id"]  # fmt: skip
    assert stack.s3_secret_key not in json.dumps(assets_run.lineage)


def test_the_dry_runs_complete_event_names_nothing(assets_run: Run) -> None:
    event = _complete(assets_run, "dry_run")
    assert event["inputs"] == [] and event["outputs"] == []


def test_the_start_event_names_the_outlet_as_the_operator_names_its_output(assets_run: Run) -> None:
    """Before the load, Airflow's OpenLineage integration names the task's outlets with the provider's
    converter: the same dataset as the COMPLETE event's output."""
    port = assets_run.stack.nodes[0].tcp_port
    (start,) = [e for e in assets_run.lineage if e["eventType"] == "START" and e["job"]["name"] == f"{DAG_ID}.load"]
    assert [(d["namespace"], d["name"]) for d in start["outputs"]] == [
        (f"clickhouse://127.0.0.1:{port}", "default.asset_posts")
    ]

"""The continuous example DAG as Airflow's own DagBag parses it: on Airflow 3 an asset with both watchers,
scheduled on it or on time; on Airflow 2 one import error that names the Airflow version it needs.

It runs end to end through Airflow's scheduler and triggerer in tests/scheduler/test_live.py (``s3ch-local live``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from airflow_provider_s3ch.compat import AIRFLOW_3, AIRFLOW_VERSION

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = ROOT / "example_dags" / "example_continuous.py"

PARSE = """
import json, sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:
    from airflow.models.dagbag import DagBag
bag = DagBag(sys.argv[1], include_examples=False) if "include_examples" in DagBag.__init__.__code__.co_varnames \
    else DagBag(sys.argv[1])
out = {"errors": [str(e) for e in bag.import_errors.values()], "dags": {}}
for dag in bag.dags.values():
    timetable = dag.timetable
    watchers = [w for asset in timetable.asset_condition.objects for w in asset.watchers]
    task = dag.get_task("load_landed_files")
    out["dags"][dag.dag_id] = {
        "timetable": type(timetable).__name__,
        "inner": type(getattr(timetable, "timetable", None)).__name__,
        "max_active_runs": dag.max_active_runs,
        "watchers": [(w.name, type(w.trigger).__name__) for w in watchers],
        "task": {k: getattr(task, k) for k in ("skip_loaded", "files_from", "skip_when_empty", "max_files_per_load",
                                               "s3_uri")},
    }
print("PARSED " + json.dumps(out))
"""


def parse(**env: str) -> dict:
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH"))
                                                                   if p)}
    out = subprocess.run([sys.executable, "-c", PARSE, str(DAG_FILE)], env=environ, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    line = next(line for line in out.stdout.splitlines() if line.startswith("PARSED "))
    return json.loads(line[len("PARSED "):])


def test_the_continuous_dag_parses_with_both_watchers_or_names_the_airflow_it_needs() -> None:
    parsed = parse(S3CH_CONTINUOUS_URI="s3://landing/in/*.csv",
                   S3CH_CONTINUOUS_QUEUE_URL="http://127.0.0.1:1/123456789012/landing", S3CH_CONTINUOUS_MAX_FILES="50")
    if not AIRFLOW_3:
        assert parsed["dags"] == {}
        assert len(parsed["errors"]) == 1, parsed
        assert (f"continuous ingestion (asset watchers) needs Apache Airflow 3.0 or later; this is Airflow "
                f"{AIRFLOW_VERSION}") in parsed["errors"][0]
        return
    assert parsed["errors"] == []
    dag = parsed["dags"]["s3_to_clickhouse_continuous"]
    assert dag["timetable"] == "AssetOrTimeSchedule" and dag["inner"] == "CronTriggerTimetable"
    assert dag["max_active_runs"] == 1
    assert dag["watchers"] == [["landing_sqs", "S3NotificationEventTrigger"],
                               ["landing_listing", "S3ListingEventTrigger"]]
    assert dag["task"] == {"skip_loaded": True, "files_from": "events", "skip_when_empty": True,
                           "max_files_per_load": 50, "s3_uri": "s3://landing/in/*.csv"}


def test_without_a_queue_the_listing_watcher_watches_alone() -> None:
    parsed = parse(S3CH_CONTINUOUS_QUEUE_URL="")
    if not AIRFLOW_3:
        assert parsed["dags"] == {} and len(parsed["errors"]) == 1
        return
    assert parsed["dags"]["s3_to_clickhouse_continuous"]["watchers"] == [["landing_listing", "S3ListingEventTrigger"]]

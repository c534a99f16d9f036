"""Test-wide setup: Airflow runs from a throwaway AIRFLOW_HOME, set before Airflow is imported; the modules
whose checks are the same on every Airflow carry the ``airflow_independent`` marker."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_HOME = tempfile.mkdtemp(prefix="s3ch-test-airflow-")
# Each process of the suite gets its own home: pytest-xdist's workers inherit the environment of the process that
# started them, whose home they would otherwise share (its database too). An AIRFLOW_HOME set by the caller stays.
if os.environ.get("AIRFLOW_HOME") in (None, os.environ.get("S3CH_TEST_AIRFLOW_HOME")):
    os.environ["AIRFLOW_HOME"] = os.environ["S3CH_TEST_AIRFLOW_HOME"] = _HOME
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
for _var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(_var, None)

# Hypothesis: no per-example deadline anywhere. On a busy machine one example of a pure function can take
# seconds; a deadline would fail the test on the machine's load, not on the property.
from hypothesis import settings  # noqa: E402 - after the environment above

settings.register_profile("s3ch", deadline=None)
settings.load_profile("s3ch")

ROOT = Path(__file__).resolve().parents[1]

# What each Airflow version must run. The pure core (no Airflow import, tests/unit/test_core_is_pure.py) and
# the load path (load/, the hooks' statements, the servers' answers) are the same code on every Airflow: their
# checks run once, on the newest Airflow (`make test`). What differs by version is the part through Airflow:
# the operator's execute/defer/resume, triggers, the sensor, lineage and assets, connections and their forms,
# the compat seam, errors as Airflow's exceptions, secrets masking, DAG parsing, `airflow dags test` and the
# scheduler. `make test-airflow` (-m "not airflow_independent") runs that part, on any Airflow version.
# A module not listed here runs on every Airflow version: list one only with the reason its check does not
# depend on Airflow. The integration modules below call `op.execute(context)` as the way into the load path;
# the operator's own Airflow surface is checked, per version, by the modules not listed (test_operator_load,
# test_bad_input, test_connections, test_deferrable, test_server_restart, test_glob_sensor, test_lineage,
# test_secrets, test_s3_access, the unit tests of the provider's Airflow classes, and tests/dags). Some listed
# modules assert that an error is an AirflowFailException or a run an AirflowSkipException: that the provider's
# errors are Airflow's exceptions is checked per version by tests/unit/test_errors.py and test_bad_input.
AIRFLOW_INDEPENDENT: dict[str, str] = {
    # The pure core: plain functions over pydantic models; nothing in them imports Airflow.
    "tests/unit/test_glob_linear.py": "core.glob's regexes",
    "tests/unit/test_guide_regime.py": "the planner against the guide's figures",
    "tests/unit/test_history.py": "core.history",
    "tests/unit/test_ledger.py": "core.ledger*: the ledger's decisions and SQL",
    "tests/unit/test_ledger_docs.py": "core.ledger*: the documented ledger cases",
    "tests/unit/test_ledger_rebuild.py": "core.ledger_rebuild and core.staging",
    "tests/unit/test_metrics.py": "core.metrics",
    "tests/unit/test_modes.py": "core.recovery, core.staging, core.sql: the load modes' statements",
    "tests/unit/test_parquet_footer.py": "core.parquet_footer, core.parquet_stats",
    "tests/unit/test_partition_spans.py": "core.plan.partition_spans: the partitions a block spans",
    "tests/unit/test_parts_model.py": "core.plan.parts: the parts an insert writes",
    "tests/unit/test_peak_memory.py": "core.plan's memory model",
    "tests/unit/test_planner.py": "core.plan",
    "tests/unit/test_resume_reason.py": "core.recovery",
    "tests/unit/test_rows_out.py": "core.rows_out",
    "tests/unit/test_schema.py": "core.schema and its DESCRIBE",
    "tests/unit/test_sensor_readiness.py": "core.readiness (the sensor's decision, not the sensor)",
    "tests/unit/test_setting_types.py": "core.setting_types",
    "tests/unit/test_shrink.py": "core.plan.shrink",
    "tests/unit/test_sql.py": "core.sql: the renderers",
    "tests/unit/test_sql_summary.py": "core.sql_summary: how statements are shown in logs",
    "tests/unit/test_tables.py": "core.tables",
    "tests/unit/test_views.py": "core.views",
    "tests/unit/test_workload.py": "core.plan.workload and core.metrics",
    "tests/unit/test_access.py": "core.access: the S3 credential modes' SQL and hints",
    "tests/unit/test_s3_client.py": "boto3's client and its model loader, no Airflow",
    "tests/unit/test_ledger_heartbeat.py": "core.ledger_rows: heartbeat ages and stale claims",
    # Source and docs read as text: the same files whatever Airflow is installed.
    "tests/unit/test_core_is_pure.py": "reads the core's imports from its source",
    "tests/unit/test_no_import_cycles.py": "reads the package's imports from its source",
    "tests/unit/test_load_package.py": "reads load/'s layout from its source",
    "tests/unit/test_module_sizes.py": "counts the shells' lines",
    "tests/unit/test_readme.py": "reads the README's figures against core constants",
    "tests/unit/test_s3queue_report.py": "renders the side-by-side report from bench/results",
    # The load path on the real servers: ClickHouse and S3 see the same statements and requests on every
    # Airflow (the goldens record them); Airflow's part of each load is the operator's entry, checked above.
    "tests/integration/test_distributed.py": "s3Cluster plans and their inserts on three nodes",
    "tests/integration/test_faults.py": "recovery from faults: the server's state and the retry's statements",
    "tests/integration/test_faults_distributed.py": "recovery of a distributed insert on the servers",
    "tests/integration/test_glob_property.py": "our glob against ClickHouse's s3() (hooks.s3 listing, no operator)",
    "tests/integration/test_goldens.py": "the statements the load path sends, in order, and its returned dict",
    "tests/integration/test_history.py": "planning from system.query_log",
    "tests/integration/test_keeper.py": "ZooKeeper and S3Queue on the local stack (no Airflow)",
    "tests/integration/test_keys.py": "key encoding between boto3 and ClickHouse's URL decoding",
    "tests/integration/test_latency_plan.py": "the plan's reading streams under S3 latency",
    "tests/integration/test_ledger.py": "the file ledger's rows and the target's rows",
    "tests/integration/test_ledger_chunks.py": "chunked ledger loads killed and resumed, on the servers",
    "tests/integration/test_ledger_histories.py": "ledger histories against ClickHouse's read of S3",
    "tests/integration/test_ledger_model.py": "the ledger against its model, on the servers",
    "tests/integration/test_ledger_model_cluster.py": "the ledger against its model on three nodes, nodes killed",
    "tests/integration/test_ledger_heartbeat.py": "heartbeats and stale claims on the servers (loads killed)",
    "tests/integration/test_ledger_partitions.py": "replace_partitions with the ledger, on the servers",
    "tests/integration/test_bad_files.py": "files set aside by the ledger after the server's data errors, loads killed",
    "tests/integration/test_look_objects.py": "a listing of a key range against HeadObject, through boto3 on moto",
    "tests/integration/test_partition_spans.py": "the block rule's partition indexes against the engine's functions",
    "tests/integration/test_compact_parts.py": "the staging table's part format on the engine (compact_parts)",
    "tests/integration/test_local_cli.py": "s3ch-local's processes (no Airflow)",
    "tests/integration/test_memory_replan.py": "smaller plans after the server's memory error",
    "tests/integration/test_native_client.py": "hooks/native.py's clients (clickhouse-driver)",
    "tests/integration/test_parquet_footers.py": "footer reads through boto3",
    "tests/integration/test_parse_errors.py": "the server's parse errors rewritten by core.rows_out",
    "tests/integration/test_peak_small.py": "the memory model against system.query_log",
    "tests/integration/test_s3_glob_clickhouse.py": "our glob against ClickHouse's s3()",
    "tests/integration/test_s3_listing.py": "listing and manifest through boto3 against moto",
    "tests/integration/test_s3_refused.py": "S3 refusals classified from the server's errors (core.access)",
    "tests/integration/test_schema_check.py": "the schema check's DESCRIBE and core.schema",
    "tests/integration/test_schema_footer.py": "the engine's DESCRIBE of a footer",
    "tests/integration/test_schema_sample.py": "the schema check's DESCRIBE of a sample",
    "tests/integration/test_setting_types.py": "settings checked against system.settings before any statement",
    "tests/integration/test_tables.py": "tables created and evolved from the server's inference",
    "tests/integration/test_views.py": "loads into tables with materialized views, killed and retried, on the servers",
    "tests/integration/test_workload.py": "workload scheduling on the server",
    "tests/bench/test_bench_smoke.py": "the benchmark harness (bench/), its loads and ratios",
}
# Tests of a listed module that go through Airflow itself, and so run on every version.
THROUGH_AIRFLOW: frozenset[str] = frozenset(
    {
        "tests/integration/test_ledger.py::test_the_example_dag_loads_the_new_files_on_each_run",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stale = sorted(p for p in AIRFLOW_INDEPENDENT if not (ROOT / p).is_file())
    if stale:
        raise pytest.UsageError(f"tests/conftest.py lists modules that do not exist: {', '.join(stale)}")
    independent = pytest.mark.airflow_independent
    for item in items:
        test_id = item.nodeid.split("[", 1)[0]
        if test_id.split("::", 1)[0] in AIRFLOW_INDEPENDENT and test_id not in THROUGH_AIRFLOW:
            item.add_marker(independent)

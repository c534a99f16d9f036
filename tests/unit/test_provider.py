"""The package is an Airflow provider: Airflow finds it, its connection type and its operator."""

from __future__ import annotations

import subprocess
import sys
import types

from airflow.providers.common.sql.hooks.sql import DbApiHook

from airflow_provider_s3ch import __version__, get_provider_info
from airflow_provider_s3ch.core.recovery import QueryId
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator


def test_airflow_lists_the_provider_and_its_connection_type() -> None:
    code = (
        "from airflow.providers_manager import ProvidersManager as P; p = P(); "
        "print(p.providers['airflow-provider-s3ch'].version); "
        "print(p.hooks['clickhouse_native'].hook_class_name)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = [line.strip() for line in out.stdout.splitlines()]
    assert __version__ in lines
    assert "airflow_provider_s3ch.hooks.clickhouse.ClickHouseHook" in lines


def test_the_provider_registers_only_its_own_connection_type() -> None:
    """``clickhouse`` (and ``clickhouse_default``) belong to Apache Airflow's ClickHouse provider."""
    (conn_type,) = get_provider_info()["connection-types"]  # type: ignore[misc]
    assert conn_type["connection-type"] == ClickHouseHook.conn_type == "clickhouse_native"
    assert conn_type["hook-name"] == ClickHouseHook.hook_name == "ClickHouse (native protocol)"
    assert ClickHouseHook.default_conn_name == "clickhouse_native_default"
    assert S3ToClickHouseOperator(task_id="t", s3_uri="s3://b/k", table="t").clickhouse_conn_id == (
        "clickhouse_native_default"
    )
    assert issubclass(ClickHouseHook, DbApiHook)


def test_provider_info_names_the_operator_module() -> None:
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-s3ch"
    assert "airflow_provider_s3ch.operators.s3_to_clickhouse" in info["operators"][0]["python-modules"]


def test_template_fields_include_connection_ids() -> None:
    for name in ("s3_uri", "table", "memory_cap", "settings", "clickhouse_conn_id", "aws_conn_id"):
        assert name in S3ToClickHouseOperator.template_fields


def make_query_id(*args: object) -> str:
    return str(QueryId.for_task(*args))  # type: ignore[arg-type]


def test_query_id_is_deterministic_per_task_instance_with_try_suffix() -> None:
    a1 = make_query_id("dag", "task", "run", -1, 1)
    a2 = make_query_id("dag", "task", "run", -1, 2)
    assert a1 == make_query_id("dag", "task", "run", -1, 1)
    assert a1.rsplit("-try", 1)[0] == a2.rsplit("-try", 1)[0] and a1.endswith("-try1") and a2.endswith("-try2")
    assert make_query_id("dag", "task", "run", 0, 1) != a1
    assert make_query_id("dag", "task", "run2", -1, 1) != a1
    assert make_query_id("dag", "task", "run", -1, 1, '{"s3_uri": "s3://b/other/*"}') != a1


def test_query_id_stem_follows_the_rendered_configuration() -> None:
    """A retry after the DAG was edited is another load: another stem, nothing to attach to."""
    ti = types.SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)

    def stem(**kwargs: object) -> str:
        args = {"s3_uri": "s3://b/2024-01/*.parquet", "table": "db.t", **kwargs}
        return S3ToClickHouseOperator(task_id="t", **args).query_id({"ti": ti}).stem  # type: ignore[arg-type]

    same = stem()
    assert stem() == same
    assert stem(memory_cap="2GiB") == same  # how it runs, not what it loads
    for change in (
        {"s3_uri": "s3://b/2024-02/*.parquet"},
        {"table": "db.u"},
        {"mode": "overwrite"},
        {"format": "CSVWithNames"},
        {"structure": "a UInt8"},
        {"settings": {"max_threads": 2}},
    ):
        assert stem(**change) != same, change

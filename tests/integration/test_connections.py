"""Connections beside Apache Airflow's own ClickHouse provider, and the hook as Airflow's SQL hook.

Both providers are installed (``apache-airflow-providers-clickhousedb`` is in the ``test`` extra):
each registers its own connection type, both hooks resolve, and on the real local stack the
official hook talks HTTP, this provider's hook the native protocol, the operator loads through a
connection of either type, and Airflow's SQL operator, sensor and connection test work with it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_s3ch import CONN_FIELDS
from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.errors import InvalidRequestError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import SampleDataset
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.dags.test_dags import _airflow, prepare_home
from tests.integration.support import count, fake_context, query_log

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OFFICIAL_HOOK = "airflow.providers.clickhousedb.hooks.clickhouse.ClickHouseHook"
OUR_HOOK = "airflow_provider_s3ch.hooks.clickhouse.ClickHouseHook"
TCP, HTTP = "TCP", "HTTP"  # system.query_log's interface
#: ``airflow connections test``'s exit status when the test fails: Airflow 2's command exits 0 all the same.
FAILED = 1 if AIRFLOW_3 else 0

_REGISTRY = """
import json, warnings
warnings.simplefilter("always")
from airflow.providers_manager import ProvidersManager
from airflow_provider_s3ch.compat import AIRFLOW_3

pm = ProvidersManager()
types = ("clickhouse", "clickhouse_native")
result = {"core": {t: pm.hooks[t].hook_class_name for t in types}}
if AIRFLOW_3:  # the task SDK's own registry, and the forms as the UI's API serves them
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime  # noqa: TID251 - Airflow 3's
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    rt = ProvidersManagerTaskRuntime()
    result["task_sdk"] = {t: rt.hooks[t].hook_class_name for t in types}
    result["forms"] = {
        m.connection_type: {"hook_name": m.hook_name, "extra": sorted(m.extra_fields or {}),
                            "port": m.standard_fields.port.placeholder if m.standard_fields.port else None}
        for m in HookMetaService.hook_meta_data() if m.connection_type in types}
else:  # Airflow 2: the forms from the hooks' own methods, as its web UI reads them
    widgets, behaviours = pm.connection_form_widgets, pm.field_behaviours
    result["forms"] = {
        t: {"hook_name": pm.hooks[t].hook_name,
            "extra": sorted(k.rpartition("__")[2] for k in widgets if k.startswith(f"extra__{t}__")),
            "port": (behaviours.get(t) or {}).get("placeholders", {}).get("port")}
        for t in types}
print("RESULT " + json.dumps(result))
"""


def _http_connection(stack: LocalStack, **extra: Any) -> dict[str, Any]:
    """A connection of the official provider's type ``clickhouse``: the node's HTTP port."""
    conn = stack.clickhouse_connection(0, **extra)
    conn["conn_type"] = "clickhouse"
    conn["port"] = stack.nodes[0].http_port
    return conn


def _numbers_table(stack: LocalStack, rows: int = 1000, database: str = "default") -> str:
    table = f"`{database}`.`numbers_{uuid.uuid4().hex[:8]}`"
    client = stack.clickhouse_client()
    client.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    client.execute(f"CREATE TABLE {table} (n UInt64, s String) ENGINE = MergeTree ORDER BY n")
    client.execute(f"INSERT INTO {table} SELECT number, concat('n', toString(number)) FROM numbers({rows})")
    return table


def _interface(stack: LocalStack, marker: str) -> set[str]:
    """The interfaces (TCP: native, HTTP) of the finished queries whose text holds ``marker``."""
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    rows = client.execute(
        "SELECT DISTINCT interface FROM system.query_log WHERE type = 'QueryFinish' AND position(query, %(m)s) > 0 "
        "AND query NOT LIKE '%%system.query_log%%'",
        {"m": marker},
    )
    return {str(r[0]) for r in rows}


# ---------------------------------------------------------------------------------------- registry
def test_each_provider_registers_its_own_connection_type_without_warnings() -> None:
    out = subprocess.run([sys.executable, "-c", _REGISTRY], capture_output=True, text=True, timeout=180, check=True)
    log = out.stdout + out.stderr
    assert "already registered" not in log, log[-3000:]
    assert "already added" not in log and "already exists" not in log, log[-3000:]
    assert "get_connection_form_widgets" not in log and "get_ui_field_behaviour" not in log, log[-3000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])
    for manager in ("core", "task_sdk") if AIRFLOW_3 else ("core",):
        assert result[manager] == {"clickhouse": OFFICIAL_HOOK, "clickhouse_native": OUR_HOOK}, manager
    official, ours = result["forms"]["clickhouse"], result["forms"]["clickhouse_native"]
    assert ours["hook_name"] == "ClickHouse (native protocol)" and official["hook_name"] == "ClickHouse"
    assert set(CONN_FIELDS) == set(ours["extra"]) and ours["port"].startswith("9000")  # on Airflow 2 and 3
    assert not {"cluster", "region", "s3_endpoint_url"} & set(official["extra"]), official  # each form is its own
    if AIRFLOW_3:  # the official provider's form (its releases for Airflow 2 have none)
        assert {"session_settings", "client_kwargs"} & set(official["extra"])
        assert official["port"] == "8123"


# ---------------------------------------------------------------------------------------- the official hook
def test_the_official_hook_talks_http_to_the_local_stack(stack: LocalStack, env_conn) -> None:
    from airflow.providers.clickhousedb.hooks.clickhouse import ClickHouseHook as OfficialHook

    table = _numbers_table(stack, rows=250)
    env_conn("ch_http", _http_connection(stack))
    hook = OfficialHook(clickhouse_conn_id="ch_http")
    marker = f"http_{uuid.uuid4().hex[:8]}"
    assert hook.get_records(f"SELECT count(), sum(n), '{marker}' FROM {table}") == [(250, 250 * 249 // 2, marker)]
    assert _interface(stack, marker) == {HTTP}
    assert hook.test_connection()[0] is True


# ---------------------------------------------------------------------------------------- the operator
def test_the_operator_loads_through_a_clickhouse_native_connection(
    stack: LocalStack, posts: SampleDataset, posts_table: str, env_conn
) -> None:
    conn = stack.clickhouse_connection(0)
    assert conn["conn_type"] == "clickhouse_native"
    env_conn("ch_native", conn)
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, clickhouse_conn_id="ch_native")
    result = op.execute(fake_context())
    assert count(stack, posts_table) == posts.rows == result["written_rows"]
    assert query_log(stack, result["query_id"])["written_rows"] == posts.rows


def test_the_operator_loads_through_a_clickhouse_type_connection(
    stack: LocalStack, posts: SampleDataset, posts_table: str, env_conn
) -> None:
    """One ``clickhouse`` connection for both providers: HTTP port for the official hook, native_port for ours."""
    from airflow.providers.clickhousedb.hooks.clickhouse import ClickHouseHook as OfficialHook

    env_conn("ch_both", _http_connection(stack, native_port=stack.nodes[0].tcp_port))
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, clickhouse_conn_id="ch_both")
    result = op.execute(fake_context())
    assert count(stack, posts_table) == posts.rows == result["written_rows"]
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    interface = client.execute(
        "SELECT interface FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'",
        {"q": result["query_id"]},
    )
    assert interface == [(TCP,)]
    assert OfficialHook(clickhouse_conn_id="ch_both").get_records(f"SELECT count() FROM {posts_table}") == [
        (posts.rows,)
    ]


def test_a_clickhouse_type_connection_never_takes_its_http_port_for_the_native_one(stack: LocalStack, env_conn) -> None:
    node = stack.nodes[0]
    env_conn("ch_http_only", _http_connection(stack))
    assert ClickHouseHook("ch_http_only").port == 9000  # not the connection's (HTTP) port
    env_conn("ch_http_tls", _http_connection(stack, secure=True))
    assert ClickHouseHook("ch_http_tls").port == 9440
    env_conn("ch_http_native", _http_connection(stack, native_port=str(node.tcp_port)))
    hook = ClickHouseHook("ch_http_native")
    assert hook.port == node.tcp_port and hook.test_connection()[0] is True
    env_conn("ch_http_bad", _http_connection(stack, native_port="nine thousand"))
    with pytest.raises(InvalidRequestError, match="extra 'native_port' is 'nine thousand'"):
        ClickHouseHook("ch_http_bad")
    native = stack.clickhouse_connection(0)
    env_conn("ch_native_port", native)
    assert ClickHouseHook("ch_native_port").port == node.tcp_port  # a native connection's port is its own


# ---------------------------------------------------------------------------------------- the SQL hook
def test_get_records_and_get_df_return_what_the_server_has(stack: LocalStack) -> None:
    table = _numbers_table(stack, rows=1000)
    hook = ClickHouseHook()
    assert hook.get_records(f"SELECT n, s FROM {table} ORDER BY n LIMIT 3") == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert hook.get_first(f"SELECT count(), sum(n) FROM {table} WHERE n < %(k)s", parameters={"k": 10}) == (10, 45)
    server = stack.clickhouse_client().execute(f"SELECT n, s FROM {table} WHERE n % 7 = 0 ORDER BY n")
    pytest.importorskip("pandas")
    df = hook.get_df(f"SELECT n, s FROM {table} WHERE n % 7 = 0 ORDER BY n")
    assert list(df.columns) == ["n", "s"]
    assert [tuple(row) for row in df.itertuples(index=False)] == server
    ok, message = hook.test_connection()
    version = stack.clickhouse_client().execute("SELECT version()")[0][0]
    assert ok is True and version in message and stack.user in message


def _task_results(home: Path, dag_id: str) -> dict[str, str]:
    with sqlite3.connect(home / "airflow.db") as db:
        return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?", (dag_id,)))


def _rows(value: Any) -> list[list[Any]]:
    """XCom rows as lists (Airflow's serializer may keep the tuples' class)."""
    if isinstance(value, dict) and "__data__" in value:
        return _rows(value["__data__"])
    if isinstance(value, list | tuple):
        return [_rows(v) if isinstance(v, list | tuple | dict) else v for v in value]
    return value


SQL_DAG = """
import datetime

from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator
from airflow.providers.common.sql.sensors.sql import SqlSensor
from airflow.providers.common.compat.sdk import DAG

from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(dag_id="s3ch_sql", schedule=None, start_date=datetime.datetime(2024, 1, 1), catchup=False):
    SQLExecuteQueryOperator(task_id="native_rows", conn_id="ch_sql", sql="SELECT n, s FROM {table} ORDER BY n LIMIT 3")
    SQLExecuteQueryOperator(task_id="native_count", conn_id="ch_sql", sql="SELECT count(), sum(n) FROM {table}")
    SQLExecuteQueryOperator(
        task_id="native_database", conn_id="ch_sql", database="{database}",
        sql="SELECT currentDatabase(), count() FROM {unqualified}",
    )
    SqlSensor(task_id="native_sensor", conn_id="ch_sql", sql="SELECT count() FROM {table}", poke_interval=1, timeout=60)
    SQLExecuteQueryOperator(task_id="http_count", conn_id="clickhouse_default", sql="SELECT count() FROM {table}")
    S3ToClickHouseOperator(
        task_id="load_through_clickhouse_type", clickhouse_conn_id="clickhouse_default",
        s3_uri="{s3_uri}", table="{posts_table}",
    )
"""


def test_sql_execute_query_operator_and_sql_sensor_through_airflow(
    tmp_path: Path, stack: LocalStack, posts: SampleDataset, posts_table: str, env_conn
) -> None:
    """``airflow dags test``: Airflow's SQL operator and sensor on a ``clickhouse_native`` connection, and
    ``clickhouse_default`` as the official provider's HTTP connection for its SQL operator and this operator."""
    table = _numbers_table(stack, rows=1000)
    database = f"other_{uuid.uuid4().hex[:6]}"
    other = _numbers_table(stack, rows=7, database=database)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sql_dag.py").write_text(
        textwrap.dedent(SQL_DAG).format(
            table=table,
            database=database,
            unqualified=other.split(".", 1)[1],
            s3_uri=posts.s3_uri,
            posts_table=posts_table,
        )
    )
    env_conn("ch_sql", stack.clickhouse_connection(0))
    env_conn("clickhouse_default", _http_connection(stack, native_port=stack.nodes[0].tcp_port))
    home = tmp_path / "airflow"
    home.mkdir()
    prepare_home(home, lambda *args: _airflow(home, dags, stack, *args))
    out = _airflow(home, dags, stack, "dags", "test", "s3ch_sql")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-5000:]
    assert _task_results(home, "s3ch_sql") == dict.fromkeys(
        (
            "native_rows",
            "native_count",
            "native_database",
            "native_sensor",
            "http_count",
            "load_through_clickhouse_type",
        ),
        "success",
    ), log[-5000:]
    assert _rows(read_xcom(home, "s3ch_sql", "native_rows")) == [[0, "n0"], [1, "n1"], [2, "n2"]]
    assert _rows(read_xcom(home, "s3ch_sql", "native_count")) == [[1000, 499500]]
    assert _rows(read_xcom(home, "s3ch_sql", "native_database")) == [[database, 7]]
    assert _rows(read_xcom(home, "s3ch_sql", "http_count")) == [[1000]]
    assert read_xcom(home, "s3ch_sql", "load_through_clickhouse_type")["written_rows"] == posts.rows
    assert count(stack, posts_table) == posts.rows
    assert stack.password not in log


# ---------------------------------------------------------------------------------------- airflow connections test
def _connections_test(tmp_path: Path, conn_id: str, conn: dict[str, Any]) -> tuple[int, str]:
    """``airflow connections test``: its exit status and what it said (the console's line breaks undone)."""
    home = tmp_path / f"home_{conn_id}"
    home.mkdir()
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn),
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        }
    )
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "connections", "test", conn_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return out.returncode, " ".join((out.stdout + out.stderr).split())


def test_airflow_connections_test_succeeds_on_the_stack_and_names_a_wrong_password(
    tmp_path: Path, stack: LocalStack
) -> None:
    status, said = _connections_test(tmp_path, "ch_ok", stack.clickhouse_connection(0))
    assert status == 0 and "Connection success!" in said, said

    wrong = stack.clickhouse_connection(0)
    wrong["password"] = "not-the-password-" + uuid.uuid4().hex[:6]
    status, failed = _connections_test(tmp_path, "ch_wrong", wrong)
    assert status == FAILED and "Connection failed!" in failed, failed
    assert f"refused user '{stack.user}': wrong user or password" in failed
    assert "fix the login and password of connection 'ch_wrong'" in failed
    assert wrong["password"] not in failed and stack.password not in failed + said


def test_a_native_connection_on_the_http_port_fails_with_a_hint(tmp_path: Path, stack: LocalStack) -> None:
    conn = stack.clickhouse_connection(0)
    conn["port"] = stack.nodes[0].http_port
    status, said = _connections_test(tmp_path, "ch_on_http", conn)
    assert status == FAILED and "Connection failed!" in said, said
    assert f"is port {conn['port']} ClickHouse's HTTP port? The native protocol listens on 9000" in said


def test_airflow_connections_test_on_a_clickhouse_type_connection_uses_the_official_hook(
    tmp_path: Path, stack: LocalStack
) -> None:
    """The connection has the HTTP port and no ``native_port``: only the official (HTTP) hook can pass."""
    status, said = _connections_test(tmp_path, "ch_official", _http_connection(stack))
    assert status == 0 and "Connection success!" in said, said

"""DAGs through Airflow itself (`airflow dags test`), on the real local stack."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import posts_ddl, write_posts
from airflow_provider_s3ch.local.stack import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag_stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        yield stack


def airflow_env(home: Path, dags: Path, stack: LocalStack) -> dict[str, str]:
    """The environment of an Airflow command on the local stack: its home, its DAGs, the stack's connections."""
    env = dict(os.environ)
    env.update(stack.airflow_env())
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        }
    )
    return env


def _airflow(home: Path, dags: Path, stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args], env=airflow_env(home, dags, stack), capture_output=True, text=True,
        timeout=600, check=False,
    )


# The metadata database of one `airflow db migrate` in this test process; every later Airflow home starts from a
# copy of it: the same schema, without an Airflow process (seconds each) to build it again for every DAG run.
_MIGRATED_DB = Path(tempfile.mkdtemp(prefix="s3ch-test-airflow-db-")) / "airflow.db"


def prepare_home(home: Path, airflow: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """A migrated metadata database in ``home`` and the DAGs serialized into it; ``airflow(*args)`` runs an
    Airflow command in that home."""
    if _MIGRATED_DB.exists():
        shutil.copyfile(_MIGRATED_DB, home / "airflow.db")
    else:
        out = airflow("db", "migrate")
        assert out.returncode == 0, out.stderr[-3000:]
        shutil.copyfile(home / "airflow.db", _MIGRATED_DB)
    out = airflow("dags", "reserialize")
    assert out.returncode == 0, out.stderr[-3000:]


def _run_dag(tmp_path: Path, dags: Path, stack: LocalStack, dag_id: str, conf: dict | None = None) -> Path:
    home = tmp_path / "airflow"
    home.mkdir()
    prepare_home(home, lambda *args: _airflow(home, dags, stack, *args))
    test_args = ["dags", "test", dag_id] + (["-c", json.dumps(conf)] if conf else [])
    out = _airflow(home, dags, stack, *test_args)
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    assert "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]
    return home


def _query_log_written_rows(stack: LocalStack, query_id: str) -> int:
    client = stack.clickhouse_client()
    client.execute("SYSTEM FLUSH LOGS")
    rows = client.execute(
        "SELECT written_rows FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'", {"q": query_id}
    )
    assert len(rows) == 1
    return int(rows[0][0])


def test_example_dag_loads_the_sample(tmp_path: Path, dag_stack: LocalStack) -> None:
    dag_stack.create_bucket("s3ch-sample")
    data = write_posts(dag_stack.s3_client(), "s3ch-sample", rows=20_000, months=4)
    home = _run_dag(tmp_path, ROOT / "example_dags", dag_stack, "s3_to_clickhouse_posts", {"s3_uri": data.s3_uri})
    xcom = read_xcom(home, "s3_to_clickhouse_posts", "load_posts")
    assert xcom["written_rows"] == data.rows == _query_log_written_rows(dag_stack, xcom["query_id"])
    assert dag_stack.clickhouse_client().execute("SELECT count() FROM default.posts")[0][0] == data.rows
    assert xcom["settings"]["max_memory_usage"] == 4 * 1024**3  # the DAG's memory_cap param, rendered
    # The operator created the table from the files: the guide's keys, the key columns not nullable.
    assert xcom["table_changes"]["created"] == "MergeTree table"
    keys = dag_stack.clickhouse_client().execute(
        "SELECT sorting_key, partition_key FROM system.tables WHERE database = 'default' AND name = 'posts'"
    )
    assert keys == [("PostTypeId, toDate(CreationDate), CreationDate", "toYYYYMM(CreationDate)")]


def test_readme_style_dag_with_text_formats_and_globs(tmp_path: Path, dag_stack: LocalStack) -> None:
    s3 = dag_stack.s3_client()
    dag_stack.create_bucket("s3ch-formats")
    months = write_posts(s3, "s3ch-formats", rows=9_000, months=3, prefix="parquet/")
    ch = dag_stack.clickhouse_client()
    ch.execute(posts_ddl("default.f_posts"))
    for table in ("f_events_csv", "f_events_tsv"):
        ch.execute(
            f"CREATE TABLE default.{table} (id UInt32, name String, amount Float64) ENGINE = MergeTree ORDER BY id"
        )
    csv_rows = tsv_rows = 0
    for region, n in (("eu", 120), ("us", 80), ("ap", 40)):
        body = "id,name,amount\n" + "".join(f"{i},{region}{i},{i / 4}\n" for i in range(n))
        s3.put_object(
            Bucket="s3ch-formats", Key=f"csv/{region}/2024/01/part-0.csv.gz", Body=gzip.compress(body.encode())
        )
        csv_rows += n
        tsv = "id\tname\tamount\n" + "".join(f"{i}\t{region}{i}\t{i / 4}\n" for i in range(n))
        s3.put_object(Bucket="s3ch-formats", Key=f"tsv/{region}/part-0.tsv", Body=tsv.encode())
        tsv_rows += n if region in ("eu", "us") else 0

    home = _run_dag(tmp_path, Path(__file__).parent / "dags", dag_stack, "s3ch_formats")

    parquet_rows = ch.execute("SELECT count() FROM default.f_posts")[0][0]
    expected = {
        "parquet": (parquet_rows, "f_posts"),
        "csv_gz": (csv_rows, "f_events_csv"),
        "tsv": (tsv_rows, "f_events_tsv"),
    }
    assert parquet_rows == 6_000  # two of the three months: {2008-07,2008-08}
    assert months.rows == 9_000
    for task_id, (rows, table) in expected.items():
        xcom = read_xcom(home, "s3ch_formats", task_id)
        assert xcom["written_rows"] == rows == _query_log_written_rows(dag_stack, xcom["query_id"]), task_id
        assert ch.execute(f"SELECT count() FROM default.{table}")[0][0] == rows, task_id


def test_cluster_example_dag_goes_distributed(tmp_path: Path) -> None:
    with LocalStack(nodes=3, region="eu-west-3") as stack:
        stack.create_bucket("s3ch-sample")
        data = write_posts(stack.s3_client(), "s3ch-sample", rows=24_000, months=6)
        home = _run_dag(
            tmp_path, ROOT / "example_dags", stack, "s3_to_clickhouse_posts_cluster", {"s3_uri": data.s3_uri}
        )
        xcom = read_xcom(home, "s3_to_clickhouse_posts_cluster", "load_posts")
        assert xcom["strategy"] == "distributed"
        assert xcom["written_rows"] == data.rows
        assert xcom["table_changes"]["created"] == (
            "Distributed over MergeTree tables, node by node (the cluster has no Keeper)"
        )
        assert xcom["settings"]["parallel_distributed_insert_select"] == 2
        # s3Cluster hands the files out one at a time to whichever node asks first: a node may get none of the
        # six (seen on a busy machine). What the engine does promise: every shard runs a secondary insert, each
        # node's share is in its own table, and the shares add up to the files' rows.
        per_node = {n["node"]: n["written_rows"] for n in xcom["nodes"]}
        assert sorted(per_node) == sorted(node.address for node in stack.nodes), per_node
        assert sum(per_node.values()) == data.rows, per_node
        initiator = stack.clickhouse_client(0)
        initiator.execute("SYSTEM FLUSH LOGS")
        assert initiator.execute(
            "SELECT Settings['parallel_distributed_insert_select'] FROM system.query_log "
            "WHERE query_id = %(q)s AND is_initial_query AND type = 'QueryFinish'", {"q": xcom["query_id"]}
        ) == [("2",)]
        for node in stack.nodes:
            client = stack.clickhouse_client(node.index)
            client.execute("SYSTEM FLUSH LOGS")
            secondary = client.execute(
                "SELECT sum(written_rows), count() FROM system.query_log WHERE initial_query_id = %(q)s "
                "AND NOT is_initial_query AND type = 'QueryFinish' AND query_kind = 'Insert'", {"q": xcom["query_id"]}
            )[0]
            local = client.execute("SELECT count() FROM default.posts_local")[0][0]
            assert secondary[1] >= 1, f"no secondary insert on {node.address}"
            assert local == secondary[0] == per_node[node.address], (node.address, local, secondary, per_node)


def test_a_type_error_is_not_retried_and_a_server_that_does_not_answer_is(
    tmp_path: Path, dag_stack: LocalStack
) -> None:
    """Through Airflow's own task runner: retries=2 on both tasks."""
    dag_stack.create_bucket("s3ch-retries")
    dag_stack.s3_client().put_object(Bucket="s3ch-retries", Key="typed/bad.csv", Body=b"id,name\nabc,x\n")
    ch = dag_stack.clickhouse_client()
    ch.execute("CREATE TABLE default.typed (id UInt64, name String) ENGINE = MergeTree ORDER BY id")
    down = {"conn_type": "clickhouse_native", "host": "127.0.0.1", "port": free_port(), "extra": {"connect_timeout": 1}}
    home = tmp_path / "airflow"
    home.mkdir()
    dags = Path(__file__).parent / "dags"
    os.environ["AIRFLOW_CONN_CLICKHOUSE_DOWN"] = json.dumps(down)
    try:
        prepare_home(home, lambda *args: _airflow(home, dags, dag_stack, *args))
        out = _airflow(home, dags, dag_stack, "dags", "test", "s3ch_retries")
    finally:
        os.environ.pop("AIRFLOW_CONN_CLICKHOUSE_DOWN")
    log = out.stdout + out.stderr
    with sqlite3.connect(home / "airflow.db") as db:
        tries = dict(db.execute("SELECT task_id, try_number FROM task_instance WHERE dag_id = 's3ch_retries'"))
        states = dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = 's3ch_retries'"))
    assert states == {"type_error": "failed", "server_down": "failed"}, log[-4000:]
    assert tries == {"type_error": 1, "server_down": 3}, log[-4000:]
    assert "ClickHouseQueryError" in log and "ClickHouseUnavailableError" in log
    assert ch.execute("SELECT count() FROM default.typed")[0][0] == 0

"""End to end, each load a fresh process: the operator against the loads a user would otherwise write.

What a user compares: from the task's start to its result. Each load runs in a new Python process
(as Airflow runs each task), with its imports done before the clock starts (a task process has
imported Airflow and the DAG before ``execute``; on Linux Airflow 3 forks it from its supervisor, so
``airflow.sdk.execution_time.supervisor``, which the first connection lookup imports, is loaded too: ~30 ms
that a fresh process would otherwise charge to the first ``get_connection``); each loads the same files
into a fresh table, after the server dropped its schema and Parquet metadata caches: as a scheduled load
of new files finds them.

- ``hand``: ``clickhouse_driver.Client(...)``, then ``INSERT INTO t SELECT * FROM s3(url, key, secret,
  format)`` with ClickHouse's defaults: what a user writes without the operator.
- ``operator``: ``S3ToClickHouseOperator(...).execute(context)``: listing, planning, the staging table,
  the insert, the partition moves and the figures from ``system.query_log``.
- ``floor``: the least an exact load that reports from ``system.query_log`` does around its insert
  (:data:`FLOOR`), to read the operator's time around the insert against.
- ``worker``: the load on the worker: boto3 lists the keys (``list_objects_v2`` paginator) and downloads
  each object (4 threads), pyarrow reads it (``pyarrow.parquet.read_table``; ``pyarrow.csv.read_csv`` over
  a gzip stream with the table's column types), clickhouse-driver inserts it (one columnar NumPy INSERT
  per file, ``use_numpy``).
- ``dlt``: dlt's ``filesystem`` source (``read_parquet(use_pyarrow=True)`` / ``read_csv_duckdb(use_pyarrow=
  True)``) into its ClickHouse destination (clickhouse-connect over HTTP) with the table's column names
  (``sql_cs_v1`` naming), run by the python in ``S3CH_DLT_PYTHON`` (a separate venv with ``dlt[clickhouse,
  parquet,s3]``, duckdb and pandas); skipped when unset. Its table is ``<dataset>___<table>`` in the database.

For each: the task time (connect to result), the insert's own ``query_duration_ms`` (the worker's and
dlt's: the sum over their INSERTs, which includes the time the server waits for the client's data), and
the time around the insert (task less insert). ``python -m bench.run --only end_to_end`` runs it alone;
``make bench`` includes it. ``S3CH_E2E_ROOT=<a checkout>`` runs the operator of another checkout (to
compare commits).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.datasets import Dataset

ROOT = Path(__file__).resolve().parents[1]

#: The checkout whose operator the fresh processes run (default: this one).
SOURCE = Path(os.environ.get("S3CH_E2E_ROOT") or ROOT)

#: A python executable with dlt installed (``dlt[clickhouse,parquet,s3]``, duckdb, pandas); unset: no dlt runs.
DLT_PYTHON = os.environ.get("S3CH_DLT_PYTHON") or None

#: The report's note when dlt was not run.
DLT_UNSET = "not run: S3CH_DLT_PYTHON (a python with dlt[clickhouse,parquet,s3], duckdb and pandas) is unset"

#: The peers of the operator, in the order they run within a round (after ``hand`` and ``operator``).
PEERS = ("worker", "dlt")

#: dlt's dataset (a prefix of its tables in the database): one for every run, so that its own tables
#: (``_dlt_loads``, ``_dlt_version``, ``_dlt_pipeline_state``) exist after the first run, as for a DAG's.
DLT_DATASET = "s3ch_bench_dlt"

HAND = """
import json, sys, time, uuid
from clickhouse_driver import Client
a = json.loads(sys.argv[1])
query_id = "bench-hand-" + uuid.uuid4().hex
started = time.monotonic()
client = Client(host=a["host"], port=a["port"], user=a["user"], password=a["password"])
client.execute(a["sql"], query_id=query_id)
print(json.dumps({"task_s": time.monotonic() - started, "query_id": query_id}))
"""

OPERATOR = """
import json, sys, time, types, uuid
import logging
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
try:  # Airflow 3's task process is forked from its supervisor: this module is loaded before execute
    import airflow.sdk.execution_time.supervisor  # noqa: F401
except ImportError:  # Airflow 2
    pass
for name in ("airflow", "airflow.task", "airflow.task.operators", "botocore", "boto3"):
    logging.getLogger(name).setLevel(logging.WARNING)
a = json.loads(sys.argv[1])
op = S3ToClickHouseOperator(task_id="load", s3_uri=a["s3_uri"], table=a["table"])
ti = types.SimpleNamespace(dag_id="bench", task_id="load", run_id="bench-" + uuid.uuid4().hex, map_index=-1,
                           try_number=1)
started = time.monotonic()
result = op.execute({"ti": ti})
print(json.dumps({"task_s": time.monotonic() - started, "query_id": result["query_id"],
                  "predicted": result.get("predicted_memory_usage"), "phases_ms": result.get("phases_ms"),
                  "settings": result.get("settings")}))
"""

#: The least a load that is exact and reports from ``system.query_log`` does around its insert: the ``aws``
#: connection's credentials and S3 client (the provider's ``S3Source``, as the operator builds them), the
#: listing, a staging table filled by the insert (the operator's settings of the same round) and moved into
#: the target in one ``ALTER`` (its partitions read as the operator reads them), dropped, and the insert's
#: figures read after the operator's ``SYSTEM FLUSH LOGS``. No region check, footers, plan, schema check,
#: earlier tries or mark: what is left when everything the operator adds is taken away (its ``around_s`` is
#: this floor on this machine).
FLOOR = """
import json, logging, sys, time, uuid
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator  # noqa: F401 - as imported
try:
    import airflow.sdk.execution_time.supervisor  # noqa: F401
except ImportError:
    pass
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.query_log import flush_logs
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.hooks.server import partitions
for name in ("airflow", "airflow.task", "botocore", "boto3"):
    logging.getLogger(name).setLevel(logging.WARNING)
a = json.loads(sys.argv[1])
started = time.monotonic()
hook = ClickHouseHook("clickhouse_native_default")
source = S3Source("aws_default")
creds = source.credentials()
pages = source.client().get_paginator("list_objects_v2").paginate(Bucket=a["bucket"], Prefix=a["prefix"])
keys = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(a["suffix"])]
staging = "_s3ch_floor_" + uuid.uuid4().hex[:12]
hook.execute(f"CREATE TABLE `{a['database']}`.`{staging}` AS `{a['database']}`.`{a['table']}`")
query_id = "bench-floor-" + uuid.uuid4().hex
hook.execute(f"INSERT INTO `{a['database']}`.`{staging}` SELECT * FROM s3('{a['url']}', '{creds.access_key_id}', "
             f"'{creds.secret_access_key}', '{a['format']}')", settings=a["settings"], query_id=query_id)
ids = [pid for pid, _ in partitions(hook, TableRef(database=a["database"], name=staging))]
if ids:
    hook.execute(f"ALTER TABLE `{a['database']}`.`{staging}` " + ", ".join(
        f"MOVE PARTITION ID '{pid}' TO TABLE `{a['database']}`.`{a['table']}`" for pid in ids))
hook.execute(f"DROP TABLE `{a['database']}`.`{staging}` SYNC")
flush_logs(hook)
hook.execute("SELECT written_rows, written_bytes, memory_usage, query_duration_ms FROM system.query_log "
             "WHERE query_id = %(q)s AND type = 'QueryFinish' AND event_date >= yesterday()", {"q": query_id})
task_s = time.monotonic() - started
hook.close()
print(json.dumps({"task_s": task_s, "query_id": query_id, "files": len(keys)}))
"""

WORKER = """
import gzip, json, logging, sys, time, uuid
from concurrent.futures import ThreadPoolExecutor
import boto3
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from clickhouse_driver import Client
logging.getLogger("clickhouse_driver").setLevel(logging.ERROR)  # "NumPy support is not implemented for Enum8"
a = json.loads(sys.argv[1])
TS = pa.timestamp("ms")  # the CSV's timestamps are UTC without an offset
CSV_TYPES = {"Id": pa.int32(), "PostTypeId": pa.string(), "AcceptedAnswerId": pa.uint32(), "CreationDate": TS,
             "Score": pa.int32(), "ViewCount": pa.uint32(), "Body": pa.string(), "OwnerUserId": pa.int32(),
             "OwnerDisplayName": pa.string(), "LastEditorUserId": pa.int32(), "LastEditorDisplayName": pa.string(),
             "LastEditDate": TS, "LastActivityDate": TS, "Title": pa.string(), "Tags": pa.string(),
             "AnswerCount": pa.uint16(), "CommentCount": pa.uint8(), "FavoriteCount": pa.uint8(),
             "ContentLicense": pa.string(), "ParentId": pa.string(), "CommunityOwnedDate": TS, "ClosedDate": TS}
prefix = "bench-worker-" + uuid.uuid4().hex
started = time.monotonic()
s3 = boto3.client("s3", endpoint_url=a["endpoint"], region_name=a["region"], aws_access_key_id=a["key"],
                  aws_secret_access_key=a["secret"])
pages = s3.get_paginator("list_objects_v2").paginate(Bucket=a["bucket"], Prefix=a["prefix"])
keys = [o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(a["suffix"])]


def read(key):
    body = s3.get_object(Bucket=a["bucket"], Key=key)["Body"]
    if a["format"] == "parquet":
        return pq.read_table(pa.BufferReader(body.read()))
    return pcsv.read_csv(gzip.GzipFile(fileobj=body), convert_options=pcsv.ConvertOptions(column_types=CSV_TYPES))


client = Client(host=a["host"], port=a["port"], user=a["user"], password=a["password"], settings={"use_numpy": True})
query_ids, rows = [], 0
with ThreadPoolExecutor(4) as pool:
    for i, table in enumerate(pool.map(read, keys)):
        names = ", ".join(f"`{n}`" for n in table.column_names)
        # .copy(): Enum8 has no NumPy column in the driver, and its generic column converts the values in place.
        columns = [column.to_numpy().copy() for column in table.columns]
        query_ids.append(f"{prefix}-{i}")
        client.execute(f"INSERT INTO {a['table']} ({names}) VALUES", columns, columnar=True, query_id=query_ids[-1])
        rows += table.num_rows
print(json.dumps({"task_s": time.monotonic() - started, "query_ids": query_ids, "rows_sent": rows}))
"""

DLT = """
import json, os, sys, tempfile, time
a = json.loads(sys.argv[1])
os.environ.update(a["env"])
import dlt
from dlt.sources.filesystem import filesystem, read_csv_duckdb, read_parquet
# What the run imports on first use, imported before the clock as the other loads' imports are.
import clickhouse_connect, clickhouse_driver, duckdb, pyarrow.parquet, s3fs  # noqa: F401
import dlt.destinations.impl.clickhouse.clickhouse  # noqa: F401
with tempfile.TemporaryDirectory() as pipelines_dir:  # a fresh worker: dlt restores its state from ClickHouse
    started = time.monotonic()
    files = filesystem(bucket_url=a["bucket_url"], file_glob=a["glob"])
    if a["format"] == "parquet":
        reader = files | read_parquet(use_pyarrow=True)
    else:
        reader = files | read_csv_duckdb(use_pyarrow=True, dtype={"ParentId": "VARCHAR"})
    pipeline = dlt.pipeline(pipeline_name="s3ch_bench", destination="clickhouse", dataset_name=a["dataset"],
                            pipelines_dir=pipelines_dir)
    info = pipeline.run(reader.with_name(a["table"]))
    info.raise_on_failed_jobs()
    task_s = time.monotonic() - started
print(json.dumps({"task_s": task_s}))
"""


def _as_new_files(client: Any) -> None:
    """Every run as a scheduled load of new files sees them: the server holds no schema inferred from them and no
    Parquet metadata of them (the runs load the same files again; the caches would otherwise serve the second)."""
    client.execute("SYSTEM DROP SCHEMA CACHE FOR S3")
    client.execute("SYSTEM DROP PARQUET METADATA CACHE")


def fresh_env(stack: Any, endpoint: str, source: Path = SOURCE) -> dict[str, str]:
    """A fresh load's environment: the stack's Airflow, its connections reading S3 through ``endpoint``, and
    ``source``'s provider first on the path."""
    aws = stack.aws_connection()
    aws["extra"] = {**aws["extra"], "endpoint_url": endpoint}
    env = {**os.environ, **stack.airflow_env(), "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
           "AIRFLOW_CONN_CLICKHOUSE_NATIVE_DEFAULT": json.dumps(
               stack.clickhouse_connection(0, s3_endpoint_url=endpoint)),
           "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH")) if p)
    return env


def _fresh(script: str, args: dict[str, Any], env: dict[str, str], python: str | None = None,
           tail: int = 2000, source: Path = SOURCE) -> dict[str, Any]:  # fmt: skip
    """Run ``script`` in a new process, in ``source`` (the checkout on its path: :func:`fresh_env`); its last
    line's JSON."""
    proc = subprocess.run([python or sys.executable, "-c", script, json.dumps(args)], env=env, cwd=source,
                          capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"a fresh load failed: {(proc.stdout + proc.stderr)[-tail:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _last_error(text: str) -> str:
    """The exception's message in a failed fresh process's output: its last line naming an error or exception."""
    found = [line.strip() for line in text.splitlines() if re.match(r"[\w.]*(Error|Exception)\w*: ", line.strip())]
    return (found[-1] if found else text.strip().splitlines()[-1] if text.strip() else "no output")[:500]


def _inserts(client: Any, condition: str, params: dict[str, Any], expected: int, wait_s: float = 10.0) -> dict:
    """The sum of the finished INSERTs' ``query_duration_ms`` matching ``condition`` in ``system.query_log``."""
    deadline = time.monotonic() + wait_s
    while True:
        client.execute("SYSTEM FLUSH LOGS")
        count, duration_ms = client.execute(
            f"SELECT count(), sum(query_duration_ms) FROM system.query_log WHERE type = 'QueryFinish' "
            f"AND query_kind = 'Insert' AND {condition}", params)[0]  # fmt: skip
        if count >= expected or time.monotonic() > deadline:
            return {"query_duration_ms": int(duration_ms), "inserts": int(count)}
        time.sleep(0.3)


def dlt_env(stack: Any, endpoint: str) -> dict[str, str]:
    """dlt's configuration as environment variables: ClickHouse (native and HTTP ports) and the S3 source."""
    node = stack.nodes[0]
    return {
        "DESTINATION__CLICKHOUSE__CREDENTIALS__HOST": "127.0.0.1",
        "DESTINATION__CLICKHOUSE__CREDENTIALS__PORT": str(node.tcp_port),
        "DESTINATION__CLICKHOUSE__CREDENTIALS__HTTP_PORT": str(node.http_port),
        "DESTINATION__CLICKHOUSE__CREDENTIALS__USERNAME": stack.user,
        "DESTINATION__CLICKHOUSE__CREDENTIALS__PASSWORD": stack.password,
        "DESTINATION__CLICKHOUSE__CREDENTIALS__SECURE": "0",
        "SOURCES__FILESYSTEM__CREDENTIALS__AWS_ACCESS_KEY_ID": stack.s3_access_key,
        "SOURCES__FILESYSTEM__CREDENTIALS__AWS_SECRET_ACCESS_KEY": stack.s3_secret_key,
        "SOURCES__FILESYSTEM__CREDENTIALS__ENDPOINT_URL": endpoint,
        "SOURCES__FILESYSTEM__CREDENTIALS__REGION_NAME": stack.region,
        "SCHEMA__NAMING": "sql_cs_v1",  # keep the table's column names (the default snake_cases them)
        "RUNTIME__LOG_LEVEL": "WARNING",
        "RUNTIME__DLTHUB_TELEMETRY": "false",
    }


def bench_end_to_end(stack: Any, datasets: list[Dataset], *, repeats: int, database: str, log: Any,
                     s3_url: str | None = None, path: str = "direct") -> list[dict]:
    """Hand-written, operator, worker-side and dlt loads of each dataset, alternating, ``repeats`` rounds,
    each a fresh process.

    :param s3_url: the S3 endpoint all read through (ClickHouse's ``s3()``, the operator's and the worker's
        boto3, dlt's s3fs), e.g. a :class:`~bench.s3proxy.S3Proxy`'s; default the stack's S3 server.
    :param path: the label of that endpoint in the results (``direct``, or the proxy's latency and bandwidth).
    """
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.measure import new_table

    client = stack.clickhouse_client(send_receive_timeout=3600)
    endpoint = s3_url or stack.s3_endpoint
    env = fresh_env(stack, endpoint)
    ch = {"host": "127.0.0.1", "port": stack.nodes[0].tcp_port, "user": stack.user, "password": stack.password}
    out = []
    for ds in datasets:
        fmt = "Parquet" if ds.spec.fmt == "parquet" else "CSVWithNames"
        manifest = _manifest_summary(stack, ds)
        url = f"{endpoint}/{ds.bucket}/{ds.prefix}*.{ds.extension}"
        variants = ["hand", "operator", "floor", "worker"] + (["dlt"] if DLT_PYTHON else [])
        settings: dict[str, Any] = {}  # the operator's of the round, for the floor's insert
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        dlt_error = None
        for _ in range(repeats):
            for variant in variants:
                if variant == "dlt" and dlt_error:
                    continue
                # dlt's tables are <dataset>___<table> (its dataset is a prefix inside the database).
                tag = f"e2e_{variant}_{uuid.uuid4().hex[:6]}"
                _as_new_files(client)
                table = new_table(client, database, posts_ddl, f"{DLT_DATASET}___{tag}" if variant == "dlt" else tag)
                try:
                    if variant == "hand":
                        sql = (f"INSERT INTO `{database}`.`{table}` SELECT * FROM s3('{url}', '{stack.s3_access_key}', "
                               f"'{stack.s3_secret_key}', '{fmt}')")
                        r = _fresh(HAND, {"host": "127.0.0.1", "port": stack.nodes[0].tcp_port, "user": "default",
                                          "password": "", "sql": sql}, env)
                        insert = _entry(client, r["query_id"])
                    elif variant == "operator":
                        r = _fresh(OPERATOR, {"s3_uri": ds.s3_uri, "table": f"{database}.{table}"}, env)
                        insert = _entry(client, r["query_id"])
                        settings = r.get("settings") or {}
                    elif variant == "floor":
                        r = _fresh(FLOOR, {"database": database, "table": table, "bucket": ds.bucket,
                                           "prefix": ds.prefix, "suffix": f".{ds.extension}", "url": url,
                                           "format": fmt, "settings": settings}, env)
                        insert = _entry(client, r["query_id"])
                    elif variant == "worker":
                        r = _fresh(WORKER, {**ch, "endpoint": endpoint, "region": stack.region,
                                            "key": stack.s3_access_key, "secret": stack.s3_secret_key,
                                            "bucket": ds.bucket, "prefix": ds.prefix, "suffix": f".{ds.extension}",
                                            "format": ds.spec.fmt, "table": f"`{database}`.`{table}`"}, env)
                        insert = _inserts(client, "query_id IN %(ids)s", {"ids": tuple(r["query_ids"])},
                                          len(r["query_ids"]))
                    else:
                        try:
                            r = _fresh(DLT, {"env": {**dlt_env(stack, endpoint),
                                                     "DESTINATION__CLICKHOUSE__CREDENTIALS__DATABASE": database},
                                             "bucket_url": f"s3://{ds.bucket}/{ds.prefix}", "glob": f"*.{ds.extension}",
                                             "format": ds.spec.fmt, "dataset": DLT_DATASET,
                                             "table": table.removeprefix(f"{DLT_DATASET}___")}, env,
                                       python=DLT_PYTHON, tail=1_000_000)  # its exception, before duckdb's exit noise
                        except RuntimeError as exc:  # recorded in the report; the other variants go on
                            dlt_error = _last_error(str(exc))
                            log(f"end to end {ds.spec.name} ({path}): dlt failed: {dlt_error}")
                            continue
                        insert = _inserts(client, "has(tables, %(t)s)", {"t": f"{database}.{table}"}, 1)
                    rows = client.execute(f"SELECT count() FROM `{database}`.`{table}`")[0][0]
                finally:
                    client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
                insert_s = float(insert.get("query_duration_ms") or 0) / 1000
                run = {"task_s": round(r["task_s"], 3), "insert_s": round(insert_s, 3),
                       "around_s": round(r["task_s"] - insert_s, 3), "rows": int(rows)}
                if "inserts" in insert:
                    run["inserts"] = insert["inserts"]
                if r.get("phases_ms"):  # the operator's own split of its time (the XCom's phases_ms)
                    run["phases_ms"] = r["phases_ms"]
                if insert.get("memory_usage"):  # the s3() inserts' peak, and the operator's own prediction of it
                    run["peak"] = int(insert["memory_usage"])
                    run["predicted"] = r.get("predicted")
                runs[variant].append(run)
        runs = {v: rs for v, rs in runs.items() if rs}
        med = {v: {k: round(statistics.median(x[k] for x in rs), 3) for k in ("task_s", "insert_s", "around_s")}
               for v, rs in runs.items()}
        row = {"dataset": ds.spec.name, "path": path, "files": len(ds.keys), "bytes": ds.bytes, "runs": runs,
               "median": med, "manifest": manifest,
               "rows_equal": len({x["rows"] for rs in runs.values() for x in rs}) == 1,
               "speedup_end_to_end": round(med["hand"]["task_s"] / med["operator"]["task_s"], 2),
               "speedup_insert": round(med["hand"]["insert_s"] / med["operator"]["insert_s"], 2),
               "vs_operator": {p: round(med[p]["task_s"] / med["operator"]["task_s"], 2) for p in PEERS if p in med},
               "dlt": "ran" if "dlt" in med else f"failed: {dlt_error}" if dlt_error else DLT_UNSET}
        out.append(row)
        peers = "".join(f", {p} {med[p]['task_s']} s ({row['vs_operator'][p]}x the operator's)"
                        for p in PEERS if p in med)
        log(f"end to end {ds.spec.name} ({path}): hand {med['hand']['task_s']} s (insert {med['hand']['insert_s']} s), "
            f"operator {med['operator']['task_s']} s (insert {med['operator']['insert_s']} s, around "
            f"{med['operator']['around_s']} s; the floor's around {med.get('floor', {}).get('around_s')} s): "
            f"{row['speedup_end_to_end']}x end to end, "
            f"{row['speedup_insert']}x the insert{peers}; rows equal: {row['rows_equal']}")
    return out


def _entry(client: Any, query_id: str) -> dict[str, Any]:
    """An s3() insert's duration and peak memory from system.query_log."""
    from bench.measure import flush_and_fetch

    entry = flush_and_fetch(client, query_id)
    return {"query_duration_ms": entry.get("query_duration_ms", 0), "memory_usage": entry.get("memory_usage", 0)}


def _manifest_summary(stack: Any, ds: Dataset) -> dict[str, Any]:
    """The dataset's manifest as the plan sees it (sizes, footers): what the memory prediction needs."""
    from airflow_provider_s3ch.core.models import LoadRequest
    from airflow_provider_s3ch.hooks.s3 import build_manifest

    return build_manifest(stack.s3_client(), LoadRequest(s3_uri=ds.s3_uri, table="bench.probe")).summary()


def _peer_cells(r: dict[str, Any], peer: str) -> str:
    m = r["median"].get(peer)
    if not m:
        return "– | – | –"
    return f"{m['task_s']} | {m['insert_s']} | {r['vs_operator'][peer]}x"


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The report's section."""
    if not rows:
        return []
    out = [
        "## End to end (each load a fresh process)",
        "",
        "Task start to result, medians of the rounds; each load a new Python process with its imports done "
        "(bench/end_to_end.py); the variants alternate within each round. `hand`: `INSERT … SELECT FROM s3()` "
        "with ClickHouse's defaults through clickhouse-driver; `operator`: `S3ToClickHouseOperator.execute`. "
        "Speed-up = hand / operator.",
        "",
        "The peers, what a user would otherwise write for the same files into the same table: `worker`: boto3 "
        "lists the keys (`list_objects_v2` paginator) and downloads each file (4 threads), pyarrow reads it "
        "(`pyarrow.parquet.read_table`; `pyarrow.csv.read_csv` over a gzip stream with the table's column types), "
        "clickhouse-driver inserts it (one columnar NumPy INSERT per file); `dlt`: dlt's `filesystem` source "
        "(`read_parquet(use_pyarrow=True)`, `read_csv_duckdb(use_pyarrow=True)`) into its ClickHouse destination "
        "(clickhouse-connect over HTTP; the table's column names, `sql_cs_v1` naming; defaults otherwise) from the "
        "python in `S3CH_DLT_PYTHON`. Their insert s is the sum of their INSERTs' `query_duration_ms` in "
        "`system.query_log`, not comparable with the s3() inserts': the worker's includes the time the server "
        "waits while the client encodes each file's columns, dlt's is the upload of the Parquet files it wrote "
        "locally first. Their task s is comparable. `x op` = peer task s / operator task s: above 1 the operator "
        "is faster. Rows equal: every run of every variant wrote the same row count.",
        "",
        "`20 ms, 100 MB/s` and `50 ms, 50 MB/s`: every variant reads S3 through bench/s3proxy.py with that request "
        "latency and per-connection bandwidth (bench/run.py `E2E_PROXIES`); the peers' inserts go straight to "
        "ClickHouse.",
        "",
        "`floor`: the least an exact load that reports from `system.query_log` does around its insert "
        "(bench/end_to_end.py `FLOOR`: the connection's S3 client, the listing, a staging table filled with the "
        "operator's settings of the round, moved in one `ALTER`, dropped, the figures read after a flush): its "
        "around the insert s, beside the operator's.",
        "",
        "| dataset | S3 | files | MB | hand s | hand insert s | operator s | operator insert s | around the insert s "
        "| floor around s | end to end | insert | worker s | worker insert s | worker x op | dlt s | dlt insert s "
        "| dlt x op | rows equal |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        h, o = r["median"]["hand"], r["median"]["operator"]
        floor = r["median"].get("floor", {}).get("around_s", "–")
        out.append(f"| {r['dataset']} | {r.get('path', 'direct')} | {r['files']} | {r['bytes'] / 1e6:.0f} | "
                   f"{h['task_s']} | {h['insert_s']} | {o['task_s']} | {o['insert_s']} | {o['around_s']} | {floor} | "
                   f"{r['speedup_end_to_end']}x | {r['speedup_insert']}x | {_peer_cells(r, 'worker')} | "
                   f"{_peer_cells(r, 'dlt')} | {'yes' if r['rows_equal'] else 'NO'} |")
    notes: dict[str, list[str]] = {}
    for r in rows:
        if r.get("dlt") and r["dlt"] != "ran":
            notes.setdefault(r["dlt"], []).append(f"{r['dataset']} ({r.get('path', 'direct')})")
    if notes:
        out.append("")
        out += [f"- dlt, {', '.join(where)}: {note}" for note, where in notes.items()]
    return [*out, ""]

"""End to end, each load a fresh process: the operator against a hand-written ``INSERT … SELECT FROM s3()``.

What a user compares: from the task's start to its result. Each load runs in a new Python process
(as Airflow runs each task), with its imports done before the clock starts (a task process has
imported Airflow and the DAG before ``execute``); each loads the same files into a fresh table.

- ``hand``: ``clickhouse_driver.Client(...)``, then ``INSERT INTO t SELECT * FROM s3(url, key, secret,
  format)`` with ClickHouse's defaults: what a user writes without the operator.
- ``operator``: ``S3ToClickHouseOperator(...).execute(context)``: listing, planning, the staging table,
  the insert, the partition moves and the figures from ``system.query_log``.

For each: the task time (connect to result), the insert's own ``query_duration_ms``, and the time around
the insert (task less insert). ``python -m bench.run --only end_to_end`` runs it alone; ``make bench``
includes it. ``S3CH_E2E_ROOT=<a checkout>`` runs the operator of another checkout (to compare commits).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from bench.datasets import Dataset

ROOT = Path(__file__).resolve().parents[1]

#: The checkout whose operator the fresh processes run (default: this one).
SOURCE = Path(os.environ.get("S3CH_E2E_ROOT") or ROOT)

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
for name in ("airflow", "airflow.task", "airflow.task.operators", "botocore", "boto3"):
    logging.getLogger(name).setLevel(logging.WARNING)
a = json.loads(sys.argv[1])
op = S3ToClickHouseOperator(task_id="load", s3_uri=a["s3_uri"], table=a["table"])
ti = types.SimpleNamespace(dag_id="bench", task_id="load", run_id="bench-" + uuid.uuid4().hex, map_index=-1,
                           try_number=1)
started = time.monotonic()
result = op.execute({"ti": ti})
print(json.dumps({"task_s": time.monotonic() - started, "query_id": result["query_id"]}))
"""


def _fresh(script: str, args: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(args)], env=env, cwd=SOURCE, capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"a fresh load failed: {(proc.stdout + proc.stderr)[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_end_to_end(stack: Any, datasets: list[Dataset], *, repeats: int, database: str, log: Any,
                     s3_url: str | None = None, path: str = "direct") -> list[dict]:
    """Hand-written and operator loads of each dataset, alternating, ``repeats`` rounds, each a fresh process.

    :param s3_url: the S3 endpoint both read through (ClickHouse's ``s3()`` and the operator's boto3
        listing), e.g. a :class:`~bench.s3proxy.S3Proxy`'s; default the stack's S3 server.
    :param path: the label of that endpoint in the results (``direct``, ``proxy``).
    """
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.measure import flush_and_fetch, new_table

    client = stack.clickhouse_client(send_receive_timeout=3600)
    endpoint = s3_url or stack.s3_endpoint
    aws = stack.aws_connection()
    aws["extra"] = {**aws["extra"], "endpoint_url": endpoint}
    env = {**os.environ, **stack.airflow_env(), "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
           "AIRFLOW_CONN_CLICKHOUSE_NATIVE_DEFAULT": json.dumps(stack.clickhouse_connection(0, s3_endpoint_url=endpoint)),
           "AIRFLOW_CONN_AWS_DEFAULT": json.dumps(aws)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SOURCE), env.get("PYTHONPATH")) if p)
    out = []
    for ds in datasets:
        fmt = "Parquet" if ds.spec.fmt == "parquet" else "CSVWithNames"
        url = f"{endpoint}/{ds.bucket}/{ds.prefix}*.{ds.extension}"
        runs: dict[str, list[dict[str, Any]]] = {"hand": [], "operator": []}
        for _ in range(repeats):
            for variant in ("hand", "operator"):
                table = new_table(client, database, posts_ddl, f"e2e_{variant}_{uuid.uuid4().hex[:6]}")
                try:
                    if variant == "hand":
                        sql = (f"INSERT INTO `{database}`.`{table}` SELECT * FROM s3('{url}', '{stack.s3_access_key}', "
                               f"'{stack.s3_secret_key}', '{fmt}')")
                        r = _fresh(HAND, {"host": "127.0.0.1", "port": stack.nodes[0].tcp_port, "user": "default",
                                          "password": "", "sql": sql}, env)
                    else:
                        r = _fresh(OPERATOR, {"s3_uri": ds.s3_uri, "table": f"{database}.{table}"}, env)
                    entry = flush_and_fetch(client, r["query_id"])
                    rows = client.execute(f"SELECT count() FROM `{database}`.`{table}`")[0][0]
                finally:
                    client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
                insert_s = float(entry.get("query_duration_ms", 0)) / 1000
                runs[variant].append({"task_s": round(r["task_s"], 3), "insert_s": round(insert_s, 3),
                                      "around_s": round(r["task_s"] - insert_s, 3), "rows": int(rows)})
        med = {v: {k: round(statistics.median(x[k] for x in rs), 3) for k in ("task_s", "insert_s", "around_s")}
               for v, rs in runs.items()}
        row = {"dataset": ds.spec.name, "path": path, "files": len(ds.keys), "bytes": ds.bytes, "runs": runs, "median": med,
               "rows_equal": len({x["rows"] for rs in runs.values() for x in rs}) == 1,
               "speedup_end_to_end": round(med["hand"]["task_s"] / med["operator"]["task_s"], 2),
               "speedup_insert": round(med["hand"]["insert_s"] / med["operator"]["insert_s"], 2)}
        out.append(row)
        log(f"end to end {ds.spec.name} ({path}): hand {med['hand']['task_s']} s (insert {med['hand']['insert_s']} s), "
            f"operator {med['operator']['task_s']} s (insert {med['operator']['insert_s']} s, around "
            f"{med['operator']['around_s']} s): {row['speedup_end_to_end']}x end to end, "
            f"{row['speedup_insert']}x the insert")
    return out


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The report's section."""
    if not rows:
        return []
    out = [
        "## End to end (each load a fresh process)",
        "",
        "Task start to result, medians of the rounds; each load a new Python process with its imports done "
        "(bench/end_to_end.py). `hand`: `INSERT … SELECT FROM s3()` with ClickHouse's defaults through "
        "clickhouse-driver; `operator`: `S3ToClickHouseOperator.execute`. Speed-up = hand / operator.",
        "",
        "`proxy`: both read S3 through bench/s3proxy.py (the latency section's request latency and bandwidth).",
        "",
        "| dataset | S3 | files | MB | hand s | hand insert s | operator s | operator insert s | around the insert s "
        "| end to end | insert |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        h, o = r["median"]["hand"], r["median"]["operator"]
        out.append(f"| {r['dataset']} | {r.get('path', 'direct')} | {r['files']} | {r['bytes'] / 1e6:.0f} | "
                   f"{h['task_s']} | {h['insert_s']} | {o['task_s']} | {o['insert_s']} | {o['around_s']} | "
                   f"{r['speedup_end_to_end']}x | {r['speedup_insert']}x |")
    return [*out, ""]

"""The time around the insert at 100 MB, per phase and per call: the operator beside the floor, in one run.

``python -m bench.around [--rounds N] [--out bench/results/around.json]``

On the local stack it writes the end-to-end section's two 100 MB datasets (20 Parquet files of ~5 MB, 10 gzip'd
CSV files of ~9 MB) and loads each into a fresh table, ``rounds`` times, alternating the operator and the floor
(:data:`bench.end_to_end.FLOOR`, the least an exact load that reports from ``system.query_log`` does around its
insert), each in a fresh process with its imports done, after the server dropped its schema and Parquet metadata
caches. Each process traces what it sends: every ClickHouse statement (clickhouse-driver's ``Client.execute``) and
every S3 request (botocore's ``_make_api_call``), with its start and duration in the task; the operator's own
``phases_ms`` come from its XCom.

What it prints and writes, per dataset: the medians of task, insert and around (task less the insert's
``query_duration_ms``), the operator's around less the floor's, the phases, and the calls of the round whose
operator around was the median's, side by side with the floor's: where the time around the insert goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from bench.common import BUCKET, DATABASE, E2E_DATASETS
from bench.datasets import RowPool, node_files_dir, write_dataset
from bench.end_to_end import FLOOR, OPERATOR, _as_new_files, _entry, _fresh, fresh_env

#: Put before each fresh load's script: each ClickHouse statement and S3 request, with its start (ms since the
#: tracer was armed, which the load's script does right after its clock starts) and duration, printed as JSON
#: on the load's last line's ``calls`` (the script's own JSON gets them added).
TRACE = """
import json as _json, sys as _sys, time as _time
_calls, _t0 = [], [None]
def _arm():
    _t0[0] = _time.monotonic()
def _traced(label_of, fn):
    def wrapper(*args, **kwargs):
        begun = _time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            if _t0[0] is not None:
                _calls.append([label_of(args, kwargs)[:90], round((begun - _t0[0]) * 1000, 1),
                               round((_time.monotonic() - begun) * 1000, 1)])
    return wrapper
import clickhouse_driver, botocore.client
clickhouse_driver.Client.execute = _traced(lambda a, k: "ch: " + " ".join(str(a[1]).split()),
                                           clickhouse_driver.Client.execute)
botocore.client.BaseClient._make_api_call = _traced(lambda a, k: "s3: " + str(a[1]),
                                                    botocore.client.BaseClient._make_api_call)
_print = print
def print(*args, **kwargs):  # the script's last line: its JSON with the calls and the provider's origin added
    text = " ".join(str(a) for a in args)
    if text.startswith("{"):
        import airflow_provider_s3ch
        got = _json.loads(text)
        got.update(calls=_calls, origin=airflow_provider_s3ch.__file__)
        text = _json.dumps(got)
    _print(text, **kwargs)
"""

def _armed(script: str) -> str:
    """The script with the tracer put before it and armed when its clock starts."""
    return TRACE + script.replace("started = time.monotonic()", "started = time.monotonic(); _arm()", 1)


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return sorted(runs, key=lambda r: r["around_s"])[len(runs) // 2]


def _run(script: str, args: dict[str, Any], env: dict[str, str], source: Path) -> dict[str, Any]:
    """A fresh load of :func:`_armed` ``script`` with ``source``'s provider (checked: the script reports where its
    provider came from)."""
    got = _fresh(_armed(script), args, {**env, "PYTHONPATH": os.pathsep.join(
        p for p in (str(source), env.get("PYTHONPATH")) if p)}, source=source)
    if not got["origin"].startswith(str(source)):
        raise RuntimeError(f"the load ran the provider from {got['origin']}, not from {source}")
    return got


def bench_around(
    stack: Any, datasets: list[Any], rounds: int, log: Any, sources: dict[str, Path] | None = None
) -> list[dict[str, Any]]:
    """:param sources: the operators to run beside the floor, by name (default this checkout's, ``operator``)."""
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.measure import new_table

    client = stack.clickhouse_client(send_receive_timeout=3600)
    root = Path(__file__).resolve().parents[1]
    env = fresh_env(stack, stack.s3_endpoint, root)
    sources = sources or {"operator": root}
    out = []
    for ds in datasets:
        fmt = "Parquet" if ds.spec.fmt == "parquet" else "CSVWithNames"
        url = f"{stack.s3_endpoint}/{ds.bucket}/{ds.prefix}*.{ds.extension}"
        runs: dict[str, list[dict[str, Any]]] = {**{name: [] for name in sources}, "floor": []}
        settings: dict[str, Any] = {}
        for _ in range(rounds):
            for variant in runs:
                _as_new_files(client)
                table = new_table(client, DATABASE, posts_ddl, f"around_{variant}_{uuid.uuid4().hex[:6]}")
                try:
                    if variant in sources:
                        r = _run(
                            OPERATOR,
                            {"s3_uri": ds.s3_uri, "table": f"{DATABASE}.{table}"},
                            env,
                            sources[variant],
                        )
                        settings = r.get("settings") or {}
                    else:
                        r = _run(
                            FLOOR,
                            {
                                "database": DATABASE,
                                "table": table,
                                "bucket": ds.bucket,
                                "prefix": ds.prefix,
                                "suffix": f".{ds.extension}",
                                "url": url,
                                "format": fmt,
                                "settings": settings,
                            },
                            env,
                            root,
                        )
                    insert_s = float(_entry(client, r["query_id"]).get("query_duration_ms") or 0) / 1000
                    rows = client.execute(f"SELECT count() FROM `{DATABASE}`.`{table}`")[0][0]
                finally:
                    client.execute(f"DROP TABLE IF EXISTS `{DATABASE}`.`{table}` SYNC")
                runs[variant].append(
                    {
                        "task_s": round(r["task_s"], 3),
                        "insert_s": round(insert_s, 3),
                        "around_s": round(r["task_s"] - insert_s, 3),
                        "rows": rows,
                        "phases_ms": r.get("phases_ms"),
                        "calls": r.get("calls", []),
                    }
                )
        med = {
            v: {k: round(statistics.median(x[k] for x in rs), 3) for k in ("task_s", "insert_s", "around_s")}
            for v, rs in runs.items()
        }
        row = {
            "dataset": ds.spec.name,
            "files": len(ds.keys),
            "bytes": ds.bytes,
            "rounds": rounds,
            "median": med,
            "over_floor_s": {name: round(med[name]["around_s"] - med["floor"]["around_s"], 3) for name in sources},
            "over_floor_per_round_s": {
                name: [round(o["around_s"] - f["around_s"], 3) for o, f in zip(runs[name], runs["floor"], strict=True)]
                for name in sources
            },
            "phases_ms": {
                name: {
                    k: statistics.median((x["phases_ms"] or {}).get(k, 0) for x in runs[name])
                    for k in (runs[name][0]["phases_ms"] or {})
                }
                for name in sources
            },
            "rows_equal": len({x["rows"] for rs in runs.values() for x in rs}) == 1,
            "median_round": {v: _median_run(rs) for v, rs in runs.items()},
            "runs": runs,
        }
        out.append(row)
        for name in sources:
            log(
                f"{ds.spec.name}: {name} around {med[name]['around_s']} s (insert {med[name]['insert_s']} s), "
                f"floor around {med['floor']['around_s']} s (insert {med['floor']['insert_s']} s): "
                f"{row['over_floor_s'][name]:+.3f} s over the floor (per round "
                f"{row['over_floor_per_round_s'][name]}); phases {row['phases_ms'][name]}"
            )
        for variant, one in row["median_round"].items():
            log(f"  {variant} (around {one['around_s']} s), its calls (start ms, took ms):")
            for label, start, took in one["calls"]:
                log(f"    {start:8.1f} {took:8.1f}  {label}")
    return out


def main(argv: list[str] | None = None) -> int:
    from airflow_provider_s3ch.local import LocalStack

    parser = argparse.ArgumentParser(prog="python -m bench.around", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows-per-month", type=int, default=40_000)
    parser.add_argument("--out", default="bench/results/around.json")
    parser.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="NAME=CHECKOUT",
        help="also run the operator of another checkout (e.g. an earlier commit's worktree)",
    )
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(f"[around {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="s3ch-around-"))
    began = time.monotonic()
    with LocalStack(nodes=1, workdir=workdir / "stack") as stack, stack.environ():
        client = stack.clickhouse_client()
        client.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
        stack.create_bucket(BUCKET)
        pool = RowPool(args.rows_per_month)
        s3 = stack.s3_client()
        datasets = [write_dataset(spec, pool, s3, BUCKET, node_files_dir(stack)) for spec in E2E_DATASETS]
        del pool
        results = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "load_average_start": os.getloadavg(),
            "around": bench_around(
                stack,
                datasets,
                args.rounds,
                log,
                {
                    "operator": Path(__file__).resolve().parents[1],
                    **{k: Path(v).resolve() for k, v in (o.split("=", 1) for o in args.operator)},
                },
            ),
        }
        results["load_average_end"] = os.getloadavg()
    results["wall_s"] = round(time.monotonic() - began, 1)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    log(f"done in {results['wall_s']} s: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

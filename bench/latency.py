"""The same inserts direct and through a proxy that models real object storage (bench/s3proxy.py).

Moto on loopback has no request latency and no per-connection bandwidth limit; AWS S3 has both. Each
dataset is loaded with a few settings side by side, once straight from moto and once through
:class:`~bench.s3proxy.S3Proxy` (a first-byte latency per request and a per-connection bandwidth cap),
so the report can say which settings change their effect under latency:

- ``defaults``: ClickHouse's own settings;
- ``plan``: the operator's plan for the dataset;
- ``plan, 10 MiB buffer``: the plan with ClickHouse's default ``max_download_buffer_size`` (the plan
  takes the guide's 50 MiB for many small files);
- ``plan, 8 reading threads``: the plan with ``max_threads = 8``: more files in flight at once, which
  hides per-request latency (the plan leaves ``max_threads`` at the cores).
"""

from __future__ import annotations

import statistics
import uuid
from typing import Any

from bench.datasets import Dataset
from bench.s3proxy import S3Proxy

MiB = 1024 * 1024

#: The proxy's shape: within the 20-50 ms and 50-100 MB/s that S3 shows per request and connection.
LATENCY_MS = 30.0
BANDWIDTH_MBPS = 80.0


def bench_latency(stack: Any, datasets: list[Dataset], planned: dict[str, Any], *, repeats: int, database: str,
                  log: Any) -> dict[str, Any]:
    """Each dataset's variants, direct and through the proxy, ``repeats`` interleaved rounds; medians.

    :param planned: per dataset name, the operator's plan (``Planned``: ``source`` and ``settings``).
    """
    from airflow_provider_s3ch.local.sample import posts_ddl
    from bench.measure import new_table, run_sql_insert

    client = stack.clickhouse_client(send_receive_timeout=3600)
    out: list[dict[str, Any]] = []
    with S3Proxy(stack.s3_endpoint, latency_ms=LATENCY_MS, bandwidth_mbps=BANDWIDTH_MBPS) as proxy:
        for ds in datasets:
            plan = planned[ds.spec.name]
            variants = {
                "defaults": {},
                "plan": dict(plan.settings),
                "plan, 10 MiB buffer": {**plan.settings, "max_download_buffer_size": 10 * MiB},
                "plan, 8 reading threads": {**plan.settings, "max_threads": 8},
            }
            runs: dict[tuple[str, str], list[float]] = {}
            for _ in range(repeats):
                for path, source in (("direct", plan.source), ("proxy", plan.source.replace(stack.s3_endpoint,
                                                                                             proxy.url))):
                    for name, settings in variants.items():
                        table = new_table(client, database, posts_ddl, f"lat_{uuid.uuid4().hex[:6]}")
                        try:
                            r = run_sql_insert(client, database, table, source, settings, ready=False)
                        finally:
                            client.execute(f"DROP TABLE IF EXISTS `{database}`.`{table}` SYNC")
                        if r["ok"]:
                            runs.setdefault((path, name), []).append(r["duration_s"])
            med = {f"{path}|{name}": round(statistics.median(v), 3) for (path, name), v in runs.items()}
            row = {"dataset": ds.spec.name, "files": len(ds.keys), "bytes": ds.bytes, "median_s": med,
                   "vs_defaults": {k: round(v / med[k.split("|")[0] + "|defaults"], 2) for k, v in med.items()
                                   if k.split("|")[0] + "|defaults" in med},
                   "proxy_over_direct": {name: round(med[f"proxy|{name}"] / med[f"direct|{name}"], 2)
                                         for name in variants if f"proxy|{name}" in med and f"direct|{name}" in med}}
            out.append(row)
            log(f"latency {ds.spec.name}: " + ", ".join(f"{k} {v}s" for k, v in med.items()))
        requests, sent = proxy.requests, proxy.bytes_out
    return {"latency_ms": LATENCY_MS, "bandwidth_mbps": BANDWIDTH_MBPS, "proxy_requests": requests,
            "proxy_bytes": sent, "datasets": out}


def lines(result: dict[str, Any]) -> list[str]:
    """The report's section."""
    if not result or not result.get("datasets"):
        return []
    out = [
        "## Through a proxy that models S3 (latency and bandwidth)",
        "",
        f"The same inserts straight from moto and through bench/s3proxy.py: {result['latency_ms']:g} ms to the first "
        f"byte of every request, each connection paced to {result['bandwidth_mbps']:g} MB/s "
        f"({result['proxy_requests']} requests, {result['proxy_bytes'] / 1e6:.0f} MB through it). Insert seconds "
        "from `system.query_log`, medians; `vs defaults` within the same path.",
        "",
        "| dataset | variant | direct s | proxy s | proxy / direct | direct vs defaults | proxy vs defaults |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result["datasets"]:
        names = list(dict.fromkeys(k.split("|")[1] for k in r["median_s"]))
        for name in names:
            d, p = r["median_s"].get(f"direct|{name}"), r["median_s"].get(f"proxy|{name}")
            out.append(f"| {r['dataset']} | {name} | {d} | {p} | {r['proxy_over_direct'].get(name)} | "
                       f"{r['vs_defaults'].get(f'direct|{name}')} | {r['vs_defaults'].get(f'proxy|{name}')} |")
    return [*out, ""]

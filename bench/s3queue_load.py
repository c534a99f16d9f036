"""S3Queue's throughput (many small files, a larger set) and cost (S3 requests an hour, the node's memory).

Throughput: the files are put first, then the queue is created; the clock runs from the ``CREATE`` to the last
row in the MergeTree target. Parts from ``system.part_log`` (``NewPart`` of the target), commits from
``system.s3queue_log`` (distinct ``commit_id``). Cost: a moto server seeded with ``objects`` tiny objects under the
queue's prefix (:mod:`bench.moto_seeded`), a counting proxy (:class:`bench.s3proxy.S3Proxy`, no delay) between
ClickHouse and it, a file put a minute, the requests counted by kind and scaled to an hour.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import psutil

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.stack import free_port
from bench.s3proxy import S3Proxy
from bench.s3queue_scenarios import BUCKET, STRUCTURE, Queue, Say


def _drain_rows(q: Queue, total: int, timeout: float) -> float:
    """Seconds until the target holds ``total`` rows (or ``timeout``)."""
    ch, began = q.ch(), time.monotonic()
    while time.monotonic() - began < timeout:
        if ch.execute(f"SELECT count() FROM {q.target}")[0][0] >= total:
            break
        time.sleep(0.2)
    return time.monotonic() - began


def _engine_figures(q: Queue) -> dict[str, Any]:
    ch = q.ch()
    ch.execute("SYSTEM FLUSH LOGS")
    parts = ch.execute("SELECT count() FROM system.part_log WHERE event_type = 'NewPart' AND database = 'default' "
                       "AND table = %(t)s", {"t": q.target.split(".")[1]})[0][0]  # fmt: skip
    commits = ch.execute("SELECT uniqExact(commit_id) FROM system.s3queue_log WHERE table = %(t)s",
                         {"t": f"q_{q.name}"})[0][0]  # fmt: skip
    active = ch.execute(f"SELECT count() FROM system.parts WHERE active AND database = 'default' "
                        f"AND table = '{q.target.split('.')[1]}'")[0][0]  # fmt: skip
    return {"parts_made": int(parts), "commits": int(commits), "active_parts_at_end": int(active)}


def throughput_small(stack: LocalStack, files: int, rows: int, modes: list[str], *, threads: int = 8,
                     timeout: float = 900.0, say: Say = print) -> list[dict[str, Any]]:  # fmt: skip
    """``files`` files of ``rows`` rows put, then for each mode a queue over them: rows/s, files/s, parts."""
    prefix = f"small_{int(time.time())}/"
    loader = Queue(stack, "small_put", rows=rows, prefix=prefix)
    began = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(loader.put, range(1, files + 1)))
    put_s = time.monotonic() - began
    out = []
    for mode in modes:
        q = Queue(stack, f"small_{mode}_{int(time.time())}", mode, "tuned", rows, prefix=prefix).create()
        took = _drain_rows(q, files * rows, timeout)
        figures = _engine_figures(q)
        outcome = q.outcome(range(1, files + 1))
        q.drop()
        result = {"mode": mode, "files": files, "rows_per_file": rows, "file_bytes": len(loader_body(rows)),
                  "put_s": round(put_s, 1), "load_s": round(took, 1), "rows_per_s": round(files * rows / took),
                  "files_per_s": round(files / took, 1), **figures, "exactly_once": outcome["exactly_once"],
                  "lost": len(outcome["lost"]), "duplicated": len(outcome["duplicated"]), "prefix": prefix}  # fmt: skip
        say(f"small files {mode}: {files} in {took:.1f} s, {result['rows_per_s']:,} rows/s, "
            f"{figures['parts_made']} parts, {figures['commits']} commits")  # fmt: skip
        out.append(result)
    return out


def loader_body(rows: int) -> bytes:
    from bench.s3queue_scenarios import body

    return body(1, rows)


def throughput_large(stack: LocalStack, megabytes: int, *, file_mb: int = 64, timeout: float = 900.0,
                     say: Say = print) -> dict[str, Any]:  # fmt: skip
    """About ``megabytes`` MB of CSV in files of ~``file_mb`` MB (written by ClickHouse into S3), then an unordered
    queue over them: rows/s, MB/s, parts."""
    prefix = f"large_{int(time.time())}/"
    rows_per_file = int(file_mb * 1e6 / 24)  # rows "n,id,v..." of ~24 bytes
    files = max(1, round(megabytes / file_mb))
    ch = stack.clickhouse_client()
    q = Queue(stack, f"large_{int(time.time())}", "unordered", "tuned", rows_per_file, prefix=prefix)
    began = time.monotonic()
    for n in range(1, files + 1):
        ch.execute(f"INSERT INTO FUNCTION s3('{stack.s3_endpoint}/{BUCKET}/{q.key(n)}', '{stack.s3_access_key}', "
                   f"'{stack.s3_secret_key}', 'CSV', '{STRUCTURE}') SELECT {n}, {n} * 1000000000 + number, "
                   f"concat('v', toString(number)) FROM numbers({rows_per_file})")  # fmt: skip
    written_s = time.monotonic() - began
    size = sum(q.s3.head_object(Bucket=BUCKET, Key=q.key(n))["ContentLength"] for n in range(1, files + 1))
    q.create()
    took = _drain_rows(q, files * rows_per_file, timeout)
    figures = _engine_figures(q)
    outcome = q.outcome(range(1, files + 1))
    q.drop()
    say(f"large: {files} files, {size / 1e6:.0f} MB in {took:.1f} s ({size / 1e6 / took:.1f} MB/s)")
    return {"files": files, "rows_per_file": rows_per_file, "bytes": size, "written_s": round(written_s, 1),
            "load_s": round(took, 1), "rows_per_s": round(files * rows_per_file / took),
            "mb_per_s": round(size / 1e6 / took, 1), **figures, "exactly_once": outcome["exactly_once"],
            "prefix": prefix}  # fmt: skip


class CountingProxy(S3Proxy):
    """:class:`S3Proxy` without delay or pacing, counting the requests by kind (LIST, GET, HEAD, PUT, other)."""

    def __init__(self, upstream: str) -> None:
        self.by_kind: Counter[str] = Counter()
        super().__init__(upstream, latency_ms=0.0, bandwidth_mbps=None)

    def _handler(self) -> Any:
        base, proxy = super()._handler(), self

        class Counting(base):  # type: ignore[valid-type,misc]
            def _forward(self) -> None:
                path, query = urlsplit(self.path).path, urlsplit(self.path).query
                kind = self.command
                if self.command == "GET" and ("list-type" in query or path.rstrip("/").count("/") <= 1):
                    kind = "LIST"
                with proxy._lock:
                    proxy.by_kind[kind] += 1
                super()._forward()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        return Counting


def _rss_mib(stack: LocalStack) -> float:
    proc = stack.nodes[0].process
    return round(psutil.Process(proc.pid).memory_info().rss / 2**20, 1) if proc else float("nan")


def cost(stack: LocalStack, objects: int, minutes: float, polling: list[str], *, file_every: float = 60.0,
         say: Say = print) -> dict[str, Any]:  # fmt: skip
    """For each polling setting, ``minutes`` of an unordered queue over a prefix of ``objects`` objects with a new
    file every ``file_every`` s: its S3 requests (counted at a proxy) scaled to an hour, and the node's RSS."""
    port = free_port()
    bucket = "s3ch-seeded"
    argv = [sys.executable, "-m", "bench.moto_seeded", str(port), stack.region, f"{bucket}={objects}"]
    server = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        if not line.startswith("ready"):
            raise RuntimeError(f"the seeded S3 server did not start: {line!r}")
        upstream = f"http://127.0.0.1:{port}"
        import boto3

        s3 = boto3.client("s3", endpoint_url=upstream, aws_access_key_id="x", aws_secret_access_key="x",
                          region_name=stack.region)  # fmt: skip
        runs = []
        with CountingProxy(upstream) as proxy:
            for setting in polling:
                runs.append(_cost_run(stack, proxy, s3, bucket, setting, minutes, file_every, say))
    finally:
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=10)
    return {"objects_under_prefix": objects, "minutes_each": minutes, "file_every_s": file_every,
            "seeded_by": "bench.moto_seeded (moto's backend filled in-process)", "runs": runs}  # fmt: skip


def _cost_run(stack: LocalStack, proxy: CountingProxy, s3: Any, bucket: str, setting: str, minutes: float,
              file_every: float, say: Say) -> dict[str, Any]:  # fmt: skip
    rss_before = _rss_mib(stack)
    stamp = int(time.time())
    q = Queue(stack, f"cost_{setting}_{stamp}", "unordered", setting, endpoint=proxy.url, prefix="o/",
              glob=f"**/c{stamp}-*.csv", bucket=bucket).create()  # fmt: skip
    with proxy._lock:
        proxy.by_kind.clear()
    began, n, rss_peak = time.monotonic(), 0, rss_before
    while time.monotonic() - began < minutes * 60:
        if time.monotonic() - began >= n * file_every:
            n += 1
            s3.put_object(Bucket=bucket, Key=f"o/new/c{stamp}-{n:06d}.csv", Body=q_body(n))
        rss_peak = max(rss_peak, _rss_mib(stack))
        time.sleep(1.0)
    elapsed = time.monotonic() - began
    with proxy._lock:
        counted = dict(proxy.by_kind)
    loaded = q.ch().execute(f"SELECT uniqExact(file) FROM {q.target}")[0][0]
    rss_after = _rss_mib(stack)
    q.drop()
    per_hour = {k: round(v * 3600 / elapsed) for k, v in counted.items()}
    say(f"cost {setting}: {counted} in {elapsed:.0f} s -> {per_hour} an hour; files {loaded}/{n}; "
        f"RSS {rss_before} -> {rss_after} MiB")  # fmt: skip
    return {"polling": setting, "seconds": round(elapsed, 1), "files_put": n, "files_loaded": int(loaded),
            "requests": counted, "requests_per_hour": per_hour, "total_per_hour": sum(per_hour.values()),
            "rss_mib_before_queue": rss_before, "rss_mib_idle_with_queue": rss_after,
            "rss_mib_peak": rss_peak}  # fmt: skip


def q_body(n: int) -> bytes:
    from bench.s3queue_scenarios import body

    return body(n, 100)

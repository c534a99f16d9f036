"""ClickHouse's S3Queue engine on the local stack: the queue, its files, and the latency and fault scenarios.

Each scenario makes its own S3Queue table (its own ``keeper_path`` and prefix) with a materialized view into a
MergeTree table, puts files into moto's S3 and reads the MergeTree table back, then drops the three. The files have
the shape of the provider's continuous benchmark (:class:`airflow_provider_s3ch.local.live.Tracker`): key
``<prefix>f-NNNNNN.csv``, rows ``file,id,v`` with the file's number in ``file`` (the marker the target is polled for),
100 rows by default. A file is "loaded once" when the target holds exactly its rows, ">1" when more (a duplicate),
"partial" when fewer, "0" when none. :mod:`bench.s3queue_peer` runs them and writes the report.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from clickhouse_driver.errors import Error as ClickHouseError

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.live import STRUCTURE

BUCKET = "s3ch-s3queue-peer"
#: ClickHouse 26.9's S3Queue polling defaults (``system.s3_queue_settings``) and the tuned values.
POLLING = {
    "defaults": {"polling_min_timeout_ms": 1000, "polling_max_timeout_ms": 600000, "polling_backoff_ms": 30000},
    "tuned": {"polling_min_timeout_ms": 100, "polling_max_timeout_ms": 1000, "polling_backoff_ms": 100},
}
Say = Callable[[str], None]
_DOWN = (ClickHouseError, OSError, EOFError)


#: The node's system logs S3Queue and the parts counts read: a ``config.d`` file beside the stack's ``config.xml``.
LOGS_XML = """<clickhouse>
    <s3queue_log><database>system</database><table>s3queue_log</table>
        <flush_interval_milliseconds>500</flush_interval_milliseconds></s3queue_log>
    <part_log><database>system</database><table>part_log</table>
        <flush_interval_milliseconds>500</flush_interval_milliseconds></part_log>
</clickhouse>
"""


def enable_logs(stack: LocalStack) -> None:
    """Give node 0 ``system.s3queue_log`` and ``system.part_log`` (a ``config.d`` file, then a clean restart)."""
    folder = stack.nodes[0].workdir / "config.d"
    folder.mkdir(exist_ok=True)
    (folder / "s3queue_peer_logs.xml").write_text(LOGS_XML)
    stack.restart_node(0, kill=False)


def percentile(values: Iterable[float], p: float) -> float | None:
    """The ``p``-th percentile (nearest rank), as the provider's benchmark computes it; None without values."""
    ordered = sorted(values)
    if not ordered:
        return None
    return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 2)


def body(n: int, rows: int, tag: str = "v") -> bytes:
    """File ``n``'s CSV bytes: ``rows`` rows ``n,n*1e6+i,<tag>i`` (the provider's benchmark's shape, ``tag='v'``)."""
    return "".join(f"{n},{n * 1_000_000 + i},{tag}{i}\n" for i in range(rows)).encode()


def classify(count: int, rows: int) -> str:
    """How often a file of ``rows`` rows is in the target, from its row count there: 0, 1, >1 or partial."""
    if count == 0:
        return "0"
    if count == rows:
        return "1"
    return ">1" if count > rows else "partial"


@dataclass
class Queue:
    """One S3Queue table, its materialized view and its MergeTree target on node 0 of ``stack``."""

    stack: LocalStack
    name: str
    mode: str = "unordered"
    polling: str = "tuned"
    rows: int = 100  #: rows per file
    endpoint: str | None = None  #: the S3 endpoint ClickHouse reads (default: the stack's)
    glob: str = "*.csv"
    prefix: str = ""
    bucket: str = BUCKET
    settings: dict[str, Any] = field(default_factory=dict)
    put_at: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefix = self.prefix or f"{self.name}/"
        self.s3 = self.stack.s3_client()

    @property
    def target(self) -> str:
        return f"default.t_{self.name}"

    def ch(self) -> Any:
        return self.stack.clickhouse_client()

    def create(self) -> Queue:
        url = f"{self.endpoint or self.stack.s3_endpoint}/{self.bucket}/{self.prefix}{self.glob}"
        settings = {"mode": self.mode, "keeper_path": f"/s3ch/peer/{self.name}",
                    **{f"s3queue_{k}": v for k, v in POLLING[self.polling].items()}, **self.settings}  # fmt: skip
        clause = ", ".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in settings.items())
        ch = self.ch()
        ch.execute(
            f"CREATE TABLE default.q_{self.name} ({STRUCTURE}) ENGINE = S3Queue('{url}', "
            f"'{self.stack.s3_access_key}', '{self.stack.s3_secret_key}', 'CSV') SETTINGS {clause}"
        )
        ch.execute(f"CREATE TABLE {self.target} ({STRUCTURE}, path String, at DateTime64(3) DEFAULT now64(3)) "
                   "ENGINE = MergeTree ORDER BY (file, id)")  # fmt: skip
        ch.execute(f"CREATE MATERIALIZED VIEW default.mv_{self.name} TO {self.target} "
                   f"AS SELECT file, id, v, _path AS path FROM default.q_{self.name}")  # fmt: skip
        return self

    def drop(self) -> None:
        """Drop the view and the queue (which stops its polling); the target stays for the report's reads."""
        ch = self.ch()
        for sql in (f"DROP VIEW IF EXISTS default.mv_{self.name}", f"DROP TABLE IF EXISTS default.q_{self.name} SYNC"):
            with contextlib.suppress(*_DOWN):
                ch.execute(sql)

    def key(self, n: int) -> str:
        return f"{self.prefix}f-{n:06d}.csv"

    def put(self, n: int, data: bytes | None = None) -> None:
        """Put file ``n``; its clock starts when ``put_object`` returns."""
        self.s3.put_object(Bucket=self.bucket, Key=self.key(n), Body=body(n, self.rows) if data is None else data)
        self.put_at[n] = time.monotonic()

    def counts(self, ch: Any | None = None) -> dict[int, int] | None:
        """Rows in the target by file; None while the node does not answer."""
        try:
            rows = (ch or self.ch()).execute(f"SELECT file, count() FROM {self.target} GROUP BY file")
        except _DOWN:
            return None
        return {int(f): int(c) for f, c in rows}

    def wait(self, files: Iterable[int], timeout: float, poll: float = 0.2) -> dict[int, float]:
        """Poll until each of ``files`` has all its rows (or ``timeout``): file -> when it first had them."""
        want, seen, ch = set(files), {}, self.ch()
        deadline = time.monotonic() + timeout
        while want - seen.keys() and time.monotonic() < deadline:
            now = time.monotonic()
            for n, c in (self.counts(ch) or {}).items():
                if n in want and n not in seen and c >= self.rows:
                    seen[n] = now
            time.sleep(poll)
        return seen

    def outcome(self, files: Iterable[int]) -> dict[str, Any]:
        """Each file's times in the target (0, 1, >1, partial) and the lists of lost and duplicated ones."""
        counts = self.counts() or {}
        per = {n: classify(counts.get(n, 0), self.rows) for n in sorted(set(files))}
        return {"per_file": {str(n): c for n, c in per.items()},
                "once": sum(c == "1" for c in per.values()),
                "lost": [n for n, c in per.items() if c in ("0", "partial")],
                "duplicated": [n for n, c in per.items() if c == ">1"],
                "exactly_once": all(c == "1" for c in per.values())}  # fmt: skip

    def engine_states(self) -> dict[str, Any]:
        """What S3Queue itself says of its files: ``system.s3queue_metadata_cache`` by status, and the failed ones."""
        path = f"/s3ch/peer/{self.name}"
        try:
            ch = self.ch()
            states = dict(ch.execute("SELECT status, count() FROM system.s3queue_metadata_cache "
                                     "WHERE zookeeper_path = %(p)s GROUP BY status", {"p": path}))  # fmt: skip
            failed = ch.execute("SELECT file_path, exception FROM system.s3queue_metadata_cache "
                                "WHERE zookeeper_path = %(p)s AND status = 'Failed'", {"p": path})  # fmt: skip
            keeper = ch.execute("SELECT processed_nodes_count, processing_nodes_count, failed_nodes_count "
                                "FROM system.s3_queue_metadata WHERE zookeeper_path = %(p)s", {"p": path})  # fmt: skip
        except _DOWN as exc:
            return {"error": str(exc).splitlines()[0]}
        nodes = dict(zip(("processed", "processing", "failed"), keeper[0], strict=True)) if keeper else {}
        return {"statuses": states, "keeper_nodes": nodes,
                "failed": [{"file": f, "exception": e.splitlines()[0][:300]} for f, e in failed]}  # fmt: skip


def latency(stack: LocalStack, mode: str, polling: str, files: int, interval: float, *, rows: int = 100,
            drain: float = 120.0, say: Say = print) -> dict[str, Any]:  # fmt: skip
    """``files`` files put one every ``interval`` s; each one's put -> readable seconds (the target polled every
    0.2 s), as the provider's ``bench.continuous`` measures it."""
    q = Queue(stack, f"lat_{mode}_{polling}_{int(time.time())}", mode, polling, rows).create()
    ch, seen = q.ch(), {}
    start, n = time.monotonic(), 0
    last_put = start + (files - 1) * interval
    while True:
        now = time.monotonic()
        if n < files and now >= start + n * interval:
            n += 1
            q.put(n)
        for f, c in (q.counts(ch) or {}).items():
            if c >= rows and f in q.put_at and f not in seen:
                seen[f] = time.monotonic()
        if n == files and (len(seen) == files or now > last_put + drain):
            break
        time.sleep(0.2)
    lat = [seen[f] - q.put_at[f] for f in sorted(seen)]
    q.drop()
    out = q.outcome(q.put_at)
    say(f"latency {mode}/{polling}: {len(seen)}/{files} loaded, p50 {percentile(lat, 50)} s, "
        f"p95 {percentile(lat, 95)} s, max {max(lat, default=None)}")  # fmt: skip
    return {"mode": mode, "polling": polling, "settings": POLLING[polling], "files": files, "interval_s": interval,
            "rows_per_file": rows, "loaded": len(seen), "p50_s": percentile(lat, 50), "p95_s": percentile(lat, 95),
            "max_s": round(max(lat), 2) if lat else None, "latencies_s": [round(x, 3) for x in lat],
            "exactly_once": out["exactly_once"], "duplicated": out["duplicated"], "lost": out["lost"]}  # fmt: skip


def idle_gaps(stack: LocalStack, gaps: list[float], repeats: int, *, timeout: float = 700.0,
              say: Say = print) -> list[dict[str, Any]]:  # fmt: skip
    """One unordered queue per polling setting, side by side: a first file loaded, then for each gap: ``repeats``
    times the queues left idle ``gap`` s after the last load, one file put into each, its latency."""
    stamp = int(time.time())
    queues = {p: Queue(stack, f"gap_{p}_{stamp}", "unordered", p).create() for p in POLLING}
    n, out = 1, []
    for q in queues.values():
        q.put(n)
    for q in queues.values():
        q.wait([n], timeout)
    for gap in gaps:
        for r in range(repeats):
            time.sleep(gap)
            n += 1
            for q in queues.values():
                q.put(n)
            # both clocks run at once: each queue's file is polled for until both arrived
            pending = dict(queues)
            seen: dict[str, float] = {}
            deadline = time.monotonic() + timeout
            while pending and time.monotonic() < deadline:
                for p, q in list(pending.items()):
                    if (q.counts() or {}).get(n, 0) >= q.rows:
                        seen[p] = time.monotonic() - q.put_at[n]
                        del pending[p]
                time.sleep(0.2)
            for p in queues:
                value = round(seen[p], 2) if p in seen else None
                out.append({"polling": p, "idle_s": gap, "repeat": r + 1, "latency_s": value})
                say(f"idle {gap:g} s, {p}: {value} s")
    for q in queues.values():
        q.drop()
    return out


def hunt(q: Queue, seconds: float) -> tuple[int, int, int]:
    """Wait up to ``seconds`` for S3Queue to be processing a file (``system.s3queue_metadata_cache``) or for a file
    to be partly in the target: (files processing, files partly in the target, files put and not loaded)."""
    deadline = time.monotonic() + seconds
    while True:
        processing = q.engine_states().get("statuses", {}).get("Processing", 0)
        counts = q.counts() or {}
        partial = sum(1 for f in q.put_at if 0 < counts.get(f, 0) < q.rows)
        if processing or partial or time.monotonic() > deadline:
            return processing, partial, sum(1 for f in q.put_at if counts.get(f, 0) < q.rows)
        time.sleep(0.02)


def kills(stack: LocalStack, mode: str, files: int, interval: float, count: int, *, seed: int = 43, rows: int = 100,
          hunt_s: float = 3.0, drain: float = 180.0, say: Say = print) -> dict[str, Any]:  # fmt: skip
    """``files`` files put every ``interval`` s (tuned polling) while the node is SIGKILLed ``count`` times at
    seeded random points (each kill waits up to ``hunt_s`` s for S3Queue to be processing a file) and started again
    on its data; then each file's times in the target."""
    q = Queue(stack, f"kill_{mode}_{int(time.time())}", mode, "tuned", rows).create()
    rng = random.Random(seed)
    period = files * interval
    plan = sorted(rng.uniform(0.05 * period, 0.95 * period) for _ in range(count))
    log: list[dict[str, Any]] = []
    start, n = time.monotonic(), 0
    while n < files or plan:
        while n < files and time.monotonic() - start >= n * interval:
            n += 1
            q.put(n)
        now = time.monotonic() - start
        if plan and now >= plan[0]:
            plan.pop(0)
            processing, partial, in_flight = hunt(q, hunt_s)
            began = time.monotonic()
            stack.restart_node(0, kill=True)
            log.append({"at_s": round(time.monotonic() - start, 1), "files_put": n, "in_flight": in_flight,
                        "processing": processing, "partial_in_target": partial,
                        "restart_s": round(time.monotonic() - began, 1)})  # fmt: skip
            continue
        time.sleep(0.05)
    seen = q.wait(range(1, files + 1), drain)
    time.sleep(3)  # a duplicate that lands after the last first load
    out = q.outcome(q.put_at)
    states = q.engine_states()
    q.drop()
    say(f"kills {mode}: {len(log)} kills, {out['once']}/{files} once, lost {out['lost']}, dup {out['duplicated']}")
    return {"mode": mode, "polling": "tuned", "files": files, "interval_s": interval, "rows_per_file": rows,
            "kills": len(log), "seed": seed, "kill_log": log, "loaded_within_drain": len(seen),
            "drain_s": drain, "engine": states, **out}  # fmt: skip


def large_file_kill(stack: LocalStack, mode: str, rows: int, *, timeout: float = 120.0,
                    say: Say = print) -> dict[str, Any]:  # fmt: skip
    """One file of ``rows`` rows (more than one insert block) written by ClickHouse into S3, the node SIGKILLed
    as soon as the target holds part of it (polled every 0.02 s); then how many times it is there."""
    q = Queue(stack, f"big_{mode}_{int(time.time())}", mode, "tuned", rows).create()
    ch = q.ch()
    ch.execute(f"INSERT INTO FUNCTION s3('{stack.s3_endpoint}/{BUCKET}/{q.key(1)}', '{stack.s3_access_key}', "
               f"'{stack.s3_secret_key}', 'CSV', '{STRUCTURE}') "
               f"SELECT 1, 1000000 + number, concat('v', toString(number)) FROM numbers({rows})")  # fmt: skip
    q.put_at[1] = time.monotonic()
    size = q.s3.head_object(Bucket=BUCKET, Key=q.key(1))["ContentLength"]
    seen_rows, deadline, killed = 0, time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        seen_rows = (q.counts(ch) or {}).get(1, 0)
        if 0 < seen_rows < rows or seen_rows >= rows:
            break  # part of the file in the target: the kill lands mid-file
        time.sleep(0.02)
    if seen_rows < rows:
        stack.restart_node(0, kill=True)
        killed = {"rows_in_target_at_kill": seen_rows, "at_s": round(time.monotonic() - q.put_at[1], 2)}
    q.wait([1], timeout)
    time.sleep(3)
    final = (q.counts() or {}).get(1, 0)
    states = q.engine_states()
    q.drop()
    say(f"large file {mode}: {rows} rows, killed {killed}, target holds {final} ({final / rows:.2f}x)")
    return {"mode": mode, "rows": rows, "bytes": size, "killed": killed, "rows_in_target": final,
            "times_loaded": round(final / rows, 3), "outcome": classify(final, rows), "engine": states}  # fmt: skip


def out_of_order(stack: LocalStack, mode: str, *, wait: float = 10.0, say: Say = print) -> dict[str, Any]:
    """Files 20-59 loaded, then 1-8 (keys that sort before them) and 100 (after): which are loaded. S3Queue hashes
    keys into buckets (``processing_threads_num`` by default), each with its own last processed key: 40 files
    first give every bucket one."""
    q = Queue(stack, f"order_{mode}_{int(time.time())}", mode, "tuned").create()
    first, late, after = list(range(20, 60)), list(range(1, 9)), [100]
    for n in first:
        q.put(n)
    q.wait(first, 60)
    for n in late + after:
        q.put(n)
    q.wait(late + after, 60)
    time.sleep(wait)
    out = q.outcome(first + late + after)
    q.drop()
    skipped = [n for n in late if out["per_file"][str(n)] == "0"]
    say(f"out of order {mode}: late keys {late}, skipped {skipped}")
    return {"mode": mode, "first": first, "late_keys": late, "after": after, "skipped": skipped, **out}


def reupload(stack: LocalStack, mode: str, *, wait: float = 10.0, say: Say = print) -> dict[str, Any]:
    """Files 1-3 loaded, file 2 put again under the same key with new bytes, file 4 after it: what arrives."""
    q = Queue(stack, f"reup_{mode}_{int(time.time())}", mode, "tuned").create()
    for n in (1, 2, 3):
        q.put(n)
    q.wait([1, 2, 3], 60)
    q.put(2, body(2, q.rows, tag="r"))
    q.put(4)
    q.wait([4], 60)
    time.sleep(wait)
    ch = q.ch()
    new_rows = ch.execute(f"SELECT count() FROM {q.target} WHERE file = 2 AND startsWith(v, 'r')")[0][0]
    old_rows = ch.execute(f"SELECT count() FROM {q.target} WHERE file = 2 AND startsWith(v, 'v')")[0][0]
    out = q.outcome([1, 2, 3, 4])
    q.drop()
    verdict = "new bytes loaded" if new_rows else "new bytes ignored"
    say(f"re-upload {mode}: {verdict} (old rows {old_rows}, new rows {new_rows})")
    return {"mode": mode, "reuploaded": 2, "old_rows": old_rows, "new_rows": new_rows,
            "new_bytes_loaded": bool(new_rows), "verdict": verdict, **out}  # fmt: skip


def parse_error(stack: LocalStack, mode: str, *, timeout: float = 90.0, say: Say = print) -> dict[str, Any]:
    """Files 1-6 put at once, file 3 with a row whose ``id`` is not a number: what loads, what S3Queue says."""
    q = Queue(stack, f"bad_{mode}_{int(time.time())}", mode, "tuned").create()
    files = [1, 2, 3, 4, 5, 6]
    for n in files:
        data = body(n, q.rows)
        if n == 3:
            lines = data.decode().splitlines(keepends=True)
            lines[50] = "3,not-a-number,bad\n"
            data = "".join(lines).encode()
        q.put(n, data)
    began = q.put_at[6]
    q.wait([1, 2, 4, 5, 6], timeout)
    failed_at = None
    while time.monotonic() - began < timeout:
        if q.engine_states().get("failed"):
            failed_at = round(time.monotonic() - began, 1)
            break
        time.sleep(0.5)
    time.sleep(3)
    out = q.outcome(files)
    states = q.engine_states()
    logged = _queue_log(q)
    q.drop()
    say(f"parse error {mode}: failed {states.get('failed')}, lost {out['lost']}, dup {out['duplicated']}")
    return {"mode": mode, "bad_file": 3, "failed_after_s": failed_at, "engine": states, "s3queue_log": logged,
            "loading_retries": 10, **out}  # fmt: skip


def _queue_log(q: Queue) -> dict[str, Any] | None:
    """``system.s3queue_log`` of the queue's table, by status (None where the node has no such table)."""
    ch = q.ch()
    with contextlib.suppress(*_DOWN):
        ch.execute("SYSTEM FLUSH LOGS")
        if not ch.execute("EXISTS TABLE system.s3queue_log")[0][0]:
            return None
        rows = ch.execute("SELECT file_name, status, count(), any(exception) FROM system.s3queue_log "
                          "WHERE table = %(t)s GROUP BY file_name, status ORDER BY file_name",
                          {"t": f"q_{q.name}"})  # fmt: skip
        return {"rows": [{"file": f, "status": s, "entries": int(c), "exception": e.splitlines()[0][:200] if e else ""}
                         for f, s, c, e in rows]}  # fmt: skip
    return None

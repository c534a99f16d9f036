"""The provider's side of S3Queue's fault scenarios (:mod:`bench.s3queue_scenarios`), through the live stream.

One live run on the local stack with Airflow's own processes on the continuous example DAG
(``example_dags/example_continuous.py``: both watchers, the minute's safety net, the file ledger, ``on_bad_file=
"set_aside"``), as ``s3ch-local live`` runs it (:func:`airflow_provider_s3ch.local.live.run_live`). While ``--files``
small CSV files (100 rows) are put a second apart, the feed's hook puts, at set points:

- **a parse error**: a file whose row 51 has an ``id`` that is not a number (after 5 files);
- **a re-upload**: file 3, loaded by then, put again under its key with new bytes (after 10);
- **late keys**: 8 files whose keys sort before every key put so far (``e-…`` before ``f-…``; after 20);
- **a file larger than an insert block, the node killed mid-file**: 2.5 M rows (~51 MB, written by ClickHouse into
  S3), the ClickHouse node SIGKILLed and started again as soon as the provider's insert of it has read rows (after
  25).

Once each is settled, ``--idle`` gaps (5 s, 60 s) with nothing put, each followed by one file (its latency: the
S3Queue peer's idle-gap scenario), while the resident memory of the ClickHouse node and of each Airflow component is
sampled every 5 s. Then it reads the outcome file by file from the table (its ``file`` column), the
ledger and its table of files set aside, and what the runs told (their XComs' ``ledger`` entries). Writes ``--out``
(``bench/results/continuous_scenarios.json``) and prints a table.

    .venv/bin/python -m bench.continuous_scenarios            # 40 files, ~5 min on 2 cores
    .venv/bin/python -m bench.continuous_scenarios --big-rows 500000
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

import psutil

from airflow_provider_s3ch.compat import AIRFLOW_VERSION
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.airflow import Airflow
from airflow_provider_s3ch.local.live import DAG_ID, STRUCTURE, LiveOptions, LiveResult, Tracker, run_live, tally
from bench.s3queue_scenarios import body

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "continuous_scenarios.json"
ROWS = 100
BAD, BIG, LATE, IDLE = 900_001, 700_001, list(range(800_001, 800_009)), 600_001
REUPLOADED = 3


class Scenarios:
    """The feed's hook: puts each scenario's files at its point and follows them until they are settled."""

    #: After how many of the feed's files each scenario's files are put.
    AT: ClassVar[dict[str, int]] = {"bad": 5, "reupload": 10, "late": 20, "big": 25}

    def __init__(self, stack: LocalStack, options: LiveOptions, big_rows: int, say: Any,
                 at: dict[str, int] | None = None, idle: list[float] | None = None) -> None:
        self.stack, self.options, self.big_rows, self.say = stack, options, big_rows, say
        self.at = {**self.AT, **(at or {})}
        #: Once every scenario settled: for each gap, nothing put for that many seconds, then one file.
        self.idle, self.idle_latency = list(idle or []), {}
        self._idle_since: float | None = None
        #: The resident memory (MiB) of the ClickHouse node and of each Airflow component (its process tree),
        #: sampled every few seconds: the peak and the last sample.
        self.memory: dict[str, dict[str, float]] = {}
        self._sampled = 0.0
        #: The live run's Airflow (its metadata database holds what the runs told).
        self.airflow: Airflow | None = None
        self.s3, self.ch = stack.s3_client(), stack.clickhouse_client()
        self.put_at: dict[int, float] = {}
        self.seen_at: dict[int, float] = {}
        self.done: set[str] = set()
        self.kill: dict[str, Any] | None = None
        self.started = time.monotonic()

    def key(self, n: int, late: bool = False) -> str:
        return f"{self.options.prefix}{'e' if late else 'f'}-{n:06d}.csv"

    def _put(self, key: str, data: bytes, n: int) -> None:
        self.s3.put_object(Bucket=self.options.bucket, Key=key, Body=data)
        self.put_at[n] = time.monotonic()

    def __call__(self, airflow: Airflow, tracker: Tracker) -> bool:
        self.airflow = airflow
        put, at = len(tracker.put_at), self.at
        tracker.extra |= {BAD, BIG, *LATE, *range(IDLE, IDLE + len(self.idle))}
        if put >= at["bad"] and "bad" not in self.done:
            lines = body(BAD, ROWS).decode().splitlines(keepends=True)
            lines[50] = f"{BAD},not-a-number,bad\n"
            self._put(self.key(BAD), "".join(lines).encode(), BAD)
            self.done.add("bad")
            self.say(f"put {self.key(BAD)}: row 51 cannot be parsed")
        if put >= at["reupload"] and "reupload" not in self.done and REUPLOADED in tracker.seen_at:
            data = body(REUPLOADED, self.options.rows_per_file, tag="r")
            self.s3.put_object(Bucket=self.options.bucket, Key=tracker.key(REUPLOADED), Body=data)
            self.done.add("reupload")
            self.say(f"put {tracker.key(REUPLOADED)} again with new bytes")
        if put >= at["late"] and "late" not in self.done:
            for n in LATE:
                self._put(self.key(n, late=True), body(n, ROWS), n)
            self.done.add("late")
            self.say(f"put {len(LATE)} late keys, sorting before every key put so far")
        if put >= at["big"] and "big" not in self.done:
            self.ch.execute(
                f"INSERT INTO FUNCTION s3('{self.stack.s3_endpoint}/{self.options.bucket}/{self.key(BIG)}', "
                f"'{self.stack.s3_access_key}', '{self.stack.s3_secret_key}', 'CSV', '{STRUCTURE}') SELECT {BIG}, "
                f"{BIG * 1_000_000} + number, concat('v', toString(number)) FROM numbers({self.big_rows})")
            self.put_at[BIG] = time.monotonic()
            self.done.add("big")
            self._kill_mid_file(tracker)  # the feed waits meanwhile (a few seconds: the run's start and its read)
            self.say(f"put {self.key(BIG)}: {self.big_rows:,} rows; the node is killed once the insert reads it")
        self._look()
        self._sample(airflow)
        if not self._settled(tracker):
            return True
        return self._idle_gaps()

    def _idle_gaps(self) -> bool:
        """After the scenarios: each idle gap, then a file, until it is readable; False once all are done."""
        if len(self.idle_latency) == len(self.idle):
            return False
        n = IDLE + len(self.idle_latency)
        if n in self.put_at:
            if n in self.seen_at:
                gap = self.idle[len(self.idle_latency)]
                self.idle_latency[str(gap)] = round(self.seen_at[n] - self.put_at[n], 2)
                self.say(f"a file put after {gap:g} s idle: readable {self.idle_latency[str(gap)]} s after its put")
                self._idle_since = None
            return True
        if self._idle_since is None:
            self._idle_since = time.monotonic()
        if time.monotonic() - self._idle_since >= self.idle[len(self.idle_latency)]:
            self._put(self.key(n), body(n, self.options.rows_per_file), n)
        return True

    def _sample(self, airflow: Airflow) -> None:
        if time.monotonic() - self._sampled < 5:
            return
        self._sampled = time.monotonic()
        node = self.stack.nodes[0].process
        roots = {"clickhouse": node.pid if node is not None else None,
                 **{name: proc.pid for name, proc in airflow.procs.items()}}  # fmt: skip
        for name, pid in roots.items():
            try:
                root = psutil.Process(pid)
                mib = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
            except (psutil.Error, TypeError, ValueError):
                continue
            entry = self.memory.setdefault(name, {"peak_mib": 0.0, "last_mib": 0.0})
            entry["peak_mib"], entry["last_mib"] = round(max(entry["peak_mib"], mib), 1), round(mib, 1)

    def _kill_mid_file(self, tracker: Tracker, timeout: float = 120.0) -> None:
        """Every 10 ms: once the provider's insert of the large file has read rows, SIGKILL the node and start it
        again (``kill`` says when); ``{"missed": True}`` when the file loaded first."""
        ch, name = self.stack.clickhouse_client(), self.key(BIG).rsplit("/", 1)[-1]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                running = ch.execute("SELECT read_rows FROM system.processes WHERE startsWith(query_id, 's3ch-') AND "
                                     "query LIKE %(k)s", {"k": f"%{name}%"})  # fmt: skip
                if not running and ch.execute(f"SELECT count() FROM {self.options.table} WHERE file = {BIG}")[0][0]:
                    break  # loaded before the hunt saw its insert
            except Exception:  # noqa: BLE001 - the node restarting
                running = []
            if running and running[0][0] > 0:
                in_target = self._count(BIG)
                began = time.monotonic()
                self.stack.restart_node(0, kill=True)
                self.ch = self.stack.clickhouse_client()
                tracker.ch = self.stack.clickhouse_client()
                self.kill = {"insert_read_rows_at_kill": int(running[0][0]), "rows_in_target_at_kill": in_target,
                             "at_s_after_put": round(began - self.put_at[BIG], 2),
                             "restart_s": round(time.monotonic() - began, 1)}  # fmt: skip
                self.say(f"SIGKILLed the node mid-file: {self.kill}")
                return
            time.sleep(0.01)
        self.kill = {"missed": True}
        self.say("the large file loaded before its insert was seen reading: no kill")

    def _count(self, n: int) -> int:
        return int(self.ch.execute(f"SELECT count() FROM {self.options.table} WHERE file = {n}")[0][0])

    def _look(self) -> None:
        try:
            counts = dict(self.ch.execute(f"SELECT file, count() FROM {self.options.table} WHERE file IN %(f)s "
                                          "GROUP BY file", {"f": (*LATE, BIG, *range(IDLE, IDLE + 8))}))  # fmt: skip
        except Exception:  # noqa: BLE001 - the node restarting
            return
        for n in (*LATE, BIG, *range(IDLE, IDLE + len(self.idle))):
            if counts.get(n, 0) >= (self.big_rows if n == BIG else ROWS if n in LATE else self.options.rows_per_file) \
                    and n not in self.seen_at and n in self.put_at:
                self.seen_at[n] = time.monotonic()

    def set_aside(self) -> list[tuple[str, str]]:
        ledger = f"{self.options.table.split('.')[0]}._s3ch_ledger_set_aside"
        try:
            return [(str(k), str(e)) for k, e in self.ch.execute(
                f"SELECT key, error FROM {ledger} FINAL WHERE table = %(t)s", {"t": self.options.table})]
        except Exception:  # noqa: BLE001 - not made yet
            return []

    def _settled(self, tracker: Tracker) -> bool:
        return ({"bad", "reupload", "late", "big"} <= self.done and all(n in self.seen_at for n in (*LATE, BIG))
                and bool(self.set_aside()) and self.kill is not None)  # fmt: skip


def told(airflow: Airflow) -> dict[str, Any]:
    """What the DAG's runs told in their XComs' ``ledger`` entries: files set aside, changed files left out (read
    from its metadata database, once its processes stopped too)."""
    rows = airflow.db("SELECT value FROM xcom WHERE dag_id = ? AND key = 'return_value'", DAG_ID)
    set_aside, changed, runs = [], [], 0
    for (value,) in rows:
        try:
            x = json.loads(value) if isinstance(value, str | bytes) else value
        except ValueError:
            continue
        ledger = (x or {}).get("ledger") or {}
        runs += 1
        set_aside += [f["key"] for f in ledger.get("set_aside_files", [])]
        changed += ledger.get("skipped_changed_keys", [])
    return {"xcoms": runs, "set_aside_keys": sorted(set(set_aside)), "skipped_changed_keys": sorted(set(changed))}


def run(args: argparse.Namespace, say: Any = print) -> dict[str, Any]:
    """The live run with the scenarios (:class:`Scenarios`) on a fresh stack and Airflow, and its outcome."""
    options = LiveOptions(
        dag_file=ROOT / "example_dags" / "example_continuous.py", bucket="s3ch-scenarios", table="default.scenarios",
        files=args.files, interval=args.interval, rows_per_file=ROWS, drain_timeout=args.drain_timeout,
        queue="s3ch-scenarios")  # fmt: skip
    started = time.monotonic()
    with LocalStack(nodes=1, region="eu-west-3") as stack, tempfile.TemporaryDirectory(prefix="s3ch-sc-") as home:
        hook = Scenarios(stack, options, args.big_rows, say, idle=args.idle)
        result = run_live(stack, options, home=Path(home), say=say, faults=hook)
        out = outcome(stack, options, hook, result)
    return {"airflow": AIRFLOW_VERSION, "python": platform.python_version(), "interval_s": args.interval,
            "duration_s": round(time.monotonic() - started, 1), **out}  # fmt: skip


def outcome(stack: LocalStack, options: LiveOptions, hook: Scenarios, result: LiveResult) -> dict[str, Any]:
    """What the table, the ledger and the runs' XComs hold after a live run with :class:`Scenarios`, file by
    file; ``ok`` when every scenario ended as the provider means it to."""
    assert options.files is not None and hook.airflow is not None
    ch, rows = stack.clickhouse_client(), options.rows_per_file
    counts = {int(f): int(c) for f, c in ch.execute(f"SELECT file, count() FROM {options.table} GROUP BY file")}
    reup = dict(ch.execute(f"SELECT substring(v, 1, 1), count() FROM {options.table} WHERE file = {REUPLOADED} "
                           "GROUP BY 1"))  # fmt: skip
    aside, said = hook.set_aside(), told(hook.airflow)
    main = {n: c for n, c in counts.items() if n < IDLE}
    feed = range(1, options.files + 1)
    counted = tally(main, feed, feed, rows)
    bad_key, big_rows = hook.key(BAD), hook.big_rows
    out = {
        "files": options.files, "rows_per_file": rows,
        "main": {"files": options.files, "exactly_once": counted.exactly_once, "lost": counted.lost,
                 "doubled": counted.doubled, "not_loaded": counted.not_loaded_yet, "p50_s": result.summary()["p50_s"],
                 "runs": result.runs},
        "parse_error": {"key": bad_key, "rows_in_table": counts.get(BAD, 0),
                        "set_aside": [k for k, _ in aside] == [bad_key],
                        "error": next((e for k, e in aside if k == bad_key), None),
                        "told_in_xcom": bad_key in said["set_aside_keys"],
                        "others_once": counted.exactly_once and not counted.not_loaded_yet},
        "reupload": {"key": hook.key(REUPLOADED), "old_rows": reup.get("v", 0), "new_rows": reup.get("r", 0),
                     "told_in_xcom": hook.key(REUPLOADED) in said["skipped_changed_keys"]},
        "late_keys": {"keys": len(LATE), "loaded_once": sum(1 for n in LATE if counts.get(n) == ROWS),
                      "doubled": sum(1 for n in LATE if counts.get(n, 0) > ROWS),
                      "latency_s": [round(hook.seen_at[n] - hook.put_at[n], 2) for n in LATE if n in hook.seen_at]},
        "large_file": {"rows": big_rows, "killed": hook.kill, "rows_in_table": counts.get(BIG, 0),
                       "times_loaded": round(counts.get(BIG, 0) / big_rows, 3),
                       "latency_s": round(hook.seen_at[BIG] - hook.put_at[BIG], 1) if BIG in hook.seen_at else None},
        "idle": {"gaps_s": hook.idle, "latency_s": hook.idle_latency,
                 "each_once": all(counts.get(IDLE + i) == rows for i in range(len(hook.idle)))},
        "memory_mib": hook.memory,
        "told": said,
    }  # fmt: skip
    out["ok"] = bool(out["main"]["exactly_once"] and not out["main"]["not_loaded"]
                     and out["parse_error"]["set_aside"] and out["parse_error"]["rows_in_table"] == 0
                     and out["parse_error"]["told_in_xcom"]
                     and out["reupload"]["new_rows"] == 0 and out["reupload"]["old_rows"] == rows
                     and out["late_keys"]["loaded_once"] == len(LATE) and out["large_file"]["times_loaded"] == 1.0
                     and bool(out["large_file"]["killed"]) and "missed" not in out["large_file"]["killed"]
                     and out["idle"]["each_once"])  # fmt: skip
    return out


def table(r: dict[str, Any]) -> str:
    k = r["large_file"]["killed"] or {}
    lines = [
        f"main stream: {r['main']['files']} files, each once: {r['main']['exactly_once']}, not loaded "
        f"{r['main']['not_loaded']}",
        f"parse error: {r['parse_error']['key']} set aside: {r['parse_error']['set_aside']}, its rows in the table "
        f"{r['parse_error']['rows_in_table']}, told in an XCom: {r['parse_error']['told_in_xcom']}",
        f"re-upload: old rows {r['reupload']['old_rows']}, new rows {r['reupload']['new_rows']}, told in an XCom: "
        f"{r['reupload']['told_in_xcom']}",
        f"late keys: {r['late_keys']['loaded_once']}/{r['late_keys']['keys']} once, latency "
        f"{r['late_keys']['latency_s']}",
        f"large file: {r['large_file']['rows']:,} rows, killed with {k.get('insert_read_rows_at_kill')} read, "
        f"{k.get('rows_in_target_at_kill')} in the table; after: {r['large_file']['times_loaded']}x the file",
        f"ok: {r['ok']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--big-rows", type=int, default=2_500_000)
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--idle", type=lambda v: [float(g) for g in v.split(",") if g], default=[5.0, 60.0],
                   help="after the scenarios, idle gaps before one more file each (5,60)")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    r = run(args, say=lambda line: print(f"[scenarios] {line}", flush=True))
    r["command"] = " ".join(["python -m bench.continuous_scenarios", *(argv if argv is not None else sys.argv[1:])])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(r, indent=2, default=str) + "\n")
    print(table(r))
    return 0 if r["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The file ledger on the real local stack: incremental runs load every file exactly once.

Every check compares the target with one clean load of the files (``count()`` and
``sum(cityHash64(*))``, computed by ClickHouse from the same files) and reads the ledger's rows.
Files hold distinct rows (``file``, ``id``), so a file loaded twice or missed changes both figures.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from airflow.providers.common.compat.sdk import AirflowSkipException

from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.models import LoadRequest
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, QueryId
from airflow_provider_s3ch.errors import InvalidRequestError, PlanError, S3chError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import ROOT, fingerprint
from tests.integration.support import fake_context, query_log

pytestmark = pytest.mark.integration

BUCKET = "s3ch-ledger"
STRUCTURE = "file UInt16, id UInt32, v String"
ROWS = 300


@dataclass
class Files:
    """Files under one prefix of the bucket, and the target they load into."""

    stack: LocalStack
    prefix: str
    table: str
    rows: int = ROWS

    @property
    def uri(self) -> str:
        return f"s3://{BUCKET}/{self.prefix}*.csv"

    def key(self, n: int) -> str:
        return f"{self.prefix}f-{n:02d}.csv"

    def put(self, *numbers: int, version: int = 1, rows: int | None = None) -> None:
        s3 = self.stack.s3_client()
        for n in numbers:
            body = "".join(f"{n},{n * 100_000 + i},v{version}-{'x' * (i % 40)}\n" for i in range(rows or self.rows))
            s3.put_object(Bucket=BUCKET, Key=self.key(n), Body=body.encode())

    def clean(self) -> tuple[int, int]:
        """count() and sum(cityHash64(*)) of one plain load of every file under the prefix now."""
        ch = self.stack.clickhouse_client()
        name = f"default.clean_{uuid.uuid4().hex[:8]}"
        ch.execute(f"CREATE TABLE {name} ({STRUCTURE}) ENGINE = MergeTree ORDER BY id")
        ch.execute(
            f"INSERT INTO {name} SELECT * FROM s3('{self.stack.s3_endpoint}/{BUCKET}/{self.prefix}*.csv', "
            f"'{self.stack.s3_access_key}', '{self.stack.s3_secret_key}', 'CSV', '{STRUCTURE}')"
        )
        out = fingerprint(self.stack, name)
        ch.execute(f"DROP TABLE {name} SYNC")
        return out

    def operator(self, task_id: str = "load", **kwargs: Any) -> S3ToClickHouseOperator:
        kwargs.setdefault("s3_uri", self.uri)
        return S3ToClickHouseOperator(task_id=task_id, table=self.table, format="CSV", structure=STRUCTURE,
                                      skip_loaded=True, **kwargs)

    def run(self, task_id: str = "load", run_id: str | None = None, try_number: int = 1, **kwargs: Any) -> dict:
        return self.operator(task_id, **kwargs).execute(fake_context(task_id, try_number, run_id))

    def ledger(self, ledger: str = LEDGER_NAME) -> list[tuple[str, str, str, str]]:
        """(key, etag, state, query_id) of the target's ledger rows, latest versions, by key."""
        return [tuple(r) for r in self.stack.clickhouse_client().execute(
            f"SELECT key, etag, toString(state), query_id FROM default.{ledger} FINAL WHERE table = %(t)s "
            "ORDER BY key, etag, load_id", {"t": self.table})]

    def loaded_once(self) -> dict[str, int]:
        """How many loaded rows each file version has (one per load that loaded it)."""
        rows = self.stack.clickhouse_client().execute(
            f"SELECT key, etag, countIf(state = 'loaded') FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s "
            "GROUP BY key, etag ORDER BY key, etag", {"t": self.table})
        return {f"{k}@{e[:6]}": int(c) for k, e, c in rows}


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


def new_files(stack: LocalStack, partition_by: str = "file % 3") -> Files:
    tag = uuid.uuid4().hex[:8]
    table = f"default.led_{tag}"
    stack.clickhouse_client().execute(
        f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY {partition_by} ORDER BY id"
    )
    return Files(stack, f"led-{tag}/", table)


def staging_left(stack: LocalStack) -> list[str]:
    return [r[0] for r in stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE database = 'default' AND startsWith(name, %(p)s)", {"p": STAGING_PREFIX})]


# ---------------------------------------------------------------------- incremental runs


def test_three_runs_with_files_arriving_out_of_key_order_load_every_file_once(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(3, 7)
    first = f.run()
    assert first["ledger"]["new_keys"] == [f.key(3), f.key(7)] and first["written_rows"] == 2 * ROWS
    f.put(1, 5)  # earlier keys, later: no watermark would find them
    second = f.run()
    assert second["ledger"]["new_keys"] == [f.key(1), f.key(5)]
    assert second["ledger"]["skipped_loaded_keys"] == [f.key(3), f.key(7)]
    f.put(9, 0, 4)
    third = f.run()
    assert third["ledger"]["new_keys"] == [f.key(0), f.key(4), f.key(9)] and third["files"] == 3
    # The server read exactly the new files: its own record of each insert.
    for result, files in ((first, 2), (second, 2), (third, 3)):
        entry = query_log(stack, result["query_id"])
        assert entry["read_rows"] == entry["written_rows"] == files * ROWS
    assert fingerprint(stack, f.table) == f.clean()
    assert f.loaded_once() == {f"{f.key(n)}@{e[:6]}": 1 for n, e in _etags(f).items()}
    assert staging_left(stack) == []

    nothing = f.run()  # nothing new: a success with zero rows
    assert (nothing["query_id"], nothing["written_rows"], nothing["files"]) == (None, 0, 0)
    assert nothing["ledger"]["skipped_loaded"] == 7 and nothing["ledger"]["new"] == 0
    with pytest.raises(AirflowSkipException, match="no new file"):
        f.run(skip_when_empty=True)
    assert fingerprint(stack, f.table) == f.clean()


def _etags(f: Files) -> dict[int, str]:
    s3 = f.stack.s3_client()
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=f.prefix)["Contents"]
    return {int(o["Key"][-6:-4]): o["ETag"].strip('"') for o in listing}


def test_the_ledger_records_what_each_load_read(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(2)
    result = f.run()
    client = stack.clickhouse_client()
    (row,) = client.execute(
        f"SELECT key, etag, size, last_modified, chunk, query_id, toString(state), rows FROM default.{LEDGER_NAME} "
        "FINAL WHERE table = %(t)s", {"t": f.table})
    head = stack.s3_client().head_object(Bucket=BUCKET, Key=f.key(2))
    assert row[:3] == (f.key(2), head["ETag"].strip('"'), head["ContentLength"])
    assert abs(row[3].timestamp() - head["LastModified"].timestamp()) < 1
    assert row[4:] == (0, result["query_id"], "loaded", ROWS)  # one file: its rows are the load's


def test_the_listing_and_head_object_give_each_file_its_etag_and_last_modified(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 2)
    client = S3Source("aws_default").client()
    heads = {f.key(n): stack.s3_client().head_object(Bucket=BUCKET, Key=f.key(n)) for n in (1, 2)}
    for uri in (f.uri, f"s3://{BUCKET}/{f.prefix}f-{{01,02}}.csv"):  # listed, and read directly (HeadObject)
        manifest = build_manifest(client, LoadRequest(s3_uri=uri, table="t", format="CSV"))
        assert [(o.key, o.etag, o.last_modified) for o in manifest.objects] == [
            (k, h["ETag"].strip('"'), h["LastModified"]) for k, h in sorted(heads.items())]
        assert all(o.last_modified.utcoffset().total_seconds() == 0 for o in manifest.objects)


def test_keys_that_need_percent_encoding_are_read_by_name(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    names = ["a b.csv", "100%.csv", "x#1.csv", "ü.csv", "q=1&r.csv"]
    s3 = stack.s3_client()
    for i, name in enumerate(names[:2]):
        s3.put_object(Bucket=BUCKET, Key=f.prefix + name, Body=f"{i},{i},a\n{i},{i + 100},b\n".encode())
    first = f.run()
    for i, name in enumerate(names[2:], start=2):
        s3.put_object(Bucket=BUCKET, Key=f.prefix + name, Body=f"{i},{i},a\n{i},{i + 100},b\n".encode())
    second = f.run()
    assert sorted(second["ledger"]["new_keys"]) == sorted(f.prefix + n for n in names[2:])
    assert (first["written_rows"], second["written_rows"]) == (4, 6)
    assert query_log(stack, second["query_id"])["read_rows"] == 6
    assert fingerprint(stack, f.table) == f.clean()


def test_a_key_the_insert_cannot_name_fails_before_anything_is_claimed(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1)
    stack.s3_client().put_object(Bucket=BUCKET, Key=f.prefix + "a,b.csv", Body=b"1,1,x\n")
    with pytest.raises(InvalidRequestError, match="'a,b.csv'|a,b.csv"):
        f.run()
    assert f.ledger() == [] and fingerprint(stack, f.table)[0] == 0


def test_a_dry_run_reads_the_ledger_and_writes_nothing(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 2)
    f.run()
    f.put(3)
    result = f.run(dry_run=True)
    assert result["dry_run"] and result["ledger"]["new_keys"] == [f.key(3)]
    assert f.key(3) in result["sql"] and f.key(1) not in result["sql"]
    assert [r[0] for r in f.ledger()] == [f.key(1), f.key(2)]
    missing = f"ledger_{uuid.uuid4().hex[:6]}"  # a dry run does not create the ledger either
    assert f.run(dry_run=True, ledger_table=missing)["ledger"]["new"] == 3
    assert not stack.clickhouse_client().execute("EXISTS TABLE default." + missing)[0][0]


# ---------------------------------------------------------------------- changed files


def test_a_changed_file_is_reloaded_in_place_with_replace_partitions(stack: LocalStack, bucket: str) -> None:
    """Each file is its own partition: a reload replaces the old version's rows with the new version's."""
    f = new_files(stack, partition_by="file")
    f.put(1, 2)
    f.run(mode="replace_partitions", on_changed="reload")
    old_etag = _etags(f)[1]
    f.put(1, version=2, rows=ROWS + 17)  # rewritten: another ETag, other rows
    result = f.run(mode="replace_partitions", on_changed="reload")
    assert result["ledger"]["reloaded_keys"] == [f.key(1)] and result["ledger"]["new"] == 0
    assert result["ledger"]["skipped_loaded_keys"] == [f.key(2)]
    assert fingerprint(stack, f.table) == f.clean()  # the old version's rows are gone
    # the old version's row is released: one loaded row per key, the version in the target
    assert f.loaded_once() == {f"{f.key(1)}@{old_etag[:6]}": 0, f"{f.key(1)}@{_etags(f)[1][:6]}": 1,
                               f"{f.key(2)}@{_etags(f)[2][:6]}": 1}


def test_a_changed_file_is_skipped_or_fails_the_run(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1)
    f.run()
    before = fingerprint(stack, f.table)
    f.put(1, version=2)
    f.put(2)
    with pytest.raises(PlanError, match=f"changed since they were loaded.*{f.key(1)}"):
        f.run()  # on_changed='fail', the default: nothing is claimed, nothing loads
    assert fingerprint(stack, f.table) == before and [r[0] for r in f.ledger()] == [f.key(1)]
    result = f.run(on_changed="skip")
    assert result["ledger"]["skipped_changed_keys"] == [f.key(1)] and result["ledger"]["new_keys"] == [f.key(2)]
    assert fingerprint(stack, f.table)[0] == before[0] + ROWS
    again = f.run(on_changed="skip")  # a skipped change stays skipped
    assert again["ledger"]["skipped_changed"] == 1 and again["written_rows"] == 0


def test_arguments_the_ledger_cannot_honour_are_refused_before_anything_runs(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1)
    name = f"ledger_{uuid.uuid4().hex[:6]}"
    with pytest.raises(InvalidRequestError, match="old rows would stay"):
        f.run(on_changed="reload", ledger_table=name)  # mode='append'
    with pytest.raises(InvalidRequestError, match="overwrite"):
        f.run(mode="overwrite", ledger_table=name)
    assert not stack.clickhouse_client().execute("EXISTS TABLE default." + name)[0][0]
    assert fingerprint(stack, f.table)[0] == 0


def test_a_target_without_a_staging_table_is_refused_and_its_claims_given_back(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 2)
    ch = stack.clickhouse_client()
    # a view into a Memory table cannot be staged (no partitions to move): the target takes a direct insert
    ch.execute(f"CREATE TABLE {f.table}_copy ({STRUCTURE}) ENGINE = Memory")
    ch.execute(f"CREATE MATERIALIZED VIEW {f.table}_mv TO {f.table}_copy AS SELECT * FROM {f.table}")
    with pytest.raises(PlanError, match=r"needs a staging table.*which is Memory"):
        f.run()
    assert {r[2] for r in f.ledger()} == {"released"} and fingerprint(stack, f.table)[0] == 0


# ---------------------------------------------------------------------- failures and stale claims


def test_a_failed_load_gives_its_claims_back_and_the_next_run_loads_the_files(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 2)
    stack.s3_client().put_object(Bucket=BUCKET, Key=f.key(3), Body=b"3,1,ok\nnot a number,2,bad\n")
    with pytest.raises(S3chError):
        f.run()
    assert {r[2] for r in f.ledger()} == {"released"} and fingerprint(stack, f.table)[0] == 0
    assert staging_left(stack) == []
    f.put(3)  # fixed
    result = f.run()
    assert result["ledger"]["new"] == 3 and fingerprint(stack, f.table) == f.clean()


def test_a_stale_claim_of_a_dead_load_is_taken_over(stack: LocalStack, bucket: str) -> None:
    """A load that claimed files and died before its insert (no query, no staging table) holds them for
    claim_timeout; after it, another run loads them, and the dead load's retry claims afresh and finds them taken."""
    f = new_files(stack)
    f.put(1, 2)
    dead, manifest = _ledger_run(f, "dead", f.uri)
    dead.create()
    dead.write(manifest.objects, "claimed", query_id=str(dead.query_id))
    held = f.run("other")
    assert held["ledger"]["skipped_claimed"] == 2 and held["written_rows"] == 0
    time.sleep(1.5)  # the claims' age, measured by the server, passes the timeout below
    taken = f.run("other", claim_timeout=1.0)
    assert taken["ledger"]["new"] == 2 and fingerprint(stack, f.table) == f.clean()
    retry = LedgerRun(dead.hook, dead.request, QueryId(stem=dead.own, try_number=2), claim_timeout=1.0)
    assert retry.prepare(manifest, "unused") == [] and retry.summary()["skipped_loaded"] == 2
    assert fingerprint(stack, f.table) == f.clean()
    dead.hook.close()


# ---------------------------------------------------------------------- two loads at once


def _ledger_run(f: Files, task_id: str, s3_uri: str) -> tuple[LedgerRun, Any]:
    request = LoadRequest(s3_uri=s3_uri, table=f.table, format="CSV", structure=STRUCTURE, skip_loaded=True)
    run = LedgerRun(ClickHouseHook("clickhouse_native_default"), request,
                    QueryId.for_task("it", task_id, "r", -1, 1, task_id))
    return run, build_manifest(S3Source("aws_default").client(), request)


def test_claims_written_at_the_same_time_go_to_the_earlier_one(stack: LocalStack, bucket: str) -> None:
    """Both loads write their claims before either reads them back: the earlier commit keeps the overlap."""
    f = new_files(stack)
    f.put(*range(6))
    a, a_files = _ledger_run(f, "a", f.uri)
    b, b_files = _ledger_run(f, "b", f"s3://{BUCKET}/{f.prefix}f-0{{2,3,4,5}}.csv")
    a.create()
    a.write(a_files.objects, "claimed", query_id=str(a.query_id))
    b.write(b_files.objects, "claimed", query_id=str(b.query_id))
    from airflow_provider_s3ch.core.ledger import confirm

    def decide(run: LedgerRun, objects: list) -> tuple[list[str], list[str]]:
        rows = run.read(o.key for o in objects)
        kept, lost = confirm(objects, rows, run.facts(rows), own=run.own)
        return [o.key for o in kept], [o.key for o in lost]

    for _ in range(2):  # and the same again: the decision is stable
        assert decide(b, b_files.objects) == ([], [f.key(n) for n in (2, 3, 4, 5)])
        assert decide(a, a_files.objects) == ([f.key(n) for n in range(6)], [])
    # A load that lists after both claims sees the files held.
    c, c_files = _ledger_run(f, "c", f.uri)
    assert c.prepare(c_files, "http://x/" + BUCKET + "/" + f.prefix + "*.csv") == []
    assert c.summary()["skipped_claimed"] == 6
    a.hook.close(), b.hook.close(), c.hook.close()


def test_two_runs_at_once_over_overlapping_globs_load_each_file_once(stack: LocalStack, bucket: str) -> None:
    """Three rounds: 12 new files each, then two runs started together (different task ids), one over every
    file, one over the even-numbered ones; their inserts are slowed so that they overlap."""
    f = new_files(stack)
    slow = {"max_remote_read_network_bandwidth": 3_000_000, "max_threads": 1, "max_insert_threads": 1}
    splits = []
    for round_ in range(3):
        numbers = range(round_ * 12, round_ * 12 + 12)
        f.put(*numbers, rows=4000)
        start = threading.Barrier(2)
        results: dict[str, Any] = {}

        def load(task_id: str, uri: str, results: dict[str, Any] = results, start: threading.Barrier = start) -> None:
            op = f.operator(task_id, s3_uri=uri, settings=slow)
            start.wait()
            try:
                results[task_id] = op.execute(fake_context(task_id))
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                results[task_id] = exc

        threads = [threading.Thread(target=load, args=("a", f.uri)),
                   threading.Thread(target=load, args=("b", f"s3://{BUCKET}/{f.prefix}f-*{{0,2,4,6,8}}.csv"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        a, b = results["a"], results["b"]
        assert isinstance(a, dict) and isinstance(b, dict), results
        new_a, new_b = set(a["ledger"]["new_keys"]), set(b["ledger"]["new_keys"])
        assert not new_a & new_b and new_a | new_b == {f.key(n) for n in numbers}
        assert a["written_rows"] + b["written_rows"] == 12 * 4000
        assert fingerprint(stack, f.table) == f.clean()
        splits.append(f"a {len(new_a)} new/{a['ledger']['skipped_claimed']} held, "
                      f"b {len(new_b)} new/{b['ledger']['skipped_claimed']} held")
    assert set(f.loaded_once().values()) == {1} and len(f.loaded_once()) == 36
    print("\nconcurrent runs, per round: " + "; ".join(splits))
    assert f.run()["written_rows"] == 0


# ---------------------------------------------------------------------- a worker killed at the boundaries

KILLER = """
import json, os, signal, sys, types
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

args = json.loads(sys.argv[1])
boundary = args.pop("kill_at")

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

if boundary == "after_moves":  # the staging table is dropped; 'loaded' is never written
    LedgerRun.loaded = die
elif boundary == "before_pending":  # the insert finished into the staging table; the files are still 'claimed'
    LedgerRun.pending = die
elif boundary in ("before_moves", "before_moves_cleared"):  # 'pending' is written; no partition moved
    pending = LedgerRun.pending
    LedgerRun.pending = lambda self, *a: (pending(self, *a), die())
elif boundary == "mid_moves":  # one partition moved, the others still in the staging table
    execute = ClickHouseHook.execute
    def execute_then_die(self, sql, *a, **k):
        if "MOVE PARTITION" in sql:  # the moves' one ALTER applied up to its first command (they apply in order)
            execute(self, sql.split(", MOVE PARTITION")[0], *a, **k)
            die()
        return execute(self, sql, *a, **k)
    ClickHouseHook.execute = execute_then_die
ti = types.SimpleNamespace(dag_id="it", task_id=args.pop("task_id"), run_id=args.pop("run_id"), map_index=-1,
                           try_number=1, xcom_push=lambda key, value: None)
S3ToClickHouseOperator(task_id=ti.task_id, **args).execute({"ti": ti})
"""


def _killed_worker(f: Files, run_id: str, kill_at: str) -> None:
    env = {**os.environ, **f.stack.airflow_env()}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    payload = json.dumps({"task_id": "load", "run_id": run_id, "kill_at": kill_at, "s3_uri": f.uri, "table": f.table,
                          "format": "CSV", "structure": STRUCTURE, "skip_loaded": True})
    proc = subprocess.run([sys.executable, "-c", KILLER, payload], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize(
    "kill_at", ["before_pending", "before_moves", "mid_moves", "after_moves", "before_moves_cleared"]
)
def test_a_worker_killed_around_the_partition_moves_is_completed_by_its_retry(
    stack: LocalStack, bucket: str, kill_at: str
) -> None:
    """A real SIGKILL of the worker at each boundary; then another run, then the retry. ``before_moves_cleared``:
    the task instance is cleared instead of retried, so the query log's earlier try does not count, and the
    ledger's pending rows make the new try finish the insert rather than load it afresh."""
    f = new_files(stack)
    f.put(*range(6))  # three partitions (file % 3)
    expected = f.clean()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    _killed_worker(f, run_id, kill_at)
    stem = QueryId.parse(str(f.operator().query_id(fake_context("load", 1, run_id)))).stem
    staging = f"{STAGING_PREFIX}{stem}"
    # 'pending' is written before the first move, in every case
    assert {r[2] for r in f.ledger()} == {"claimed" if kill_at == "before_pending" else "pending"}
    assert (staging in staging_left(stack)) == (kill_at != "after_moves")
    landed = fingerprint(stack, f.table)[0]
    assert landed == {"mid_moves": landed, "after_moves": 6 * ROWS}.get(kill_at, 0)
    assert kill_at != "mid_moves" or 0 < landed < 6 * ROWS

    if kill_at == "after_moves":
        retry = f.run(run_id=run_id, try_number=2)  # the staging table is gone: the moves were done
        assert retry["written_rows"] == 0 and retry["ledger"]["recovered"] == 6
        other = f.run("other")
        assert other["ledger"]["skipped_loaded"] == 6 and other["written_rows"] == 0
    else:
        other = f.run("other")  # another run meanwhile: the files are the killed load's, not new
        assert other["ledger"]["skipped_claimed"] == 6 and other["written_rows"] == 0
        assert fingerprint(stack, f.table)[0] == landed
        if kill_at == "before_moves_cleared":  # max_tries - retries + 1 = 2: try 1 belongs to an earlier series
            ctx = fake_context("load", 2, run_id)
            ctx["ti"].max_tries = 1
            retry = f.operator(retries=0).execute(ctx)
            assert "belong to a cleared run" in retry["resume_reason"]  # the query log alone would load afresh
        else:
            retry = f.run(run_id=run_id, try_number=2)  # attaches to the finished insert and moves the rest
        assert retry["attached_to"] == f"s3ch-{stem}-try1" and retry["written_rows"] == 6 * ROWS
    assert fingerprint(stack, f.table) == expected
    assert set(f.loaded_once().values()) == {1} and len(f.loaded_once()) == 6
    assert staging not in staging_left(stack)
    assert f.run("next")["written_rows"] == 0
    print(f"\nkilled {kill_at}: {landed} rows had landed; completed without a duplicate "
          f"({time.monotonic() - started:.1f} s)")


# ---------------------------------------------------------------------- many keys


def test_a_key_list_longer_than_the_default_query_size_is_read(stack: LocalStack, bucket: str) -> None:
    """800 new files with 430-character names beside 400 loaded ones: one key list of ~340 KB, a
    statement over ClickHouse's default max_query_size (256 KiB) with the URL's encoding; the protocol's
    max_query_size holds it."""
    f = new_files(stack)
    f.prefix += "d" * 400 + "/"
    s3 = stack.s3_client()

    def put(numbers: range) -> None:
        for i in numbers:
            s3.put_object(Bucket=BUCKET, Key=f"{f.prefix}f-{i:05d}.csv", Body=f"{i % 7},{i},x\n".encode())

    put(range(400))
    assert f.run()["written_rows"] == 400
    put(range(400, 1200))
    statement = len(f.run(dry_run=True)["sql"].encode())  # the redacted statement is as long, within the keys
    started = time.monotonic()
    result = f.run()
    wall = time.monotonic() - started
    assert result["ledger"]["new"] == 800 and result["ledger"]["skipped_loaded"] == 400
    assert statement > 262_144
    entry = query_log(stack, result["query_id"])
    assert entry["read_rows"] == entry["written_rows"] == 800
    assert fingerprint(stack, f.table) == f.clean()
    print(f"\n800 new files of 1200 in one key list: statement {statement} bytes, run {wall:.1f} s")


# ---------------------------------------------------------------------- the example DAG through Airflow


def test_the_example_dag_loads_the_new_files_on_each_run(tmp_path, stack: LocalStack, bucket: str) -> None:
    from airflow_provider_s3ch.local.cli import read_xcom
    from airflow_provider_s3ch.local.sample import write_posts

    tag = uuid.uuid4().hex[:8]
    prefix, table = f"inc-dag-{tag}/", f"default.posts_inc_{tag}"
    s3 = stack.s3_client()
    write_posts(s3, BUCKET, rows=6_000, months=2, prefix=prefix)
    home = tmp_path / "airflow"
    home.mkdir()
    env = {**os.environ, **stack.airflow_env(), "AIRFLOW_HOME": str(home),
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "example_dags"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}

    def airflow(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "airflow", *args], env=env, capture_output=True, text=True,
                             timeout=600, check=False)
        assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
        return out.stdout + out.stderr

    airflow("db", "migrate")
    airflow("dags", "reserialize")
    conf = json.dumps({"s3_uri": f"s3://{BUCKET}/{prefix}*.parquet", "table": table})
    assert "state=success" in airflow("dags", "test", "s3_to_clickhouse_incremental", "-c", conf)
    first = read_xcom(home, "s3_to_clickhouse_incremental", "load_new_files")
    assert first["ledger"]["new"] == 2 and first["written_rows"] == 6_000
    write_posts(s3, BUCKET, rows=9_000, months=3, start=(2009, 1), prefix=prefix)  # three more months
    assert "state=success" in airflow("dags", "test", "s3_to_clickhouse_incremental", "-c", conf)
    second = read_xcom(home, "s3_to_clickhouse_incremental", "load_new_files")
    assert (second["ledger"]["new"], second["ledger"]["skipped_loaded"], second["written_rows"]) == (3, 2, 9_000)
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE {table}_clean AS {table}")
    ch.execute(f"INSERT INTO {table}_clean SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{prefix}*.parquet', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')")
    assert fingerprint(stack, table) == fingerprint(stack, f"{table}_clean")

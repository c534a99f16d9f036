"""Chunked loads on the real local stack: ``max_files_per_load`` / ``max_bytes_per_load`` split a load into
consecutive inserts, each through its own staging table and committed with its ledger rows; a load killed
anywhere resumes at its first chunk that is not committed, and every row lands exactly once.

Every check compares the target with one clean load of the files (``count()`` and ``sum(cityHash64(*))``
computed by ClickHouse from the same files) and reads the ledger's rows.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest

from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.ledger_rows import unit_id
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, QueryId
from airflow_provider_s3ch.errors import InvalidRequestError, S3chError
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import ROOT, fingerprint
from tests.integration.test_ledger import BUCKET, ROWS, STRUCTURE, Files, bucket, new_files, staging_left

pytestmark = pytest.mark.integration

__all__ = ["bucket"]  # the bucket fixture, shared with the ledger's other tests


def per_file(f: Files) -> dict[int, int]:
    """Rows in the target per file: a file loaded twice has 2 × ROWS."""
    return dict(f.stack.clickhouse_client().execute(f"SELECT file, count() FROM {f.table} GROUP BY file"))


def chunk_rows(f: Files) -> list[tuple[str, int, str]]:
    """(key, chunk, state) of the target's ledger rows, latest versions."""
    return [tuple(r) for r in f.stack.clickhouse_client().execute(
        f"SELECT key, chunk, toString(state) FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s ORDER BY key",
        {"t": f.table})]  # fmt: skip


def test_a_chunked_load_commits_each_chunk_with_its_ledger_rows(stack: LocalStack, bucket: str, capfd) -> None:
    f = new_files(stack)
    f.put(*range(12))
    expected = f.clean()
    capfd.readouterr()
    out = f.run(max_files_per_load=5)
    logged = "".join(capfd.readouterr())
    assert fingerprint(stack, f.table) == expected
    assert [(c["chunk"], c["files"], c["written_rows"]) for c in out["chunks"]] == [
        (1, 5, 5 * ROWS), (2, 5, 5 * ROWS), (3, 2, 2 * ROWS)]
    assert out["written_rows"] == 12 * ROWS and out["files"] == 12 and out["ledger"]["chunks"] == 3
    stem = QueryId.parse(out["chunks"][0]["query_id"]).stem
    assert [QueryId.parse(c["query_id"]).stem for c in out["chunks"]] == [unit_id(stem[:20], n) for n in (1, 2, 3)]
    assert [c for _, c, _ in chunk_rows(f)] == [1] * 5 + [2] * 5 + [3] * 2
    assert {s for *_, s in chunk_rows(f)} == {"loaded"}
    assert "Chunk 1/3: 5 files" in logged and "Chunk 3/3: 2 files" in logged and "over 3 chunks" in logged
    assert not [t for t in staging_left(stack) if t.startswith(STAGING_PREFIX + stem[:20])]
    # The next run: nothing new; then two new files make one chunk.
    assert f.run(max_files_per_load=5)["written_rows"] == 0
    f.put(12, 13)
    again = f.run(max_files_per_load=5, run_id="next")
    assert again["written_rows"] == 2 * ROWS and len(again["chunks"]) == 1 and fingerprint(stack, f.table) == f.clean()


def test_max_bytes_per_load_bounds_each_chunk(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(*range(6))
    size = stack.s3_client().head_object(Bucket=BUCKET, Key=f.key(0))["ContentLength"]
    out = f.run(max_bytes_per_load=str(2 * size + size // 2))  # two files fit, not three
    assert [c["files"] for c in out["chunks"]] == [2, 2, 2] and all(c["bytes"] <= 2.5 * size for c in out["chunks"])
    assert fingerprint(stack, f.table) == f.clean()


def test_chunk_arguments_the_ledger_cannot_honour_are_refused(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1)
    with pytest.raises(InvalidRequestError, match="need skip_loaded=True"):
        S3ToClickHouseOperator(task_id="t", s3_uri=f.uri, table=f.table, format="CSV", structure=STRUCTURE,
                               max_files_per_load=5).build_request()
    with pytest.raises(InvalidRequestError, match="later chunk would replace"):
        f.operator(mode="replace_partitions", max_files_per_load=5).build_request()
    with pytest.raises(InvalidRequestError, match="max_files_per_load=0"):
        f.operator(max_files_per_load=0).build_request()
    with pytest.raises(InvalidRequestError, match="max_bytes_per_load"):
        f.operator(max_bytes_per_load="lots").build_request()
    assert per_file(f) == {}


def test_a_failed_chunk_keeps_the_committed_ones_and_the_retry_loads_the_rest(stack: LocalStack, bucket: str,
                                                                              monkeypatch) -> None:
    """Chunk 3's file disappears from S3 after the chunk looked its files up, just before its insert (the real
    S3's 404): chunks 1 and 2 stay committed, the claims of chunks 3 to 5 are given back, and the retry, with the
    file back, claims them again and loads them, chunk 3 first. (Deleted before the look, the file is left out:
    test_run_from_events.)"""
    f = new_files(stack)
    f.put(*range(10))
    expected = f.clean()
    s3 = stack.s3_client()
    body = s3.get_object(Bucket=BUCKET, Key=f.key(4))["Body"].read()
    begin = LedgerRun.begin

    def begin_losing_chunk_3(self: LedgerRun, chunk: Any) -> Any:
        begun = begin(self, chunk)
        if chunk.number == 3:
            s3.delete_object(Bucket=BUCKET, Key=f.key(4))
        return begun

    monkeypatch.setattr(LedgerRun, "begin", begin_losing_chunk_3)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    with pytest.raises(S3chError, match="deleted from S3 after the run looked at it"):
        f.run(run_id=run_id, max_files_per_load=2)
    assert sorted(per_file(f)) == [0, 1, 2, 3] and set(per_file(f).values()) == {ROWS}
    states = {k: s for k, _, s in chunk_rows(f)}
    assert [states[f.key(n)] for n in range(10)] == ["loaded"] * 4 + ["released"] * 6
    monkeypatch.setattr(LedgerRun, "begin", begin)
    s3.put_object(Bucket=BUCKET, Key=f.key(4), Body=body)  # the same bytes: the same ETag
    retry = f.run(run_id=run_id, try_number=2, max_files_per_load=2)
    assert [c["chunk"] for c in retry["chunks"]] == [3, 4, 5] and retry["written_rows"] == 6 * ROWS
    assert fingerprint(stack, f.table) == expected and set(f.loaded_once().values()) == {1}


# ---------------------------------------------------------------------- killed at random points, retried

KILLER = """
import json, os, signal, sys, types
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

args = json.loads(sys.argv[1])
boundary, at_chunk = args.pop("kill_at"), args.pop("kill_chunk")
current = {"chunk": None}

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

begin = LedgerRun.begin
def begin_and_note(self, chunk):
    current["chunk"] = chunk.number
    return begin(self, chunk)
LedgerRun.begin = begin_and_note

def here():
    return current["chunk"] == at_chunk

def wrap(name, before):
    original = getattr(LedgerRun, name)
    def wrapped(self, metrics, chunk, *rest):
        if here() and before:
            die()
        out = original(self, metrics, chunk, *rest)
        if here() and not before:
            die()
        return out
    setattr(LedgerRun, name, wrapped)

if boundary == "before_pending":  # the chunk's insert finished into its staging table; rows still 'claimed'
    wrap("pending", True)
elif boundary == "before_moves":  # 'pending' is written; no partition moved
    wrap("pending", False)
elif boundary == "between_move_and_ledger":  # every partition moved, staging dropped; 'loaded' not written
    wrap("loaded", True)
elif boundary == "after_ledger":  # the chunk is committed and recorded; the next chunk not begun
    wrap("loaded", False)
elif boundary in ("mid_moves", "before_insert"):
    execute, insert = ClickHouseHook.execute, ClickHouseHook.run_insert
    def execute_then_die(self, sql, *a, **k):
        if here() and "MOVE PARTITION" in sql:  # the moves' one ALTER applied up to its first command
            execute(self, sql.split(", MOVE PARTITION")[0], *a, **k)
            die()
        return execute(self, sql, *a, **k)
    def die_before_insert(self, *a, **k):
        if here():
            die()
        return insert(self, *a, **k)
    if boundary == "mid_moves":  # one partition moved, the others still in the staging table
        ClickHouseHook.execute = execute_then_die
    else:  # the chunk's staging table is created, its insert not sent
        ClickHouseHook.run_insert = die_before_insert
ti = types.SimpleNamespace(dag_id="it", task_id=args.pop("task_id"), run_id=args.pop("run_id"), map_index=-1,
                           try_number=args.pop("try_number"), xcom_push=lambda key, value: None)
S3ToClickHouseOperator(task_id=ti.task_id, **args).execute({"ti": ti})
"""

BOUNDARIES = ["before_insert", "before_pending", "before_moves", "mid_moves", "between_move_and_ledger",
              "after_ledger"]


def _killed_try(f: Files, run_id: str, try_number: int, chunk: int, boundary: str, per_chunk: int) -> None:
    env = {**os.environ, **f.stack.airflow_env()}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    payload = json.dumps({"task_id": "load", "run_id": run_id, "try_number": try_number, "kill_at": boundary,
                          "kill_chunk": chunk, "s3_uri": f.uri, "table": f.table, "format": "CSV",
                          "structure": STRUCTURE, "skip_loaded": True, "max_files_per_load": per_chunk})
    proc = subprocess.run([sys.executable, "-c", KILLER, payload], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, f"try {try_number} was not killed at chunk {chunk} {boundary}:\n" + (
        proc.stdout[-3000:] + proc.stderr[-3000:])


def test_a_20_chunk_load_killed_at_random_points_ends_with_every_row_once(stack: LocalStack, bucket: str) -> None:
    """One load of 40 files in 20 chunks of 2; its worker is SIGKILLed at 12 random points (every boundary
    of a chunk twice, at increasing chunks), each try the retry of the one before. No file is ever in the
    target twice; the last try completes; the target equals one clean load and the ledger holds every file
    once, ``loaded``, in its chunk."""
    seed = int(os.environ.get("S3CH_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    chunks = sorted(rng.sample(range(1, 21), 12))
    boundaries = BOUNDARIES * 2
    rng.shuffle(boundaries)
    points = list(zip(chunks, boundaries, strict=True))
    f = new_files(stack)
    f.put(*range(40), rows=100)
    expected = f.clean()
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    seen: list[str] = []
    for try_number, (chunk, boundary) in enumerate(points, start=1):
        _killed_try(f, run_id, try_number, chunk, boundary, per_chunk=2)
        rows = per_file(f)
        assert set(rows.values()) <= {100}, (
            f"seed {seed}: a file twice after a kill at chunk {chunk} {boundary}: {rows}"
        )
        seen.append(f"{chunk}:{boundary}({len(rows)} files in)")
        if try_number == 1:  # another run meanwhile: the files are the killed load's, not new
            other = f.run("other", max_files_per_load=2)
            held = other["ledger"]["skipped_claimed"] + other["ledger"]["skipped_loaded"]
            assert other["written_rows"] == 0 and held == 40, f"seed {seed}: {other['ledger']}"
    final = f.run(run_id=run_id, try_number=len(points) + 1, max_files_per_load=2)
    assert fingerprint(stack, f.table) == expected, f"seed {seed}"
    ledger = chunk_rows(f)
    assert {s for *_, s in ledger} == {"loaded"} and len(ledger) == 40, f"seed {seed}: {ledger}"
    assert [c for _, c, _ in ledger] == [n // 2 + 1 for n in range(40)]
    assert set(f.loaded_once().values()) == {1}
    assert not [t for t in staging_left(stack) if t.startswith(STAGING_PREFIX + QueryId.parse(
        final["chunks"][-1]["query_id"] if final.get("chunks") else final["query_id"]).stem[:20])]
    assert f.run("next", max_files_per_load=2)["written_rows"] == 0
    print(f"\n20 chunks, seed {seed}, killed at {', '.join(seen)}; the last try loaded "
          f"{final['written_rows']} rows; exact after {time.monotonic() - started:.0f} s")

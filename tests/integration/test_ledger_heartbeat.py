"""A ledger load's heartbeat on the real local stack: a load SIGKILLed between its claims and its insert frees
its files once its last beat is older than its window (``claim_timeout`` left at 1 h); a live load that is
slow between its claims and its insert keeps its files; a load whose beats stalled claims its files again
before its insert and leaves to another load the files that load took meanwhile. Every check compares the
target with one clean load of the files and counts the ledger's ``loaded`` rows per file."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_s3ch.core.ledger import HEARTBEAT_WINDOW_BEATS
from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.recovery import QueryId
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.faults import fingerprint
from tests.integration.support import fake_context
from tests.integration.test_ledger import STRUCTURE, Files, bucket, new_files

pytestmark = pytest.mark.integration

__all__ = ["bucket"]

FILES = 6


def _dies_before_its_insert(env: dict[str, str], kwargs: dict[str, Any], run_id: str) -> None:
    """In a forked worker: the load, SIGKILLed once its claims are written and confirmed, before its insert."""
    os.environ.update(env)
    LedgerRun.begin = lambda self, chunk: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
    S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 1, run_id))
    os._exit(1)  # not reached: the load has files to insert


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload(["airflow_provider_s3ch.operators.s3_to_clickhouse", __name__])


def loads_of(f: Files) -> set[str]:
    """The loads with rows in the target's ledger."""
    return {QueryId.parse(q).stem for (q,) in f.stack.clickhouse_client().execute(
        f"SELECT DISTINCT query_id FROM default.{LEDGER_NAME} FINAL WHERE table = %(t)s", {"t": f.table})}


def signs_of_life(stack: LocalStack, load_id: str) -> float:
    """Seconds since the load's last sign of life, by the server's clock: its youngest claim or its last beat."""
    ch = stack.clickhouse_client()
    claim = ch.execute(f"SELECT min(dateDiff('microsecond', claimed_at, now64(6))) / 1e6 FROM default.{LEDGER_NAME} "
                       "FINAL WHERE load_id = %(l)s AND state = 'claimed'", {"l": load_id})[0][0]
    beat = ch.execute(f"SELECT dateDiff('microsecond', max(beat_at), now64(6)) / 1e6 FROM default.{LEDGER_NAME}"
                      "_heartbeat WHERE load_id = %(l)s", {"l": load_id})[0][0]
    return min(float(claim), float(beat))


def wait_until(condition: Callable[[], bool], what: str, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"not within {limit:g} s: {what}"
        time.sleep(0.1)


def test_a_load_killed_between_its_claims_and_its_insert_frees_its_files_once_its_heartbeat_is_old(
    stack: LocalStack, bucket: str,
) -> None:
    f = new_files(stack)
    f.put(*range(FILES))
    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
    kwargs = {"table": f.table, "s3_uri": f.uri, "format": "CSV", "structure": STRUCTURE,
              "skip_loaded": True, "claim_heartbeat": 1.0}
    worker = _FORKS.Process(target=_dies_before_its_insert, args=(env, kwargs, "run-dead"))
    worker.start()
    worker.join(300)
    assert worker.exitcode == -signal.SIGKILL
    assert {s for _, _, s, _ in f.ledger()} == {"claimed"} and len(f.ledger()) == FILES
    (dead,) = loads_of(f)
    window = 1.0 * HEARTBEAT_WINDOW_BEATS
    wait_until(lambda: signs_of_life(stack, dead) >= window, "the dead load's last sign of life is a window old")
    out = f.run(run_id="run-next")  # claim_timeout left at its default, 1 h
    assert out["files"] == FILES and out["ledger"]["new"] == FILES and out["ledger"]["skipped_claimed"] == 0
    assert fingerprint(stack, f.table) == f.clean()
    assert set(f.loaded_once().values()) == {1} and len(f.loaded_once()) == FILES


def slow_between_claims_and_insert(monkeypatch: pytest.MonkeyPatch, stall_beats: bool = False) -> tuple[
        threading.Event, threading.Event]:
    """Make the load run in the thread named ``slow`` wait before its first chunk (its claims written and
    confirmed) until ``go`` is set, ``claimed`` set when it waits; with ``stall_beats`` its heartbeat's writes
    fail from then on (a stalled worker, a server that does not answer it)."""
    claimed, go = threading.Event(), threading.Event()
    begin = LedgerRun.begin

    def waiting(self: LedgerRun, chunk: Any) -> Any:
        if threading.current_thread().name == "slow" and not go.is_set():
            if stall_beats:
                self.beat._send = _refused  # type: ignore[method-assign]
            claimed.set()
            go.wait(300)
        return begin(self, chunk)

    monkeypatch.setattr(LedgerRun, "begin", waiting)
    return claimed, go


def _refused(client: Any) -> None:
    raise ConnectionError("the server does not answer")


def run_slow(f: Files, out: dict[str, Any], **kwargs: Any) -> threading.Thread:
    def load() -> None:
        out.update(f.run(run_id="run-slow", **kwargs))

    thread = threading.Thread(target=load, name="slow")
    thread.start()
    return thread


def test_a_live_load_slow_between_its_claims_and_its_insert_keeps_its_files(
    stack: LocalStack, bucket: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = new_files(stack)
    f.put(*range(FILES))
    claimed, go = slow_between_claims_and_insert(monkeypatch)
    slow: dict[str, Any] = {}
    thread = run_slow(f, slow, claim_heartbeat=1.0)
    try:
        assert claimed.wait(120)
        (load,) = loads_of(f)
        # Its claims are older than its window: only its beats hold them now.
        wait_until(lambda: stack.clickhouse_client().execute(
            f"SELECT min(dateDiff('microsecond', claimed_at, now64(6))) / 1e6 FROM default.{LEDGER_NAME} FINAL "
            "WHERE load_id = %(l)s", {"l": load})[0][0] >= 1.25 * HEARTBEAT_WINDOW_BEATS, "its claims are a window old")
        other = f.run(run_id="run-other")
        assert other["files"] == 0 and other["ledger"]["skipped_claimed"] == FILES
    finally:
        go.set()
        thread.join(300)
    assert slow["files"] == FILES and slow["ledger"]["new"] == FILES
    assert fingerprint(stack, f.table) == f.clean()
    assert set(f.loaded_once().values()) == {1} and len(f.loaded_once()) == FILES


def test_a_load_whose_heartbeat_stalled_claims_again_before_its_insert_and_leaves_the_files_taken_meanwhile(
    stack: LocalStack, bucket: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = new_files(stack)
    f.put(*range(FILES))
    claimed, go = slow_between_claims_and_insert(monkeypatch, stall_beats=True)
    slow: dict[str, Any] = {}
    thread = run_slow(f, slow, claim_heartbeat=1.0)
    try:
        assert claimed.wait(120)
        (load,) = loads_of(f)
        wait_until(lambda: signs_of_life(stack, load) >= HEARTBEAT_WINDOW_BEATS, "its beats stopped a window ago")
        other = f.run(run_id="run-other")  # takes its claims as stale
        assert other["files"] == FILES and other["ledger"]["new"] == FILES
    finally:
        go.set()
        thread.join(300)
    assert slow["files"] == 0 and slow["ledger"]["skipped_claimed"] == FILES  # lost them when it claimed again
    assert fingerprint(stack, f.table) == f.clean()
    assert set(f.loaded_once().values()) == {1} and len(f.loaded_once()) == FILES
    states = {s for _, _, s, q in f.ledger() if QueryId.parse(q).stem == load}
    assert states == {"released"}

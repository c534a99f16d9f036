"""Helpers for integration tests: read the real servers' state."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack

SAMPLE_BUCKET = "s3ch-sample"


def fake_context(task_id: str = "load", try_number: int = 1, run_id: str | None = None) -> dict[str, Any]:
    """The part of an Airflow context the operator reads (the task instance's identity)."""
    pushed: dict[str, Any] = {}
    ti = types.SimpleNamespace(
        dag_id="it", task_id=task_id, run_id=run_id or f"run-{uuid.uuid4().hex[:8]}", map_index=-1,
        try_number=try_number, pushed=pushed, xcom_push=lambda key, value: pushed.__setitem__(key, value),
    )
    return {"ti": ti}


def count(stack: LocalStack, table: str, node: int = 0) -> int:
    return int(stack.clickhouse_client(node).execute(f"SELECT count() FROM {table}")[0][0])


def query_log(stack: LocalStack, query_id: str, node: int = 0) -> dict[str, Any]:
    """The finished entry of a query in a node's system.query_log, as a dict."""
    client = stack.clickhouse_client(node)
    client.execute("SYSTEM FLUSH LOGS")
    rows, cols = client.execute(
        "SELECT written_rows, written_bytes, read_rows, read_bytes, query_duration_ms, memory_usage, Settings, "
        "log_comment "
        "FROM system.query_log WHERE query_id = %(q)s AND type = 'QueryFinish'",
        {"q": query_id},
        with_column_types=True,
    )
    assert len(rows) == 1, f"expected one finished entry for {query_id}, got {rows}"
    return dict(zip([c[0] for c in cols], rows[0], strict=True))


def as_json(value: Any) -> str:
    return json.dumps(value, default=str)


def secondary_inserts(stack: LocalStack, query_id: str, node: int) -> tuple[int, int]:
    """(how many, rows written) of the finished secondary inserts of ``query_id`` in a node's system.query_log.

    A distributed load (s3Cluster, ``parallel_distributed_insert_select = 2``) runs one on every shard; s3Cluster
    hands the files out on demand, so how many rows each node writes (none, on a busy machine) is not promised.
    """
    client = stack.clickhouse_client(node)
    client.execute("SYSTEM FLUSH LOGS")
    n, rows = client.execute(
        "SELECT count(), sum(written_rows) FROM system.query_log WHERE initial_query_id = %(q)s "
        "AND NOT is_initial_query AND type = 'QueryFinish' AND query_kind = 'Insert'",
        {"q": query_id},
    )[0]
    return int(n), int(rows)


class ReservationBlocker:
    """A query that holds a memory reservation in a workload until it is released, so that loads started beside
    it wait for admission for certain, whatever the machine's speed: the server's own queue
    (``system.scheduler``, the workload's ``allocation_queue``) says when they wait. A query waiting there is
    not in ``system.processes``.

    :param reserve: the reservation it holds (``reserve_memory``).
    """

    def __init__(self, stack: LocalStack, workload: str = "loads", reserve: str = "2Gi") -> None:
        self.stack, self.workload, self.reserve = stack, workload, reserve
        self.query_id = f"blocker-{uuid.uuid4().hex[:12]}"
        self.released = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        try:  # up to 10 minutes unless released (KILL QUERY)
            self.stack.clickhouse_client().execute(
                f"SELECT sleepEachRow(0.5) FROM numbers(1200) SETTINGS workload = '{self.workload}', "
                f"reserve_memory = '{self.reserve}', max_block_size = 1, function_sleep_max_microseconds_per_block = 0",
                query_id=self.query_id,
            )
        except Exception as exc:  # noqa: BLE001 - killed: what it is for
            self.error = exc

    def queued(self) -> int:
        """How many queries wait for admission in the workload's queue."""
        rows = self.stack.clickhouse_client().execute(
            "SELECT queue_length FROM system.scheduler WHERE resource = 'memory' AND type = 'allocation_queue' "
            "AND endsWith(path, %(p)s)", {"p": f"/{self.workload}/queue"},
        )
        return int(rows[0][0]) if rows else 0

    def __enter__(self) -> ReservationBlocker:
        self._thread.start()
        client = self.stack.clickhouse_client()
        deadline = time.monotonic() + 120
        while not client.execute("SELECT 1 FROM system.processes WHERE query_id = %(q)s", {"q": self.query_id}):
            assert self._thread.is_alive() and time.monotonic() < deadline, f"the blocker did not start: {self.error}"
            time.sleep(0.05)
        return self

    def release_once_queued(self, waiting: int = 1, hold: float = 0.0, timeout: float = 300) -> None:
        """Once ``waiting`` queries wait behind the blocker, and ``hold`` seconds more, release it (for a thread)."""
        deadline = time.monotonic() + timeout
        while self.queued() < waiting and time.monotonic() < deadline and not self.released.wait(0.05):
            pass
        if not self.released.wait(hold):
            self.release()

    def release(self) -> None:
        self.released.set()
        self.stack.clickhouse_client().execute("KILL QUERY WHERE query_id = %(q)s SYNC", {"q": self.query_id})
        self._thread.join(timeout=120)

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.release()


def wait_answering(url: str, timeout: float = 120.0) -> None:
    """Wait until an HTTP server answers ``url`` (any status: an error is an answer). A server started as its own
    process (moto) takes seconds to import and bind on a busy machine; raise if it never answers."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer from {url} within {timeout:g} s: {exc}") from exc
            time.sleep(0.1)


@contextlib.contextmanager
def locked_moto(log: Path, region: str, users: dict[str, list[str]],
                setup: Any = None) -> Iterator[tuple[str, dict[str, tuple[str, str]]]]:
    """A moto server of its own that enforces credentials and IAM policies once set up (``/moto-api/reset-auth``):
    ``setup(endpoint, {"endpoint_url": …, …})`` runs first as an unrestricted user; then each of ``users`` gets an
    IAM user allowed the actions named (on every resource). Yields the endpoint and each user's keys."""
    from airflow_provider_s3ch.local.stack import free_port

    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        import boto3

        kwargs = {"endpoint_url": endpoint, "region_name": region, "aws_access_key_id": "setup",
                  "aws_secret_access_key": "setup"}
        if setup is not None:
            setup(endpoint, kwargs)
        iam, keys = boto3.client("iam", **kwargs), {}
        for user, actions in users.items():
            iam.create_user(UserName=user)
            if actions:
                iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps({
                    "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
            key = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (key["AccessKeyId"], key["SecretAccessKey"])
        enforce = urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(enforce, timeout=10).read()
        yield endpoint, keys
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        if proc.poll() is None:
            proc.kill()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def counting(die_at: int | None = None, in_flight_ms: int = 0, act: Callable[[], None] = _die) -> Iterator[list[int]]:
    """Count the statements the load sends to ClickHouse (not its heartbeat thread's); with ``die_at``, SIGKILL
    the process just before the ``die_at``-th, or ``in_flight_ms`` after it was sent (the statement in flight,
    or done by then); ``act`` in place of the SIGKILL does something else there once (kill a node)."""
    sent, acted, timers = [0], [False], []
    saved = {name: getattr(ClickHouseHook, name) for name in ("execute", "run_insert")}

    def fire() -> None:
        if not acted[0]:
            acted[0] = True
            act()

    for name, original in saved.items():

        def counted(self: Any, *a: Any, _original: Any = original, **k: Any) -> Any:
            if threading.current_thread().name.startswith("s3ch-heartbeat"):  # beats at times of their own
                return _original(self, *a, **k)
            sent[0] += 1
            if die_at is not None and sent[0] >= die_at:
                if not in_flight_ms:
                    fire()
                elif not timers:
                    timers.append(threading.Timer(in_flight_ms / 1000, fire))
                    timers[0].start()
            return _original(self, *a, **k)

        setattr(ClickHouseHook, name, counted)
    try:
        yield sent
    finally:
        for name, original in saved.items():
            setattr(ClickHouseHook, name, original)
        for timer in timers:  # what was set off happens before the block is left (a node is killed, then restarted)
            timer.join()


def kill_node(stack: LocalStack, index: int = 0) -> None:
    """SIGKILL ClickHouse node ``index`` (as a crash) and wait for it to be gone; ``stack.restart_node`` starts it
    again."""
    process = stack.nodes[index].process
    assert process is not None
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def module_counts(counts: Counter[str], title: str, report_env: str) -> Any:
    """A module's fixture ``stats``: ``counts`` cleared before its first test, and reported
    (:func:`report_counts`) after its last."""
    import pytest

    @pytest.fixture(scope="module")
    def stats() -> Iterator[Counter[str]]:
        counts.clear()
        yield counts
        report_counts(title, counts, report_env)

    return stats


def report_counts(title: str, counts: Counter[str], report_env: str) -> None:
    """Print a run's counts after its module, and write them to the file ``report_env`` names (if set)."""
    data = dict(sorted(counts.items()))
    print(f"\n{title}: {json.dumps(data, indent=1)}")
    report = os.environ.get(report_env)
    if report:
        with open(report, "w") as out:
            json.dump(data, out, indent=1)

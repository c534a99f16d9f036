"""A backfill under Airflow's real components: scheduler, dag-processor and api-server, LocalExecutor on
SQLite, on the real local stack with workload scheduling. More runs at once than the workload admits:
the server admits the loads by their memory caps, every month loads exactly, and a SIGKILLed task
process's retry leaves its month exact."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import month_keys, write_posts
from tests.scheduler.support import Airflow, wait_for

DAG_ID = "s3ch_scheduler_backfill"
BUCKET = "s3ch-scheduler"
MONTHS = 6
ROWS = 60_000
WORKLOAD_MEMORY = "3Gi"  # the workload's max_memory: one load of 2 GiB at a time
MEMORY_CAP = "2GiB"

pytestmark = pytest.mark.integration


class AdmissionSampler(threading.Thread):
    """Samples the server's memory reservations while the backfill runs: how many loads it admitted at once."""

    def __init__(self, stack: LocalStack) -> None:
        super().__init__(daemon=True)
        self.client = stack.clickhouse_client()
        self.stop = threading.Event()
        self.admitted: list[int] = []

    def run(self) -> None:
        while not self.stop.is_set():
            (held,) = self.client.execute(
                "SELECT allocations FROM system.scheduler WHERE resource = 'memory' AND type = 'allocation_limit'"
            )
            self.admitted.append(int(held[0]))
            time.sleep(0.02)


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3", workload_memory=WORKLOAD_MEMORY) as s:
        s.create_bucket(BUCKET)
        yield s


def test_a_backfill_under_the_real_scheduler_loads_every_month_exactly(stack: LocalStack, tmp_path: Path) -> None:
    data = write_posts(stack.s3_client(), BUCKET, rows=ROWS, months=MONTHS)
    ch = stack.clickhouse_client()
    ch.execute("CREATE DATABASE IF NOT EXISTS scheduled")
    airflow = Airflow(tmp_path, stack, {"S3CH_TEST_BUCKET": BUCKET, "S3CH_TEST_MEMORY_CAP": MEMORY_CAP})
    sampler = AdmissionSampler(stack)
    migrated = airflow.run("db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    started = time.monotonic()
    # The scheduler starts once the backfill exists: its writes and the CLI's would otherwise race for SQLite's
    # one writer, and a write that must upgrade a read is refused at once ("database is locked"), busy timeout
    # or not. The dag-processor still writes as it parses: a refused create (nothing committed) is made again.
    airflow.start("api-server", "dag-processor")
    try:
        wait_for("the DAG to be parsed", lambda: airflow.db("SELECT 1 FROM dag WHERE dag_id = ?", DAG_ID), 300, airflow)
        assert airflow.run("dags", "unpause", DAG_ID).returncode == 0
        for _ in range(3):
            created = airflow.run("backfill", "create", "--dag-id", DAG_ID, "--from-date", "2008-07-01", "--to-date",
                                  "2008-12-01", "--max-active-runs", str(MONTHS))  # fmt: skip
            locked = "database is locked" in created.stdout + created.stderr
            if created.returncode == 0 or not locked or airflow.db("SELECT 1 FROM backfill WHERE dag_id = ?", DAG_ID):
                break
            time.sleep(2)
        assert created.returncode == 0, created.stdout[-2000:] + created.stderr[-2000:]
        airflow.start("scheduler")

        killed: list[int] = []

        def kill_one() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not killed:
                for proc in airflow.task_processes():
                    try:
                        proc.send_signal(signal.SIGKILL)
                        killed.append(proc.pid)
                        return
                    except psutil.NoSuchProcess:
                        continue
                time.sleep(0.05)

        killer = threading.Thread(target=kill_one)
        killer.start()
        sampler.start()

        def runs_done() -> bool:
            states = [s for (s,) in airflow.db("SELECT state FROM dag_run WHERE dag_id = ?", DAG_ID)]
            return len(states) == MONTHS and all(s in ("success", "failed") for s in states)

        wait_for("the backfill's runs to finish", runs_done, 600, airflow, interval=2)
        killer.join()
        elapsed = time.monotonic() - started
    finally:
        sampler.stop.set()
        airflow.stop()

    runs = airflow.db("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY logical_date", DAG_ID)
    assert [s for _, s in runs] == ["success"] * MONTHS, runs
    tries = airflow.db("SELECT run_id, try_number, state FROM task_instance WHERE dag_id = ?", DAG_ID)
    assert killed, "no task process was seen to kill"
    retried = [t for t in tries if t[1] > 1]
    assert retried, f"the killed task was not retried: {tries}"

    # Every month exact: the rows and their checksum equal the month's file, read by the server itself.
    for year, month in month_keys(months=MONTHS):
        key = f"{data.prefix}{year:04d}-{month:02d}.parquet"
        file = ch.execute(
            f"SELECT count(), sum(cityHash64(Id, Body, Title)) FROM s3('{stack.s3_endpoint}/{BUCKET}/{key}', "
            f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')"
        )[0]
        table = ch.execute(
            "SELECT count(), sum(cityHash64(Id, Body, Title)) FROM scheduled.posts "
            "WHERE toYYYYMM(CreationDate) = %(p)s", {"p": year * 100 + month},
        )[0]  # fmt: skip
        assert table == file, f"{year}-{month:02d}: table {table} != file {file}"
    assert ch.execute("SELECT count() FROM scheduled.posts")[0][0] == data.rows
    assert ch.execute("SELECT count() FROM system.tables WHERE name LIKE '\\_s3ch\\_stage\\_%'")[0][0] == 0

    # The server admitted the loads by their caps: never two 2 GiB reservations in 3 GiB at once, while
    # Airflow ran up to six at a time; the loads that waited say so in the server's own figure.
    sampler.join()
    assert sampler.admitted and max(sampler.admitted) == 1, sorted(set(sampler.admitted))
    ch.execute("SYSTEM FLUSH LOGS")
    loads = [(start.timestamp(), end.timestamp(), int(wait) / 1e6) for start, end, wait in ch.execute(
        "SELECT query_start_time_microseconds, event_time_microseconds, "
        "ProfileEvents['MemoryReservationAdmitMicroseconds'] FROM system.query_log "
        "WHERE type = 'QueryFinish' AND query_kind = 'Insert' AND Settings['workload'] = 'loads' "
        "AND Settings['reserve_memory'] = %(r)s ORDER BY query_start_time_microseconds", {"r": str(2 * 1024**3)},
    )]  # fmt: skip
    assert len(loads) >= MONTHS, loads
    # A load sent while another ran (admitted, holding its reservation) waited for it, and says so in the
    # server's own figure. Whether any two were sent together is Airflow's scheduling (on a busy machine they
    # may not be): only the loads that were are checked.
    sent_while_held = [b for a in loads for b in loads if a[0] + a[2] < b[0] < a[1] - 0.2]
    assert all(wait > 0 for _, _, wait in sent_while_held), (sent_while_held, loads)
    waits = [round(wait * 1000) for _, _, wait in loads]
    print(f"\nreal scheduler: {MONTHS} months, {data.rows} rows in {elapsed:.0f} s; killed task process {killed}, "
          f"retried {[(r, n) for r, n, _ in retried]}; admission waits (ms) {waits}, "
          f"{len(sent_while_held)} sent while another load held its reservation; "
          f"at most {max(sampler.admitted)} admitted at once over {len(sampler.admitted)} samples")

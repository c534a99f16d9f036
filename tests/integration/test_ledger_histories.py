"""Histories of the file ledger on the real local stack: several runs, each one's state left to the next.

The table is partitioned by month; each check compares it, partition by partition (``count()`` and
``sum(cityHash64(*))``), with ClickHouse's own read of the files in S3 now into a table of the same shape.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import uuid
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_provider_s3ch.errors import S3chError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import fake_context
from tests.integration.test_ledger import staging_left

pytestmark = pytest.mark.integration

BUCKET = "s3ch-histories"
STRUCTURE = "ts DateTime, id UInt32, v String"


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


def body(fmt: str, month: int, rows: int, seed: int) -> bytes:
    """``rows`` rows of 2024-``month``, distinct per ``seed``, as CSV or Parquet."""
    start = datetime(2024, month, 1)
    ts = [start + timedelta(minutes=i) for i in range(rows)]
    ids = [seed * 1_000_000 + i for i in range(rows)]
    vs = [f"s{seed}-{i % 97}" for i in range(rows)]
    if fmt == "CSV":
        return "".join(f"{t:%Y-%m-%d %H:%M:%S},{i},{v}\n" for t, i, v in zip(ts, ids, vs, strict=True)).encode()
    out = io.BytesIO()
    pq.write_table(pa.table({"ts": pa.array(ts, pa.timestamp("s")), "id": pa.array(ids, pa.uint32()),
                             "v": pa.array(vs, pa.string())}), out)
    return out.getvalue()


def by_partition(stack: LocalStack, table: str) -> dict[str, tuple[int, int]]:
    rows = stack.clickhouse_client().execute(
        f"SELECT _partition_id, count(), sum(cityHash64(*)) FROM {table} GROUP BY _partition_id ORDER BY 1")
    return {str(p): (int(c), int(h)) for p, c, h in rows}


def files_now(stack: LocalStack, prefix: str, fmt: str) -> dict[str, tuple[int, int]]:
    """Every file under ``prefix`` now, read by ClickHouse into a table partitioned like the target."""
    ch = stack.clickhouse_client()
    name = f"default.hist_clean_{uuid.uuid4().hex[:8]}"
    ch.execute(f"CREATE TABLE {name} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY id")
    ext = fmt.lower()
    ch.execute(f"INSERT INTO {name} SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{prefix}*.{ext}', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', '{fmt}', '{STRUCTURE}')")
    try:
        return by_partition(stack, name)
    finally:
        ch.execute(f"DROP TABLE {name} SYNC")


@pytest.mark.parametrize(("fmt", "a", "b", "c", "a_again"), [
    ("Parquet", 1000, 2000, 500, 800),  # 3,300 rows in the end, 2,500 of February
    ("CSV", 1000, 2000, 500, 800),
    ("CSV", 10, 20, 5, 8),  # 25 February rows
])
def test_a_reload_keeps_a_late_file_of_another_month(
    stack: LocalStack, bucket: str, fmt: str, a: int, b: int, c: int, a_again: int,
) -> None:
    """a (January) and b (February) load together; a late c (February) rebuilds February; a is overwritten
    and reloaded: February, which a's first insert recorded, is rebuilt from b *and* c."""
    tag = uuid.uuid4().hex[:8]
    table, prefix, ext = f"default.hist_{tag}", f"hist-{tag}/", fmt.lower()
    stack.clickhouse_client().execute(
        f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY id")
    s3 = stack.s3_client()

    def put(name: str, month: int, rows: int, seed: int) -> None:
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}{name}.{ext}", Body=body(fmt, month, rows, seed))

    def run() -> dict:
        op = S3ToClickHouseOperator(
            task_id="load", s3_uri=f"s3://{BUCKET}/{prefix}*.{ext}", table=table, format=fmt,
            **({"structure": STRUCTURE} if fmt == "CSV" else {}), skip_loaded=True, mode="replace_partitions",
            on_changed="reload")
        return op.execute(fake_context())

    put("a", 1, a, 1)
    put("b", 2, b, 2)
    run()
    assert by_partition(stack, table) == files_now(stack, prefix, fmt)
    put("c", 2, c, 3)
    run()
    assert by_partition(stack, table) == files_now(stack, prefix, fmt)
    put("a", 1, a_again, 4)
    result = run()
    assert result["ledger"]["reloaded_keys"] == [f"{prefix}a.{ext}"]
    assert by_partition(stack, table) == files_now(stack, prefix, fmt)
    assert {p: n for p, (n, _) in by_partition(stack, table).items()} == {"202401": a_again, "202402": b + c}
    rebuilt = {p["partition_id"]: p for p in result["rebuilt"]}
    assert set(rebuilt) == {"202401", "202402"}
    assert rebuilt["202402"]["earlier_files"] == [f"{prefix}b.{ext}", f"{prefix}c.{ext}"]
    assert rebuilt["202401"]["new_files"] == [f"{prefix}a.{ext}"]
    assert staging_left(stack) == []


def test_a_file_put_back_to_its_earlier_version_is_reloaded(stack: LocalStack, bucket: str) -> None:
    """a v1 loads; a v2 is reloaded over it; the v1 bytes are put back: they are a changed file (the target holds
    v2), reloaded, and the ledger holds one loaded row for a, of v1's ETag (found by the ledger's model)."""
    tag = uuid.uuid4().hex[:8]
    table, prefix = f"default.hist_{tag}", f"hist-{tag}/"
    stack.clickhouse_client().execute(
        f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY id")
    s3 = stack.s3_client()
    v1, v2 = body("CSV", 1, 30, 1), body("CSV", 2, 20, 2)

    def run() -> dict:
        return S3ToClickHouseOperator(
            task_id="load", s3_uri=f"s3://{BUCKET}/{prefix}*.csv", table=table, format="CSV", structure=STRUCTURE,
            skip_loaded=True, mode="replace_partitions", on_changed="reload").execute(fake_context())

    for version in (v1, v2, v1):
        etag = s3.put_object(Bucket=BUCKET, Key=f"{prefix}a.csv", Body=version)["ETag"].strip('"')
        result = run()
        assert result["written_rows"] == version.count(b"\n")
        assert by_partition(stack, table) == files_now(stack, prefix, "CSV")
    assert result["ledger"]["reloaded_keys"] == [f"{prefix}a.csv"]
    loaded = stack.clickhouse_client().execute(
        "SELECT etag FROM default._s3ch_ledger FINAL WHERE table = %(t)s AND state = 'loaded'", {"t": table})
    assert loaded == [(etag,)]


def _refused_then_killed(env: dict[str, str], kwargs: dict[str, object], run_id: str) -> None:
    """In a forked worker: the load, SIGKILLed once its refusal released its files and dropped its tables, before
    the refusal reached Airflow (Airflow then retries the task: a dead worker is not a refusal)."""
    os.environ.update(env)
    from airflow_provider_s3ch.load.rebuild import PartitionRebuild

    refuse = PartitionRebuild.refuse

    def refuse_then_die(self: PartitionRebuild, steps: object, error: Exception) -> None:
        try:
            refuse(self, steps, error)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)

    PartitionRebuild.refuse = refuse_then_die  # type: ignore[method-assign]
    S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 1, run_id))


def test_a_refused_load_killed_before_it_failed_is_refused_again_by_its_retry(stack: LocalStack, bucket: str) -> None:
    """f0 and f1 share a partition; f0 changes (skipped); a late f2 in that partition cannot be rebuilt without f0's
    loaded version: refused. The worker dies after the refusal gave f2 up and dropped the staging table: its retry
    must not take the earlier try's finished insert for a finished load (f2 recorded loaded, its rows nowhere), but
    refuse again; once f0 is restored, f2 loads (found by the ledger's model)."""
    tag = uuid.uuid4().hex[:8]
    table, prefix = f"default.hist_{tag}", f"hist-{tag}/"
    stack.clickhouse_client().execute(
        f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY id")
    s3 = stack.s3_client()
    kwargs = {"s3_uri": f"s3://{BUCKET}/{prefix}*.csv", "table": table, "format": "CSV", "structure": STRUCTURE,
              "skip_loaded": True, "mode": "replace_partitions", "on_changed": "skip"}
    f0 = body("CSV", 1, 10, 1)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f0.csv", Body=f0)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f1.csv", Body=body("CSV", 1, 10, 2))
    S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context())
    before = by_partition(stack, table)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f0.csv", Body=body("CSV", 1, 7, 3))  # changed: skipped
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f2.csv", Body=body("CSV", 1, 5, 4))  # late, same month
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
    worker = multiprocessing.get_context("forkserver").Process(target=_refused_then_killed, args=(env, kwargs, run_id))
    worker.start()
    worker.join(300)
    assert worker.exitcode == -signal.SIGKILL
    with pytest.raises(S3chError, match=rf"cannot be read again as they were loaded: {prefix}f0.csv \(changed"):
        S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 2, run_id))
    assert by_partition(stack, table) == before and staging_left(stack) == []
    states = dict(stack.clickhouse_client().execute(
        "SELECT key, toString(state) FROM default._s3ch_ledger FINAL WHERE table = %(t)s AND key LIKE '%%f2.csv'",
        {"t": table}))
    assert states == {f"{prefix}f2.csv": "released"}
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}f0.csv", Body=f0)  # restored: f2 loads, its month rebuilt
    S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context())
    assert by_partition(stack, table) == files_now(stack, prefix, "CSV")

"""``replace_partitions`` with the ledger on the real local stack: a partition the new files share with files
loaded earlier is rebuilt from all of them, or the load is refused with the target unchanged.

Each check compares the target, partition by partition (``count()`` and ``sum(cityHash64(*))``), with
ClickHouse's own read of every file under the prefix into a table with the same partition key.
"""

from __future__ import annotations

import uuid

import pytest

from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.core.ledger_sql import render_create_ledger, render_write, state_rows
from airflow_provider_s3ch.core.models import LoadRequest, TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.errors import LoadError, PlanError
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.local import LocalStack
from tests.integration.test_ledger import BUCKET, ROWS, STRUCTURE, Files, staging_left

pytestmark = pytest.mark.integration

#: Files 10-19 are partition 1, 20-29 partition 2, ... (a month each, in the issue's words).
PARTITION_BY = "intDiv(file, 10)"


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


def new_files(stack: LocalStack) -> Files:
    tag = uuid.uuid4().hex[:8]
    table = f"default.ledp_{tag}"
    stack.clickhouse_client().execute(
        f"CREATE TABLE {table} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY {PARTITION_BY} ORDER BY id"
    )
    return Files(stack, f"ledp-{tag}/", table)


def by_partition(stack: LocalStack, table: str) -> dict[str, tuple[int, int]]:
    rows = stack.clickhouse_client().execute(
        f"SELECT _partition_id, count(), sum(cityHash64(*)) FROM {table} GROUP BY _partition_id ORDER BY 1")
    return {str(p): (int(c), int(h)) for p, c, h in rows}


def clean(f: Files) -> dict[str, tuple[int, int]]:
    """Every file under the prefix now, read by ClickHouse into a table partitioned like the target."""
    ch = f.stack.clickhouse_client()
    name = f"default.cleanp_{uuid.uuid4().hex[:8]}"
    ch.execute(f"CREATE TABLE {name} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY {PARTITION_BY} ORDER BY id")
    ch.execute(
        f"INSERT INTO {name} SELECT * FROM s3('{f.stack.s3_endpoint}/{BUCKET}/{f.prefix}*.csv', "
        f"'{f.stack.s3_access_key}', '{f.stack.s3_secret_key}', 'CSV', '{STRUCTURE}')"
    )
    try:
        return by_partition(f.stack, name)
    finally:
        ch.execute(f"DROP TABLE {name} SYNC")


def monthly(f: Files, n: int, **kwargs: object) -> dict:
    """One run over the files of partition ``n // 10``, as a monthly DAG's templated glob reads them."""
    return f.run(s3_uri=f"s3://{BUCKET}/{f.prefix}f-{n // 10}*.csv", mode="replace_partitions", **kwargs)


def test_a_late_file_rebuilds_its_partition_with_the_files_loaded_before(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    for n in (10, 20, 30):  # three months, three runs
        f.put(n)
        monthly(f, n)
    assert by_partition(stack, f.table) == clean(f)
    f.put(11)  # a late file for the first month: its run lists the month again
    late = monthly(f, 11)
    assert late["ledger"]["new_keys"] == [f.key(11)] and late["partitions"] == ["1"]
    assert late["written_rows"] == ROWS  # the figures are the new file's; the earlier one was read again
    assert by_partition(stack, f.table) == clean(f)
    assert sum(c for c, _ in by_partition(stack, f.table).values()) == 4 * ROWS
    # A late file whose run names it alone: the earlier file of its month is outside the glob (a HeadObject)
    f.put(21)
    late = f.run(s3_uri=f"s3://{BUCKET}/{f.prefix}f-21.csv", mode="replace_partitions")
    assert late["ledger"]["new_keys"] == [f.key(21)]
    assert by_partition(stack, f.table) == clean(f)
    assert staging_left(stack) == []


def test_a_reload_in_a_shared_partition_keeps_the_other_files_rows(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(10, 11, 12)
    f.run(mode="replace_partitions", on_changed="reload")
    f.put(11, version=2, rows=ROWS + 17)  # one of three files of partition 1 rewritten
    result = f.run(mode="replace_partitions", on_changed="reload")
    assert result["ledger"]["reloaded_keys"] == [f.key(11)]
    assert by_partition(stack, f.table) == clean(f)  # the old version's rows gone, the other two files' kept
    assert staging_left(stack) == []


def test_a_reloaded_file_that_left_a_partition_takes_its_old_rows_with_it(stack: LocalStack, bucket: str) -> None:
    """File 10's old version wrote partition 1; its new version writes partition 2 (its rows' ``file``)."""
    f = new_files(stack)
    for n in (10, 20):  # a run each: each file's row records its own partition only
        f.put(n)
        f.run(s3_uri=f"s3://{BUCKET}/{f.prefix}f-{n}.csv", mode="replace_partitions", on_changed="reload")
    body = "".join(f"25,{9_000_000 + i},moved\n" for i in range(ROWS))
    stack.s3_client().put_object(Bucket=BUCKET, Key=f.key(10), Body=body.encode())
    f.run(mode="replace_partitions", on_changed="reload")
    assert by_partition(stack, f.table) == clean(f)
    assert "1" not in by_partition(stack, f.table)


def test_a_partition_that_cannot_be_rebuilt_is_refused_with_the_target_unchanged(
    stack: LocalStack, bucket: str,
) -> None:
    f = new_files(stack)
    f.put(10, 20)
    f.run(mode="replace_partitions")
    before = by_partition(stack, f.table)
    stack.s3_client().delete_object(Bucket=BUCKET, Key=f.key(10))  # an earlier file of partition 1 is gone
    f.put(11)
    with pytest.raises(PlanError, match=rf"partition\(s\) 1 .*{f.key(10)} \(gone from S3\).*mode='append'"):
        f.run(mode="replace_partitions")
    assert by_partition(stack, f.table) == before
    assert staging_left(stack) == []
    states = {k: s for k, _, s, _ in f.ledger()}
    assert states[f.key(11)] == "released"  # the late file is free for the run after the file is restored
    f.put(10)
    f.run(mode="replace_partitions")
    assert by_partition(stack, f.table) == clean(f)


def test_a_ledger_from_before_partitions_were_kept_gets_the_column_and_its_rows_count_everywhere(
    stack: LocalStack, bucket: str,
) -> None:
    f = new_files(stack)
    ledger = f"ledger_old_{uuid.uuid4().hex[:6]}"
    ch = stack.clickhouse_client()
    old = render_create_ledger(TableRef(database="default", name=ledger))
    old = "\n".join(line for line in old.splitlines() if not line.strip().startswith("`partitions`"))
    ch.execute(old)
    f.put(10, 20)
    f.run(mode="replace_partitions", ledger_table=ledger)  # the load adds the column
    columns = [r[0] for r in ch.execute(f"DESCRIBE TABLE default.{ledger}")]
    assert "partitions" in columns
    # rows written before the column was there have none: they may be in any partition
    ch.execute(f"ALTER TABLE default.{ledger} UPDATE partitions = [] WHERE 1", settings={"mutations_sync": 2})
    f.put(11)
    result = monthly(f, 11, ledger_table=ledger)
    assert result["partitions"] == ["1"]
    assert by_partition(stack, f.table) == clean(f)
    recorded = dict(ch.execute(f"SELECT key, partitions FROM default.{ledger} FINAL WHERE key = %(k)s",
                               {"k": f.key(11)}))
    assert recorded == {f.key(11): ["1"]}


def test_a_load_yields_to_another_that_is_bringing_rows_into_the_same_partition(
    stack: LocalStack, bucket: str,
) -> None:
    """Load B recorded file 12 of partition 1 as pending and still holds its staging table: a load of the late
    file 11 fails retryably before the target changes, and its retry, once B is in, keeps B's rows too."""
    f = new_files(stack)
    f.put(10)
    monthly(f, 10)
    ch = stack.clickhouse_client()
    other = uuid.uuid4().hex[:20]
    f.put(12)
    (obj,) = build_manifest(stack.s3_client(), LoadRequest(
        s3_uri=f"s3://{BUCKET}/{f.key(12)}", table=f.table, format="CSV")).objects
    ch.execute(render_write(TableRef(database="default", name=LEDGER_NAME), with_claimed_at=False),
               state_rows(f.table, BUCKET, [obj], load_id=other, query_id=f"s3ch-{other}-try1", state="pending",
                          partitions=["1"]), settings={"insert_deduplicate": 0})
    b_staging = f"default.{STAGING_PREFIX}{other}"
    ch.execute(f"CREATE TABLE {b_staging} AS {f.table}")
    ch.execute(f"INSERT INTO {b_staging} SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{f.key(12)}', "
               f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")
    before = by_partition(stack, f.table)
    f.put(11)
    run_id = f"late-{uuid.uuid4().hex[:6]}"
    with pytest.raises(LoadError, match=rf"load {other} is bringing rows into partition\(s\) 1"):
        monthly(f, 11, run_id=run_id)
    assert by_partition(stack, f.table) == before
    # B finishes: its partition moves in, its staging table goes (its pending row now reads as committed)
    ch.execute(f"ALTER TABLE {b_staging} MOVE PARTITION ID '1' TO TABLE {f.table}")
    ch.execute(f"DROP TABLE {b_staging} SYNC")
    retry = monthly(f, 11, run_id=run_id, try_number=2)
    assert retry["attached_to"] is not None  # the retry took its first try's insert: no second read of file 11
    assert by_partition(stack, f.table) == clean(f)
    assert staging_left(stack) == []

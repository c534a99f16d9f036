"""Loads into a table that materialized views read, on the real local stack: the raw table and every view's
target fed once, whatever statement the worker or the ClickHouse node is SIGKILLed at.

The target has the three shapes of view users build: a ``SummingMergeTree`` rollup (yearly partitions where the
raw table's are monthly), a chain of two views (the first view's target read by the second, unpartitioned), and
a view into a table partitioned by another column. What each table must hold is ClickHouse's own: the same
tables and views, fed by one plain ``INSERT … SELECT FROM s3()`` of the same files.

``make test`` runs a few kills (``S3CH_VIEW_KILLS``, 8 by default); ``make view-kills`` runs more and writes
the counts to bench/results/view_kills.json.
"""

from __future__ import annotations

import os
import random
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import counting, kill_node, report_counts
from tests.integration.test_ledger_model import _FORKS, _killed_load, context_of

BUCKET = "s3ch-views"
STRUCTURE = "d Date, k String, v UInt64"
FILES, ROWS = 4, 3000
KILLS = int(os.environ.get("S3CH_VIEW_KILLS", "8"))
#: Rows the target holds before a replace mode loads the files: 2024-03 is among the files' months (replaced; k9
#: is in no file, so the view partitioned by k loses that partition), 2023-06 and 2025-01 are not (kept).
OLD = [("2023-06-01", "k1", 7), ("2023-06-02", "k2", 5), ("2024-03-04", "k9", 11), ("2024-03-05", "k2", 13),
       ("2025-01-06", "k3", 17)]
#: What each mode leaves, from the target holding OLD (append: from an empty target).
HOW = ("append", "skip_loaded", "replace_partitions", "overwrite")
STATS: Counter[str] = Counter()


def old_rows(keep: bool = False) -> str:
    """OLD as VALUES (``keep``: the rows of months no file holds, those replace_partitions keeps)."""
    return ", ".join(f"('{d}', '{k}', {v})" for d, k, v in OLD if not keep or not d.startswith("2024"))


def tables_ddl(t: str) -> list[str]:
    """The raw table ``t`` and its views: a rollup, a chain of two, a view into another partition key."""
    return [
        f"CREATE TABLE {t} ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY (k, d)",
        f"CREATE TABLE {t}_sum (m UInt32, k String, v UInt64) ENGINE = SummingMergeTree "
        "PARTITION BY intDiv(m, 100) ORDER BY (m, k)",
        f"CREATE MATERIALIZED VIEW {t}_mv_sum TO {t}_sum AS SELECT toYYYYMM(d) AS m, k, sum(v) AS v FROM {t} "
        "GROUP BY m, k",
        f"CREATE TABLE {t}_mid ({STRUCTURE}) ENGINE = MergeTree PARTITION BY toYYYYMM(d) ORDER BY k",
        f"CREATE MATERIALIZED VIEW {t}_mv_mid TO {t}_mid AS SELECT d, k, v * 2 AS v FROM {t} WHERE v % 3 != 0",
        f"CREATE TABLE {t}_top (k String, n UInt64, s UInt64) ENGINE = MergeTree ORDER BY k",
        f"CREATE MATERIALIZED VIEW {t}_mv_top TO {t}_top AS SELECT k, count() AS n, sum(v) AS s FROM {t}_mid "
        "GROUP BY k",
        f"CREATE TABLE {t}_byk (k String, d Date, v UInt64) ENGINE = MergeTree PARTITION BY k ORDER BY d",
        f"CREATE MATERIALIZED VIEW {t}_mv_byk TO {t}_byk AS SELECT k, d, v FROM {t} WHERE k != 'k0'",
    ]


#: Each table's contents as compared: rows (a SummingMergeTree's summed by key, merged or not).
SHAPES = {
    "": "SELECT count(), sum(cityHash64(*)) FROM {t}",
    "_sum": "SELECT count(), sum(cityHash64(m, k, v)) FROM (SELECT m, k, sum(v) AS v FROM {t} GROUP BY m, k)",
    "_mid": "SELECT count(), sum(cityHash64(*)) FROM {t}",
    "_top": "SELECT count(), sum(cityHash64(k, n, s)) FROM (SELECT k, sum(n) AS n, sum(s) AS s FROM {t} GROUP BY k)",
    "_byk": "SELECT count(), sum(cityHash64(*)) FROM {t}",
}


def contents(stack: LocalStack, t: str) -> dict[str, tuple[int, int]]:
    ch = stack.clickhouse_client()
    return {suffix: tuple(ch.execute(sql.format(t=t + suffix))[0]) for suffix, sql in SHAPES.items()}


def staging_left(stack: LocalStack) -> list[str]:
    return [r[0] for r in stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE startsWith(name, %(p)s)", {"p": STAGING_PREFIX})]


@pytest.fixture(scope="module")
def files(stack: LocalStack) -> Iterator[dict[str, Any]]:
    """The files under a prefix of their own, and what ClickHouse makes of them (a plain insert into a copy of the
    tables and views)."""
    stack.create_bucket(BUCKET)
    rng, s3, prefix = random.Random(53), stack.s3_client(), f"v-{uuid.uuid4().hex[:8]}"
    for n in range(FILES):
        lines = [f"2024-{1 + (n + i) % 12:02d}-{1 + i % 28:02d},k{rng.randrange(9)},{rng.randrange(1000)}"
                 for i in range(ROWS)]
        s3.put_object(Bucket=BUCKET, Key=f"{prefix}/f{n}.csv", Body="\n".join(lines).encode())
    expected = {}
    for how, rows in (("append", ""), ("replace_partitions", old_rows(keep=True))):
        ref, ch = new_target(stack, rows, prefix="vref"), stack.clickhouse_client()
        ch.execute(f"INSERT INTO {ref} SELECT * FROM s3('{stack.s3_endpoint}/{BUCKET}/{prefix}/*.csv', "
                   f"'{stack.s3_access_key}', '{stack.s3_secret_key}', 'CSV', '{STRUCTURE}')")
        expected[how] = contents(stack, ref)
    expected["skip_loaded"] = expected["overwrite"] = expected["append"]
    yield {"uri": f"s3://{BUCKET}/{prefix}/*.csv", "expected": expected["append"], "by_how": expected}
    report_counts("Loads into a table with views, killed and retried", STATS, "S3CH_VIEW_KILLS_REPORT")


def new_target(stack: LocalStack, rows: str = "", prefix: str = "vw") -> str:
    """A raw table and its views, holding ``rows`` (VALUES), inserted as users do (the views fed by ClickHouse)."""
    t = f"default.{prefix}_{uuid.uuid4().hex[:8]}"
    ch = stack.clickhouse_client()
    for ddl in tables_ddl(t):
        ch.execute(ddl)
    if rows:
        ch.execute(f"INSERT INTO {t} VALUES {rows}")
    return t


def kwargs(files: dict[str, Any], table: str, mode: str = "append", **extra: Any) -> dict[str, Any]:
    return {"s3_uri": files["uri"], "table": table, "format": "CSV", "structure": STRUCTURE, "mode": mode, **extra}


def outcome(args: dict[str, Any], run_id: str, try_number: int) -> str:
    try:
        S3ToClickHouseOperator(task_id="load", **args).execute(context_of(run_id, try_number, None))
    except Exception as exc:  # noqa: BLE001 - the caller says what the try must do
        return str(exc)
    return "done"


def test_an_append_feeds_every_view_once_through_staging_twins(stack: LocalStack, files: dict[str, Any]) -> None:
    t = new_target(stack)
    result = S3ToClickHouseOperator(task_id="load", **kwargs(files, t)).execute(context_of("run-1", 1, None))
    assert "staging twins" in result["mode_reason"]
    assert contents(stack, t) == files["expected"]
    assert result["written_rows"] == FILES * ROWS  # the table's rows, not the views' beside them
    assert staging_left(stack) == []


def test_the_replace_modes_recompute_every_view_from_the_table_they_leave(
        stack: LocalStack, files: dict[str, Any]) -> None:
    """replace_partitions: in each view's target the partitions the replaced and the new rows reach hold what the
    view makes of the table as it is after (the yearly rollup's 2024, every k the rows carry, the unpartitioned
    top), the others are kept (2023, 2025), a partition no row reaches any more is dropped (k9); overwrite: each
    view's target holds what its view makes of the files."""
    for mode in ("replace_partitions", "overwrite"):
        t = new_target(stack, old_rows())
        result = S3ToClickHouseOperator(task_id="load", **kwargs(files, t, mode)).execute(context_of("run-r", 1, None))
        assert "recomputed through staging twins" in result["mode_reason"]
        assert contents(stack, t) == files["by_how"][mode], mode
        assert staging_left(stack) == []
        ch = stack.clickhouse_client()
        assert ch.execute(f"SELECT count() FROM {t}_byk WHERE k = 'k9'") == [(0,)]  # dropped
        assert ch.execute(f"SELECT count() FROM {t}_sum WHERE m = 202501") == [(int(mode != "overwrite"),)]  # kept


def test_views_a_recomputation_cannot_replay_refuse_replace_partitions_and_leave_everything(
        stack: LocalStack, files: dict[str, Any]) -> None:
    t = new_target(stack, old_rows())
    before = contents(stack, t)
    with pytest.raises(PlanError, match="skip_loaded=True with mode='replace_partitions'"):
        S3ToClickHouseOperator(task_id="load", **kwargs(files, t, "replace_partitions", skip_loaded=True)).execute(
            context_of("run-l", 1, None))
    ch = stack.clickhouse_client()
    ch.execute(f"CREATE TABLE {t}_at (k String, at DateTime) ENGINE = MergeTree ORDER BY k")
    ch.execute(f"CREATE MATERIALIZED VIEW {t}_mv_at TO {t}_at AS SELECT k, now() AS at FROM {t}")
    with pytest.raises(PlanError, match=r"cannot be recomputed exactly: materialized view .*_mv_at calls now\(\)"):
        S3ToClickHouseOperator(task_id="load", **kwargs(files, t, "replace_partitions")).execute(
            context_of("run-n", 1, None))
    assert contents(stack, t) == before
    assert staging_left(stack) == []
    # overwrite replays nothing: the insert feeds every view, now() included, as a plain insert would
    S3ToClickHouseOperator(task_id="load", **kwargs(files, t, "overwrite")).execute(context_of("run-o", 1, None))
    assert contents(stack, t) == files["by_how"]["overwrite"]
    assert ch.execute(f"SELECT count() FROM {t}_at") == [(FILES * ROWS,)]
    assert staging_left(stack) == []


def _killed_at_the_mark(env: dict[str, str], args: dict[str, Any], run_id: str) -> None:
    """In a forked worker: the load, SIGKILLed as it marks its staging table filled (the insert finished)."""
    os.environ.update(env)
    original = ClickHouseHook.execute

    def execute(self: ClickHouseHook, sql: str, *a: Any, **k: Any) -> Any:
        if sql.startswith(f"ALTER TABLE `default`.`{STAGING_PREFIX}") and "MODIFY COMMENT" in sql:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, sql, *a, **k)

    ClickHouseHook.execute = execute  # type: ignore[method-assign]
    S3ToClickHouseOperator(task_id="load", **args).execute(context_of(run_id, 1, None))


def test_a_retry_after_a_view_was_dropped_leaves_none_of_its_staging(stack: LocalStack, files: dict[str, Any]) -> None:
    """The worker dies once the insert fed every twin; a view is dropped before the retry, which brings in the
    other views' copies and drops the gone view's twin and copy (it plans from the views there are now)."""
    t = new_target(stack)
    args, run_id = kwargs(files, t), f"run-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
    worker = _FORKS.Process(target=_killed_at_the_mark, args=(env, args, run_id))
    worker.start()
    worker.join(300)
    assert worker.exitcode == -signal.SIGKILL
    assert any(name.startswith(STAGING_PREFIX) for name in staging_left(stack))
    stack.clickhouse_client().execute(f"DROP VIEW {t}_mv_byk SYNC")
    assert outcome(args, run_id, 2) == "done"
    got, want = contents(stack, t), files["expected"]
    assert {k: v for k, v in got.items() if k != "_byk"} == {k: v for k, v in want.items() if k != "_byk"}
    assert got["_byk"] == (0, 0)  # dropped before the try that fed it published
    assert staging_left(stack) == []


def _scenarios() -> list[tuple[str, str, int, int]]:
    rng = random.Random(int(os.environ.get("S3CH_VIEW_KILLS_SEED", "5353")))
    out = []
    for n in range(KILLS):
        out.append((HOW[n % len(HOW)], ("worker", "node")[(n // len(HOW)) % 2], rng.randint(2, 36),
                    rng.choice([0, 0, 3, 15])))
    return out


@pytest.mark.parametrize(("how", "victim", "die_at", "in_flight_ms"), _scenarios())
def test_a_load_killed_at_a_statement_and_retried_feeds_every_view_once(
        stack: LocalStack, files: dict[str, Any], how: str, victim: str, die_at: int, in_flight_ms: int) -> None:
    """The worker or the node SIGKILLed at the load's ``die_at``-th statement (or ``in_flight_ms`` after it was
    sent); the retry (try 2, a third when the node was still starting) ends with every table as ClickHouse's own
    insert made it, and no staging table, twin or copy left."""
    t = new_target(stack, old_rows() if how in ("replace_partitions", "overwrite") else "")
    extra = {"skip_loaded": True, "ledger_table": f"vl_{t.split('_')[-1]}"} if how == "skip_loaded" else {}
    mode = how if how in ("replace_partitions", "overwrite") else "append"
    args, run_id = kwargs(files, t, mode, **extra), f"run-{uuid.uuid4().hex[:8]}"
    if victim == "worker":
        env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
        worker = _FORKS.Process(target=_killed_load, args=(env, args, run_id, die_at, in_flight_ms))
        worker.start()
        worker.join(300)
        assert worker.exitcode is not None, "the worker neither died nor finished in 300 s"
        first = "killed" if worker.exitcode == -signal.SIGKILL else "done" if worker.exitcode == 0 else "failed"
    else:
        with counting(die_at, in_flight_ms, act=lambda: kill_node(stack)) as sent:
            first = outcome(args, run_id, 1)
        stack.restart_node(0)
        if sent[0] < die_at:
            first = "done"
    STATS[f"{how}, {victim} killed: {'the load finished before' if first == 'done' else 'retried'}"] += 1
    if first != "done":
        STATS[f"killed at statement {die_at:02d}{f' +{in_flight_ms} ms' if in_flight_ms else ' (before)'}"] += 1
    if first != "done":
        second = outcome(args, run_id, 2)
        if second != "done":  # the node was still starting
            STATS["retries that needed a third try"] += 1
            second = outcome(args, run_id, 3)
        assert second == "done", second
    assert contents(stack, t) == files["by_how"][how], f"{how}, {victim} killed at statement {die_at}"
    assert staging_left(stack) == []
    if how == "skip_loaded":  # every file is recorded: the next run loads nothing
        assert outcome(args, f"run-{uuid.uuid4().hex[:8]}", 1) == "done"
        assert contents(stack, t) == files["by_how"][how]

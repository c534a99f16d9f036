"""Files the server cannot read, set aside (``on_bad_file='set_aside'``) on the real local stack: the other files load
exactly once, the bad version is recorded and left out of later runs until it is put again, a run that meets too many
stops, and a worker killed at any statement around the setting aside is retried to the same end."""

from __future__ import annotations

import os
import signal
import uuid
from typing import Any

import pytest

from airflow_provider_s3ch.core.ledger_request import LEDGER_NAME
from airflow_provider_s3ch.errors import ClickHouseQueryError, InvalidRequestError
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.load.set_aside import SET_ASIDE_LIMIT
from airflow_provider_s3ch.local import LocalStack
from tests.integration.faults import fingerprint
from tests.integration.support import fake_context
from tests.integration.test_ledger import BUCKET, ROWS, Files, new_files, staging_left
from tests.integration.test_ledger_model import _FORKS, _killed_load

pytestmark = pytest.mark.integration

SET_ASIDE = f"default.{LEDGER_NAME}_set_aside"


@pytest.fixture(scope="module")
def bucket(stack: LocalStack) -> str:
    stack.create_bucket(BUCKET)
    return BUCKET


def put_bad(f: Files, n: int, how: str = "row") -> None:
    """File ``n`` with a row the server cannot parse (``row``: a number that is not one), or one short of a column
    (``short``)."""
    bad = "not-a-number,1,bad\n" if how == "row" else f"{n},1\n"
    body = "".join(f"{n},{n * 100_000 + i},ok\n" for i in range(ROWS // 2)) + bad
    f.stack.s3_client().put_object(Bucket=BUCKET, Key=f.key(n), Body=body.encode())


def clean_of(f: Files, numbers: list[int]) -> tuple[int, int]:
    """count() and sum(cityHash64(*)) of one plain load of the files ``numbers``."""
    ch, name = f.stack.clickhouse_client(), f"default.clean_{uuid.uuid4().hex[:8]}"
    ch.execute(f"CREATE TABLE {name} AS {f.table}")
    keys = ",".join(f.key(n) for n in numbers)
    ch.execute(f"INSERT INTO {name} SELECT * FROM s3('{f.stack.s3_endpoint}/{BUCKET}/{{{keys}}}', "
               f"'{f.stack.s3_access_key}', '{f.stack.s3_secret_key}', 'CSV', 'file UInt16, id UInt32, v String')")
    out = fingerprint(f.stack, name)
    ch.execute(f"DROP TABLE {name} SYNC")
    return out


def set_aside_rows(f: Files) -> list[tuple[str, str]]:
    """(key, error) of the target's files set aside."""
    ch = f.stack.clickhouse_client()
    if not ch.execute(f"EXISTS TABLE {SET_ASIDE}")[0][0]:
        return []
    return [tuple(r) for r in ch.execute(f"SELECT key, error FROM {SET_ASIDE} FINAL WHERE table = %(t)s ORDER BY key",
                                         {"t": f.table})]


def test_a_file_the_server_cannot_parse_is_set_aside_and_the_others_load_once(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 3)
    put_bad(f, 2)
    first = f.run(on_bad_file="set_aside")
    assert first["written_rows"] == 2 * ROWS and first["ledger"]["set_aside"] == 1
    (aside,) = first["ledger"]["set_aside_files"]
    assert aside["key"] == f.key(2) and f"in file {BUCKET}/{f.key(2)}" in aside["error"]
    assert "Cannot parse" in aside["error"] and "not-a-number" not in aside["error"]  # the rows stay out
    assert fingerprint(stack, f.table) == clean_of(f, [1, 3])
    assert [k for k, _ in set_aside_rows(f)] == [f.key(2)] and staging_left(stack) == []
    # Later runs leave the version out, and say so
    again = f.run(run_id="again", on_bad_file="set_aside")
    assert again["written_rows"] == 0 and again["ledger"]["set_aside_before_keys"] == [f.key(2)]
    # A listed run without set_aside still leaves it out (the ledger's record), rather than failing on it
    assert f.run(run_id="plain")["ledger"]["set_aside_before"] == 1
    # Put again with good bytes (another ETag): loaded
    f.put(2)
    fixed = f.run(run_id="fixed", on_bad_file="set_aside")
    assert fixed["ledger"]["new_keys"] == [f.key(2)] and fixed["ledger"]["set_aside_before"] == 0
    assert fingerprint(stack, f.table) == f.clean()
    loaded = f.loaded_once()  # the bad version: released, never loaded
    assert sorted(loaded.values()) == [0, 1, 1, 1] and loaded[f"{f.key(2)}@{aside['etag'][:6]}"] == 0


def test_in_chunks_a_bad_file_alone_in_its_chunk_leaves_the_chunk_empty(stack: LocalStack, bucket: str) -> None:
    f = new_files(stack)
    f.put(1, 2, 4)
    put_bad(f, 3, how="short")
    out = f.run(on_bad_file="set_aside", max_files_per_load=1)
    assert out["written_rows"] == 3 * ROWS and [a["key"] for a in out["ledger"]["set_aside_files"]] == [f.key(3)]
    assert fingerprint(stack, f.table) == clean_of(f, [1, 2, 4]) and staging_left(stack) == []
    assert sorted(f.loaded_once().values()) == [0, 1, 1, 1]


def test_by_default_a_bad_file_fails_the_load_naming_it_and_nothing_is_set_aside(stack: LocalStack,
                                                                                  bucket: str) -> None:
    f = new_files(stack)
    f.put(1)
    put_bad(f, 2)
    with pytest.raises(ClickHouseQueryError, match=f"in file {BUCKET}/{f.key(2)}"):
        f.run()
    assert set_aside_rows(f) == [] and fingerprint(stack, f.table)[0] == 0 and staging_left(stack) == []


def test_a_run_stops_setting_aside_after_the_limit(stack: LocalStack, bucket: str) -> None:
    """So many files the server cannot read are the table's or the structure's fault: the run fails, saying so."""
    f = new_files(stack)
    for n in range(SET_ASIDE_LIMIT + 2):
        put_bad(f, n)
    with pytest.raises(ClickHouseQueryError, match=f"set aside {SET_ASIDE_LIMIT} files already"):
        f.run(on_bad_file="set_aside")
    assert len(set_aside_rows(f)) == SET_ASIDE_LIMIT and staging_left(stack) == []
    assert fingerprint(stack, f.table)[0] == 0


def test_set_aside_needs_the_ledger(stack: LocalStack, bucket: str) -> None:
    from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

    f = new_files(stack)
    with pytest.raises(InvalidRequestError, match="on_bad_file='set_aside' needs skip_loaded=True"):
        S3ToClickHouseOperator(task_id="load", s3_uri=f.uri, table=f.table, on_bad_file="set_aside").execute(
            fake_context("load", 1))


def _statements(f: Files, kwargs: dict[str, Any]) -> list[str]:
    """The statements one set-aside load sends (its heartbeats' aside), by their first words."""
    sent: list[str] = []
    saved = ClickHouseHook.execute, ClickHouseHook.run_insert

    def execute(self: Any, sql: str, *a: Any, **k: Any) -> Any:
        sent.append(" ".join(sql.split())[:70])
        return saved[0](self, sql, *a, **k)

    def run_insert(self: Any, sql: str, **k: Any) -> Any:
        sent.append("the insert")
        return saved[1](self, sql, **k)

    ClickHouseHook.execute, ClickHouseHook.run_insert = execute, run_insert
    try:
        from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
        S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 1, "count"))
    finally:
        ClickHouseHook.execute, ClickHouseHook.run_insert = saved
    return sent


def test_a_worker_killed_around_the_setting_aside_is_retried_to_the_same_end(stack: LocalStack, bucket: str) -> None:
    """SIGKILLed before each statement from the failed insert to the insert without the file (and 5 ms into the failed
    insert, the record's write and the release): the retry loads the good files once, the bad one is set aside once,
    no staging table is left."""
    probe = new_files(stack)
    probe.put(1, 3)
    put_bad(probe, 2)
    probe_kwargs = {"s3_uri": probe.uri, "table": probe.table, "format": "CSV",
                    "structure": "file UInt16, id UInt32, v String", "skip_loaded": True, "on_bad_file": "set_aside"}
    sent = [s for s in _statements(probe, probe_kwargs) if "heartbeat" not in s]
    inserts = [i + 1 for i, s in enumerate(sent) if s == "the insert"]
    assert len(inserts) == 2, sent  # the insert that failed, the insert without the file
    aside = next(i + 1 for i, s in enumerate(sent) if "_set_aside" in s and s.startswith("INSERT"))
    points = [(n, 0) for n in range(inserts[0], inserts[1] + 1)] + [(n, 5) for n in (inserts[0], aside, aside + 1)]
    env = {k: v for k, v in os.environ.items() if k.startswith("AIRFLOW")}
    for die_at, in_flight_ms in points:
        f = new_files(stack)
        f.put(1, 3)
        put_bad(f, 2)
        kwargs = {**probe_kwargs, "s3_uri": f.uri, "table": f.table}
        worker = _FORKS.Process(target=_killed_load, args=(env, kwargs, "run", die_at, in_flight_ms))
        worker.start()
        worker.join(300)
        assert worker.exitcode == -signal.SIGKILL, (die_at, worker.exitcode)
        f.run(try_number=2, run_id="run", on_bad_file="set_aside")
        where = f"killed before statement {die_at} ({sent[die_at - 1]}) +{in_flight_ms} ms"
        assert fingerprint(stack, f.table) == clean_of(f, [1, 3]), where
        assert [k for k, _ in set_aside_rows(f)] == [f.key(2)], where
        assert staging_left(stack) == [], where
        assert f.run(run_id="next", on_bad_file="set_aside")["written_rows"] == 0, where


def test_into_a_table_with_a_view_the_view_gets_the_other_files_once(stack: LocalStack, bucket: str) -> None:
    """The failed insert fed the view's staging twin too: it is dropped with the staging table, and the insert without
    the file feeds the view once."""
    f = new_files(stack)
    ch, agg = stack.clickhouse_client(), f"{f.table}_agg"
    ch.execute(f"CREATE TABLE {agg} (file UInt16, n UInt64) ENGINE = SummingMergeTree ORDER BY file")
    ch.execute(f"CREATE MATERIALIZED VIEW {f.table}_mv TO {agg} AS SELECT file, count() AS n FROM {f.table} "
               "GROUP BY file")
    f.put(1, 3)
    put_bad(f, 2)
    out = f.run(on_bad_file="set_aside")
    assert [a["key"] for a in out["ledger"]["set_aside_files"]] == [f.key(2)]
    assert fingerprint(stack, f.table) == clean_of(f, [1, 3])
    assert ch.execute(f"SELECT file, sum(n) FROM {agg} GROUP BY file ORDER BY file") == [(1, ROWS), (3, ROWS)]
    assert staging_left(stack) == []

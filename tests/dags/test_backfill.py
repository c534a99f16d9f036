"""The backfill example through Airflow (`airflow dags test`) on the real local stack:
running one month twice gives the same rows, and the other months are untouched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.cli import read_xcom
from airflow_provider_s3ch.local.sample import write_posts
from tests.dags.test_dags import ROOT, _airflow

DAG_ID = "s3_to_clickhouse_backfill"
CONF = {"bucket": "s3ch-backfill", "database": "backfill"}


@pytest.fixture(scope="module")
def backfill_stack() -> Iterator[LocalStack]:
    with LocalStack(nodes=1, region="eu-west-3") as stack:
        yield stack


def _fingerprint(stack: LocalStack) -> tuple[int, int, dict[int, int]]:
    ch = stack.clickhouse_client()
    count, checksum = ch.execute("SELECT count(), sum(cityHash64(*)) FROM backfill.posts")[0]
    parts = dict(ch.execute("SELECT toYYYYMM(CreationDate) AS p, count() FROM backfill.posts GROUP BY p ORDER BY p"))
    return int(count), int(checksum), {int(k): int(v) for k, v in parts.items()}


def _dags_test(home: Path, stack: LocalStack, logical_date: str) -> dict:
    out = _airflow(home, ROOT / "example_dags", stack, "dags", "test", DAG_ID, logical_date, "-c", json.dumps(CONF))
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    assert "state=success" in out.stdout + out.stderr, (out.stdout + out.stderr)[-5000:]
    return read_xcom(home, DAG_ID, "load_month")


def test_rerunning_a_month_gives_the_same_rows(tmp_path: Path, backfill_stack: LocalStack) -> None:
    stack = backfill_stack
    stack.create_bucket("s3ch-backfill")
    data = write_posts(stack.s3_client(), "s3ch-backfill", rows=12_000, months=6)  # 2008-07 .. 2008-12
    home = tmp_path / "airflow"
    home.mkdir()
    for args in (("db", "migrate"), ("dags", "reserialize")):
        out = _airflow(home, ROOT / "example_dags", stack, *args)
        assert out.returncode == 0, out.stderr[-3000:]

    july = _dags_test(home, stack, "2008-07-01")
    assert july["partitions"] == ["200807"] and july["mode"] == "replace_partitions"
    after_july = _fingerprint(stack)
    assert after_july[2] == {200807: data.rows // 6}

    first = _dags_test(home, stack, "2008-08-01")
    after_first = _fingerprint(stack)
    second = _dags_test(home, stack, "2008-08-01")
    after_second = _fingerprint(stack)

    assert first["partitions"] == second["partitions"] == ["200808"]
    assert first["written_rows"] == second["written_rows"] == data.rows // 6
    assert after_first == after_second, "re-running a month must give the same rows"
    assert after_second[2] == {200807: data.rows // 6, 200808: data.rows // 6}
    assert after_second[2][200807] == after_july[2][200807]
    print(
        f"\nbackfill: after 2008-07 {after_july[:2]}; after 2008-08 run 1 {after_first[:2]}, "
        f"run 2 {after_second[:2]}; run 2 query {second['query_id']} attached_to={second['attached_to']}"
    )

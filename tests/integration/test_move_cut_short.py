"""An append whose ``MOVE PARTITION`` a crash of the server cut short, on one node and on the 3-node cluster.

``MOVE PARTITION`` on a MergeTree table is not atomic under a crash: the target takes the moved part, then the
source lets it go (an empty part covering it); a SIGKILL between the two leaves the part in both tables after the
restart (seen on the local cluster: a retry then moved it again, doubling its rows). Here that state is made
without a race: the first ``MOVE`` of a load is replaced by ``ATTACH PARTITION … FROM`` of its first partition (a
copy that keeps the part's UUID, as the cut-short move does) and a lost connection; the retry must bring the other
partitions in and leave that one where it is: every row once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import POSTS_DDL, SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import SAMPLE_BUCKET, fake_context

pytestmark = pytest.mark.integration

_MOVE = re.compile(r"ALTER TABLE (\S+) MOVE PARTITION ID '([^']+)' TO TABLE (`[^`]*`\.`[^`]*`)")


@pytest.fixture
def cut_short() -> Iterator[list[str]]:
    """The first ``MOVE PARTITION`` sent becomes a copy of its first partition and a lost connection; the
    partitions so copied are listed."""
    original, copied = ClickHouseHook.execute, []

    def execute(self: ClickHouseHook, sql: Any, *a: Any, **k: Any) -> Any:
        move = _MOVE.match(str(sql)) if not copied else None
        if move is not None:
            staging, pid, target = move.groups()
            original(self, f"ALTER TABLE {target} ATTACH PARTITION ID '{pid}' FROM {staging}", client=k.get("client"))
            copied.append(pid)
            raise ConnectionResetError("the server was killed during MOVE PARTITION")
        return original(self, sql, *a, **k)

    ClickHouseHook.execute = execute  # type: ignore[method-assign]
    try:
        yield copied
    finally:
        ClickHouseHook.execute = original  # type: ignore[method-assign]


def _counts(stack: LocalStack, source: str) -> dict[str, tuple[int, int]]:
    rows = stack.clickhouse_client(0).execute(
        f"SELECT toString(toYYYYMM(CreationDate)) AS p, count(), sum(cityHash64(*)) FROM {source} GROUP BY p")
    return {str(p): (int(c), int(h)) for p, c, h in rows}


def _files(stack: LocalStack, data: SampleDataset) -> dict[str, tuple[int, int]]:
    url = f"{stack.s3_endpoint}/{SAMPLE_BUCKET}/{data.prefix}*.parquet"
    return _counts(stack, f"s3('{url}', '{stack.s3_access_key}', '{stack.s3_secret_key}', 'Parquet')")


def _load_cut_short_then_retry(stack: LocalStack, table: str, data: SampleDataset, copied: list[str],
                               **kwargs: Any) -> dict[str, Any]:
    kwargs = {"s3_uri": data.s3_uri, "table": table, "mode": "append", **kwargs}
    run_id = f"cut-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match="killed during MOVE PARTITION"):
        S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 1, run_id))
    assert copied, "no MOVE was reached"
    return S3ToClickHouseOperator(task_id="load", **kwargs).execute(fake_context("load", 2, run_id))


def test_one_node_retry_moves_only_what_the_cut_short_move_left(stack: LocalStack, cut_short: list[str]) -> None:
    data = write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=1_200, months=4, prefix=f"cut-{uuid.uuid4().hex[:6]}/")
    table = f"default.cut_{uuid.uuid4().hex[:8]}"
    stack.clickhouse_client(0).execute(POSTS_DDL.replace("{engine}", "MergeTree").format(table=table))
    result = _load_cut_short_then_retry(stack, table, data, cut_short)
    assert result["attached_to"], result
    assert _counts(stack, table) == _files(stack, data), "a partition the cut-short move had moved came in twice"


def test_cluster_retry_moves_only_what_the_cut_short_move_left(cluster_stack: LocalStack,
                                                               cut_short: list[str]) -> None:
    stack = cluster_stack
    data = write_posts(stack.s3_client(), SAMPLE_BUCKET, rows=1_800, months=6, prefix=f"cut-{uuid.uuid4().hex[:6]}/")
    dist, _ = stack.create_distributed_table(f"cut_{uuid.uuid4().hex[:8]}", POSTS_DDL.replace("{engine}", "MergeTree"))
    result = _load_cut_short_then_retry(stack, dist, data, cut_short, strategy="distributed",
                                        clickhouse_conn_id="clickhouse_cluster", aws_conn_id="aws_cluster")
    assert result["attached_to"], result
    assert _counts(stack, dist) == _files(stack, data), "a partition the cut-short move had moved came in twice"

"""A load over its memory cap, on the real local stack: the operator tries smaller plans inside the task.

200,000 sample posts in two Parquet files of one row group each need more than 384 MiB
with the first plan and fits with a smaller one; at 64 MiB no plan fits. The server's own figures
(``system.query_log``) say what each attempt ran with and used.
"""

from __future__ import annotations

import pytest

from airflow_provider_s3ch.core.recovery import STAGING_PREFIX
from airflow_provider_s3ch.errors import QueryMemoryLimitError
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def posts(stack: LocalStack) -> SampleDataset:
    """200,000 posts in two monthly Parquet files (~26 MB, one row group each)."""
    bucket = "s3ch-memory"
    stack.create_bucket(bucket)
    return write_posts(stack.s3_client(), bucket, rows=200_000, months=2, prefix="memory/posts/")


def _attempts(stack: LocalStack, query_id: str) -> list[tuple[str, int, int, str]]:
    """(type, memory_usage, max_memory_usage, max_insert_threads) of every run of the load's query id."""
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    return [(str(t), int(m), int(cap), str(threads)) for t, m, cap, threads in ch.execute(
        "SELECT toString(type), memory_usage, toUInt64(Settings['max_memory_usage']), Settings['max_insert_threads'] "
        "FROM system.query_log WHERE query_id = %(q)s AND type != 'QueryStart' ORDER BY event_time_microseconds",
        {"q": query_id})]  # fmt: skip


def test_a_load_over_its_cap_finishes_within_it_with_a_smaller_plan(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, memory_cap="384MiB")
    context = fake_context()
    result = op.execute(context)
    assert count(stack, posts_table) == posts.rows and result["written_rows"] == posts.rows
    attempts = result["memory_attempts"]
    assert len(attempts) >= 2 and attempts[0]["step"] == "plan" and attempts[-1]["error"] is None
    assert all("memory limit exceeded" in a["error"] for a in attempts[:-1]), attempts
    assert attempts[-1]["step"] in ("halve", "one_thread", "smallest")
    # The server ran the same query id once per attempt, every time under the cap: never above it.
    runs = _attempts(stack, result["query_id"])
    assert [t for t, *_ in runs] == ["ExceptionWhileProcessing"] * (len(attempts) - 1) + ["QueryFinish"]
    assert {cap for _, _, cap, _ in runs} == {384 * MiB}
    assert all(m <= 384 * MiB for _, m, _, _ in runs) and result["memory_usage"] <= 384 * MiB
    assert result["settings"]["max_insert_threads"] == int(runs[-1][3])
    assert not stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE startsWith(name, %(p)s)", {"p": STAGING_PREFIX})
    print(f"\n384 MiB cap: {[(a['step'], a['error'] and a['error'][:60]) for a in attempts]}; "
          f"peak {result['memory_usage'] / MiB:.0f} MiB")


def test_a_cap_no_plan_fits_fails_naming_what_was_tried_and_leaves_the_table(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, memory_cap="64MiB")
    with pytest.raises(QueryMemoryLimitError) as err:
        op.execute(fake_context())
    message = str(err.value)
    assert "does not fit memory_cap 64 MiB with any plan" in message and "raise memory_cap" in message
    assert "plan:" in message and "smallest:" in message
    assert count(stack, posts_table) == 0
    assert not stack.clickhouse_client().execute(
        "SELECT name FROM system.tables WHERE startsWith(name, %(p)s)", {"p": STAGING_PREFIX})


def test_later_chunks_start_from_the_plan_that_fitted(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    """A chunked load (one file per chunk): each chunk starts from the step the chunk before it ended on. At this
    cap the first plan of chunk 1 usually goes over and a smaller one fits, so chunk 2 starts from that step
    instead of failing the first plan again. The server's memory use varies from run to run (one CI run fitted
    chunk 1 at 210 MiB with the first plan): then chunk 2 starts from the plan too, and the test says so."""
    op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, memory_cap="256MiB",
                                skip_loaded=True, max_files_per_load=1)
    result = op.execute(fake_context())
    assert count(stack, posts_table) == posts.rows
    by_chunk: dict[int, list[str]] = {}
    for a in result["memory_attempts"]:
        by_chunk.setdefault(a["chunk"], []).append(a["step"])
    assert set(by_chunk) <= {1, 2}, by_chunk
    # A chunk that fitted its first plan records no attempt; one that stepped down records each step.
    ended_on = by_chunk[1][-1] if 1 in by_chunk else "plan"
    if 1 in by_chunk:
        assert by_chunk[1][0] == "plan" and len(by_chunk[1]) >= 2, by_chunk
        assert by_chunk.get(2, [])[:1] == [ended_on], by_chunk  # chunk 2 started where chunk 1 ended
    else:
        print(f"\nchunk 1 fitted its first plan this run; chunk 2: {by_chunk.get(2, ['plan'])}")
        assert by_chunk.get(2, ["plan"])[0] == "plan", by_chunk
    assert all(c["memory_usage"] <= 256 * MiB for c in result["chunks"])

"""Learning from past loads, on the real local stack: a second load of the same target and files plans from
the first one's figures in ``system.query_log`` (core/history.py)."""

from __future__ import annotations

import gzip
import io

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from airflow_provider_s3ch.core.history import SCALE_BOUNDS, TAG_PREFIX, parse_tag
from airflow_provider_s3ch.local import LocalStack
from airflow_provider_s3ch.local.sample import SampleDataset, write_posts
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator
from tests.integration.support import count, fake_context, query_log

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def posts(stack: LocalStack) -> SampleDataset:
    """200,000 posts in two Parquet files of one row group each (the memory-replan test's data)."""
    bucket = "s3ch-history"
    stack.create_bucket(bucket)
    return write_posts(stack.s3_client(), bucket, rows=200_000, months=2, prefix="history/posts/")


@pytest.fixture(scope="module")
def csv_posts(stack: LocalStack, posts: SampleDataset) -> str:
    """The same posts as gzip'd CSV files (no footers: the plan assumes a fixed expansion): their glob."""
    s3 = stack.s3_client()
    for key in posts.keys:
        table = pq.read_table(io.BytesIO(s3.get_object(Bucket=posts.bucket, Key=key)["Body"].read()))
        out = io.BytesIO()
        pacsv.write_csv(table, out)
        s3.put_object(
            Bucket=posts.bucket,
            Key=key.replace("history/posts/", "history/csv/").replace(".parquet", ".csv.gz"),
            Body=gzip.compress(out.getvalue(), compresslevel=1),
        )
    return f"s3://{posts.bucket}/history/csv/*.csv.gz"


def _runs(stack: LocalStack, query_id: str) -> list[tuple[str, str, str]]:
    ch = stack.clickhouse_client()
    ch.execute("SYSTEM FLUSH LOGS")
    return [(str(t), str(c), str(threads)) for t, c, threads in ch.execute(
        "SELECT toString(type), log_comment, Settings['max_insert_threads'] FROM system.query_log "
        "WHERE query_id = %(q)s AND type != 'QueryStart' ORDER BY event_time_microseconds", {"q": query_id})]


def test_a_second_load_at_the_same_cap_starts_from_the_step_the_first_needed(
    stack: LocalStack, posts: SampleDataset, posts_table: str
) -> None:
    def load() -> dict:
        op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, memory_cap="384MiB")
        return op.execute(fake_context())

    first = load()
    assert first["history"] is None
    assert first["memory_attempts"][0]["step"] == "plan" and first["memory_attempts"][0]["error"]
    fitted = first["memory_attempts"][-1]["step"]
    runs = _runs(stack, first["query_id"])
    assert [parse_tag(c).step for _, c, _ in runs] == [a["step"] for a in first["memory_attempts"]]

    second = load()
    assert count(stack, posts_table) == 2 * posts.rows
    assert second["history"]["loads"] == 1 and second["history"]["start_step"] == fitted
    assert any(c.startswith(f"starts from step {fitted!r}") for c in second["history"]["changes"])
    # No failed attempt this time: the server ran the load once, with the smaller plan, under the cap.
    assert second["memory_attempts"] == [{"step": fitted, "settings": first["memory_attempts"][-1]["settings"],
                                          "error": None, "from_history": True}]
    runs = _runs(stack, second["query_id"])
    assert [(t, parse_tag(c).step) for t, c, _ in runs] == [("QueryFinish", fitted)]
    assert second["memory_usage"] <= 384 * MiB


def test_a_second_load_learns_the_expansion_and_scales_its_prediction(
    stack: LocalStack, csv_posts: str, posts_table: str
) -> None:
    results = []
    for _ in range(2):
        op = S3ToClickHouseOperator(task_id="load", s3_uri=csv_posts, table=posts_table)
        results.append(op.execute(fake_context()))
        stack.clickhouse_client().execute(f"TRUNCATE TABLE {posts_table}")
    first, second = results
    # The tag is the server's (system.query_log), not the XCom's: settings show what the plan chose.
    assert first["history"] is None and "log_comment" not in first["settings"]
    assert query_log(stack, first["query_id"])["log_comment"].startswith(TAG_PREFIX)
    learned = second["history"]
    assert learned["loads"] == 1
    assert learned["expansion"] == pytest.approx(first["written_bytes"] / first["bytes"], rel=0.01)
    assert "learned from earlier loads" in second["settings_reasons"]["min_insert_block_size_bytes"]
    # The first prediction is the model's; the second is scaled by the first's measured / predicted.
    # (within the bounds the scale is held to: how far below its prediction a small load peaks moves with the
    # machine's load, 0.48 on a busy one)
    low, high = SCALE_BOUNDS
    assert learned["memory_scale"] == pytest.approx(min(max(first["memory_vs_predicted"], low), high), abs=0.01)
    # The second prediction is its model (with the learned expansion) times the learned scale. Whether it lands
    # nearer its peak is the benchmark's to show (bench/history_bench.py): the peak of this small load moves
    # with the machine's load (340-710 MiB measured for the same insert), more than one run can tell.
    facts = parse_tag(query_log(stack, second["query_id"])["log_comment"])
    assert facts is not None and facts.model_bytes > 0
    assert second["predicted_memory_usage"] == int(facts.model_bytes * learned["memory_scale"])
    assert "learned from earlier loads" in second["predicted_memory_reason"]
    assert f"x {learned['memory_scale']:.2f} (measured / predicted" in second["predicted_memory_reason"]
    print(f"\nmeasured / predicted peak: first {first['memory_vs_predicted']}, second {second['memory_vs_predicted']}; "
          f"expansion {learned['expansion']} (the plan's fixed factor 4)")


def test_learning_can_be_turned_off(stack: LocalStack, posts: SampleDataset, posts_table: str) -> None:
    for _ in range(2):
        op = S3ToClickHouseOperator(task_id="load", s3_uri=posts.s3_uri, table=posts_table, learn_from_history=False)
        result = op.execute(fake_context())
    assert result["history"] is None and query_log(stack, result["query_id"])["log_comment"] == ""


@pytest.mark.parametrize("glob", ["*.csv.gz", "*"])
def test_the_history_is_read_whether_the_glob_names_the_format_or_only_the_files_do(
    stack: LocalStack, csv_posts: str, posts_table: str, glob: str
) -> None:
    # ``*.csv.gz`` names the format: the earlier loads are read before the listing, under the glob's key;
    # ``*`` does not: they are read after it, under the key of the format the files' extensions name.
    uri = csv_posts.replace("*.csv.gz", glob)
    results = []
    for _ in range(2):
        op = S3ToClickHouseOperator(task_id="load", s3_uri=uri, table=posts_table)
        results.append(op.execute(fake_context()))
    assert count(stack, posts_table) == 2 * results[0]["written_rows"] > 0
    stack.clickhouse_client().execute(f"TRUNCATE TABLE {posts_table}")
    assert results[0]["history"] is None and results[1]["history"]["loads"] == 1

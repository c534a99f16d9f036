"""The metrics arithmetic: system.query_log rows -> LoadMetrics (pure: no server).

The rows below have the shape the local three-node cluster logs (tests/integration/test_distributed.py
checks the same arithmetic against each node's count() on the real engine).
"""

from __future__ import annotations

from airflow_provider_s3ch.core.metrics import QueryLogRow, load_metrics, merge_by_node, summary
from airflow_provider_s3ch.core.models import InsertSettings, LoadPlan, NodeMetrics, TableRef

QID = "s3ch-0123456789abcdef0123-try1"


def row(node: str, query_id: str = QID, **figures: object) -> QueryLogRow:
    return QueryLogRow.model_validate({"node": node, "query_id": query_id, **figures})


def test_rows_are_read_by_column_name() -> None:
    r = QueryLogRow.model_validate(
        {"query_id": QID, "written_rows": 5, "Settings": {"max_threads": 4}, "type": "QueryFinish",
         "exception": "Code: 6. bad\nStack trace: ..."}
    )
    assert r.settings == {"max_threads": "4"} and r.finished and r.error == "Code: 6. bad"
    assert not row("a", type="ExceptionWhileProcessing").finished


def test_single_node_load_is_its_one_entry() -> None:
    entry = row("ch0:9000", written_rows=100, written_bytes=1000, read_rows=100, read_bytes=900,
                query_duration_ms=50, memory_usage=7, Settings={"max_insert_threads": "2"})
    m = load_metrics(entry)
    assert (m.written_rows, m.written_bytes, m.read_rows, m.read_bytes) == (100, 1000, 100, 900)
    assert m.duration_ms == 50 and m.memory_usage == 7 and m.settings == {"max_insert_threads": "2"}
    assert [n.node for n in m.nodes] == ["ch0:9000"] and m.rows_per_second == 2000.0


def test_distributed_load_sums_the_secondary_inserts_per_node() -> None:
    entry = row("ch0:9000", written_rows=0, read_rows=0, query_duration_ms=900, memory_usage=10)
    secondary = [
        row("ch0:9000", "q-a", written_rows=40, written_bytes=400, read_rows=40, read_bytes=300, memory_usage=30,
            query_duration_ms=800),
        row("ch1:9000", "q-b", written_rows=35, written_bytes=350, read_rows=35, read_bytes=250, memory_usage=50),
        row("ch1:9000", "q-c", written_rows=5, written_bytes=50, read_rows=5, read_bytes=20, memory_usage=20),
        row("ch2:9000", "q-d", written_rows=20, written_bytes=200, read_rows=20, read_bytes=100),
        row("ch2:9000", "q-e", written_rows=999, type="ExceptionWhileProcessing"),  # failed: not counted
        row("ch0:9000", QID, written_rows=999),  # the initial query itself: not a secondary insert
    ]
    m = load_metrics(entry, secondary, distributed=True)
    assert m.written_rows == 100 and m.written_bytes == 1000 and m.read_rows == 100 and m.read_bytes == 670
    assert {n.node: n.written_rows for n in m.nodes} == {"ch0:9000": 40, "ch1:9000": 40, "ch2:9000": 20}
    assert m.memory_usage == 50 and m.duration_ms == 900
    ch1 = next(n for n in m.nodes if n.node == "ch1:9000")
    assert ch1.memory_usage == 50 and ch1.query_id == "q-b"


def test_single_node_load_into_a_distributed_table_counts_each_row_once() -> None:
    # The initiator writes every row into the Distributed table and its own shard's rows again.
    entry = row("ch0:9000", written_rows=130, written_bytes=1300, read_rows=100, read_bytes=800)
    secondary = [row("ch1:9000", "q-b", written_rows=40, written_bytes=410), row("ch2:9000", "q-c", written_rows=30)]
    m = load_metrics(entry, secondary, target_distributed=True)
    assert {n.node: n.written_rows for n in m.nodes} == {"ch0:9000": 30, "ch1:9000": 40, "ch2:9000": 30}
    own = m.nodes[0]
    assert own.written_bytes == 1300 * 30 // 130 and own.read_rows == 0
    assert m.written_rows == 100 and m.read_rows == 100 and m.read_bytes == 800


def test_merge_by_node_adds_rows_and_keeps_the_largest_duration_and_memory() -> None:
    a = NodeMetrics(node="n", query_id="a", written_rows=1, written_bytes=2, read_rows=3, read_bytes=4,
                    duration_ms=10, memory_usage=5)
    b = a.model_copy(update={"query_id": "b", "duration_ms": 20, "memory_usage": 1})
    (m,) = merge_by_node([a, b])
    assert (m.written_rows, m.written_bytes, m.read_rows, m.read_bytes) == (2, 4, 6, 8)
    assert (m.duration_ms, m.memory_usage, m.query_id) == (20, 5, "a")


def test_summary_reports_the_settings_the_server_ran_with() -> None:
    plan = LoadPlan(
        table=TableRef(database="db", name="t"), source_url="u", format="Parquet", strategy="single",
        strategy_reason="r", settings=InsertSettings(values={"max_insert_threads": 2, "x": "a"}), budget_bytes=1,
        budget_reason="b", manifest={"files": 3, "bytes": 9},
    )
    m = load_metrics(row("ch0:9000", written_rows=10, query_duration_ms=1000,
                         Settings={"max_insert_threads": "4", "x": "a"}))
    out = summary(plan, m, wall_ms=1500)
    assert out["settings"] == {"max_insert_threads": 4, "x": "a"}  # as logged, not as planned
    assert (out["files"], out["bytes"], out["written_rows"], out["wall_ms"]) == (3, 9, 10, 1500)

"""A Distributed target staged on every shard: which targets can be, the names, the reasons, each shard's
statements, the mark that carries every partition of the load. No server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.ledger_request import check_steps
from airflow_provider_s3ch.core.marks import FilledMark, mark_needle, unquote_literal
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import STAGING_PREFIX, plan_steps
from airflow_provider_s3ch.core.server_models import ClusterNode, TableInfo
from airflow_provider_s3ch.core.shards import DISTRIBUTED_SUFFIX, render_create_distributed_staging, stageable_shards
from airflow_provider_s3ch.core.sql import quote_literal, render_set_comment
from airflow_provider_s3ch.core.staging import finalize_statements

STEM = "0123456789abcdef0123"
NODES = [ClusterNode(host="10.0.0.3", port=9000, shard_num=3), ClusterNode(host="10.0.0.1", port=9000, shard_num=1),
         ClusterNode(host="10.0.0.2", port=9000, shard_num=2)]
DIST = TableInfo(database="db", name="posts", engine="Distributed", dist_cluster="c3", local_database="ldb",
                 local_table="posts_local", sharding_key="rand()", local_engine="MergeTree")


@pytest.mark.parametrize(("mode", "finalize"), [("append", "move"), ("replace_partitions", "replace"),
                                                ("overwrite", "exchange")])
def test_a_distributed_table_over_mergetree_is_staged_on_every_shard(mode: str, finalize: str) -> None:
    steps = plan_steps(mode, DIST, STEM, nodes=NODES, cluster="c3")
    assert steps.shards is not None and steps.finalize == finalize
    assert steps.staging == TableRef(database="db", name=f"{STAGING_PREFIX}{STEM}{DISTRIBUTED_SUFFIX}")
    assert steps.insert_into == steps.staging and steps.stem == STEM
    assert steps.shards.local_staging == TableRef(database="ldb", name=f"{STAGING_PREFIX}{STEM}")
    assert steps.shards.local_target == TableRef(database="ldb", name="posts_local")
    assert [n.shard_num for n in steps.shards.nodes] == [1, 2, 3]
    assert "every shard" in steps.reason and "3 shards" in steps.reason
    one = steps.on_shard()
    assert (one.target, one.staging, one.shards, one.finalize) == (
        steps.shards.local_target, steps.shards.local_staging, None, finalize)
    assert one.stem == STEM and one.marker == steps.marker


@pytest.mark.parametrize(("change", "cluster", "word"), [
    ({"local_engine": "ReplicatedMergeTree"}, "c3", "replicated"),
    ({"local_engine": "Log"}, "c3", "not a MergeTree"),
    ({"local_table": None}, "c3", "could not be read"),
    ({}, "other", "pass cluster='c3'"),
])
def test_what_cannot_be_staged_on_every_shard_says_why(change: dict, cluster: str, word: str) -> None:
    table = DIST.model_copy(update=change)
    assert not stageable_shards(table, NODES, cluster)[0]
    append = plan_steps("append", table, STEM, nodes=NODES, cluster=cluster)
    assert append.staging is None and append.shards is None and word in append.reason
    for mode in ("replace_partitions", "overwrite"):
        with pytest.raises(PlanError, match=word.replace("(", r"\(")):
            plan_steps(mode, table, STEM, nodes=NODES, cluster=cluster)


def test_shards_with_several_replicas_are_not_staged() -> None:
    nodes = [*NODES, ClusterNode(host="10.0.0.4", port=9000, shard_num=1, replica_num=2)]
    assert not stageable_shards(DIST, nodes, "c3")[0]
    assert "several replicas (shard 1)" in plan_steps("append", DIST, STEM, nodes=nodes, cluster="c3").reason


def test_views_on_the_local_tables_keep_append_direct() -> None:
    steps = plan_steps("append", DIST.model_copy(update={"local_dependent_views": ["ldb.mv"]}), STEM, nodes=NODES,
                       cluster="c3")
    assert steps.staging is None and "ldb.mv" in steps.reason


def test_the_ledger_takes_a_staged_distributed_load() -> None:
    for strategy in ("single", "distributed"):
        for mode in ("append", "replace_partitions"):
            check_steps(plan_steps(mode, DIST, STEM, nodes=NODES, cluster="c3"), strategy=strategy)
    with pytest.raises(PlanError, match="direct insert"):  # views on the local tables: not staged
        check_steps(plan_steps("append", DIST.model_copy(update={"local_dependent_views": ["ldb.mv"]}), STEM,
                               nodes=NODES, cluster="c3"), strategy="distributed")


def test_the_distributed_staging_table_keeps_the_cluster_and_the_sharding_key() -> None:
    sql = render_create_distributed_staging(TableRef(database="db", name="s_all"), TableRef(database="db", name="t"),
                                            "c'3", TableRef(database="ldb", name="s"), "cityHash64(Id)")
    assert sql == ("CREATE TABLE `db`.`s_all` AS `db`.`t` ENGINE = Distributed('c\\'3', 'ldb', 's', cityHash64(Id))")
    assert render_create_distributed_staging(TableRef(database="db", name="s_all"), TableRef(database="db", name="t"),
                                             "c", TableRef(database="ldb", name="s"), None).endswith("'s')")


@given(st.lists(st.tuples(st.from_regex(r"[0-9]{6}", fullmatch=True), st.text(max_size=8)), max_size=5))
def test_the_mark_carries_the_loads_partitions_and_reads_back(partitions: list[tuple[str, str]]) -> None:
    mark = FilledMark(stem=STEM, query_id=f"s3ch-{STEM}-try2", figures={"written_rows": 7}, partitions=partitions)
    back = FilledMark.read(mark.comment(), STEM)
    assert back is not None and back.partitions == partitions and back.figures == {"written_rows": 7}
    plain = FilledMark(stem=STEM, query_id=f"s3ch-{STEM}-try2", figures={"written_rows": 7})
    assert FilledMark.read(plain.comment(), STEM).partitions is None  # a one-node mark, as before


@given(held=st.sets(st.sampled_from(["200807", "200808", "200809", "200810"])),
       others=st.sets(st.sampled_from(["200807", "200808", "200809", "200810", "200811"])))
def test_a_shard_replaces_what_it_holds_and_drops_the_loads_other_partitions(held: set[str], others: set[str]) -> None:
    steps = plan_steps("replace_partitions", DIST, STEM, nodes=NODES, cluster="c3").on_shard()
    every = sorted(held | others)
    plan = finalize_statements(steps, staging_comment="", target_comment=None,
                               staging_partitions=[(p, p) for p in sorted(held)],
                               drop=[p for p in every if p not in held])
    sql = " ".join(s.sql for s in plan.steps)
    for p in every:
        assert (f"REPLACE PARTITION ID '{p}'" in sql) == (p in held)
        assert (f"DROP PARTITION ID '{p}'" in sql) == (p not in held)
    assert plan.steps[-1].sql.startswith("DROP TABLE IF EXISTS `ldb`.`_s3ch_stage_")
    move = plan_steps("append", DIST, STEM, nodes=NODES, cluster="c3").on_shard()
    moved = finalize_statements(move, staging_comment="", target_comment=None, staging_partitions=[("1", "1")],
                                drop=["2"])
    assert "DROP PARTITION" not in " ".join(s.sql for s in moved.steps)  # append never drops


@given(st.text())
def test_a_quoted_literal_reads_back(value: str) -> None:
    text = quote_literal(value)
    assert unquote_literal(text + " SETTINGS x = 1") == (value, len(text))


def test_a_mark_is_read_back_from_the_statement_that_wrote_it() -> None:
    mark = FilledMark(stem=STEM, query_id=f"s3ch-{STEM}-try1", figures={"written_rows": 3, "note": "it's"},
                      partitions=[("200807", "200807")])
    statement = render_set_comment(TableRef(database="ldb", name=f"{STAGING_PREFIX}{STEM}"), mark.comment())
    assert mark_needle(STEM) in statement
    assert FilledMark.from_statement(statement, STEM) == mark
    assert FilledMark.from_statement(statement, "f" * 20) is None  # another load's
    assert FilledMark.from_statement("ALTER TABLE t MODIFY COMMENT 'no mark'", STEM) is None
    assert FilledMark.from_statement("ALTER TABLE t MODIFY COMMENT 'unclosed", STEM) is None

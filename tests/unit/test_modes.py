"""Pure decisions for retry-safe loads: the steps a mode needs, what a retry does. No server."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.core.marks import MARK_SETTING_CHARS, FilledMark
from airflow_provider_s3ch.core.models import LoadRequest, TableRef
from airflow_provider_s3ch.core.recovery import (
    STAGING_PREFIX,
    EarlierTry,
    LoadSteps,
    QueryId,
    decide_resume,
    first_try_of_series,
    is_marker,
    plan_steps,
    staging_marker,
    staging_table,
)
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sql import (
    quote_literal,
    render_create_staging,
    render_drop_table,
    render_exchange,
    render_move_partitions,
    render_replace_partitions,
    render_set_comment,
)
from airflow_provider_s3ch.core.staging import (
    PARTITIONS_PER_ALTER,
    abandon_statements,
    finalize_statements,
    overwrite_steps,
    prepare_statements,
)

STEM = "0123456789abcdef0123"
MT = TableInfo(database="db", name="posts", engine="MergeTree", partition_key="toYYYYMM(CreationDate)")
DIST = TableInfo(database="db", name="posts", engine="Distributed", local_engine="MergeTree")
REPL = TableInfo(database="db", name="posts", engine="ReplicatedMergeTree")
MEM = TableInfo(database="db", name="posts", engine="Memory")


# --- query ids --------------------------------------------------------------------------


def test_query_id_round_trip() -> None:
    qid = str(QueryId.for_task("dag", "task", "run", -1, 3))
    parsed = QueryId.parse(qid)
    stem, n = parsed.stem, parsed.try_number
    assert n == 3 and qid == f"s3ch-{stem}-try3"
    assert str(QueryId.for_task("dag", "task", "run", -1, 1)).startswith(f"s3ch-{stem}-")


@pytest.mark.parametrize("bad", ["", "s3ch-xyz-try1", "s3ch-abc-try", "other-abc-try1", "s3ch-abc-try1; DROP"])
def test_split_query_id_rejects(bad: str) -> None:
    with pytest.raises(InvalidRequestError):
        QueryId.parse(bad)


def test_query_id_regex_only_takes_hex_stems() -> None:
    assert QueryId(stem=STEM, try_number=1).pattern == f"^s3ch-{STEM}-try[0-9]+$"
    with pytest.raises(InvalidRequestError):
        QueryId(stem="abc'); DROP TABLE x; --", try_number=1)


# --- steps ------------------------------------------------------------------------------


def test_mode_defaults_to_append_and_rejects_unknown() -> None:
    assert LoadRequest.from_arguments(s3_uri="s3://bkt/x.csv", table="t").mode == "append"
    with pytest.raises(InvalidRequestError, match="mode"):
        LoadRequest.from_arguments(s3_uri="s3://bkt/x.csv", table="t", mode="upsert")
    with pytest.raises(InvalidRequestError, match="append, replace_partitions, overwrite"):
        plan_steps("upsert", MT, STEM)


def test_staging_table_name_derives_from_the_stem_in_the_target_database() -> None:
    assert staging_table(MT, STEM) == TableRef(database="db", name=f"{STAGING_PREFIX}{STEM}")


@pytest.mark.parametrize(
    ("mode", "finalize"), [("append", "move"), ("replace_partitions", "replace"), ("overwrite", "exchange")]
)
def test_mergetree_target_goes_through_staging(mode: str, finalize: str) -> None:
    steps = plan_steps(mode, MT, STEM)
    assert steps.staging == staging_table(MT, STEM) and steps.insert_into == steps.staging
    assert steps.finalize == finalize and steps.target == TableRef(database="db", name="posts")
    assert steps.marker == (staging_marker(STEM) if mode == "overwrite" else None)


@pytest.mark.parametrize("table", [DIST, REPL, MEM])
def test_append_into_unstageable_target_is_direct_and_says_so(table: TableInfo) -> None:
    steps = plan_steps("append", table, STEM)
    assert steps.staging is None and steps.finalize == "none" and steps.insert_into == steps.target
    assert "direct insert" in steps.reason and "failed try may leave" in steps.reason


@pytest.mark.parametrize("mode", ["replace_partitions", "overwrite"])
@pytest.mark.parametrize(("table", "word"), [(DIST, "Distributed"), (REPL, "Replicated"), (MEM, "not a MergeTree")])
def test_replace_modes_refuse_unstageable_targets(mode: str, table: TableInfo, word: str) -> None:
    with pytest.raises(PlanError, match=word):
        plan_steps(mode, table, STEM)


def test_materialized_views_the_server_did_not_describe_keep_append_direct_and_refuse_replace_modes() -> None:
    steps = plan_steps("append", MT.model_copy(update={"dependent_views": ["db.mv"]}), STEM)
    assert steps.staging is None and "db.mv" in steps.reason
    for mode in ("replace_partitions", "overwrite"):
        with pytest.raises(PlanError, match=r"materialized views read from db\.posts \(db\.mv\)"):
            plan_steps(mode, MT.model_copy(update={"dependent_views": ["db.mv"]}), STEM)


def test_overwrite_needs_exchange_tables() -> None:
    with pytest.raises(PlanError, match="Ordinary"):
        plan_steps("overwrite", MT.model_copy(update={"database_engine": "Ordinary"}), STEM)
    assert plan_steps("overwrite", MT.model_copy(update={"database_engine": "Atomic"}), STEM).finalize == "exchange"
    ordinary = MT.model_copy(update={"database_engine": "Ordinary"})
    assert plan_steps("replace_partitions", ordinary, STEM).finalize == "replace"


# --- retries ----------------------------------------------------------------------------


def _try(n: int, state: str) -> EarlierTry:
    return EarlierTry(query_id=f"s3ch-{STEM}-try{n}", try_number=n, state=state)


def test_first_try_loads() -> None:
    assert decide_resume([], 1).action == "load"


def test_running_earlier_try_is_waited_for() -> None:
    r = decide_resume([_try(1, "running")], 2)
    assert r.action == "wait" and r.query_ids == [f"s3ch-{STEM}-try1"]


def test_finished_earlier_try_is_attached_to() -> None:
    r = decide_resume([_try(1, "finished")], 2)
    assert r.action == "attach" and r.query_ids == [f"s3ch-{STEM}-try1"]


def test_failed_earlier_try_loads_afresh() -> None:
    r = decide_resume([_try(1, "failed"), _try(2, "failed")], 3)
    assert r.action == "load" and "failed" in r.reason


def test_the_latest_try_that_ran_decides() -> None:
    # try 1 finished, try 2 (its log entry lost to try 2) loaded afresh and failed: its staging is partial.
    assert decide_resume([_try(1, "finished"), _try(2, "failed")], 3).action == "load"
    assert decide_resume([_try(1, "failed"), _try(2, "finished")], 3).query_ids == [f"s3ch-{STEM}-try2"]


def test_own_and_later_tries_do_not_count() -> None:
    assert decide_resume([_try(2, "finished"), _try(3, "running")], 2).action == "load"


def test_tries_before_a_clear_do_not_count() -> None:
    # retries=2; the task succeeded on try 1 and was cleared: max_tries = 1 + 2, try 2 is a new series.
    first = first_try_of_series(2, max_tries=3, retries=2)
    assert first == 2
    r = decide_resume([_try(1, "finished")], 2, first)
    assert r.action == "load" and "cleared" in r.reason
    assert first_try_of_series(3, max_tries=2, retries=2) == 1  # plain retries: every try counts
    assert first_try_of_series(2, None, None) == 1


# --- SQL ----------------------------------------------------------------------------------


def test_staging_statements_quote_every_name() -> None:
    target = TableRef(database="d`b", name="t'x")
    stage = TableRef(database="d`b", name=f"{STAGING_PREFIX}{STEM}")
    assert render_create_staging(stage, target) == f"CREATE TABLE `d\\`b`.`{STAGING_PREFIX}{STEM}` AS `d\\`b`.`t'x`"
    assert render_drop_table(stage) == f"DROP TABLE IF EXISTS `d\\`b`.`{STAGING_PREFIX}{STEM}` SYNC"
    assert render_move_partitions(stage, target, ["2008'07"]) == (
        f"ALTER TABLE `d\\`b`.`{STAGING_PREFIX}{STEM}` MOVE PARTITION ID '2008\\'07' TO TABLE `d\\`b`.`t'x`"
    )
    assert render_move_partitions(stage, target, ["1", "2"]) == (
        f"ALTER TABLE `d\\`b`.`{STAGING_PREFIX}{STEM}` MOVE PARTITION ID '1' TO TABLE `d\\`b`.`t'x`, "
        "MOVE PARTITION ID '2' TO TABLE `d\\`b`.`t'x`"
    )
    assert render_replace_partitions(target, stage, ["200807"], drop=["x'"]) == (
        f"ALTER TABLE `d\\`b`.`t'x` REPLACE PARTITION ID '200807' FROM `d\\`b`.`{STAGING_PREFIX}{STEM}`, "
        "DROP PARTITION ID 'x\\''"
    )
    assert render_exchange(target, stage) == f"EXCHANGE TABLES `d\\`b`.`t'x` AND `d\\`b`.`{STAGING_PREFIX}{STEM}`"
    assert render_set_comment(target, "it's") == "ALTER TABLE `d\\`b`.`t'x` MODIFY COMMENT 'it\\'s'"


# --- overwrite: where a swap stands ------------------------------------------------------


def test_overwrite_steps_from_the_comments() -> None:
    m = staging_marker(STEM)
    assert overwrite_steps(m, "orig", m) == ["exchange", "restore_comment", "drop_staging"]  # not swapped yet
    assert overwrite_steps("orig", m, m) == ["restore_comment", "drop_staging"]  # swapped, crashed before restore
    assert overwrite_steps("orig", "orig", m) == ["drop_staging"]  # restored, crashed before the drop
    assert overwrite_steps(None, "orig", m) == []  # all done
    assert overwrite_steps(None, m, m) == ["restore_comment"]


# --- the statements around the insert, every mode ------------------------------------------

PARTS = [("200807", "200807"), ("200808", "200808")]


def _steps(mode: str) -> LoadSteps:
    return plan_steps(mode, MT, STEM)


def test_prepare_creates_the_staging_table_and_marks_it_for_overwrite() -> None:
    stage = f"`db`.`{STAGING_PREFIX}{STEM}`"
    sql = [s.sql for s in prepare_statements(_steps("append"), staging_exists=False)]
    # none there: nothing to drop; an append's parts carry UUIDs (a retry sees what a move cut short had moved)
    assert sql == [f"CREATE TABLE {stage} AS `db`.`posts` SETTINGS assign_part_uuids = 1"]
    replace = [s.sql for s in prepare_statements(_steps("replace_partitions"), staging_exists=False)]
    assert replace == [f"CREATE TABLE {stage} AS `db`.`posts`"]
    steps = prepare_statements(_steps("overwrite"), staging_exists=True)
    assert steps[0].sql == f"DROP TABLE IF EXISTS {stage} SYNC" and "left by an earlier try" in steps[0].note
    assert steps[-1].sql == f"ALTER TABLE {stage} MODIFY COMMENT '{staging_marker(STEM)}'"
    assert abandon_statements(_steps("replace_partitions"))[0].sql == f"DROP TABLE IF EXISTS {stage} SYNC"
    direct = plan_steps("append", DIST, STEM)
    assert abandon_statements(direct) == []
    with pytest.raises(InvalidRequestError, match="no staging table"):
        prepare_statements(direct, staging_exists=False)


def test_a_fresh_overwrite_after_an_unfinished_swap_puts_the_targets_comment_back_first() -> None:
    """The earlier try swapped and died: the target has the marker, the old table (staging name) the target's
    own comment; it goes back on the target before the old table is dropped. Otherwise nothing is added."""
    marker, stage = staging_marker(STEM), f"`db`.`_s3ch_stage_{STEM}`"
    steps = prepare_statements(_steps("overwrite"), staging_exists=True, staging_comment="posts by month",
                               target_comment=marker)
    assert [s.sql for s in steps[:2]] == ["ALTER TABLE `db`.`posts` MODIFY COMMENT 'posts by month'",
                                          f"DROP TABLE IF EXISTS {stage} SYNC"]
    for staging_comment, target_comment in ((marker, "posts by month"), ("posts by month", "mine"), (None, marker)):
        plain = prepare_statements(_steps("overwrite"), staging_exists=staging_comment is not None,
                                   staging_comment=staging_comment, target_comment=target_comment)
        assert not any("`db`.`posts` MODIFY COMMENT" in s.sql for s in plain), (staging_comment, target_comment)


@pytest.mark.parametrize(
    ("mode", "verb"), [("append", "MOVE PARTITION ID"), ("replace_partitions", "REPLACE PARTITION ID")]
)
def test_finalize_moves_or_replaces_the_partitions_in_one_alter_then_drops_the_staging_table(
    mode: str, verb: str
) -> None:
    f = finalize_statements(_steps(mode), staging_comment="", target_comment="", staging_partitions=PARTS)
    assert [s.sql.count(verb) for s in f.steps] == [2, 0]
    assert "'200807'" in f.steps[0].sql and "'200808'" in f.steps[0].sql
    assert f.steps[0].note.endswith("partitions 200807, 200808")
    assert f.steps[-1].sql.startswith("DROP TABLE IF EXISTS") and f.partitions == ["200807", "200808"]
    assert not f.done_before
    # A retry after the worker died half-way: only what is left in the staging table.
    rest = finalize_statements(_steps(mode), staging_comment="", target_comment="", staging_partitions=PARTS[1:])
    assert rest.partitions == ["200808"] and len(rest.steps) == 2 and rest.steps[0].sql.count(verb) == 1
    gone = finalize_statements(_steps(mode), staging_comment=None, target_comment="", staging_partitions=[])
    assert gone.done_before and gone.steps == [] and gone.partitions == []


@pytest.mark.parametrize("mode", ["append", "replace_partitions"])
def test_finalize_sends_at_most_a_batch_of_partition_commands_per_alter(mode: str) -> None:
    parts = [(str(i), f"p{i}") for i in range(2 * PARTITIONS_PER_ALTER + 1)]
    f = finalize_statements(_steps(mode), staging_comment="", target_comment="", staging_partitions=parts)
    counts = [s.sql.count("PARTITION ID") for s in f.steps[:-1]]
    assert counts == [PARTITIONS_PER_ALTER, PARTITIONS_PER_ALTER, 1] and f.partitions == [v for _, v in parts]
    sent = [pid for s in f.steps[:-1] for pid in re.findall(r"PARTITION ID '(\d+)'", s.sql)]
    assert sent == [pid for pid, _ in parts]


def test_finalize_overwrite_swaps_restores_the_comment_and_drops_the_old_table() -> None:
    m = staging_marker(STEM)
    f = finalize_statements(_steps("overwrite"), staging_comment=m, target_comment="posts by month",
                            staging_partitions=PARTS, target_partitions=[("200001", "200001")])
    assert [s.sql.split(" ")[0] for s in f.steps] == ["EXCHANGE", "ALTER", "DROP"]
    assert f.steps[1].sql.endswith("MODIFY COMMENT 'posts by month'") and f.partitions == ["200807", "200808"]
    # Swapped, then the worker died: the old table (under the staging name) carries the target's comment.
    after = finalize_statements(_steps("overwrite"), staging_comment="posts by month", target_comment=m,
                                staging_partitions=[("200001", "200001")], target_partitions=PARTS)
    assert [s.sql.split(" ")[0] for s in after.steps] == ["ALTER", "DROP"]
    assert after.steps[0].sql.endswith("MODIFY COMMENT 'posts by month'") and after.partitions == ["200807", "200808"]
    # Comment restored, then died before the drop.
    drop = finalize_statements(_steps("overwrite"), staging_comment="posts by month", target_comment="posts by month",
                               staging_partitions=[], target_partitions=PARTS)
    assert [s.sql.split(" ")[0] for s in drop.steps] == ["DROP"]
    done = finalize_statements(_steps("overwrite"), staging_comment=None, target_comment="x", staging_partitions=[])
    assert done.done_before and done.steps == []
    # A target that had no comment of its own gets none back, not the staging marker.
    bare = finalize_statements(_steps("overwrite"), staging_comment=m, target_comment=m, staging_partitions=PARTS)
    assert "MODIFY COMMENT ''" in bare.steps[1].sql


# --- the durable mark of a finished insert -----------------------------------------------


@given(figures=st.dictionaries(st.text(max_size=12), st.one_of(st.integers(), st.text(max_size=40),
                                                               st.lists(st.integers(), max_size=3)), max_size=6),
       try_number=st.integers(min_value=1, max_value=10_000))
def test_filled_mark_round_trips_through_a_comment(figures: dict, try_number: int) -> None:
    qid = str(QueryId(stem=STEM, try_number=try_number))
    mark = FilledMark(stem=STEM, query_id=qid, figures=figures)
    back = FilledMark.read(mark.comment(), STEM)
    assert back == mark and back.try_number == try_number
    assert is_marker(mark.comment(), staging_marker(STEM))
    assert FilledMark.read(mark.comment(), "f" * 20) is None  # another task instance's staging table


@given(settings=st.dictionaries(st.text(max_size=30), st.text(max_size=3000), max_size=4))
def test_a_mark_keeps_long_settings_short(settings: dict[str, str]) -> None:
    """A comment is table metadata, which the server keeps within max_query_size (a 300,000-character
    log_comment made the mark refused): the mark keeps each setting's first MARK_SETTING_CHARS characters."""
    mark = FilledMark(stem=STEM, query_id=str(QueryId(stem=STEM, try_number=1)),
                      figures={"written_rows": 3, "settings": settings})
    back = FilledMark.read(mark.comment(), STEM)
    assert back is not None and back.figures["written_rows"] == 3
    for name, value in settings.items():
        kept = back.figures["settings"][name]
        assert kept == value if len(value) <= MARK_SETTING_CHARS else (
            kept.startswith(value[:MARK_SETTING_CHARS]) and kept.endswith(f"({len(value)} characters)"))
    long = mark.model_copy(update={"figures": {"settings": {"log_comment": "x" * 300_000}}})
    assert len(long.comment()) < 2 * MARK_SETTING_CHARS


@pytest.mark.parametrize("comment", [None, "", "posts by month", staging_marker(STEM),
                                     staging_marker(STEM) + "; filled by x: not json"])
def test_no_mark_reads_as_none(comment: str | None) -> None:
    assert FilledMark.read(comment, STEM) is None


def _mark() -> FilledMark:
    return FilledMark(stem=STEM, query_id=str(QueryId(stem=STEM, try_number=1)), figures={"written_rows": 3})


@pytest.mark.parametrize("mode", ["append", "replace_partitions"])
def test_finalize_marks_the_staging_table_before_the_first_partition_leaves_it(mode: str) -> None:
    mark = _mark()
    f = finalize_statements(_steps(mode), staging_comment="", target_comment="", staging_partitions=PARTS, mark=mark)
    assert f.steps[0].sql.endswith("MODIFY COMMENT " + quote_literal(mark.comment()))
    assert "PARTITION ID '200807'" in f.steps[1].sql
    # A retry that finds the mark resumes the moves without writing it again; an empty staging table gets none.
    again = finalize_statements(_steps(mode), staging_comment=mark.comment(), target_comment="",
                                staging_partitions=PARTS[1:], mark=mark)
    assert "PARTITION ID '200808'" in again.steps[0].sql and len(again.steps) == 2
    empty = finalize_statements(_steps(mode), staging_comment="", target_comment="", staging_partitions=[], mark=mark)
    assert [s.sql.split(" ")[0] for s in empty.steps] == ["DROP"]


def test_finalize_overwrite_marks_before_the_swap_and_never_the_old_table() -> None:
    mark, m = _mark(), staging_marker(STEM)
    f = finalize_statements(_steps("overwrite"), staging_comment=m, target_comment="posts by month",
                            staging_partitions=PARTS, mark=mark)
    assert [s.sql.split(" ")[0] for s in f.steps] == ["ALTER", "EXCHANGE", "ALTER", "DROP"]
    assert f.steps[2].sql.endswith("MODIFY COMMENT 'posts by month'")
    # Swapped: the target carries the mark, the old table the target's comment, which goes back.
    after = finalize_statements(_steps("overwrite"), staging_comment="posts by month", target_comment=mark.comment(),
                                staging_partitions=[], target_partitions=PARTS, mark=mark)
    assert [s.sql for s in after.steps][:1] == ["ALTER TABLE `db`.`posts` MODIFY COMMENT 'posts by month'"]
    assert after.partitions == ["200807", "200808"]


def test_an_unpartitioned_tables_load_says_no_partition_key_not_tuple() -> None:
    from airflow_provider_s3ch.core.staging import mode_text, partitions_text

    assert mode_text("append", ["tuple()"]) == "append (no partition key)"
    assert mode_text("append", ["200807", "200808"]) == "append of partitions 200807, 200808"
    assert mode_text("overwrite", ["2008"]) == "overwrite of partition 2008"
    assert mode_text("append", []) == "append"
    assert partitions_text(["tuple()"]) == "no partition key"
    moved = finalize_statements(_steps("append"), staging_comment="", target_comment="",
                                staging_partitions=[("all", "tuple()")])
    assert moved.steps[0].note == "Moved the table's rows (no partition key)", moved.steps[0].note
    assert moved.partitions == ["tuple()"]  # the XCom keeps the server's own name


# ---------------------------------------------------------------------- compact_parts


def test_compact_parts_set_the_staging_tables_part_format_only_where_it_changes_something() -> None:
    from airflow_provider_s3ch.core.part_format import COMPACT_PART_BYTES
    from airflow_provider_s3ch.core.server import table_info

    steps = plan_steps("append", MT, "abc", compact_parts=True)
    assert steps.compact_parts == COMPACT_PART_BYTES and "written Compact" in steps.reason
    assert steps.model_dump(mode="json")["compact_parts"] == COMPACT_PART_BYTES
    assert "compact_parts" not in plan_steps("append", MT, "abc").model_dump(mode="json")  # XComs as before
    create = prepare_statements(steps, staging_exists=False)[0].sql
    assert create.endswith(f"SETTINGS assign_part_uuids = 1, min_bytes_for_wide_part = {COMPACT_PART_BYTES}")
    replace = plan_steps("replace_partitions", MT, "abc", compact_parts=True)
    assert prepare_statements(replace, staging_exists=False)[0].sql.endswith(
        f"SETTINGS min_bytes_for_wide_part = {COMPACT_PART_BYTES}")
    # A table that sets a larger threshold of its own keeps it; a direct insert says the option did nothing.
    own = table_info("db", "posts", "MergeTree", "tuple()", "id",
                     "MergeTree ORDER BY id SETTINGS index_granularity = 8192, min_bytes_for_wide_part = 1073741824")
    assert own.wide_part_bytes == 1073741824
    kept = plan_steps("append", own, "abc", compact_parts=True)
    assert kept.compact_parts is None and "(1073741824) is kept" in kept.reason
    direct = plan_steps("append", REPL, "abc", compact_parts=True)
    assert direct.staging is None and any("compact_parts=True has no effect" in w for w in direct.warnings)
    assert render_create_staging(TableRef(database="d", name="s"), TableRef(database="d", name="t")) == (
        "CREATE TABLE `d`.`s` AS `d`.`t`")


def test_compact_parts_with_overwrite_is_refused_in_the_request() -> None:
    with pytest.raises(InvalidRequestError, match="compact_parts=True with mode='overwrite'"):
        LoadRequest(s3_uri="s3://b/k.parquet", table="db.t", mode="overwrite", compact_parts=True)

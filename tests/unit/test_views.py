"""The views' staging, pure: which views get twins, what the twins read and write, the statements around them.
What the engine makes of the twins is tests/integration/test_views.py's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import PlanError
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps, plan_steps
from airflow_provider_s3ch.core.server_models import TableInfo, ViewRow
from airflow_provider_s3ch.core.staging import abandon_statements, prepare_statements, publish_views
from airflow_provider_s3ch.core.view_replay import affected_comment, partition_id_expr, read_affected
from airflow_provider_s3ch.core.views import copies, retarget, stage_views

RAW = TableRef(database="db", name="raw")
STAGING = TableRef(database="db", name="_s3ch_stage_0123456789abcdef0123")


NIL = "00000000-0000-0000-0000-000000000000"


def table(name: str, engine: str = "MergeTree", dependents: tuple[str, ...] = (), db: str = "db") -> ViewRow:
    return ViewRow(db, name, engine, [tuple(d.split(".")) for d in dependents], "", "", NIL)


def view(name: str, reads: str, to: str | None, select: str | None = None, uuid: str = NIL,
         create: str | None = None) -> ViewRow:
    into = f" TO {to}" if to else " ENGINE = MergeTree ORDER BY k"
    head = create or f"CREATE MATERIALIZED VIEW db.{name}{into} (`k` String)"
    query = select or f"SELECT k FROM {reads}"
    return ViewRow("db", name, "MaterializedView", [], f"{head} AS {query}", query, uuid)


def rows_of_a_chain() -> list[ViewRow]:
    return [table("raw", dependents=("db.mv_a", "db.mv_sum")), table("sum", "SummingMergeTree"),
            view("mv_sum", "db.raw", "db.sum"), table("mid", "Null", ("db.mv_b",)), view("mv_a", "db.raw", "db.mid"),
            table("top"), view("mv_b", "db.mid", "db.top")]


def test_a_chain_of_views_gets_twins_that_read_the_staging_tables_down_the_chain() -> None:
    staged, why = stage_views(RAW, STAGING, rows_of_a_chain())
    assert why is None
    by_view = {one.view.name: one for one in staged}
    assert set(by_view) == {"mv_a", "mv_sum", "mv_b"}
    assert by_view["mv_a"].select == f"SELECT k FROM `db`.`{STAGING.name}`"
    assert by_view["mv_b"].source == by_view["mv_a"].staging  # reads the copy of mid, not mid
    assert by_view["mv_a"].moves is False and by_view["mv_sum"].moves and by_view["mv_b"].moves  # Null: a link
    assert all(one.staging.name.startswith(STAGING.name + "v") for one in staged)
    assert all(one.staging_view.name.startswith(STAGING.name + "m") for one in staged)


@given(st.permutations(rows_of_a_chain()), st.permutations(["db.mv_a", "db.mv_sum"]))
def test_the_twins_names_do_not_depend_on_the_order_the_server_lists_views_in(rows: list[ViewRow],
                                                                             order: list[str]) -> None:
    rows = [r._replace(dependents=[tuple(d.split(".")) for d in order]) if r.name == "raw" else r for r in rows]
    names = {(one.view.name, one.staging_view.name, one.staging.name) for one in stage_views(RAW, STAGING, rows)[0]}
    assert names == {(one.view.name, one.staging_view.name, one.staging.name)
                     for one in stage_views(RAW, STAGING, rows_of_a_chain())[0]}


def test_two_views_into_one_table_share_its_copy_which_moves_once() -> None:
    rows = [table("raw", dependents=("db.v1", "db.v2")), table("agg"), view("v1", "db.raw", "db.agg"),
            view("v2", "db.raw", "db.agg")]
    staged, why = stage_views(RAW, STAGING, rows)
    assert why is None and len(staged) == 2 and len(copies(staged)) == 1
    sql = publish_views(staged, {copies(staged)[0].staging.name: [("1", "1")]})
    assert [s.sql for s in sql if "MOVE PARTITION" in s.sql] == [
        f"ALTER TABLE `db`.`{copies(staged)[0].staging.name}` MOVE PARTITION ID '1' TO TABLE `db`.`agg`"]


@pytest.mark.parametrize(("rows", "why"), [
    ([table("raw", dependents=("db.mv",)), table("t", "ReplicatedMergeTree"), view("mv", "db.raw", "db.t")],
     "ReplicatedMergeTree"),
    ([table("raw", dependents=("db.mv",)), table("t", "Memory"), view("mv", "db.raw", "db.t")], "Memory"),
    ([table("raw", dependents=("db.mv",)), table("t"),
      view("mv", "db.raw", "db.t", "SELECT k FROM db.raw WHERE k IN (SELECT k FROM db.raw)")], "more than once"),
    ([table("raw", dependents=("db.mv",)), view("mv", "db.raw", None)], "inner table"),
    ([table("raw", dependents=("db.mv",)), table("t", dependents=("db.back",)), view("mv", "db.raw", "db.t"),
      view("back", "db.t", "db.raw")], "reaches again"),
    ([table("raw", dependents=("db.lv",)), table("lv", "LiveView")], "not a materialized view"),
])
def test_views_that_cannot_be_staged_say_why(rows: list[ViewRow], why: str) -> None:
    staged, reason = stage_views(RAW, STAGING, rows)
    assert staged == [] and reason is not None and why in reason


def test_an_inner_table_is_found_by_the_views_uuid_and_a_refreshable_view_is_not_fed() -> None:
    uuid = "6acd20a6-3980-4191-ba78-ed7183768a27"
    rows = [table("raw", dependents=("db.mv", "db.rmv")), view("mv", "db.raw", None, uuid=uuid),
            table(f".inner_id.{uuid}"),
            view("rmv", "db.raw", "db.t", create="CREATE MATERIALIZED VIEW db.rmv REFRESH EVERY 1 HOUR TO db.t")]
    staged, why = stage_views(RAW, STAGING, rows)
    assert why is None and [(one.view.name, one.target.name) for one in staged] == [("mv", f".inner_id.{uuid}")]


@given(st.text(alphabet="ab'\\ .`x", max_size=12))
def test_retarget_replaces_the_table_and_nothing_in_a_string_literal(text: str) -> None:
    literal = "'" + text.replace("\\", "\\\\").replace("'", "\\'") + " db.raw'"
    query = f"SELECT k, {literal} AS note FROM db.raw WHERE note != {literal}"
    out = retarget(query, RAW, STAGING)
    assert out == query.replace("FROM db.raw", f"FROM `db`.`{STAGING.name}`")


@pytest.mark.parametrize("name", ["db.raw", "`db`.`raw`", "db . raw", '"db"."raw"'])
def test_retarget_reads_the_quoted_forms_of_a_name(name: str) -> None:
    assert retarget(f"SELECT k FROM {name}", RAW, STAGING) == f"SELECT k FROM `db`.`{STAGING.name}`"
    assert retarget(f"SELECT k FROM {name} -- db.raw", RAW, STAGING) is not None
    assert retarget("SELECT k FROM db.rawer", RAW, STAGING) is None


def test_a_plan_with_views_creates_and_drops_the_twins_around_the_staging_table() -> None:
    info = TableInfo(database="db", name="raw", engine="MergeTree", dependent_views=["db.mv_a", "db.mv_sum"],
                     view_rows=rows_of_a_chain())
    steps = plan_steps("append", info, "0123456789abcdef0123")
    assert steps.finalize == "move" and len(steps.views) == 3 and "staging twins" in steps.reason
    made = [s.sql for s in prepare_statements(steps, staging_exists=False)]
    assert made[0].startswith(f"CREATE TABLE `db`.`{STAGING.name}`")
    assert sum(sql.startswith("CREATE TABLE") for sql in made) == 4  # the staging table; sum's, mid's, top's copies
    assert made[-1].startswith("CREATE MATERIALIZED VIEW") and "CREATE TABLE" not in " ".join(
        sql for sql in made if sql.startswith("CREATE MATERIALIZED"))
    dropped = [s.sql for s in abandon_statements(steps)]
    assert dropped[-1] == f"DROP TABLE IF EXISTS `db`.`{STAGING.name}` SYNC"
    assert len(dropped) == 3 + 3 + 1  # the twins, the copies, the staging table
    assert LoadSteps.model_validate(steps.model_dump(mode="json")) == steps  # a deferred load carries them
    assert "views" not in plan_steps("append", info.model_copy(update={"dependent_views": [], "view_rows": []}),
                                     "0123456789abcdef0123").model_dump()
    for mode in ("replace_partitions", "overwrite"):  # recomputed, not refused
        assert plan_steps(mode, info, "0123456789abcdef0123").views


def test_replace_partitions_feeds_the_twins_through_a_null_table_and_drops_it_on_failure() -> None:
    info = TableInfo(database="db", name="raw", engine="MergeTree", dependent_views=["db.mv_a", "db.mv_sum"],
                     view_rows=rows_of_a_chain())
    steps = plan_steps("replace_partitions", info, "0123456789abcdef0123")
    feed = f"`db`.`{STAGING.name}n`"
    assert steps.feed is not None and "recomputed" in steps.reason
    made = [s.sql for s in prepare_statements(steps, staging_exists=False)]
    assert made[1] == f"CREATE TABLE {feed} AS `db`.`raw` ENGINE = Null"  # before the twins that read it
    assert all("assign_part_uuids" not in sql for sql in made)  # the copies' partitions are replaced, not moved
    first = [one for one in steps.views if one.reads == RAW]
    assert first and all(one.source.name == STAGING.name + "n" for one in first)
    assert f"DROP TABLE IF EXISTS {feed} SYNC" in [s.sql for s in abandon_statements(steps)]
    assert plan_steps("overwrite", info, "0123456789abcdef0123").feed is None  # the twins read the staging table


@pytest.mark.parametrize(("mode", "rows", "why"), [
    ("replace_partitions", [table("raw", dependents=("db.mv",)), table("t"),
                            view("mv", "db.raw", "db.t", "SELECT k, now() AS at FROM db.raw")], "calls now()"),
    ("replace_partitions", [table("raw", dependents=("db.mv",)), table("t"), table("dim"),
                            view("mv", "db.raw", "db.t", "SELECT k FROM db.raw AS r LEFT JOIN db.dim AS d USING k")],
     "reads db.dim too"),
    ("replace_partitions", [table("raw", dependents=("db.mv",)), table("t"), view("mv", "db.raw", "db.t",
                            "SELECT dictGetString('db.d', 'n', k) AS k FROM db.raw")], "calls dictGetString()"),
    ("overwrite", [table("raw", dependents=("db.mv",)), table("t"), table("other", dependents=("db.o",)),
                            view("mv", "db.raw", "db.t"), view("o", "db.other", "db.t")], "writes a view's target"),
    ("replace_partitions", [table("raw", dependents=("db.mv",))._replace(ttl=True), table("t"),
                            view("mv", "db.raw", "db.t")], "TTL"),
])
def test_views_that_cannot_be_recomputed_refuse_the_replace_modes(mode: str, rows: list[ViewRow], why: str) -> None:
    info = TableInfo(database="db", name="raw", engine="MergeTree", dependent_views=["db.mv"], view_rows=rows)
    with pytest.raises(PlanError, match="cannot be recomputed exactly") as caught:
        plan_steps(mode, info, "0123456789abcdef0123")
    assert why in str(caught.value) and "mode='append'" in str(caught.value)
    assert plan_steps("append", info, "0123456789abcdef0123").views  # append feeds them as they are


def test_replace_partitions_refuses_a_null_link_several_views_write_and_read_by_another() -> None:
    rows = [table("raw", dependents=("db.v1", "db.v2")), table("mid", "Null", ("db.v3",)), table("top"),
            view("v1", "db.raw", "db.mid"), view("v2", "db.raw", "db.mid"), view("v3", "db.mid", "db.top")]
    info = TableInfo(database="db", name="raw", engine="MergeTree", dependent_views=["db.v1", "db.v2"], view_rows=rows)
    with pytest.raises(PlanError, match="several views write the Null table db.mid"):
        plan_steps("replace_partitions", info, "0123456789abcdef0123")
    alone = [r._replace(dependents=[]) if r.name == "mid" else r for r in rows if r.name not in ("v3", "top")]
    assert plan_steps("replace_partitions", info.model_copy(update={"view_rows": alone}), "0123456789abcdef0123")


def test_overwrite_replays_nothing_so_a_ttl_or_a_non_deterministic_view_does_not_refuse_it() -> None:
    rows = [table("raw", dependents=("db.mv",))._replace(ttl=True), table("t"), table("dim"),
            view("mv", "db.raw", "db.t", "SELECT k, now() AS at FROM db.raw LEFT JOIN db.dim USING k")]
    info = TableInfo(database="db", name="raw", engine="MergeTree", dependent_views=["db.mv"], view_rows=rows)
    assert plan_steps("overwrite", info, "0123456789abcdef0123").views


@given(st.lists(st.from_regex(r"[0-9a-f_]{1,12}|all", fullmatch=True), max_size=5, unique=True))
def test_a_copys_comment_gives_back_the_partitions_it_replaces(ids: list[str]) -> None:
    assert read_affected(affected_comment(ids)) == ids
    assert read_affected(None) is None and read_affected("") is None


@pytest.mark.parametrize(("key", "expr"), [
    ("", "'all'"), ("toYYYYMM(d)", "partitionID(toYYYYMM(d))"), ("(k, toYear(d))", "partitionID(k, toYear(d))"),
    ("(a + b) * 2", "partitionID((a + b) * 2)"), ("(k)", "partitionID((k))"),
])
def test_the_partition_id_of_a_key_as_the_server_shows_it(key: str, expr: str) -> None:
    assert partition_id_expr(key) == expr


def test_under_a_replace_mode_a_copy_replaces_what_it_holds_and_drops_the_rest_of_its_partitions() -> None:
    rows = [table("raw", dependents=("db.v1",)), table("agg"), view("v1", "db.raw", "db.agg")]
    staged, _ = stage_views(RAW, STAGING, rows)
    name = copies(staged)[0].staging.name
    sql = [s.sql for s in publish_views(staged, {name: [("1", "1"), ("3", "3")]}, {name: ["1", "2"]})]
    assert sql == [f"ALTER TABLE `db`.`agg` REPLACE PARTITION ID '1' FROM `db`.`{name}`, DROP PARTITION ID '2'",
                   f"DROP TABLE IF EXISTS `db`.`{name}` SYNC"]
    # a copy an earlier try published and dropped is left alone
    assert [s.sql for s in publish_views(staged, {name: []}, {})] == [f"DROP TABLE IF EXISTS `db`.`{name}` SYNC"]

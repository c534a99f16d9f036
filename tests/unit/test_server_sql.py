"""The statements the hooks run to read the server and the load's queries (``core/server_sql.py``), and the ledger
table's read (``core/ledger_sql.py``): their parameters, and which rows each selects. No server: the integration
tests and the goldens hold the texts to what the servers answer."""

from __future__ import annotations

import re

import pytest

from airflow_provider_s3ch.core import server_sql
from airflow_provider_s3ch.core.history import HISTORY_DAYS, HISTORY_LOADS, tag_prefix
from airflow_provider_s3ch.core.ledger_sql import PARTITIONS_COLUMN, render_ledger_table
from airflow_provider_s3ch.core.metrics import QUERY_LOG_COLUMNS
from airflow_provider_s3ch.core.models import TableRef
from airflow_provider_s3ch.core.recovery import QueryId

_PLACEHOLDER_RE = re.compile(r"%\((\w+)\)s")

RENDERED = {
    "cluster_nodes": server_sql.render_cluster_nodes("c1"),
    "table_comment": server_sql.render_table_comment("db", "t"),
    "table_engine": server_sql.render_table_engine("db", "t"),
    "table_exists": server_sql.render_table_exists("db", "t"),
    "partitions": server_sql.render_partitions("db", "t"),
    "running_tries": server_sql.render_running_tries("^s3ch-x-try[0-9]+$"),
    "logged_tries": server_sql.render_logged_tries("^s3ch-x-try[0-9]+$"),
    "entry": server_sql.render_entry("q1"),
    "secondary_queries": server_sql.render_secondary_queries("q1"),
    "is_listed": server_sql.render_is_listed("q1"),
    "running_queries": server_sql.render_running_queries(["q1", "q2"]),
    "kill_query": server_sql.render_kill_query("q1"),
    "past_loads": server_sql.render_past_loads("key"),
    "last_entry": server_sql.render_last_entry("q1"),
    "ledger_table": render_ledger_table(TableRef(database="db", name="ledger")),
}


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_each_placeholder_has_its_parameter_and_each_parameter_its_placeholder(name: str) -> None:
    sql, params = RENDERED[name]
    assert set(_PLACEHOLDER_RE.findall(sql)) == set(params or {})


def test_names_and_ids_travel_as_parameters_never_in_the_text() -> None:
    odd = "we'ird`na%me"
    for sql, params in (server_sql.render_table_comment(odd, odd), server_sql.render_partitions(odd, odd),
                        server_sql.render_kill_query(odd), server_sql.render_cluster_nodes(odd),
                        render_ledger_table(TableRef(database=odd, name=odd))):
        assert odd not in sql and odd in (params or {}).values()


def test_the_table_reads_select_what_their_names_say_of_one_table() -> None:
    assert [server_sql.render_table_comment("db", "t").sql.split(" FROM ")[0],
            server_sql.render_table_engine("db", "t").sql.split(" FROM ")[0],
            server_sql.render_table_exists("db", "t").sql.split(" FROM ")[0]] == [
        "SELECT comment", "SELECT engine", "SELECT count()"]
    assert server_sql.render_table_exists("db", "t").params == {"d": "db", "t": "t"}


def test_a_create_that_lost_the_race_to_another_creator_is_no_failure() -> None:
    create = "CREATE TABLE IF NOT EXISTS `db`.`t` (a UInt8) ENGINE = MergeTree ORDER BY a"
    assert server_sql.lost_create_race(server_sql.TABLE_ALREADY_EXISTS, create)
    assert not server_sql.lost_create_race(server_sql.TABLE_ALREADY_EXISTS, "CREATE TABLE `db`.`t` (a UInt8)")
    assert not server_sql.lost_create_race(server_sql.TABLE_ALREADY_EXISTS, "ALTER TABLE `db`.`t` ADD COLUMN b UInt8")
    assert not server_sql.lost_create_race(60, create)
    assert not server_sql.lost_create_race(None, create)


def test_the_query_log_reads_give_the_metrics_columns_of_ended_queries_each_by_its_own_filter() -> None:
    reads = {name: RENDERED[name].sql for name in ("logged_tries", "entry", "secondary_queries")}
    for sql in reads.values():
        assert sql.startswith(f"SELECT {', '.join(QUERY_LOG_COLUMNS)} FROM system.query_log WHERE ")
        assert "type != 'QueryStart'" in sql and sql.endswith("ORDER BY event_time_microseconds")
    assert "is_initial_query AND" in reads["logged_tries"] and "match(query_id, %(r)s)" in reads["logged_tries"]
    assert "initial_query_id = %(q)s AND is_initial_query = 0" in reads["secondary_queries"]
    assert "WHERE query_id = %(q)s AND" in reads["entry"]
    assert len(set(reads.values())) == 3


def test_the_tries_of_a_stem_are_read_by_its_pattern() -> None:
    query_id = QueryId(stem="ab12", try_number=3)
    running = server_sql.render_running_tries(query_id.pattern)
    assert running.params == {"r": query_id.pattern} == server_sql.render_logged_tries(query_id.pattern).params
    assert running.sql.startswith("SELECT DISTINCT") and "FROM system.processes" in running.sql


def test_the_running_queries_are_asked_for_as_one_tuple_of_ids() -> None:
    statement = server_sql.render_running_queries(["q1", "q2"])
    assert statement.params == {"q": ("q1", "q2")}  # the driver writes a tuple as IN's list
    assert "query_id IN %(q)s OR initial_query_id IN %(q)s" in statement.sql


def test_past_loads_are_read_by_the_historys_tag_and_limits() -> None:
    sql, params = server_sql.render_past_loads("posts|bucket|x/*.parquet|Parquet")
    assert params == {"p": tag_prefix("posts|bucket|x/*.parquet|Parquet"), "days": HISTORY_DAYS, "n": HISTORY_LOADS}
    assert "type = 'QueryFinish'" in sql and sql.endswith("DESC LIMIT %(n)s")


def test_a_kill_stops_the_query_and_its_secondary_queries_without_waiting() -> None:
    sql, params = server_sql.render_kill_query("s3ch-ab-try1")
    assert sql.startswith("KILL QUERY WHERE ") and sql.endswith(" ASYNC")
    assert "initial_query_id = %(q)s" in sql and params == {"q": "s3ch-ab-try1"}


def test_the_ledger_tables_read_asks_for_the_partitions_column_the_heartbeat_and_set_aside_tables() -> None:
    sql, params = render_ledger_table(TableRef(database="db", name="ledger"))
    assert f"name = '{PARTITIONS_COLUMN}'" in sql and params == {"d": "db", "t": "ledger", "h": "ledger_heartbeat",
                                                                    "s": "ledger_set_aside"}
    assert sql.startswith("SELECT engine, engine_full, ")

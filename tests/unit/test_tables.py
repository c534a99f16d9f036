"""The pure rules for tables from files: keys, the nullability policy, the DDL, the contract."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import InvalidRequestError, SchemaError
from airflow_provider_s3ch.core.models import LoadRequest, TableRef
from airflow_provider_s3ch.core.schema import Column
from airflow_provider_s3ch.core.server_models import TableInfo
from airflow_provider_s3ch.core.sql import quote_identifier
from airflow_provider_s3ch.core.tables import (
    TableSpec,
    created_columns,
    creation,
    default_expression,
    evolution_skipped,
    evolve,
    identifiers,
    planned_table,
    with_added,
)

FILES = "s3://b/p/*.parquet"


def cols(text: str) -> list[Column]:
    return [Column(name=p.split()[0], type=p.split(maxsplit=1)[1]) for p in text.split(", ")]


def spec(**kwargs: object) -> TableSpec:
    args: dict[str, object] = {"order_by": "id", "partition_by": None, "primary_key": None, "engine": None,
                               "settings": None}  # fmt: skip
    args.update(kwargs)
    return TableSpec.from_arguments(**args)  # type: ignore[arg-type]


def test_identifiers_leave_out_functions_literals_and_numbers() -> None:
    assert identifiers("(site, toDate(`ts`), intDiv(id, 1000))") == ["site", "ts", "id"]
    assert identifiers("toYYYYMM(day) % 'id'") == ["day"]
    assert identifiers("tuple()") == []
    assert identifiers('("odd name", `with\\`tick`, `new\\nline`)') == ["odd name", "with`tick", "new\nline"]


@settings(deadline=None)  # no per-example time limit: a busy machine can pause any example
@given(st.lists(st.text(min_size=1, max_size=12).filter(lambda s: "\0" not in s), min_size=1, max_size=5, unique=True))
def test_a_list_of_columns_becomes_a_tuple_whose_identifiers_are_those_columns(names: list[str]) -> None:
    table = spec(order_by=names)
    assert table.order_by == "(" + ", ".join(quote_identifier(n) for n in names) + ")"
    assert identifiers(table.order_by) == names


def test_key_columns_lose_nullable_the_others_keep_the_inferred_type_with_a_default() -> None:
    inferred = cols(
        "id Nullable(Int64), site LowCardinality(Nullable(String)), name Nullable(String), tags Array(Nullable(String))"
    )
    made = created_columns(inferred, spec(order_by="(site, id)"), file=FILES)
    assert [(c.name, c.type, c.default_kind) for c in made] == [
        ("id", "Int64", ""),
        ("site", "LowCardinality(String)", ""),
        ("name", "Nullable(String)", "DEFAULT"),
        ("tags", "Array(Nullable(String))", "DEFAULT"),
    ]
    assert default_expression("Nullable(String)") == "NULL"
    assert default_expression("Array(Nullable(String))") == "defaultValueOfTypeName('Array(Nullable(String))')"


def test_a_key_naming_a_column_the_files_lack_is_a_schema_error_naming_them() -> None:
    with pytest.raises(SchemaError, match=r"partition_by='toYYYYMM\(ts\)' names column 'ts'.*id, name"):
        created_columns(cols("id Int64, name String"), spec(partition_by="toYYYYMM(ts)"), file=FILES)
    with pytest.raises(SchemaError, match="no columns"):
        created_columns([], spec(), file=FILES)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order_by": None}, "needs order_by"),
        ({"order_by": "  "}, "needs order_by"),
        ({"order_by": []}, "needs order_by"),
        ({"engine": "Log"}, "MergeTree-family"),
        ({"engine": "MergeTree; DROP TABLE x"}, "MergeTree-family"),
        ({"engine": "SharedMergeTree"}, "MergeTree-family"),
    ],
)
def test_the_table_spec_refuses_what_cannot_be_created(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        spec(**kwargs)


def test_the_create_statement() -> None:
    made = creation(
        TableRef(database="db", name="t"), cols("id Nullable(Int64), ts Nullable(DateTime64(3)), v Nullable(Float64)"),
        spec(order_by="(id, ts)", partition_by="toYYYYMM(ts)", engine="ReplacingMergeTree(ts)",
             settings={"index_granularity": 1024}),
        file=FILES,
    )  # fmt: skip
    assert [d.sql for d in made.statements] == [
        "CREATE TABLE IF NOT EXISTS `db`.`t` (`id` Int64, `ts` DateTime64(3), `v` Nullable(Float64) DEFAULT NULL) "
        "ENGINE = ReplacingMergeTree(ts) PARTITION BY toYYYYMM(ts) ORDER BY (id, ts) SETTINGS index_granularity = 1024"
    ]
    assert made.table.engine == "ReplacingMergeTree" and made.statements[0].on == "initiator"


@pytest.mark.parametrize("keeper", [False, True])
def test_a_distributed_target_is_a_local_table_on_every_node_and_a_distributed_one(keeper: bool) -> None:
    made = creation(TableRef(database="db", name="t"), cols("id Nullable(Int64)"), spec(), file=FILES,
                    distributed=True, cluster="c", keeper=keeper)  # fmt: skip
    local, dist = made.statements
    assert local.sql.startswith("CREATE TABLE IF NOT EXISTS `db`.`t_local`")
    assert "ENGINE = Distributed('c', 'db', 't_local', rand())" in dist.sql
    assert dist.sql.startswith("CREATE TABLE IF NOT EXISTS `db`.`t`")
    assert ("ON CLUSTER `c`" in local.sql) is keeper and ("ON CLUSTER `c`" in dist.sql) is keeper
    assert {local.on, dist.on} == {"initiator" if keeper else "every_node"}
    assert made.table.is_distributed and made.table.local_table == "t_local" and made.table.local_engine == "MergeTree"
    with pytest.raises(InvalidRequestError, match="needs a cluster"):
        creation(TableRef(database="db", name="t"), cols("id Int64"), spec(), file=FILES, distributed=True)


def test_a_planned_table_does_not_exist_yet() -> None:
    info = planned_table(TableRef(database="db", name="t"), spec(partition_by="p"), distributed=False)
    assert not info.exists and info.engine == "MergeTree" and info.partition_key == "p"


def test_add_columns_adds_what_the_files_have_and_the_table_lacks_never_path_columns() -> None:
    target = TableInfo(database="db", name="t", engine="MergeTree")
    files = cols("id Nullable(Int64), name Nullable(String), extra Nullable(Float64), day Nullable(Int64)")
    evolution = evolve(target, cols("id Int64, name String"), files, policy="add_columns",
                       file="s3://b/p/day=01/x.parquet")  # fmt: skip
    assert evolution.added_names == ["extra"]
    assert [d.sql for d in evolution.statements] == [
        "ALTER TABLE `db`.`t` ADD COLUMN IF NOT EXISTS `extra` Nullable(Float64) DEFAULT NULL"
    ]
    assert [c.name for c in with_added(cols("id Int64, name String"), evolution)] == ["id", "name", "extra"]
    for policy in ("fail", "ignore_extra"):
        assert evolve(
            target, cols("id Int64"), files, policy=policy, file=FILES  # type: ignore[arg-type]
        ).statements == []


def test_add_columns_on_a_distributed_target_alters_the_local_tables_then_the_distributed_one() -> None:
    target = TableInfo(database="db", name="t", engine="Distributed", dist_cluster="c", local_database="db",
                       local_table="t_local")  # fmt: skip
    evolution = evolve(target, cols("id Int64"), cols("id Int64, x Array(String)"), policy="add_columns", file=FILES)
    assert [(d.sql, d.on, str(d.alters.name)) for d in evolution.statements] == [  # type: ignore[union-attr]
        ("ALTER TABLE `db`.`t_local` ADD COLUMN IF NOT EXISTS `x` Array(String) "
         "DEFAULT defaultValueOfTypeName('Array(String)')", "every_node", "t_local"),
        ("ALTER TABLE `db`.`t` ADD COLUMN IF NOT EXISTS `x` Array(String) "
         "DEFAULT defaultValueOfTypeName('Array(String)')", "every_node", "t"),
    ]  # fmt: skip


def test_the_request_takes_the_contract_and_refuses_two_opposite_ones() -> None:
    request = LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t", on_schema_change="add_columns",
                                         create_table="if_missing")  # fmt: skip
    assert request.schema_change == "add_columns" and request.create_table == "if_missing"
    assert LoadRequest.from_arguments(
        s3_uri="s3://b/k.parquet", table="t", schema_check="ignore_extra"
    ).schema_change == "ignore_extra"
    with pytest.raises(InvalidRequestError, match="give one"):
        LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t", on_schema_change="add_columns",
                                   schema_check="ignore_extra")  # fmt: skip
    with pytest.raises(InvalidRequestError, match="create_table"):
        LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t", create_table="always")


def test_add_columns_needs_names_in_the_files() -> None:
    assert evolution_skipped("Parquet", None) is None and evolution_skipped("CSVWithNames", None) is None
    assert "no column names" in (evolution_skipped("CSV", None) or "")
    assert "by position" in (evolution_skipped("Parquet", "a Int64") or "")

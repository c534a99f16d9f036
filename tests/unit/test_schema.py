"""Unit tests for :mod:`airflow_provider_s3ch.core.schema` and its DESCRIBE statement (pure: no server)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_s3ch.core.errors import SchemaError
from airflow_provider_s3ch.core.models import InsertSettings, LoadPlan, LoadRequest, Manifest, S3Object, TableRef
from airflow_provider_s3ch.core.schema import (
    Column,
    add_check,
    check_schema,
    compare_by_name,
    compare_by_position,
    path_columns,
    sample_file,
    schema_reads,
    structure_in_file,
)
from airflow_provider_s3ch.core.schema_types import base_type, type_family, type_problem
from airflow_provider_s3ch.core.sql import REDACTED, render_describe
from tests.unit.test_sql import KEY_ID, SECRET, TOKEN, creds

FILE = "s3://b/data/a.parquet"


def cols(text: str, kind: dict[str, str] | None = None) -> list[Column]:
    """``"id UInt64, name String"`` as columns; ``kind`` gives default kinds by name."""
    out = []
    for part in text.split(","):
        name, _, type_name = part.strip().partition(" ")
        out.append(Column(name=name, type=type_name, default_kind=(kind or {}).get(name, "")))
    return out


def check(target: str, file: str | None = None, *, structure: str | None = None, fmt: str = "Parquet",
          policy: str = "strict", kind: dict[str, str] | None = None, **kwargs: Any):
    return check_schema(
        cols(target, kind), file=FILE, table="db.t", fmt=fmt, policy=policy,  # type: ignore[arg-type]
        file_columns=cols(file) if file is not None else None,
        structure_columns=cols(structure) if structure is not None else None, **kwargs,
    )


def plan(**kwargs: Any) -> LoadPlan:
    fields: dict[str, Any] = {
        "table": TableRef(database="db", name="t"), "source_url": "http://127.0.0.1:9/b/data/*.parquet",
        "format": "Parquet", "strategy": "single", "strategy_reason": "test",
        "settings": InsertSettings(values={"max_insert_threads": 4}), "budget_bytes": 1, "budget_reason": "test",
    }
    fields.update(kwargs)
    return LoadPlan(**fields)


# --- the case and the rules ------------------------------------------------------


def test_file_columns_unlike_the_table_fail_naming_the_file_the_columns_and_the_fix() -> None:
    with pytest.raises(SchemaError) as info:
        check("id UInt64, name String", "x Nullable(Int64), y Nullable(String), z Nullable(Float64)")
    text = str(info.value)
    assert FILE in text and "db.t" in text
    assert "id UInt64, name String" in text and "x, y, z" in text
    assert "structure=" in text and "DEFAULT" in text and "schema_check='warn'" in text
    assert "on_schema_change='ignore_extra'" in text and "on_schema_change='add_columns'" in text


def test_matching_columns_in_another_order_are_fine() -> None:
    result = check("id UInt64, name String", "name Nullable(String), id Nullable(Int64)")
    assert result.status == "ok" and result.message == f"{FILE} matches table db.t"


@pytest.mark.parametrize("fmt", ["CSVWithNames", "TSVWithNames", "JSONEachRow"])
def test_a_text_format_check_says_it_compared_names_not_types(fmt: str) -> None:
    result = check("id UInt64, score Float64", "id Nullable(String), score Nullable(String)", fmt=fmt)
    assert result.status == "ok" and "names compared, not types" in result.message and fmt in result.message
    assert "not types" not in check("id UInt64", "id Nullable(Int64)").message  # Parquet declares its types


@pytest.mark.parametrize("kind", ["DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL"])
def test_a_column_with_an_expression_may_be_missing(kind: str) -> None:
    result = check("id UInt64, d String", "id Int64", kind={"d": kind})
    assert result.status == "ok"
    assert ("filled by the table's DEFAULT" in result.message) == (kind in {"DEFAULT", "EPHEMERAL"})


def test_a_nullable_column_without_default_is_required() -> None:
    with pytest.raises(SchemaError, match=r"n Nullable\(String\)"):
        check("id UInt64, n Nullable(String)", "id Int64")


def test_an_extra_file_column_fails_unless_ignored() -> None:
    with pytest.raises(SchemaError, match="extra"):
        check("id UInt64", "id Int64, extra String")
    result = check("id UInt64", "id Int64, extra String", policy="ignore_extra")
    assert result.status == "ok" and "extra" in result.message and "ignore_extra" in result.message


def test_ignore_extra_still_fails_on_missing_columns() -> None:
    with pytest.raises(SchemaError, match="not in the file"):
        check("id UInt64, name String", "id Int64, extra String", policy="ignore_extra")


def test_a_file_column_named_like_a_computed_column_is_extra() -> None:
    with pytest.raises(SchemaError, match="MATERIALIZED or ALIAS"):
        check("id UInt64, m String", "id Int64, m String", kind={"m": "MATERIALIZED"})


def test_names_are_case_sensitive_and_the_message_says_so() -> None:
    with pytest.raises(SchemaError, match="case-sensitive: file 'ID' vs table 'id'"):
        check("id UInt64", "ID Int64")
    settings = {"input_format_parquet_case_insensitive_column_matching": 1}
    assert check("id UInt64", "ID Int64", settings=settings).status == "ok"


def test_warn_reports_the_problems_and_loads() -> None:
    result = check("id UInt64, name String", "x Int64", policy="warn")
    assert result.status == "warn" and "loading anyway" in result.message and "x" in result.message
    p = plan()
    add_check(p, result)
    assert p.checks[-1] is result and p.warnings == [result.message]


def test_off_and_nameless_formats_skip_without_reading() -> None:
    off = schema_reads("off", "Parquet", None)
    assert off.skipped is not None and off.skipped.status == "skipped" and not (off.file or off.structure)
    csv = schema_reads("strict", "CSV", None)
    assert csv.skipped is not None and "structure=" in csv.skipped.message
    assert schema_reads("strict", "CSV", "a UInt8").model_dump(exclude={"skipped"}) == {
        "file": False, "structure": True
    }
    assert schema_reads("strict", "Parquet", "a UInt8").model_dump(exclude={"skipped"}) == {
        "file": True, "structure": True
    }
    assert schema_reads("strict", "CSVWithNames", None).model_dump(exclude={"skipped"}) == {
        "file": True, "structure": False
    }


def test_hive_path_columns_may_be_missing_from_the_table_and_their_types_are_guesses() -> None:
    assert path_columns("s3://b/tsv/region=eu/day=01/part.tsv") == {"region", "day"}
    assert path_columns("s3://b/x=1.parquet") == set() and path_columns("s3://b/a/=1/f") == set()
    described = "id Nullable(Int64), name Nullable(String), day Int64"
    result = check_schema(cols("id UInt64, name String"), file="s3://b/t/day=01/p.parquet", table="db.t",
                          fmt="Parquet", policy="strict", file_columns=cols(described))
    assert result.status == "ok" and "path columns day are not in the table" in result.message
    found = compare_by_name(cols(described), cols("id UInt64, name String, day Array(String)"), typed=True,
                            from_path={"day"})
    assert found.errors == [] and found.warnings == []


# --- types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "base", "family"),
    [("Nullable(Int64)", "Int64", "integer"), ("LowCardinality(Nullable(String))", "String", "text"),
     ("Array(Nullable(Int64))", "Array(Nullable(Int64))", "nested"), ("Tuple(\n    a Nullable(Int64))", None, "nested"),
     ("Map(String, UInt8)", None, "nested"), ("Float32", None, "float"), ("BFloat16", None, "float"),
     ("Decimal(10, 2)", None, "decimal"), ("Decimal64(4)", None, "decimal"),
     ("DateTime64(3, 'UTC')", None, "other"), ("Enum8('a' = 1)", None, "other"),
     ("FixedString(3)", None, "text"), ("JSON", None, "any"), ("Variant(String, UInt8)", None, "any")],
)
def test_type_families(type_name: str, base: str | None, family: str) -> None:
    if base is not None:
        assert base_type(type_name) == base
    assert type_family(type_name) == family


@pytest.mark.parametrize(
    ("source", "target", "verdict"),
    [
        ("Nullable(Int64)", "UInt64", None),  # Nullable(T) into T: a NULL loads as the default
        ("Nullable(Int8)", "Enum8('Question' = 1, 'Answer' = 2)", None),
        ("Nullable(DateTime64(3, 'UTC'))", "DateTime64(3, 'UTC')", None),
        ("Nullable(String)", "LowCardinality(String)", None),
        ("Nullable(Int64)", "String", None),  # the server writes the number as text
        ("Nullable(String)", "DateTime", None),  # the server's to parse
        ("Array(Nullable(Int64))", "String", "error"),
        ("Nullable(Int64)", "Array(Int64)", "error"),
        ("Tuple(a Nullable(Int64))", "String", "error"),
        ("Array(Int64)", "Array(String)", None),
        ("Nullable(String)", "UInt64", "warning"),
        ("Nullable(String)", "Decimal(10, 2)", "warning"),
        ("Nullable(String)", "Nullable(UInt64)", "error"),  # text that is not a number would load as NULL
        ("String", "Nullable(Float64)", "error"),
        ("Nullable(Float64)", "Int32", "warning"),
        ("Nullable(Int64)", "Float64", None),
        ("String", "JSON", None),
    ],
)
def test_type_rules(source: str, target: str, verdict: str | None) -> None:
    problem = type_problem(source, target)
    assert (problem[0] if problem else None) == verdict


def test_a_nested_file_column_into_a_plain_one_fails() -> None:
    with pytest.raises(SchemaError, match=r"name: Array\(Nullable\(Int64\)\) into String"):
        check("id UInt64, name String", "id Nullable(Int64), name Array(Nullable(Int64))")


def test_text_into_a_number_warns_and_loads() -> None:
    result = check("id UInt64, name String", "id Nullable(String), name Nullable(String)")
    assert result.status == "warn" and "parsed as a number" in result.message


def test_types_of_text_formats_are_not_compared() -> None:
    """Inference on CSV or JSON guesses from values: a quoted "123" is a String that loads fine into UInt64."""
    assert check("id UInt64", "id Nullable(String)", fmt="CSVWithNames").status == "ok"
    assert compare_by_name(cols("id Array(Int64)"), cols("id String"), typed=False).errors == []


# --- structure: by position --------------------------------------------------------------


def test_structure_names_other_than_the_tables_load_by_position() -> None:
    result = check("id UInt64, name String", structure="a UInt64, b String", fmt="CSV")
    assert result.status == "ok" and "a into id, b into name" in result.message


def test_structure_with_the_tables_names_in_another_order_fails() -> None:
    with pytest.raises(SchemaError, match="name into id, id into name"):
        check("id UInt64, name String", structure="name String, id UInt64", fmt="CSV")


def test_structure_with_another_column_count_fails() -> None:
    with pytest.raises(SchemaError, match="3 columns"):
        check("id UInt64, name String", structure="a UInt64, b String, c String", fmt="CSV")


def test_positional_slots_leave_out_computed_and_ephemeral_columns() -> None:
    target = cols("id UInt64, name String, d String, m String, e String", {"d": "DEFAULT", "m": "MATERIALIZED",
                                                                          "e": "EPHEMERAL"})
    assert compare_by_position(cols("id UInt64, name String, d String"), target).errors == []
    assert compare_by_position(cols("id UInt64, name String"), target).errors


def test_structure_types_against_the_table() -> None:
    with pytest.raises(SchemaError, match="nested type"):
        check("id UInt64, tags String", structure="id UInt64, tags Array(String)", fmt="CSV")


def test_structure_columns_must_be_in_a_file_with_names() -> None:
    with pytest.raises(SchemaError, match="structure columns nme are not in the file"):
        check("id UInt64, name String", "id Nullable(Int64), name Nullable(String)", structure="id UInt64, nme String")
    found = structure_in_file(cols("x UInt64, y String"), cols("x Nullable(Int64), y Nullable(String), z Int8"),
                              typed=True)
    assert found.errors == [] and found.warnings == []


def test_structure_mapping_file_columns_onto_the_table_is_the_fix_for_other_names() -> None:
    result = check("id UInt64, name String", "x Nullable(Int64), y Nullable(String), z Nullable(Float64)",
                   structure="x UInt64, y String")
    assert result.status == "ok" and "x into id" in result.message


# --- the sample file and the DESCRIBE ----------------------------------------------------


def manifest(*objects: tuple[str, int]) -> Manifest:
    return Manifest(bucket="b", pattern="data/*.parquet", prefix="data/", format="Parquet",
                    objects=[S3Object(key=k, size=s) for k, s in objects])


def test_the_sample_is_the_first_file_that_is_not_empty() -> None:
    name, url = sample_file(plan(), manifest(("data/0.parquet", 0), ("data/1.parquet", 10), ("data/2.parquet", 5)))
    assert name == "s3://b/data/1.parquet" and url == "http://127.0.0.1:9/b/data/1.parquet"
    assert sample_file(plan(), manifest(("data/0.parquet", 0))) is None


def test_describe_is_redacted_and_reads_one_file_with_s3_even_for_a_distributed_plan() -> None:
    p = plan(strategy="distributed", cluster="c", compression="gzip")
    rendered = render_describe(p, creds(token=TOKEN), url="http://h/b/data/1.parquet", structure=False,
                               settings={"schema_inference_make_columns_nullable": 0})
    assert rendered.sql.startswith("DESCRIBE TABLE s3('http://h/b/data/1.parquet', ")
    assert SECRET in rendered.sql and TOKEN in rendered.sql and "'auto', 'gzip')" in rendered.sql
    assert SECRET not in rendered.redacted and TOKEN not in rendered.redacted and KEY_ID not in rendered.redacted
    assert REDACTED in rendered.redacted and SECRET not in repr(rendered)
    assert rendered.settings["schema_inference_make_columns_nullable"] == 0
    assert "max_insert_threads" not in rendered.settings


def test_describe_of_the_structure() -> None:
    rendered = render_describe(plan(format="CSV", structure="a UInt8, b String"), None, url="http://h/b/x.csv",
                               structure=True)
    assert rendered.sql == "DESCRIBE TABLE s3('http://h/b/x.csv', NOSIGN, 'CSV', 'a UInt8, b String')"
    without = render_describe(plan(format="CSV", structure="a UInt8"), None, url="http://h/b/x.csv", structure=False)
    assert without.sql == "DESCRIBE TABLE s3('http://h/b/x.csv', NOSIGN, 'CSV')"


def test_describe_of_a_huge_structure_still_parses() -> None:
    structure = ", ".join(f"c{i} UInt8" for i in range(40_000))
    rendered = render_describe(plan(format="CSV", structure=structure), None, url="http://h/b/x.csv", structure=True)
    assert int(rendered.settings["max_query_size"]) > len(rendered.sql)


def test_schema_check_is_an_argument() -> None:
    request = LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t", schema_check="ignore_extra")
    assert request.schema_check == "ignore_extra"
    assert LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t").schema_check == "strict"
    with pytest.raises(Exception, match="schema_check"):
        LoadRequest.from_arguments(s3_uri="s3://b/k.parquet", table="t", schema_check="lenient")


def test_wide_schemas_compare_in_linear_time_and_messages_stay_short() -> None:
    wide = [Column(name=f"c{i}", type="UInt8") for i in range(40_000)]
    other = [Column(name=f"d{i}", type="String") for i in range(40_000)]
    found = compare_by_name(wide, other, typed=True)
    assert len(found.errors) == 2 and all("and 39980 more" in e for e in found.errors)
    assert structure_in_file(wide, other, typed=True).errors
    with pytest.raises(SchemaError) as info:
        check_schema(other, file=FILE, table="db.t", fmt="Parquet", policy="strict", structure_columns=wide[:3])
    assert len(str(info.value)) < 2_000


def test_the_describe_takes_only_the_settings_of_reading_the_files() -> None:
    from airflow_provider_s3ch.core.schema import HEADER_SAMPLE_ROWS, describe_settings, read_settings

    settings = {"max_insert_threads": 2, "max_memory_usage": "8Gi", "max_threads": 4, "insert_deduplicate": 1,
                "min_insert_block_size_bytes": 1 << 26, "input_format_null_as_default": 0,
                "schema_inference_make_columns_nullable": 0, "format_csv_delimiter": ";",
                "s3_max_connections": 8, "date_time_input_format": "best_effort", "use_hive_partitioning": 1}
    reading = {k: v for k, v in settings.items() if not k.startswith(("max_", "insert_", "min_"))}
    assert read_settings(settings) == reading
    assert describe_settings("Parquet", settings) == reading
    assert describe_settings("CSVWithNames", settings) == {
        "input_format_max_rows_to_read_for_schema_inference": HEADER_SAMPLE_ROWS, **reading}

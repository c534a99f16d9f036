"""Parse errors rebuilt without the file's data, whatever the data holds (the shapes the engine writes;
tests/integration/test_parse_errors.py checks them against the engine's own messages)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_s3ch.core.errors import DATA_ERROR_CODES, bad_file, server_text
from airflow_provider_s3ch.core.rows_out import ParsePoint, data_fix, quotes_data, see_rows, without_rows

MARK = "Zq"  # no word of a rebuilt message holds it
values = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40).map(lambda t: f"{MARK}{t}{MARK}")


def _dump(good: str, bad: str) -> str:
    return (
        f"DB::Exception: Cannot parse input: expected ',' before: '{bad},{good}\\n3,x\\n': (at row 2)\n: \n"
        f"Row 1:\nColumn 0,   name: id,   type: UInt64, parsed text: \"1\"\n"
        f"Column 1,   name: name, type: String, parsed text: \"{good}\"\n"
        f"Row 2:\nColumn 0,   name: id,   type: UInt64, ERROR: text \"{bad}\" is not like UInt64\n"
        ": (in file/uri bkt/in/a.csv): While executing ParallelParsingBlockInputFormat: While executing "
        "ReadFromObjectStorage. Stack trace:\n\n0. ? @ 0x1\n"
    )


@given(good=values, bad=values)
def test_no_value_of_the_file_survives(good: str, bad: str) -> None:
    text = server_text(_dump(good, bad))
    assert MARK not in text
    assert text.startswith("Cannot parse input (at row 2, column 0 'id' of type UInt64)") and "bkt/in/a.csv" in text


@given(bad=values)
def test_a_value_read_as_a_date_or_a_number_is_left_out(bad: str) -> None:
    for message in (f"DB::Exception: Cannot parse date here: {bad}: (at row 7)\n: (in file/uri b/k.csv)",
                    f"DB::Exception: Cannot parse string '{bad}' as Float64: (at row 7)",
                    f"Code: 27. DB::Exception: Cannot parse input: expected '\"' before: '{bad}': "
                    "(while reading the value of key id): (at row 7)"):
        assert quotes_data(message)
        assert MARK not in server_text(message)
        assert "(at row 7" in server_text(message)


def test_a_message_without_data_is_kept_as_the_server_wrote_it() -> None:
    text = "DB::Exception: Table default.x does not exist. (UNKNOWN_TABLE) (version 26.9.2.1)"
    assert not quotes_data(text) and server_text(text + " Stack trace:\n0. ?") == text
    assert data_fix(text, None) == "fix the statement or the data"


def test_the_way_to_see_the_rows() -> None:
    _, point = without_rows(_dump("a", "b"))
    assert point == ParsePoint(file="bkt/in/a.csv", row=2)
    assert see_rows(point, "http://127.0.0.1:9/").startswith(
        "to see the rows, run SELECT * FROM s3('http://127.0.0.1:9/bkt/in/a.csv', 'LineAsString') LIMIT 3 OFFSET 1")
    assert "s3('https://bkt.s3.amazonaws.com/in/a.csv'" in see_rows(point, None)
    assert "LineAsString" in (data_fix(_dump("a", "b"), None) or "")


def test_a_memory_limit_hit_while_parsing_keeps_its_words() -> None:
    """It names the row, not its data: the memory limit's markers stay for the step-down to see."""
    text = ("DB::Exception: Query memory limit exceeded: would use 1.00 GiB (attempt to allocate chunk of 1048576 "
            "bytes), maximum: 1.00 GiB.: (at row 31337)\n: While executing ParallelParsingBlockInputFormat")
    assert not quotes_data(text) and server_text(text) == text


@given(bad=values)
def test_a_typed_readers_value_is_left_out_and_its_column_kept(bad: str) -> None:
    quoted = bad.replace("\\", "\\\\").replace("'", "\\'")  # as the server quotes a string
    text = (f"DB::Exception: Cannot parse string '{quoted}' as UInt64: syntax error at begin of string. Note: "
            "there are toUInt64OrZero and toUInt64OrNull functions: read stage: ColumnData: column: n: (in file/uri "
            "b/t/part.parquet): While executing ParquetV3BlockInputFormat")
    assert server_text(text).startswith("Cannot parse a string as UInt64 (column 'n') in file b/t/part.parquet")


keys = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1, max_size=40).filter(
    lambda k: "): " not in k and not k.endswith(")"))


@given(key=keys, code=st.sampled_from(sorted(DATA_ERROR_CODES)))
def test_a_data_error_names_the_file_it_was_reading_whatever_its_key(key: str, code: int) -> None:
    message = f"DB::Exception: Cannot parse input: (at row 2): (in file/uri bkt/{key}): While executing CSVRowInput"
    assert bad_file(code, message) == f"bkt/{key}"
    assert bad_file(code, message.replace("(in file/uri", "(reading")) is None


@given(code=st.integers(0, 1100).filter(lambda c: c not in DATA_ERROR_CODES))
def test_no_other_error_names_a_bad_file(code: int) -> None:
    assert bad_file(code, "DB::Exception: Memory limit (in file/uri bkt/a.csv): While executing") is None

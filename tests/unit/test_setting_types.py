"""The user's setting values against the server's types (the server's own answers: tests/integration/
test_setting_types.py)."""

from __future__ import annotations

import pytest

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.setting_types import check_settings, setting_int, setting_problem


@pytest.mark.parametrize(
    ("type_name", "good", "bad"),
    [
        ("UInt64", [0, 1, "0", "+5", "10G", "8Gi", "10k", "18446744073709551615"],
         [-1, 1.0, 1.5, "lots", "1; DROP TABLE x", " 5", "10GiB", "1e3", "0x10", ""]),
        ("NonZeroUInt64", [1, "2", "10k"], [0, "0", "0k", -1, "lots"]),
        ("MaxThreads", [0, 1, "+5", "auto", "auto(4)", "auto()"], [-1, "lots", "AUTO", "10G", 1.5, "1; DROP TABLE x"]),
        ("UInt64Auto", [0, "10G", "auto"], [-1, "lots"]),
        ("Int64", [-1, "-1", "+5", "10G"], [1.5, "lots", "1e3"]),
        ("Int32", [-5, "7"], ["x"]),
        ("Float", [0, -1.5, 1e20, "1e3", "+5", ".5"], ["inf", "nan", "lots", "10G"]),
        ("Double", [0.5], ["x"]),
        ("FloatAuto", ["auto", 0.5], ["lots"]),
        ("Seconds", [0, -1, 1.5, "1e3", "30"], ["10G", "1s", "lots"]),
        ("Milliseconds", [0, "10k", "+5"], [-1, 1.5, "1ms"]),
        ("Bool", [0, 1, "true", "False", "TRUE"], [2, "yes", "on", 1.0, "lots"]),
        ("BoolAuto", ["auto", "true", 0], ["yes"]),
        ("Char", [",", "", 1], ["ab"]),
        ("LoadBalancing", ["random", "nearest_hostname"], ["1; DROP TABLE x", "a'b"]),
        ("JoinAlgorithm", ["hash,parallel_hash", "", ","], ["hash; DROP"]),
    ],
)
def test_each_type_takes_what_the_server_takes(type_name, good, bad) -> None:
    for value in good:
        assert setting_problem("s", value, type_name) is None, (type_name, value)
    for value in bad:
        problem = setting_problem("s", value, type_name)
        assert problem is not None and type_name in problem and repr(value) in problem, (type_name, value)


@pytest.mark.parametrize("type_name", ["String", "Timezone", "URI", "Map", "SomeFutureType(8)", "lowercase"])
def test_types_it_cannot_judge_take_anything(type_name) -> None:
    for value in ("1; DROP TABLE x", -1, 1.5, "", "{'a': 'b'}"):
        assert setting_problem("s", value, type_name) is None


def test_the_error_names_the_setting_the_value_and_the_type() -> None:
    with pytest.raises(InvalidRequestError) as info:
        check_settings({"max_threads": "lots", "max_memory_usage": "8Gi", "max_insert_threads": -1},
                       {"max_threads": "MaxThreads", "max_memory_usage": "UInt64", "max_insert_threads": "MaxThreads"},
                       server="ClickHouse 26.9 at h:9000")
    text = str(info.value)
    assert "max_threads='lots'" in text and "max_insert_threads=-1" in text and "MaxThreads" in text
    assert "max_memory_usage" not in text  # '8Gi' is a size the server reads
    assert "ClickHouse 26.9 at h:9000" in text


def test_an_unknown_name_is_named_and_custom_settings_are_not_judged() -> None:
    with pytest.raises(InvalidRequestError, match="'max_insert_thread' is not a setting of the server"):
        check_settings({"max_insert_thread": 2}, {})
    check_settings({"custom_tag": "anything"}, {})


def test_without_the_types_nothing_is_judged() -> None:
    check_settings({"max_threads": "lots", "nope": 1}, None)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, 7), (5, 5), ("5", 5), ("+5", 5), ("10G", 10 * 1000**3), ("8Gi", 8 * 1024**3), ("10k", 10_000),
     ("10K", 10_000), ("2Mi", 2 * 1024**2), ("1T", 1000**4), ("auto(4)", 4), ("auto()", 7), ("auto", 7), ("lots", 7),
     (True, 7), (1.5, 7)],
)
def test_setting_int_reads_numbers_as_the_server_does(value, expected) -> None:
    assert setting_int(value, 7) == expected

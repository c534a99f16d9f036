"""The request model: arguments as users write them, and clear errors for bad ones."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowFailException

from airflow_provider_s3ch import errors
from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.models import LoadRequest, TableRef
from airflow_provider_s3ch.core.sizes import parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [("8GiB", 8 * 1024**3), ("512 MiB", 512 * 1024**2), ("2GB", 2 * 10**9), (1024, 1024), ("1.5GiB", 1610612736),
     ("100", 100), (None, None), ("", None), ("8Gi", 8 * 1024**3), ("512Mi", 512 * 1024**2), ("1 Ti", 1024**4),
     ("64Ki", 64 * 1024), ("1.5Gi", 1610612736), ("8gi", 8 * 1024**3), ("1G", 10**9), ("3M", 3 * 10**6)],
)
def test_parse_size(text, size) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "8 GiBs", "-1", "0", "1e9", True, "GiB", "Gi", "8Gii", "8Xi"])
def test_parse_size_rejects_with_the_fix(text) -> None:
    with pytest.raises(InvalidRequestError, match="8GiB"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "db", "name"),
    [("db.t", "db", "t"), ("t", None, "t"), ("`my.db`.`t``x`", "my.db", "t`x"), ("`a`", None, "a")],
)
def test_table_ref(text, db, name) -> None:
    ref = TableRef.parse(text)
    assert (ref.database, ref.name) == (db, name)


@pytest.mark.parametrize("text", ["", "a.b.c", ".t", "db.", "`unclosed"])
def test_table_ref_rejects(text) -> None:
    with pytest.raises(InvalidRequestError):
        TableRef.parse(text)


@pytest.mark.parametrize("uri", ["https://b/x", "s3://", "s3://bucket", "s3://bucket/", "s3:///key", "s3://b*c/x"])
def test_s3_uri_rejects(uri) -> None:
    with pytest.raises(InvalidRequestError, match="s3://"):
        LoadRequest.from_arguments(s3_uri=uri, table="t")


def test_bad_literal_argument_is_terminal_and_named() -> None:
    with pytest.raises(InvalidRequestError, match="region_check='maybe'") as info, errors.provider_errors():
        LoadRequest.from_arguments(s3_uri="s3://b/x/*.csv", table="t", region_check="maybe")
    assert isinstance(info.value, AirflowFailException)
    assert isinstance(info.value, errors.S3chError) and isinstance(info.value, errors.InvalidRequestError)


def test_settings_validation() -> None:
    r = LoadRequest.from_arguments(s3_uri="s3://b/x", table="t", settings={"max_threads": 4, "flag": True})
    assert r.settings == {"max_threads": 4, "flag": 1}
    with pytest.raises(InvalidRequestError, match="setting name"):
        LoadRequest.from_arguments(s3_uri="s3://b/x", table="t", settings={"x; DROP": 1})
    with pytest.raises(InvalidRequestError, match="number or a string"):
        LoadRequest.from_arguments(s3_uri="s3://b/x", table="t", settings={"x": [1]})


def test_bucket_and_pattern() -> None:
    r = LoadRequest.from_arguments(s3_uri="s3://bkt/a/b/*.parquet", table="db.t", memory_cap="1GiB")
    assert (r.bucket, r.key_pattern, r.memory_cap) == ("bkt", "a/b/*.parquet", 1024**3)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"memory_cap": 10**30}, "memory_cap"), ({"memory_cap": "9000000TiB"}, "memory_cap"),
     ({"settings": {"max_threads": 10**40}}, "max_threads"), ({"settings": {"max_threads": -(2**64)}}, "max_threads"),
     ({"settings": {"max_block_size": float("inf")}}, "max_block_size"),
     ({"settings": {"max_block_size": 1e30}}, "max_block_size")],
)
def test_numbers_out_of_range_are_refused_before_the_load(kwargs: dict, named: str) -> None:
    with pytest.raises(InvalidRequestError, match=named) as info:
        LoadRequest.from_arguments(s3_uri="s3://b/x/*.csv", table="t", **kwargs)
    assert "range" in str(info.value) or "8 EiB" in str(info.value)
    assert LoadRequest.from_arguments(s3_uri="s3://b/x", table="t", settings={"max_threads": 2**64 - 1}).settings


@pytest.mark.parametrize("name", ["log_queries", "log_queries_min_type", "log_queries_min_query_duration_ms",
                                  "log_queries_probability"])
def test_settings_that_would_keep_the_load_out_of_query_log_are_refused(name: str) -> None:
    with pytest.raises(InvalidRequestError, match=f"{name}=.*system.query_log"):
        LoadRequest.from_arguments(s3_uri="s3://b/x", table="t", settings={name: 0})

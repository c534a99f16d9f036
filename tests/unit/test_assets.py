"""The ``clickhouse://`` asset URI scheme, through Airflow's own Asset (which finds the provider's handler)."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import Asset

from airflow_provider_s3ch import get_provider_info
from airflow_provider_s3ch.assets import convert_asset_to_openlineage, create_asset, sanitize_uri
from airflow_provider_s3ch.compat import AIRFLOW_3
from airflow_provider_s3ch.core.lineage import openlineage_name, server_namespace


@pytest.mark.parametrize(
    ("written", "normalized"),
    [
        ("clickhouse://ch.example.com/analytics/posts", "clickhouse://ch.example.com:9000/analytics/posts"),
        ("clickhouse://ch.example.com:9440/analytics/posts", "clickhouse://ch.example.com:9440/analytics/posts"),
        ("CLICKHOUSE://CH.Example.COM/analytics/posts", "clickhouse://ch.example.com:9000/analytics/posts"),
        ("ClickHouse://host:/db/t", "clickhouse://host:9000/db/t"),
        ("clickhouse://host/db/t/", "clickhouse://host:9000/db/t"),
        ("clickhouse://loader@host:9000/db/t", "clickhouse://host:9000/db/t"),
        ("clickhouse://[::1]/db/t", "clickhouse://[::1]:9000/db/t"),
        ("clickhouse://host/Analytics/Posts_2024", "clickhouse://host:9000/Analytics/Posts_2024"),
    ],
)
def test_airflow_normalizes_clickhouse_uris(written: str, normalized: str) -> None:
    assert Asset(written).uri == normalized


@pytest.mark.parametrize(
    "uri",
    [
        "clickhouse://host",
        "clickhouse://host/",
        "clickhouse://host/analytics",
        "clickhouse://host/analytics/",
        "clickhouse://host//posts",
        "clickhouse://host/analytics/posts/extra",
        "clickhouse:///analytics/posts",
        "clickhouse://host:native/analytics/posts",
    ],
)
def test_a_uri_without_host_database_and_table_is_an_error(uri: str) -> None:
    if AIRFLOW_3:
        with pytest.raises(ValueError, match=r"clickhouse://host:port/database/table"):
            Asset(uri)
    else:  # Airflow 2 turns the handler's error into a warning ("In Airflow 3, this will raise an exception")
        with pytest.warns(UserWarning, match=r"clickhouse://host:port/database/table"):
            Asset(uri)


def test_the_provider_registers_the_scheme_with_its_handler_factory_and_converter() -> None:
    info = get_provider_info()
    assert info["asset-uris"] == info["dataset-uris"] == [{  # Airflow 3's name, and Airflow 2's
        "schemes": ["clickhouse"],
        "handler": "airflow_provider_s3ch.assets.sanitize_uri",
        "factory": "airflow_provider_s3ch.assets.create_asset",
        "to_openlineage_converter": "airflow_provider_s3ch.assets.convert_asset_to_openlineage",
    }]
    if AIRFLOW_3:
        from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime  # noqa: TID251 - Airflow 3's

        runtime = ProvidersManagerTaskRuntime()
        handlers, factories, converters = (runtime.asset_uri_handlers, runtime.asset_factories,
                                           runtime.asset_to_openlineage_converters)
    else:
        from airflow.providers_manager import ProvidersManager

        manager = ProvidersManager()
        handlers, factories, converters = (manager.dataset_uri_handlers, manager.dataset_factories,
                                           manager.dataset_to_openlineage_converters)
    assert handlers["clickhouse"] is sanitize_uri
    assert factories["clickhouse"] is create_asset
    assert converters["clickhouse"] is convert_asset_to_openlineage


def test_create_asset_builds_the_normalized_uri() -> None:
    assert create_asset(host="CH", database="analytics", table="posts").uri == "clickhouse://ch:9000/analytics/posts"
    assert create_asset(host="ch", port=9440, database="a b", table="t/1", extra={"k": 1}).uri == (
        "clickhouse://ch:9440/a%20b/t%2F1"
    )


def test_an_asset_is_named_in_openlineage_as_the_operator_names_its_output() -> None:
    dataset = convert_asset_to_openlineage(Asset("clickhouse://CH.example:9000/analytics/posts"), None)
    assert (dataset.namespace, dataset.name) == ("clickhouse://ch.example:9000", "analytics.posts")
    assert dataset.namespace == server_namespace("CH.example", 9000)
    assert dataset.name == openlineage_name("analytics", "posts")
    quoted = convert_asset_to_openlineage(create_asset(host="ch", database="a b", table="t/1"), None)
    assert quoted.name == "a b.t/1"

"""The S3 client's build: botocore's own models, found without walking every service's folder, and Python's
cyclic collector held back while it runs. botocore's stock loader is the reference."""

from __future__ import annotations

import gc
import json
import os

import pytest
from botocore.loaders import Loader

from airflow_provider_s3ch.hooks.s3_source import ModelLoader, S3Source, paused_gc

TYPES = ("service-2", "endpoint-rule-set-1", "paginators-1", "waiters-2")


@pytest.mark.parametrize("type_name", TYPES)
def test_the_models_are_botocores_own(type_name: str) -> None:
    assert ModelLoader().load_service_model("s3", type_name) == Loader().load_service_model("s3", type_name)
    assert ModelLoader().load_data("endpoints") == Loader().load_data("endpoints")


def test_every_service_botocore_knows_is_known() -> None:
    quick, stock = ModelLoader(), Loader()
    assert quick.search_paths == stock.search_paths
    assert quick.list_available_services("service-2") == stock.list_available_services("service-2")
    for type_name in TYPES:  # a service without such a model is listed, then fails to load it
        assert set(stock.list_available_services(type_name)) <= set(quick.list_available_services(type_name))


@pytest.fixture
def aws_connection(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_S3CH_UNIT_AWS", json.dumps({
        "conn_type": "aws", "login": "AKIAUNITTEST", "password": "unit-secret",
        "extra": {"region_name": "eu-west-3"}}))
    return "s3ch_unit_aws"


def test_the_client_is_built_without_walking_the_services(aws_connection: str, monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    source = S3Source(aws_connection)
    source.credentials()
    listed: list[str] = []
    real = os.listdir

    def listdir(path: str = ".") -> list[str]:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    client = source.client()
    monkeypatch.setattr(os, "listdir", real)
    # botocore's stock loader lists every service's folder (400 and more), twice
    assert len(listed) <= 3 * len(source.session._session.get_component("data_loader").search_paths)
    stock = S3Source(aws_connection).hook.get_session().client("s3")
    assert client.meta.endpoint_url == stock.meta.endpoint_url == "https://s3.eu-west-3.amazonaws.com"
    assert client.meta.service_model.operation_names == stock.meta.service_model.operation_names
    assert client.can_paginate("list_objects_v2")


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_gc_restores_the_collector(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    try:
        with paused_gc():
            assert not gc.isenabled()
            with paused_gc():
                assert not gc.isenabled()
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), paused_gc():
            raise RuntimeError("the block fails")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()

"""The seam to Airflow's moving modules: what it gives on the running Airflow, and the error of a feature
the running Airflow is too old for."""

from __future__ import annotations

import pytest

from airflow_provider_s3ch import compat
from airflow_provider_s3ch.errors import NeedsNewerAirflowError, S3chTerminalError, require


def test_the_seam_gives_airflows_own_classes() -> None:
    from airflow.providers.common.compat.sdk import Asset, BaseOperator

    assert compat.Asset is Asset and compat.BaseOperator is BaseOperator
    assert isinstance(compat.Asset(uri="clickhouse://h:9000/db/t"), compat.BaseAsset)
    assert (compat.AIRFLOW.major >= 3) is compat.AIRFLOW_3


def test_a_feature_of_a_newer_airflow_names_the_feature_and_both_versions() -> None:
    require("anything", "2.11")  # the oldest supported: always there
    newer = f"{compat.AIRFLOW.major + 1}.0"
    with pytest.raises(NeedsNewerAirflowError, match=rf"asset watchers needs Apache Airflow {newer} or later; "
                                                     rf"this is Airflow {compat.AIRFLOW_VERSION}") as info:
        require("asset watchers", newer)
    assert isinstance(info.value, S3chTerminalError)

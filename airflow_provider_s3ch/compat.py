"""The one seam between the provider and Airflow's own modules, from Airflow 2.11 to the newest 3.x.

Every name the provider takes from Airflow that moved between versions comes from here. Most come
from ``airflow.providers.common.compat.sdk``, the seam the official providers use (the Task SDK's name
on Airflow 3, the older module's on Airflow 2); the rest, which it does not carry, have their fallback
here. Nothing else in the package imports ``airflow.sdk`` (ruff's banned-api rule keeps it so).

A feature that needs a newer Airflow says so when it is used: :func:`require` names the feature and
the version, instead of an ``ImportError`` from deep inside.
"""

from __future__ import annotations

from airflow import __version__ as AIRFLOW_VERSION
from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
    Asset,
    BaseOperator,
    BaseSensorOperator,
    Context,
    PokeReturnValue,
    conf,
    mask_secret,
)
from packaging.version import Version

try:  # Airflow 3: assets; Airflow 2: datasets, of which assets are the new name
    from airflow.sdk.definitions.asset import BaseAsset
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.datasets import BaseDataset as BaseAsset  # type: ignore[no-redef]

#: The Airflow this process runs, as a comparable version.
AIRFLOW = Version(Version(AIRFLOW_VERSION).base_version)
AIRFLOW_3 = AIRFLOW.major >= 3


def require(feature: str, version: str) -> None:
    """Refuse a feature the running Airflow is too old for, naming both.

    :param feature: what the user asked for, in their terms (an argument, a DAG option).
    :param version: the oldest Airflow that has it, e.g. ``"3.0"``.
    :raises NeedsNewerAirflowError: when the running Airflow is older.
    """
    from airflow_provider_s3ch.errors import NeedsNewerAirflowError

    if Version(version) > AIRFLOW:
        raise NeedsNewerAirflowError(
            f"{feature} needs Apache Airflow {version} or later; this is Airflow {AIRFLOW_VERSION}: "
            f"upgrade Airflow, or leave {feature} out"
        )


__all__ = [
    "AIRFLOW",
    "AIRFLOW_3",
    "AIRFLOW_VERSION",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "Asset",
    "BaseAsset",
    "BaseOperator",
    "BaseSensorOperator",
    "Context",
    "PokeReturnValue",
    "conf",
    "mask_secret",
    "require",
]

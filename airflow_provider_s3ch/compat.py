"""The one seam between the provider and Airflow's own modules, from Airflow 2.11 to the newest 3.x.

Every name the provider takes from Airflow that moved between versions comes from here. Most come
from ``airflow.providers.common.compat.sdk``, the seam the official providers use (the Task SDK's name
on Airflow 3, the older module's on Airflow 2); the rest, which it does not carry, have their fallback
here. Nothing else in the package imports ``airflow.sdk`` (ruff's banned-api rule keeps it so).

A feature that needs a newer Airflow says so when it is used: :func:`airflow_provider_s3ch.errors.require`
names the feature and the version (from :data:`AIRFLOW` here), instead of an ``ImportError`` from deep inside.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

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
    Stats,
    conf,
    get_current_context,
    mask_secret,
)
from airflow.providers.common.compat.triggers import BaseEventTrigger
from packaging.version import Version

try:  # Airflow 3: assets; Airflow 2: datasets, of which assets are the new name
    from airflow.sdk.definitions.asset import BaseAsset
except ImportError:  # pragma: no cover - Airflow 2
    from airflow.datasets import BaseDataset as BaseAsset  # type: ignore[no-redef]

try:  # Airflow 3: a trigger that watches an asset; Airflow 2 has no watchers
    from airflow.sdk import AssetWatcher
except ImportError:  # pragma: no cover - Airflow 2
    AssetWatcher = None  # type: ignore[assignment,misc]

try:  # Airflow 3: a DAG run on an asset's events or on a time schedule, whichever comes first
    from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable
except ImportError:  # pragma: no cover - Airflow 2
    AssetOrTimeSchedule = CronTriggerTimetable = None  # type: ignore[assignment,misc]

try:  # Airflow 3.3: an event trigger's broker advanced only after its events are stored (the ack mode)
    from airflow.triggers.shared_stream import AdvanceItem, SharedStreamProducer
except ImportError:  # pragma: no cover - Airflow 2 and 3.0 to 3.2
    AdvanceItem = SharedStreamProducer = None  # type: ignore[assignment,misc]

try:  # Airflow 3: a running task reads an asset's events through the Task SDK
    from airflow.sdk.execution_time.context import InletEventsAccessor
except ImportError:  # pragma: no cover - Airflow 2
    InletEventsAccessor = None  # type: ignore[assignment,misc]

#: The Airflow this process runs, as a comparable version.
AIRFLOW = Version(Version(AIRFLOW_VERSION).base_version)
AIRFLOW_3 = AIRFLOW.major >= 3


def _form_widgets(cls: type) -> dict[str, object]:
    """Airflow 2's ``get_connection_form_widgets``: the extra fields of ``CONN_FIELDS`` as WTForms fields."""
    from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, IntegerField, StringField
    from wtforms.validators import Optional

    from airflow_provider_s3ch import CONN_FIELDS

    widgets: dict[str, object] = {}
    for name, field in CONN_FIELDS.items():
        kinds = field["schema"]["type"]  # type: ignore[index]
        label, description = lazy_gettext(str(field["label"])), str(field["description"])
        if "boolean" in kinds:
            widgets[name] = BooleanField(label, description=description)
        elif "integer" in kinds:
            widgets[name] = IntegerField(label, description=description, validators=[Optional()],
                                         widget=BS3TextFieldWidget())
        else:
            widgets[name] = StringField(label, description=description, widget=BS3TextFieldWidget())
    return widgets


def _ui_field_behaviour(cls: type) -> dict[str, object]:
    """Airflow 2's ``get_ui_field_behaviour``: ``UI_FIELD_BEHAVIOUR``."""
    from airflow_provider_s3ch import UI_FIELD_BEHAVIOUR

    return dict(UI_FIELD_BEHAVIOUR)


class ConnectionForm:
    """A hook's connection form on Airflow 2. Its providers manager reads a hook class's own
    ``get_connection_form_widgets`` and ``get_ui_field_behaviour`` (in the class's ``__dict__``, not
    inherited), where Airflow 3 reads the provider info's ``conn-fields`` and ``ui-field-behaviour``. Both
    come from the one copy in the package's ``__init__``. On Airflow 3 nothing is added, so Airflow 3 sees
    only the provider info."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not AIRFLOW_3:  # pragma: no cover - Airflow 2
            cls.get_connection_form_widgets = classmethod(_form_widgets)  # type: ignore[attr-defined]
            cls.get_ui_field_behaviour = classmethod(_ui_field_behaviour)  # type: ignore[attr-defined]


__all__ = [
    "AIRFLOW",
    "AIRFLOW_3",
    "AIRFLOW_VERSION",
    "AdvanceItem",
    "AirflowException",
    "ConnectionForm",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSkipException",
    "Asset",
    "AssetOrTimeSchedule",
    "AssetWatcher",
    "BaseAsset",
    "BaseEventTrigger",
    "BaseOperator",
    "BaseSensorOperator",
    "Context",
    "CronTriggerTimetable",
    "PokeReturnValue",
    "SharedStreamProducer",
    "Stats",
    "conf",
    "get_current_context",
    "mask_secret",
]


def events_since(triggering: Mapping[Any, Sequence[Any]], limit: int = 1000) -> list[Any]:
    """The events of the assets that triggered this run stored since its latest triggering event of each, oldest
    first (at most ``limit`` an asset).

    A run takes the asset events stored up to when its asset was first queued; those stored while it waited for
    ``max_active_runs`` stay for a later run, which only a further event starts (``AssetDagRunQueue`` keeps its
    first time). Reading them at the start lets a run take every file that landed before it started.

    :param triggering: the run's ``triggering_asset_events``.
    :return: the events (``extra``, ``timestamp``); none where this Airflow's task cannot read them (Airflow 2, a
        task run outside Airflow's supervisor), logged.
    """
    if InletEventsAccessor is None:
        return []
    out: list[Any] = []
    for asset, events in triggering.items():
        name, uri = getattr(asset, "name", None), getattr(asset, "uri", None)
        if not events or name is None:  # an alias: its assets' events come under their own keys
            continue
        taken = {getattr(e, "id", None) for e in events} - {None}
        latest = max(e.timestamp for e in events)
        try:
            found = list(InletEventsAccessor(asset_name=name, asset_uri=uri).after(latest).ascending().limit(limit))
        except Exception as exc:  # noqa: BLE001 - no supervisor (a test's context): the triggering events only
            logging.getLogger(__name__).info("Asset events since the run's: not read (%s)", exc)
            return []
        out.extend(e for e in found if (getattr(e, "id", None) not in taken if taken else e.timestamp > latest))
    return out

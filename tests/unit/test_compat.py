"""The seam to Airflow's moving modules: what it gives on the running Airflow, and the error of a feature
the running Airflow is too old for."""

from __future__ import annotations

import collections

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


AssetKey = collections.namedtuple("AssetKey", "name uri")


@pytest.mark.skipif(compat.InletEventsAccessor is None, reason="Airflow 2 has no Task SDK accessor")
def test_events_since_reads_each_assets_later_events_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The filter around Airflow's accessor: each triggering asset's events from its latest triggering one, the
    triggering ones left out, aliases skipped; the accessor's own reading is Airflow's (tests/scheduler)."""
    import types
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    stored = {"landing": [types.SimpleNamespace(id=i, timestamp=t0 + timedelta(seconds=i), extra={"n": i})
                          for i in range(1, 6)]}
    asked = []

    class Accessor:
        def __init__(self, asset_name: str, asset_uri: str) -> None:
            self.name, self.since = asset_name, None

        def after(self, since: datetime) -> Accessor:
            self.since = since
            return self

        def ascending(self) -> Accessor:
            return self

        def limit(self, n: int) -> list:
            asked.append((self.name, self.since, n))
            return [e for e in stored[self.name] if e.timestamp >= self.since][:n]

    monkeypatch.setattr(compat, "InletEventsAccessor", Accessor)
    landing, alias = AssetKey("landing", "s3://b/in/"), AssetKey(None, None)
    later = compat.events_since({landing: stored["landing"][:3], alias: stored["landing"][:1]})
    assert [e.extra["n"] for e in later] == [4, 5]
    assert asked == [("landing", t0 + timedelta(seconds=3), 1000)]


def test_events_since_outside_a_supervised_task_reads_none() -> None:
    import types
    from datetime import UTC, datetime

    event = types.SimpleNamespace(id=1, timestamp=datetime(2026, 1, 1, tzinfo=UTC), extra={})
    assert compat.events_since({AssetKey("a", "s3://b/"): [event]}) == []

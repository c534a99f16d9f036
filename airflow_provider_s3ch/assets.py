"""The ``clickhouse://`` asset URI scheme: ``clickhouse://host:port/database/table``.

Registered in the provider info (``asset-uris``), so that Airflow normalizes every such URI when an
:class:`~airflow.sdk.Asset` is created (:func:`sanitize_uri`), builds one from its parts
(:func:`create_asset`) and names it in OpenLineage as the operator names its output
(:func:`convert_asset_to_openlineage`). The rules are :mod:`airflow_provider_s3ch.core.lineage`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_provider_s3ch.compat import Asset
from airflow_provider_s3ch.core.lineage import (
    DEFAULT_PORT,
    asset_table,
    asset_uri,
    normalize_asset_uri,
    openlineage_name,
)

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's normalizer for ``clickhouse://`` URIs: scheme and host lower-cased, port 9000 filled in;
    raises ValueError for a URI without a host, a database and a table."""
    return normalize_asset_uri(uri)


def create_asset(
    *, host: str, database: str, table: str, port: int = DEFAULT_PORT, extra: dict[str, Any] | None = None
) -> Asset:
    """The asset of a ClickHouse table (``port``: the native protocol's)."""
    return Asset(uri=asset_uri(host, port, database, table), extra=extra)


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> OpenLineageDataset:
    """The asset as an OpenLineage dataset: ``clickhouse://host:port`` / ``database.table``."""
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

    namespace, database, table = asset_table(normalize_asset_uri(urlsplit(asset.uri)))
    return OpenLineageDataset(namespace=namespace, name=openlineage_name(database, table))

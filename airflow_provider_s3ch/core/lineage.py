"""What a load's lineage says, and the ``clickhouse://`` asset URI. Pure: no OpenLineage, no Airflow.

The shells turn these decisions into OpenLineage facets (:mod:`airflow_provider_s3ch.lineage`) and
Airflow assets (:mod:`airflow_provider_s3ch.assets`).

- **Names** follow OpenLineage's naming conventions. S3: namespace ``s3://{bucket}``, name the object
  key (``/`` for the bucket's root). ClickHouse has no entry there; it is named like the other
  databases with a host, a port, databases and tables and no schemas (MySQL, Hive): namespace
  ``clickhouse://{host}:{port}`` (the native protocol's port, the one the connection names), name
  ``{database}.{table}``.
- **Inputs**: one dataset per file, as long as there are at most :data:`MAX_INPUT_DATASETS`; beyond,
  one per directory holding files; beyond that too, one for the directory every file is under
  (:func:`input_groups`). Each says how many files and bytes it stands for.
- **The asset URI** ``clickhouse://host:port/database/table`` (:func:`normalize_asset_uri`) names the
  same table as the output dataset (:func:`openlineage_name`), so Airflow's assets and the operator's
  lineage meet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import SplitResult, quote, unquote

from pydantic import BaseModel, Field

from airflow_provider_s3ch.core.models import S3Object
from airflow_provider_s3ch.core.schema import Column

#: The asset URI scheme and the OpenLineage namespace scheme of a ClickHouse server.
SCHEME = "clickhouse"

#: The native protocol's port, filled into a ``clickhouse://`` URI that names none.
DEFAULT_PORT = 9000

#: Up to this many files, each is an input dataset of its own; beyond, they are grouped.
MAX_INPUT_DATASETS = 100

#: The form of an asset URI, for error messages.
URI_FORM = "clickhouse://host:port/database/table"

Granularity = Literal["file", "directory", "prefix"]


class InputGroup(BaseModel):
    """One input dataset: a file, or the files of a directory, in one bucket."""

    name: str
    files: int
    bytes: int


class Inputs(BaseModel):
    """The load's input datasets and what each stands for."""

    namespace: str
    granularity: Granularity
    groups: list[InputGroup]


class LoadFacts(BaseModel):
    """What lineage and asset events need from one finished load: names and figures, no credentials."""

    bucket: str
    objects: list[S3Object]
    host: str
    port: int
    database: str
    table: str
    columns: list[Column] = Field(default_factory=list)
    query_id: str
    written_rows: int
    written_bytes: int
    read_rows: int
    read_bytes: int
    mode: str = "append"
    created: bool = False
    partitions: list[str] = Field(default_factory=list)
    attached_to: str | None = None
    sql: str | None = Field(default=None, description="the INSERT as logged: credentials redacted")

    @property
    def namespace(self) -> str:
        return server_namespace(self.host, self.port)

    @property
    def name(self) -> str:
        return openlineage_name(self.database, self.table)


def _directory(key: str) -> str:
    """The key's directory (``a/b`` for ``a/b/c.parquet``); ``/`` for the bucket's root."""
    head, sep, _ = key.rpartition("/")
    return head if sep and head else "/"


def _common_directory(keys: Sequence[str]) -> str:
    """The deepest directory every key is under; ``/`` when there is none."""
    parts = [key.split("/")[:-1] for key in keys]
    common: list[str] = []
    for segments in zip(*parts, strict=False) if parts else ():
        if any(s != segments[0] for s in segments):
            break
        common.append(segments[0])
    return "/".join(common) or "/"


def input_groups(bucket: str, objects: Sequence[S3Object], *, limit: int = MAX_INPUT_DATASETS) -> Inputs:
    """The input datasets of a load: per file up to ``limit`` files, else per directory up to ``limit``
    directories, else one for the deepest directory every file is under.

    :param bucket: the bucket.
    :param objects: the manifest's objects, in its order.
    :param limit: the most datasets per file or per directory.
    """
    namespace = f"s3://{bucket}"
    if len({o.key for o in objects}) <= limit:
        by_key: dict[str, InputGroup] = {}
        for o in objects:
            group = by_key.setdefault(o.key, InputGroup(name=o.key, files=0, bytes=0))
            group.files, group.bytes = group.files + 1, group.bytes + o.size
        return Inputs(namespace=namespace, granularity="file", groups=list(by_key.values()))
    by_dir: dict[str, InputGroup] = {}
    for o in objects:
        group = by_dir.setdefault(_directory(o.key), InputGroup(name=_directory(o.key), files=0, bytes=0))
        group.files, group.bytes = group.files + 1, group.bytes + o.size
    if len(by_dir) <= limit:
        return Inputs(namespace=namespace, granularity="directory", groups=list(by_dir.values()))
    whole = InputGroup(
        name=_common_directory([o.key for o in objects]), files=len(objects), bytes=sum(o.size for o in objects)
    )
    return Inputs(namespace=namespace, granularity="prefix", groups=[whole])


def _authority(host: str, port: int) -> str:
    host = host.lower()
    if ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    return f"{host}:{port}"


def server_namespace(host: str, port: int) -> str:
    """The OpenLineage namespace of a ClickHouse server: ``clickhouse://{host}:{port}``."""
    return f"{SCHEME}://{_authority(host, port)}"


def openlineage_name(database: str, table: str) -> str:
    """The OpenLineage name of a table: ``{database}.{table}``."""
    return f"{database}.{table}"


def asset_uri(host: str, port: int, database: str, table: str) -> str:
    """The asset URI of a table, ``clickhouse://host:port/database/table`` (names percent-encoded)."""
    return f"{SCHEME}://{_authority(host, port)}/{quote(database, safe='')}/{quote(table, safe='')}"


def normalize_asset_uri(parts: SplitResult) -> SplitResult:
    """Normalize a ``clickhouse://`` asset URI: the scheme and host lower-cased, the user dropped, the
    port 9000 filled in when missing; database and table are required and kept as written (ClickHouse's
    names are case-sensitive).

    :param parts: the URI, split.
    :raises ValueError: no host, a port that is not a number, or not exactly a database and a table.
    """
    if not parts.hostname:
        raise ValueError(f"URI format clickhouse:// must contain a host: {URI_FORM}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"URI format clickhouse:// must have a numeric port: {URI_FORM}") from None
    segments = parts.path.split("/")
    if len(segments) != 3 or segments[0] or not segments[1] or not segments[2]:
        raise ValueError(f"URI format clickhouse:// must contain a database and a table: {URI_FORM}")
    return parts._replace(scheme=SCHEME, netloc=_authority(parts.hostname, port or DEFAULT_PORT))


def asset_table(parts: SplitResult) -> tuple[str, str, str]:
    """The namespace, database and table a normalized ``clickhouse://`` URI names."""
    _, database, table = parts.path.split("/")
    return f"{SCHEME}://{parts.netloc}", unquote(database), unquote(table)


def outlet_extra(facts: LoadFacts) -> dict[str, Any]:
    """The ``extra`` of the asset event a load emits: its figures (JSON-safe)."""
    return {
        "table": facts.name,
        "query_id": facts.query_id,
        "rows": facts.written_rows,
        "bytes": facts.written_bytes,
        "files": len(facts.objects),
        "source_bytes": sum(o.size for o in facts.objects),
        "mode": facts.mode,
        "partitions": list(facts.partitions),
        "attached_to": facts.attached_to,
    }

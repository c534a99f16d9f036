"""Pydantic models that carry one load from request to metrics.

Everything here is plain data: no I/O, no Airflow. The planner
(:mod:`airflow_provider_s3ch.core.plan`) and the SQL renderer
(:mod:`airflow_provider_s3ch.core.sql`) are functions over these models.
What the planner knows of the ClickHouse side
(:class:`~airflow_provider_s3ch.core.server_models.ServerProfile` and its parts) is in
:mod:`airflow_provider_s3ch.core.server_models`.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from airflow_provider_s3ch.core.access import S3Access, S3CredentialsMode
from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.formats import COMPRESSION_METHODS, compression_method
from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.sizes import parse_size

RegionCheck = Literal["warn", "fail", "off"]
Strategy = Literal["auto", "single", "distributed"]
Mode = Literal["append", "replace_partitions", "overwrite"]
SchemaPolicy = Literal["strict", "ignore_extra", "warn", "off"]
CreateTable = Literal["never", "if_missing"]
SchemaChange = Literal["fail", "add_columns", "ignore_extra"]
OnChanged = Literal["reload", "skip", "fail"]
OnBadFile = Literal["fail", "set_aside"]
SettingValue = int | float | str

#: The range of a numeric setting: ClickHouse's settings are Int64, UInt64 or Float64, and a value
#: outside Int64 .. UInt64 fails on the server with a message that names no setting.
SETTING_MIN, SETTING_MAX = -(2**63), 2**64 - 1

#: The settings that keep a query in ``system.query_log``, where a retry finds an earlier try and the
#: figures come from: pinned in the protocol for every load (over the server's profile), and refused in
#: ``settings`` (a load out of the log would be inserted again by its retry).
QUERY_LOG_SETTINGS: dict[str, int | float | str] = {
    "log_queries": 1,
    "log_queries_min_type": "QUERY_START",
    "log_queries_min_query_duration_ms": 0,
    "log_queries_probability": 1.0,
}

#: Setting names ClickHouse accepts (and the only ones rendered unquoted).
SETTING_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORMAT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


class TableRef(BaseModel):
    """A ClickHouse table, optionally qualified by its database."""

    model_config = ConfigDict(frozen=True)

    database: str | None = None
    name: str

    @classmethod
    def parse(cls, value: str) -> TableRef:
        """Parse ``"db.table"`` or ``"table"``; backticks may quote either part (```my.db`.`t` ``)."""
        text = (value or "").strip()
        parts: list[str] = []
        buf = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == "`":
                end = i + 1
                while True:
                    end = text.find("`", end)
                    if end == -1:
                        raise InvalidRequestError(f"table={value!r} has an unclosed backtick")
                    if end + 1 < len(text) and text[end + 1] == "`":
                        end += 2
                        continue
                    break
                buf += text[i + 1 : end].replace("``", "`")
                i = end + 1
                continue
            if ch == ".":
                parts.append(buf)
                buf = ""
            else:
                buf += ch
            i += 1
        parts.append(buf)
        if len(parts) not in (1, 2) or any(not p for p in parts):
            raise InvalidRequestError(
                f"table={value!r} is not a table name; give 'database.table' or 'table' "
                "(quote names containing dots with backticks)"
            )
        if len(parts) == 1:
            return cls(name=parts[0])
        return cls(database=parts[0], name=parts[1])

    def __str__(self) -> str:
        return f"{self.database}.{self.name}" if self.database else self.name

    def in_database(self, default: str) -> TableRef:
        """The table with its database named: its own, else ``default`` (the connection's)."""
        return self if self.database else self.model_copy(update={"database": default})


class LoadRequest(BaseModel):
    """What the user asked for, validated after templates render."""

    model_config = ConfigDict(frozen=True)

    s3_uri: str
    table: TableRef
    format: str | None = None
    compression: str | None = None
    structure: str | None = None
    memory_cap: int | None = Field(default=None, description="bytes; parsed from strings like '8GiB'")
    region_check: RegionCheck = "warn"
    settings: dict[str, SettingValue] = Field(default_factory=dict)
    strategy: Strategy = "auto"
    cluster: str | None = None
    dry_run: bool = False
    mode: Mode = "append"
    schema_check: SchemaPolicy = "strict"
    create_table: CreateTable = "never"
    on_schema_change: SchemaChange = "fail"
    #: The server's workload the load runs in (workload scheduling): None takes the connection's extra
    #: ``workload``; ``""`` runs without one whatever the connection says.
    workload: str | None = None
    #: Incremental loads (docs/ledger.md): load only the files the target's file ledger does not record as
    #: loaded, and record them there.
    skip_loaded: bool = False
    #: With ``skip_loaded``: what a file whose ETag differs from the loaded version's is: loaded again
    #: (``reload``), left out (``skip``) or an error (``fail``).
    on_changed: OnChanged = "fail"
    #: With ``skip_loaded``: a file whose data the server cannot read fails the load (``fail``), or is set aside in
    #: the ledger and the load goes on without it (``set_aside``, docs/ledger.md#bad-files).
    on_bad_file: OnBadFile = "fail"
    #: With ``skip_loaded``: the ledger table, ``database.name`` or ``name`` (in the target's database);
    #: None: ``<target database>._s3ch_ledger``.
    ledger_table: str | None = None
    #: A run with nothing to load is skipped (Airflow's skipped state): no object matches the glob (instead of
    #: NoObjectsError), or, with ``skip_loaded``, no new file (instead of succeeding with zero rows).
    skip_when_empty: bool = False
    #: With ``skip_loaded``: the most files one insert reads; a larger selection loads in consecutive chunks,
    #: each through its own staging table and committed with its ledger rows (docs/ledger.md).
    max_files_per_load: int | None = None
    #: With ``skip_loaded``: the most bytes (as listed) one insert reads; a file larger than this is a chunk alone.
    max_bytes_per_load: int | None = Field(default=None, description="bytes; parsed from strings like '10GiB'")
    #: How the server reads the bucket (:mod:`airflow_provider_s3ch.core.access`): ``forward``, ``server`` or
    #: ``named_collection`` (with ``named_collection``); ``role_arn`` with ``server`` (ClickHouse Cloud).
    s3_credentials: S3CredentialsMode = "forward"
    named_collection: str | None = None
    role_arn: str | None = None
    #: The staging table writes its parts under 64 MiB in ClickHouse's Compact format (``min_bytes_for_wide_part``):
    #: a faster insert into many partitions, parts that stay Compact in the target until merges rewrite them
    #: (docs/tuning.md#compact-parts).
    compact_parts: bool = False

    @model_validator(mode="after")
    def _contract(self) -> LoadRequest:
        if self.compact_parts and self.mode == "overwrite":
            raise InvalidRequestError(
                "compact_parts=True with mode='overwrite' would leave min_bytes_for_wide_part in the table's own "
                "settings (the staging table becomes the table): use mode='append' or 'replace_partitions', or "
                "set min_bytes_for_wide_part on the table yourself"
            )
        if self.schema_check == "ignore_extra" and self.on_schema_change == "add_columns":
            raise InvalidRequestError(
                "schema_check='ignore_extra' leaves the files' extra columns out, on_schema_change='add_columns' "
                "adds them to the table: give one (schema_check='strict' with on_schema_change='add_columns')"
            )
        _ = self.access  # s3_credentials, named_collection and role_arn fit together
        return self

    @property
    def access(self) -> S3Access:
        """How the server reads the bucket (checked when the request is built)."""
        return S3Access(mode=self.s3_credentials, named_collection=self.named_collection, role_arn=self.role_arn)

    @property
    def schema_change(self) -> SchemaChange:
        """The contract: ``on_schema_change``; ``schema_check='ignore_extra'`` is ``'ignore_extra'``."""
        return "ignore_extra" if self.schema_check == "ignore_extra" else self.on_schema_change

    @field_validator("table", mode="before")
    @classmethod
    def _table(cls, v: Any) -> Any:
        return TableRef.parse(v) if isinstance(v, str) else v

    @field_validator("workload", mode="before")
    @classmethod
    def _workload(cls, v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, str):
            raise InvalidRequestError(f"workload={v!r} must be the name of a workload on the server, e.g. 'loads'")
        return v.strip()

    @field_validator("memory_cap", mode="before")
    @classmethod
    def _cap(cls, v: Any) -> Any:
        return parse_size(v)

    @field_validator("max_bytes_per_load", mode="before")
    @classmethod
    def _chunk_bytes(cls, v: Any) -> Any:
        return parse_size(v, "max_bytes_per_load")

    @field_validator("max_files_per_load", mode="before")
    @classmethod
    def _chunk_files(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and not v.strip()):
            return None
        try:
            n = int(v) if not isinstance(v, bool) and float(v) == int(float(v)) else None
        except (TypeError, ValueError):
            n = None
        if n is None or n < 1:
            raise InvalidRequestError(f"max_files_per_load={v!r} must be a whole number of files, 1 or more (e.g. 100)")
        return n

    @property
    def chunked(self) -> bool:
        """Whether the load splits its files into chunks (``max_files_per_load`` or ``max_bytes_per_load``)."""
        return self.max_files_per_load is not None or self.max_bytes_per_load is not None

    @field_validator("s3_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        v = (v or "").lstrip()  # a key may end with spaces: they are the key's own
        if not v.startswith("s3://"):
            raise InvalidRequestError(
                f"s3_uri={v!r} is not an S3 URI; give 's3://bucket/prefix/*.parquet' "
                "(the bucket first, then a key or a glob)"
            )
        bucket, _, key = v[len("s3://") :].partition("/")
        if not bucket or not key:
            raise InvalidRequestError(
                f"s3_uri={v!r} names no {'bucket' if not bucket else 'key'}; "
                "give 's3://bucket/prefix/*.parquet'"
            )
        if any(c.isspace() for c in bucket) or any(c in bucket for c in "*?{}"):
            raise InvalidRequestError(f"s3_uri={v!r}: the bucket name {bucket!r} may not hold globs or spaces")
        return v

    @field_validator("format")
    @classmethod
    def _format(cls, v: str | None) -> str | None:
        if v is not None and not _FORMAT_RE.match(v):
            raise InvalidRequestError(
                f"format={v!r} is not a ClickHouse format name; give one such as 'Parquet' or 'CSVWithNames'"
            )
        return v

    @field_validator("compression")
    @classmethod
    def _compression(cls, v: str | None) -> str | None:
        if v is None:
            return v
        name = compression_method(v)
        if name is None:
            raise InvalidRequestError(
                f"compression={v!r} is not a compression method ClickHouse reads; give one of "
                f"{', '.join(repr(m) for m in ('auto', 'none', *sorted(COMPRESSION_METHODS)))}, "
                "or leave it out to take it from the files' extensions"
            )
        return name

    @field_validator("settings", mode="before")
    @classmethod
    def _settings(cls, v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise InvalidRequestError(f"settings must be a dict of ClickHouse settings, got {type(v).__name__}")
        out: dict[str, SettingValue] = {}
        for name, value in v.items():
            if not isinstance(name, str) or not SETTING_NAME_RE.match(name):
                raise InvalidRequestError(f"settings: {name!r} is not a ClickHouse setting name")
            if isinstance(value, bool):
                value = int(value)
            if not isinstance(value, int | float | str):
                raise InvalidRequestError(
                    f"settings: {name}={value!r} must be a number or a string, not {type(value).__name__}"
                )
            if name in QUERY_LOG_SETTINGS:
                raise InvalidRequestError(
                    f"settings: {name}={value!r} is not for a load to set: the load must be in system.query_log, "
                    "where its retries find it (else a retry inserts the files again) and its figures come from; "
                    "remove it"
                )
            if isinstance(value, int | float) and not (
                math.isfinite(value) and SETTING_MIN <= value <= SETTING_MAX
            ):
                raise InvalidRequestError(
                    f"settings: {name}={value!r} is out of range: ClickHouse settings are 64-bit numbers "
                    f"({SETTING_MIN} to {SETTING_MAX}); give a value in that range"
                )
            out[name] = value
        return out

    @classmethod
    def from_arguments(cls, **kwargs: Any) -> LoadRequest:
        """Build a request from the operator's rendered arguments; any invalid one is an
        :class:`InvalidRequestError` naming the argument, what it got and what it takes."""
        try:
            return cls(**kwargs)
        except ValidationError as exc:
            raise invalid_arguments(exc, "operator") from None

    @property
    def bucket(self) -> str:
        return bucket_of(self.s3_uri)

    @property
    def key_pattern(self) -> str:
        return key_pattern_of(self.s3_uri)


def bucket_of(s3_uri: str) -> str:
    """``s3://bucket/key`` -> ``bucket``."""
    return s3_uri[len("s3://") :].partition("/")[0]


def key_pattern_of(s3_uri: str) -> str:
    """``s3://bucket/key`` -> ``key`` (the glob, as given)."""
    return s3_uri[len("s3://") :].partition("/")[2]


def invalid_arguments(exc: ValidationError, kind: str) -> InvalidRequestError:
    """An :class:`InvalidRequestError` naming each invalid argument, what it got and what it takes."""
    problems = []
    for err in exc.errors():
        name = ".".join(str(p) for p in err.get("loc", ())) or "argument"
        problems.append(f"{name}={err.get('input')!r}: {err.get('msg')}")
    return InvalidRequestError(f"invalid {kind} argument: " + "; ".join(problems))


class S3Object(BaseModel):
    """One object the glob matched."""

    key: str
    size: int
    format: str | None = None
    compression: str | None = None
    #: The object's ETag as the listing (or HeadObject) gives it, without the quotes; None when not known.
    etag: str | None = None
    #: When the object was last written, from the listing (or HeadObject); None when not known.
    last_modified: datetime | None = None


class Manifest(BaseModel):
    """Objects matching the glob, listed the way ClickHouse will read them."""

    bucket: str
    pattern: str
    prefix: str
    objects: list[S3Object]
    format: str
    compression: str | None = None
    region: str | None = None
    list_calls: int = 0
    #: Parquet only, from a sample's footers (None: not read): all files' uncompressed size, the largest row group.
    uncompressed_bytes: int | None = None
    max_row_group_bytes: int | None = None
    footer_files: int = 0
    #: The quickest S3 request's round trip in ms (location, footers; None: none timed), taken as the server's.
    request_ms: float | None = None
    #: Parquet: the schema check's file and its footer's schema alone (``parquet_footer.schema_file``); in memory only.
    sample_schema: tuple[str, bytes] | None = Field(default=None, exclude=True, repr=False)
    #: Parquet, from 512 MiB: the first files' row groups' integer ranges, for the block rule; in memory only.
    key_window: KeyWindow | None = Field(default=None, exclude=True, repr=False)
    #: Keys of :attr:`objects` S3 no longer holds (deleted since their events); the ledger leaves them out, counted.
    gone: list[str] = Field(default_factory=list)

    @property
    def file_count(self) -> int:
        return len(self.objects)

    @property
    def total_bytes(self) -> int:
        return sum(o.size for o in self.objects)

    def summary(self) -> dict[str, Any]:
        sizes = sorted(o.size for o in self.objects)
        return {
            "bucket": self.bucket,
            "pattern": self.pattern,
            "files": self.file_count,
            "bytes": self.total_bytes,
            "format": self.format,
            "compression": self.compression,
            "region": self.region,
            "largest_file_bytes": sizes[-1] if sizes else 0,
            "median_file_bytes": sizes[len(sizes) // 2] if sizes else 0,
            "uncompressed_bytes": self.uncompressed_bytes,
            "max_row_group_bytes": self.max_row_group_bytes,
        }


class Check(BaseModel):
    """A pre-flight check and its outcome."""

    name: str
    status: Literal["ok", "warn", "fail", "skipped"]
    message: str


class InsertSettings(BaseModel):
    """The settings a load runs with, each with its reason."""

    values: dict[str, SettingValue] = Field(default_factory=dict)
    reasons: dict[str, str] = Field(default_factory=dict)
    overrides: list[str] = Field(default_factory=list)


class LoadPlan(BaseModel):
    """The planner's decision: how one load runs and why."""

    table: TableRef
    source_url: str
    format: str
    compression: str | None = None
    structure: str | None = None
    strategy: Literal["single", "distributed"]
    strategy_reason: str
    cluster: str | None = None
    settings: InsertSettings
    budget_bytes: int
    budget_reason: str
    checks: list[Check] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    manifest: dict[str, Any] = Field(default_factory=dict)
    #: The predicted peak memory of one node's insert (:mod:`airflow_provider_s3ch.core.plan.memory`) and why.
    predicted_peak_bytes: int | None = None
    predicted_peak_reason: str | None = None
    #: What the plan took from the target's earlier loads (:mod:`airflow_provider_s3ch.core.history`), if any.
    history: dict[str, Any] | None = None
    #: How the server reads the bucket; None: the worker's keys in the statement (``s3_credentials='forward'``).
    access: S3Access | None = None


class S3Credentials(BaseModel):
    """What ClickHouse needs to read the bucket; never logged, never pushed to XCom."""

    access_key_id: SecretStr
    secret_access_key: SecretStr
    session_token: SecretStr | None = None

    @model_validator(mode="after")
    def _non_empty(self) -> S3Credentials:
        if not self.access_key_id.get_secret_value() or not self.secret_access_key.get_secret_value():
            raise InvalidRequestError("S3 credentials need both an access key id and a secret access key")
        return self

    def secrets(self) -> list[str]:
        out = [self.secret_access_key.get_secret_value()]
        if self.session_token is not None:
            out.append(self.session_token.get_secret_value())
        return out


class QueryFigures(BaseModel):
    """What ``system.query_log`` says of one query."""

    query_id: str
    written_rows: int
    written_bytes: int
    read_rows: int
    read_bytes: int
    duration_ms: int
    memory_usage: int
    #: How long the query waited to be admitted by workload scheduling before it ran (part of ``duration_ms``).
    admission_wait_ms: int = 0


class NodeMetrics(QueryFigures):
    """One node's share of a load, from that node's ``system.query_log``."""

    node: str


class LoadMetrics(QueryFigures):
    """The load's figures from ``system.query_log``: totals, the settings it ran with, per node."""

    settings: dict[str, str] = Field(default_factory=dict)
    nodes: list[NodeMetrics] = Field(default_factory=list)

    @property
    def run_ms(self) -> int:
        """How long the load ran once admitted: ``duration_ms`` less the admission wait."""
        return max(0, self.duration_ms - self.admission_wait_ms)

    @property
    def rows_per_second(self) -> float:
        return round(self.written_rows / (self.duration_ms / 1000), 1) if self.duration_ms else 0.0

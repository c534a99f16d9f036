"""When the files of a glob are ready to load: the rule of :class:`~airflow_provider_s3ch.sensors.s3_glob.S3GlobSensor`.

The sensor waits for the manifest :class:`~airflow_provider_s3ch.operators.s3_to_clickhouse.S3ToClickHouseOperator`
would build for the same ``s3_uri``: the same glob (:mod:`airflow_provider_s3ch.core.glob`, ClickHouse's
semantics: ``{a,b}``, ``{01..12}``, ``*``, ``**``, ``?``), the same keys
(:class:`~airflow_provider_s3ch.core.manifest.Listing`).
The files are ready when

* the manifest holds at least ``min_files`` files that are not empty (1 by default: a manifest the
  load would not refuse with "no object matches");
* for a glob ClickHouse reads without listing (a key without globs, or one ``{a,b}`` group), every key it
  names exists: the load fails on a missing one;
* with ``success_marker``, the marker object exists. Its key is relative to the glob's fixed prefix,
  cut after its last ``/``: for ``s3://b/exports/2024-01/part-*.parquet`` and ``_SUCCESS``, the key
  ``exports/2024-01/_SUCCESS``.

The S3 shell lists (:func:`airflow_provider_s3ch.hooks.s3.list_matching`); :func:`readiness` decides.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from airflow_provider_s3ch.core.errors import InvalidRequestError
from airflow_provider_s3ch.core.glob import check_key_pattern, has_glob
from airflow_provider_s3ch.core.manifest import EXAMPLES, Listing
from airflow_provider_s3ch.core.models import LoadRequest, S3Object, bucket_of, invalid_arguments, key_pattern_of


class WaitRequest(BaseModel):
    """What the sensor waits for, validated after templates render (:meth:`build`)."""

    model_config = ConfigDict(frozen=True)

    #: ``s3://bucket/key-or-glob``, as the operator takes it.
    s3_uri: str
    #: How many matching files that are not empty make the manifest complete (at least 1).
    min_files: int = Field(default=1, ge=1)
    #: A key, relative to the glob's fixed prefix (see :attr:`marker_key`), that must exist; None to wait
    #: for the files only.
    success_marker: str | None = None

    @field_validator("s3_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        """The operator's rule for ``s3_uri``: the validator of
        :class:`~airflow_provider_s3ch.core.models.LoadRequest`."""
        return LoadRequest._uri(v)

    @field_validator("success_marker")
    @classmethod
    def _marker(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not v or v.startswith("/") or has_glob(v):
            raise InvalidRequestError(
                f"success_marker={v!r} is not a key: give one relative to the glob's fixed prefix, without a "
                "leading '/' or glob characters ('*', '?', '{'), such as '_SUCCESS'"
            )
        return v

    @classmethod
    def build(cls, **kwargs: Any) -> WaitRequest:
        """Validate the sensor's rendered arguments; a problem is an :class:`InvalidRequestError` naming
        the argument, what it got and what it takes."""
        try:
            request = cls(**kwargs)
        except ValidationError as exc:
            raise invalid_arguments(exc, "sensor") from None
        request.listing()  # the glob: refused now if ClickHouse refuses it
        if request.marker_key is not None:
            check_key_pattern(request.marker_key)
        return request

    @property
    def bucket(self) -> str:
        return bucket_of(self.s3_uri)

    @property
    def key_pattern(self) -> str:
        return key_pattern_of(self.s3_uri)

    def listing(self) -> Listing:
        """The empty :class:`~airflow_provider_s3ch.core.manifest.Listing` of the glob, as the operator's
        (with its default settings).

        :raises InvalidRequestError: when ClickHouse rejects the glob.
        """
        return Listing(self.key_pattern)

    @property
    def marker_key(self) -> str | None:
        """The marker's key: the glob's fixed prefix up to its last ``/``, then ``success_marker``."""
        if self.success_marker is None:
            return None
        prefix = self.listing().prefix
        return prefix[: prefix.rfind("/") + 1] + self.success_marker


class Readiness(BaseModel):
    """What one look at S3 found, and whether the files are ready."""

    s3_uri: str
    #: The manifest's files (empty ones included) and their bytes, as the operator would count them.
    files: int
    bytes: int
    non_empty_files: int
    min_files: int
    #: Keys ClickHouse would read directly that do not exist yet.
    missing: list[str] = Field(default_factory=list)
    marker: str | None = None
    marker_found: bool | None = None
    #: What is not there yet; empty when ready.
    waiting_for: list[str] = Field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.waiting_for

    @property
    def reason(self) -> str:
        """One line for the task log."""
        found = f"{self.files} file(s), {self.bytes} bytes, {self.non_empty_files} not empty"
        marker = "" if self.marker is None else f", marker {self.marker!r} {'found' if self.marker_found else 'absent'}"
        if self.ready:
            return f"{self.s3_uri} is ready: {found}{marker}"
        return f"{self.s3_uri}: {found}{marker}; waiting for " + "; ".join(self.waiting_for)

    def summary(self) -> dict[str, Any]:
        """The sensor's XCom: JSON-safe."""
        return {
            "s3_uri": self.s3_uri,
            "files": self.files,
            "bytes": self.bytes,
            "non_empty_files": self.non_empty_files,
            "success_marker": self.marker,
        }


def readiness(request: WaitRequest, objects: Sequence[S3Object], *, marker_found: bool = False) -> Readiness:
    """Whether the files the glob matches are ready to load.

    :param request: what the sensor waits for.
    :param objects: the objects the glob matched, as :func:`airflow_provider_s3ch.hooks.s3.list_matching`
        returns them (a key a ``{a,a}`` group names twice is there twice, as in the operator's manifest).
    :param marker_found: whether the marker object exists (ignored without ``success_marker``).
    """
    direct = request.listing().direct
    present = {o.key for o in objects}
    missing = sorted(set(direct) - present) if direct is not None else []
    non_empty = sum(1 for o in objects if o.size > 0)
    marker = request.marker_key
    waiting: list[str] = []
    if non_empty < request.min_files:
        waiting.append(f"{request.min_files} file(s) that are not empty, {non_empty} so far")
    if missing:
        shown = ", ".join(repr(k) for k in missing[:EXAMPLES])
        more = f" and {len(missing) - EXAMPLES} more" if len(missing) > EXAMPLES else ""
        waiting.append(
            f"{len(missing)} of the {len(set(direct or ()))} keys the glob names, which ClickHouse reads without "
            f"listing: {shown}{more}"
        )
    if marker is not None and not marker_found:
        waiting.append(f"the success marker {marker!r}")
    return Readiness(
        s3_uri=request.s3_uri,
        files=len(objects),
        bytes=sum(o.size for o in objects),
        non_empty_files=non_empty,
        min_files=request.min_files,
        missing=missing,
        marker=marker,
        marker_found=None if marker is None else marker_found,
        waiting_for=waiting,
    )

"""Errors the provider raises.

Terminal problems (bad input, missing objects or tables, a region mismatch under
policy ``fail``) subclass :class:`AirflowFailException`, so Airflow does not
retry them. Transient ones (a server that does not answer) subclass
:class:`AirflowException`, so the task's retries apply.
"""

from __future__ import annotations

try:  # Airflow 3
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
except ImportError:  # pragma: no cover - Airflow 2.x
    from airflow.exceptions import AirflowException, AirflowFailException


class S3chError(AirflowFailException):
    """A terminal problem: retrying will not help; the message says what to fix."""


class InvalidRequestError(S3chError):
    """An argument of the operator is malformed."""


class NoObjectsError(S3chError):
    """The glob matched no object."""


class BucketError(S3chError):
    """The bucket is missing or cannot be read with the connection's credentials."""


class FormatError(S3chError):
    """The files' format or compression is unknown or mixed."""


class TableError(S3chError):
    """The target table is missing or cannot take the load."""


class RegionMismatchError(S3chError):
    """The bucket is in another region than the ClickHouse server (policy ``fail``)."""


class PlanError(S3chError):
    """The load cannot be planned with the given inputs (e.g. a memory cap too small)."""


class ClickHouseAuthError(S3chError):
    """ClickHouse refused the connection's credentials."""


class ClickHouseUnavailableError(AirflowException):
    """ClickHouse did not answer; the task's retries apply."""


class LoadError(AirflowException):
    """The server-side insert failed."""

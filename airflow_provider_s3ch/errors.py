"""Errors the provider raises: one root, a terminal and a transient branch.

``except S3chError`` catches every error the provider raises. Terminal errors
(:class:`S3chTerminalError`: bad input, missing objects or tables, a region mismatch under
policy ``fail``, files whose columns do not match the table, a statement or data the server
rejects) are also :class:`AirflowFailException`, so Airflow does not retry them. Transient ones
(:class:`S3chTransientError`: a server that does not answer, an overloaded server) are
plain :class:`AirflowException`, so the task's retries apply.

The pure core raises its own exceptions (:mod:`airflow_provider_s3ch.core.errors`); each
terminal class here subclasses the core class of the same name, and :func:`provider_errors`
turns the core's exceptions into these at the shell's edge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from packaging.version import Version

from airflow_provider_s3ch.compat import (
    AIRFLOW,
    AIRFLOW_VERSION,
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
)
from airflow_provider_s3ch.core import errors as core


class S3chError(AirflowException):
    """The root of every error the provider raises."""


class S3chTerminalError(S3chError, AirflowFailException):
    """Retrying will not help; the message says what to fix."""


class S3chTransientError(S3chError):
    """The server or the network failed for now; the task's retries apply."""


class InvalidRequestError(S3chTerminalError, core.InvalidRequestError):
    """An argument of the operator is malformed."""


class NeedsNewerAirflowError(S3chTerminalError):
    """A feature of the provider that the running Airflow does not have (the message names both)."""


def require(feature: str, version: str) -> None:
    """Refuse a feature the running Airflow is too old for, naming both.

    :param feature: what the user asked for, in their terms (an argument, a DAG option).
    :param version: the oldest Airflow that has it, e.g. ``"3.0"``.
    :raises NeedsNewerAirflowError: when the running Airflow is older.
    """
    if Version(version) > AIRFLOW:
        raise NeedsNewerAirflowError(
            f"{feature} needs Apache Airflow {version} or later; this is Airflow {AIRFLOW_VERSION}: "
            f"upgrade Airflow, or leave {feature} out"
        )


class NoObjectsError(S3chTerminalError, core.NoObjectsError):
    """The glob matched no object."""


class NothingMatchedError(NoObjectsError, core.NothingMatchedError):
    """Not one object matches the glob: the files may not have arrived (``skip_when_empty`` skips the task)."""


class FormatError(S3chTerminalError, core.FormatError):
    """The files' format or compression is unknown or mixed."""


class TableError(S3chTerminalError, core.TableError):
    """The target table is missing or cannot take the load."""


class RegionMismatchError(S3chTerminalError, core.RegionMismatchError):
    """The bucket is in another region than the ClickHouse server (policy ``fail``)."""


class PlanError(S3chTerminalError, core.PlanError):
    """The load cannot be planned with the given inputs (e.g. a memory cap too small)."""


class SchemaError(S3chTerminalError, core.SchemaError):
    """The files' columns do not match the target's (missing, extra or incompatible columns)."""


class BucketError(S3chTerminalError):
    """The bucket is missing or cannot be read with the connection's credentials."""


class S3AccessDeniedError(BucketError, core.S3AccessDeniedError):
    """S3 refused the ClickHouse server's read of the files (403, access denied): the message says which
    credentials the server read with and what they lack."""


class QueueError(S3chTerminalError):
    """The SQS queue a notification watcher reads is missing, or cannot be read or emptied with the connection's
    credentials: the message names the queue and what to fix."""


class QueueUnavailableError(S3chTransientError):
    """SQS did not answer, throttled or failed for now; the watcher tries again after a pause."""


#: SQS's error codes that no retry gets past, by what went wrong (any other code, and HTTP 5xx, is transient:
#: throttling, ``OverLimit``, ``KmsThrottled``, ``ServiceUnavailable``, ``InternalError``, ...). SQS speaks JSON to
#: botocore and also sends the code of its older query protocol (``x-amzn-query-error``), which botocore puts in
#: ``Error.Code``: both spellings are here (docs/continuous.md#when-a-watcher-cannot-work).
SQS_TERMINAL_CODES: dict[str, frozenset[str]] = {
    "missing": frozenset({
        "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", "NonExistentQueue", "InvalidAddress",
    }),
    "denied": frozenset({"AccessDenied", "AccessDeniedException", "KmsAccessDenied", "KMS.AccessDeniedException"}),
    "credentials": frozenset({
        "InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch", "IncompleteSignature",
        "MissingAuthenticationToken", "MissingAuthenticationTokenException", "InvalidSecurity",
        "AWS.SimpleQueueService.InvalidSecurity", "InvalidAccessKeyId", "ExpiredToken", "ExpiredTokenException",
        "AuthFailure", "OptInRequired",
    }),
    "refused": frozenset({
        "KmsDisabled", "KmsNotFound", "KmsInvalidState", "KmsInvalidKeyUsage", "KmsOptInRequired",
        "KMS.DisabledException", "KMS.NotFoundException", "KMS.InvalidStateException", "KMS.InvalidKeyUsageException",
        "KMS.OptInRequired", "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation",
        "InvalidParameterValue", "InvalidParameterCombination", "MissingParameter", "ValidationError",
        "InvalidAttributeName", "InvalidAttributeValue",
    }),
}


def sqs_failure(code: str, status: int | None = None) -> str | None:
    """What an SQS error code says, when no retry gets past it: ``missing`` (the queue), ``denied`` (the
    credentials may not do it), ``credentials`` (SQS does not take them) or ``refused`` (the queue's KMS key, an
    argument SQS rejects); None when a retry may pass (throttling, a server error, an unknown code).

    :param code: botocore's ``Error.Code``.
    :param status: the HTTP status, for an answer without a code of its own (403: denied, 401: credentials).
    """
    for kind, codes in SQS_TERMINAL_CODES.items():
        if code in codes:
            return kind
    if status == 403 or code == "403":
        return "denied"
    if status == 401 or code == "401":
        return "credentials"
    return None


class ClusterError(S3chTerminalError):
    """The cluster named for a distributed load is not in ``system.clusters``."""


class ClickHouseAuthError(S3chTerminalError):
    """ClickHouse refused the connection's credentials."""


class ClickHouseQueryError(S3chTerminalError):
    """ClickHouse rejected the statement or the data (syntax, types, parsing): the same load fails again."""

    def __init__(self, *args: object, bad_file: str | None = None) -> None:
        super().__init__(*args)
        #: The file (``bucket/key``) whose data the server could not read (a parse, decompress or format error
        #: that names it); None for any other error.
        self.bad_file = bad_file


class QueryMemoryLimitError(ClickHouseQueryError):
    """The load hit its own memory limit (``max_memory_usage``, the task's ``memory_cap``): the same plan fails
    again; a smaller plan may fit (the operator tries them before it gives up)."""


class ClickHouseUnavailableError(S3chTransientError):
    """ClickHouse did not answer; the task's retries apply."""


class S3UnavailableError(S3chTransientError):
    """S3 did not answer, or answered with a server error (throttling, 5xx); the task's retries apply."""


class LoadError(S3chTransientError):
    """The server-side insert failed in a way a retry may get past (overload, timeouts, S3 hiccups)."""


_FROM_CORE: dict[type[core.CoreError], type[S3chTerminalError]] = {
    core.InvalidRequestError: InvalidRequestError,
    core.NothingMatchedError: NothingMatchedError,
    core.NoObjectsError: NoObjectsError,
    core.FormatError: FormatError,
    core.TableError: TableError,
    core.RegionMismatchError: RegionMismatchError,
    core.PlanError: PlanError,
    core.SchemaError: SchemaError,
    core.S3AccessDeniedError: S3AccessDeniedError,
}


def from_core(exc: core.CoreError) -> S3chError:
    """The provider's error for one of the core's (itself when it already is one)."""
    if isinstance(exc, S3chError):
        return exc
    for cls in type(exc).__mro__:
        if cls in _FROM_CORE:
            return _FROM_CORE[cls](*exc.args)
    return S3chTerminalError(*exc.args)


def in_place_of(new: BaseException, old: BaseException) -> BaseException:
    """``new``, to raise in place of ``old`` (the same error in the provider's class, or with more said): with
    ``old``'s traceback and cause, and ``old`` itself left out, so that a traceback shows the error once."""
    new.__cause__, new.__suppress_context__ = old.__cause__, True
    return new.with_traceback(old.__traceback__)


@contextlib.contextmanager
def provider_errors() -> Iterator[None]:
    """Re-raise the core's exceptions, and a connection Airflow does not know, as the provider's errors."""
    try:
        yield
    except S3chError:
        raise
    except core.CoreError as exc:
        # The same error in the provider's class: shown once (with what it was raised from, if anything).
        raise in_place_of(from_core(exc), exc)  # noqa: B904 - its cause is exc's own
    except AirflowNotFoundException as exc:
        raise InvalidRequestError(
            f"{exc}; define the connection (Airflow's UI, an AIRFLOW_CONN_<ID> variable or a secrets backend) or "
            "fix the operator's clickhouse_conn_id / aws_conn_id"
        ) from exc

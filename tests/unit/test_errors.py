"""One error root: the core's errors become the provider's; ClickHouse's codes are classified in one table."""

from __future__ import annotations

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

from airflow_provider_s3ch import errors
from airflow_provider_s3ch.core import errors as core
from airflow_provider_s3ch.core.errors import SERVER_ERRORS, classify_server_error


@pytest.mark.parametrize("name", ["InvalidRequestError", "NoObjectsError", "FormatError", "TableError",
                                  "RegionMismatchError", "PlanError", "SchemaError"])
def test_core_errors_become_terminal_provider_errors(name: str) -> None:
    with pytest.raises(errors.S3chError) as info, errors.provider_errors():
        raise getattr(core, name)("the message")
    err = info.value
    assert type(err) is getattr(errors, name) and str(err) == "the message"
    assert isinstance(err, AirflowFailException) and isinstance(err, getattr(core, name))


def _raised_in_core(cause: BaseException | None = None) -> None:
    raise core.InvalidRequestError("settings: max_threads='lots'") from cause


def test_a_core_error_shows_once_in_a_traceback() -> None:
    """Not the core's error and then the provider's of the same name and message: the provider's alone, with
    the frames where the core raised it."""
    import traceback

    with pytest.raises(errors.InvalidRequestError) as info, errors.provider_errors():
        _raised_in_core()
    text = "".join(traceback.format_exception(info.value))
    assert text.count("InvalidRequestError: settings") == 1, text
    assert "core.errors.InvalidRequestError" not in text and "_raised_in_core" in text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_core_errors_own_cause_is_kept() -> None:
    import traceback

    with pytest.raises(errors.InvalidRequestError) as info, errors.provider_errors():
        try:
            int("lots")
        except ValueError as exc:
            _raised_in_core(exc)
    assert isinstance(info.value.__cause__, ValueError)
    text = "".join(traceback.format_exception(info.value))
    assert text.count("InvalidRequestError: settings") == 1 and "invalid literal" in text


def test_every_provider_error_has_one_root_and_a_branch() -> None:
    leaves = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.S3chError)]
    assert len(leaves) >= 14
    for cls in leaves:
        assert issubclass(cls, AirflowException)
        if cls is not errors.S3chError:
            assert issubclass(cls, errors.S3chTerminalError) != issubclass(cls, errors.S3chTransientError), cls
    for transient in (errors.ClickHouseUnavailableError, errors.LoadError):
        assert not issubclass(transient, AirflowFailException)
    assert issubclass(errors.ClusterError, errors.S3chTerminalError) and not issubclass(errors.ClusterError,
                                                                                        errors.TableError)


@pytest.mark.parametrize(
    ("code", "kind"),
    [(62, "terminal"), (53, "terminal"), (47, "terminal"), (6, "terminal"), (27, "terminal"), (117, "terminal"),
     (102, "terminal"), (209, "transient"), (210, "transient"), (159, "transient"), (202, "transient"),
     (394, "transient"), (516, "auth"), (60, "unknown_table"), (1000, "transient"), (None, "transient"),
     (212, "terminal"), (467, "terminal"), (418, "terminal"), (19, "terminal")],
)
def test_server_codes_are_classified(code: int | None, kind: str) -> None:
    assert classify_server_error(code).kind == kind


def test_memory_limits_split_by_whose_limit() -> None:
    own = "Code: 241. DB::Exception: Memory limit (for query) exceeded: would use 1.00 GiB, maximum: 512.00 MiB"
    total = "Code: 241. DB::Exception: Memory limit (total) exceeded: would use 30.1 GiB, maximum: 28.8 GiB"
    assert classify_server_error(241, own).kind == "terminal" and "memory_cap" in classify_server_error(241, own).hint
    assert classify_server_error(241, total).kind == "transient"


def test_every_entry_says_why() -> None:
    assert all(entry.hint for entry in SERVER_ERRORS.values())


#: The server's words when S3 refused its read (the local engine against an S3 that enforces credentials:
#: tests/integration/test_s3_refused.py), and when S3 failed otherwise.
REFUSED_TEXTS = [
    "Code: 499. DB::Exception: Failed to get object info: No response body.. HTTP response code: 403. Please check "
    "your AWS credentials and permissions: while reading 'd/a.csv' in bucket 'locked' on disk 'StorageS3': While "
    "executing ReadFromObjectStorage. (S3_ERROR)",
    "Code: 499. DB::Exception: Access Denied: while reading key: d/a.csv, from bucket: locked: (while reading "
    "header): (in file/uri locked/d/a.csv): While executing CSVRowInputFormat: While executing "
    "ReadFromObjectStorage. (S3_ERROR)",
    "Code: 499. DB::Exception: Could not list objects in bucket 'locked' with prefix 'd/', S3 exception: "
    "`AccessDenied`, message: 'Access Denied'. (S3_ERROR)",
    "Code: 499. DB::Exception: The AWS Access Key Id you provided does not exist in our records. "
    "(InvalidAccessKeyId) (S3_ERROR)",
    "Code: 499. DB::Exception: Forbidden: while reading key: x.parquet, from bucket: b (S3_ERROR)",
]
TRANSIENT_S3_TEXTS = [
    "Code: 499. DB::Exception: Please reduce your request rate. (SlowDown): while reading key: x.parquet (S3_ERROR)",
    "Code: 499. DB::Exception: Failed to get object info: No response body.. HTTP response code: 503. (S3_ERROR)",
    "Code: 499. DB::Exception: We encountered an internal error. Please try again. (InternalError) (S3_ERROR)",
    "Code: 499. DB::Exception: The provided token has expired. (ExpiredToken), HTTP response code: 400 (S3_ERROR)",
    "Code: 499. DB::Exception: No response body: while reading key: k, from bucket: b (S3_ERROR)",
    "Code: 499. DB::Exception: The specified key does not exist. Access Denied to nothing, SlowDown (S3_ERROR)",
]


@pytest.mark.parametrize("text", REFUSED_TEXTS)
def test_s3_refusing_the_servers_read_is_terminal(text: str) -> None:
    assert core.is_s3_refusal(499, text)
    assert classify_server_error(499, text).kind == "s3_refused"
    assert not core.is_s3_refusal(36, text)  # only the server's S3 errors


@pytest.mark.parametrize("text", TRANSIENT_S3_TEXTS)
def test_throttling_and_s3_failures_stay_transient(text: str) -> None:
    assert classify_server_error(499, text).kind == "transient"


def test_the_hook_turns_a_refusal_into_a_terminal_bucket_error() -> None:
    from clickhouse_driver import errors as ch_errors

    from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook

    hook = ClickHouseHook.__new__(ClickHouseHook)
    hook.address, hook.login, hook.clickhouse_conn_id, hook.s3_endpoint_url = "h:9000", "u", "c", None
    err = hook.translate_error(ch_errors.ServerException(REFUSED_TEXTS[1], 499))
    assert isinstance(err, errors.S3AccessDeniedError) and isinstance(err, errors.BucketError)
    assert isinstance(err, AirflowFailException) and "access denied" in str(err) and "Access Denied" in str(err)
    assert isinstance(hook.translate_error(ch_errors.ServerException(TRANSIENT_S3_TEXTS[0], 499)), errors.LoadError)


def test_a_404_for_a_named_file_is_told_from_a_refusal_and_a_failure_of_s3() -> None:
    from airflow_provider_s3ch.core.errors import classify_server_error, is_s3_missing

    gone = ("Failed to get object info: No response body.. HTTP response code: 404: while reading 'p/b.csv' in "
            "bucket 'bkt' on disk 'StorageS3'")
    assert is_s3_missing(499, gone) and not is_s3_missing(499, gone.replace("404", "403"))
    assert not is_s3_missing(499, gone.replace("404", "503")) and not is_s3_missing(1000, gone)
    kind, hint = classify_server_error(499, gone)
    assert kind == "transient" and "deleted from S3 after the run looked at it" in hint
    assert classify_server_error(499, gone.replace("404", "403")).kind == "s3_refused"

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
     (394, "transient"), (516, "auth"), (60, "unknown_table"), (1000, "transient"), (None, "transient")],
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

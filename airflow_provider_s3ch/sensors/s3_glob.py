"""S3GlobSensor: wait for the files of an ``s3_uri`` with the operator's own glob semantics.

Airflow's ``S3KeySensor(wildcard_match=True)`` matches with :mod:`fnmatch`, where ``{a,b}`` and
``{01..12}`` are literal text; :class:`~airflow_provider_s3ch.operators.s3_to_clickhouse.S3ToClickHouseOperator`
reads them as ClickHouse does. This sensor lists S3 exactly as the operator's manifest does
(:func:`airflow_provider_s3ch.hooks.s3.list_matching`) and waits by the rule of
:mod:`airflow_provider_s3ch.core.readiness`, so a ``wait >> load`` pair agrees on which files there are.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow_provider_s3ch import errors
from airflow_provider_s3ch.compat import BaseSensorOperator, Context, PokeReturnValue, conf
from airflow_provider_s3ch.core.readiness import WaitRequest
from airflow_provider_s3ch.errors import S3chError, S3chTransientError, provider_errors
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.triggers.s3_glob import S3GlobTrigger, look


class S3GlobSensor(BaseSensorOperator):
    """Wait until the files an ``s3_uri`` glob matches are there, as the S3-to-ClickHouse operator will see them.

    The glob follows ClickHouse, as the operator's: ``*`` (not across ``/``), ``**``, ``?``, ``{a,b}``,
    ``{N..M}`` (``{01..12}`` zero-padded); a key without globs, or one ``{a,b}`` group of keys, is looked
    up key by key (HeadObject) as ClickHouse reads it, so every key it names must exist. The files are
    ready when

    * at least ``min_files`` matching files are not empty (1 by default), and
    * with ``success_marker``, the marker object exists: its key is relative to the glob's fixed prefix,
      cut after its last ``/`` (``s3://b/exports/2024-01/part-*.parquet`` with ``"_SUCCESS"`` waits for
      ``exports/2024-01/_SUCCESS``).

    With ``deferrable=True`` (default: ``[operators] default_deferrable``) the sensor looks once, then
    frees its worker slot and hands the wait to Airflow's triggerer
    (:class:`~airflow_provider_s3ch.triggers.s3_glob.S3GlobTrigger`), which looks every ``poke_interval``
    seconds until ``timeout``; otherwise it pokes as any sensor (``mode="poke"`` or ``"reschedule"``).

    :param s3_uri: (templated) ``s3://bucket/key-or-glob``, as the operator takes it.
    :param min_files: (templated) how many matching files that are not empty make the manifest complete.
    :param success_marker: (templated) a key, relative to the glob's fixed prefix, that must exist.
    :param aws_conn_id: (templated) the ``aws`` connection (``aws_default``).
    :param deferrable: wait in the triggerer rather than in a worker slot.
    :param kwargs: :class:`~airflow.sdk.BaseSensorOperator`'s: ``poke_interval`` (60 s), ``timeout``,
        ``mode``, ``soft_fail``, ``exponential_backoff``, ...

    **Return value** (XCom ``return_value``): ``{"s3_uri", "files", "bytes", "non_empty_files",
    "success_marker"}``: the files of the manifest (empty ones included) and their bytes when the wait ended,
    and the marker's key (None without one).

    **Errors**: a malformed ``s3_uri``, glob or marker, a missing bucket, a refused listing or an unknown
    connection fail the task without a retry (``S3chTerminalError``); S3 not answering fails the try
    (``S3chTransientError``: the task's retries apply).
    """

    template_fields: Sequence[str] = ("s3_uri", "min_files", "success_marker", "aws_conn_id")
    ui_color = "#ffd08a"

    def __init__(
        self,
        *,
        s3_uri: str,
        min_files: int = 1,
        success_marker: str | None = None,
        aws_conn_id: str | None = "aws_default",
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.s3_uri = s3_uri
        self.min_files = min_files
        self.success_marker = success_marker
        self.aws_conn_id = aws_conn_id
        self.deferrable = deferrable
        self._source: S3Source | None = None

    def wait_request(self) -> WaitRequest:
        """The rendered arguments, validated.

        :raises InvalidRequestError: a malformed ``s3_uri``, glob, ``min_files`` or ``success_marker``.
        """
        with provider_errors():
            return WaitRequest.build(s3_uri=self.s3_uri, min_files=self.min_files, success_marker=self.success_marker)

    def poke(self, context: Context) -> PokeReturnValue:
        """One look at S3; done when the files are ready, with the XCom."""
        request = self.wait_request()
        if self._source is None:
            self._source = S3Source(self.aws_conn_id)
        state = look(self._source, request)
        self.log.info("%s", state.reason)
        return PokeReturnValue(is_done=state.ready, xcom_value=state.summary() if state.ready else None)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)
        if first:
            return first.xcom_value
        self.log.info(
            "Deferring to the triggerer: it looks at S3 every %.0f s for up to %.0f s", self.poke_interval, self.timeout
        )
        self.defer(
            trigger=S3GlobTrigger(
                s3_uri=self.s3_uri,
                min_files=int(self.min_files),
                success_marker=self.success_marker,
                aws_conn_id=self.aws_conn_id,
                poke_interval=self.poke_interval,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )
        return None  # not reached: defer() raises

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Where the task resumes when the trigger fires: the XCom, or the trigger's error raised again."""
        if event and event.get("status") == "success":
            self.log.info("%s", event.get("message"))
            return event["summary"]
        event = event or {}
        raise _error(str(event.get("error", "")), str(event.get("message") or f"the trigger fired {event!r}"))


def _error(name: str, message: str) -> S3chError:
    """The provider's error class the trigger named (a transient one for a name it does not know)."""
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, S3chError)):
        cls = S3chTransientError
    return cls(message)

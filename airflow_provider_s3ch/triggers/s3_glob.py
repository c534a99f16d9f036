"""S3GlobTrigger: the deferred :class:`~airflow_provider_s3ch.sensors.s3_glob.S3GlobSensor` in Airflow's triggerer.

Each look lists S3 as the operator's manifest does (:func:`airflow_provider_s3ch.hooks.s3.list_matching`,
the same glob and the same keys) and :func:`airflow_provider_s3ch.core.readiness.readiness` decides. The
listing is boto3's, blocking: it runs in a thread (:func:`asyncio.to_thread`) so that the triggerer's
event loop goes on serving other triggers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_s3ch.core.readiness import Readiness, WaitRequest, readiness
from airflow_provider_s3ch.errors import S3chError, provider_errors
from airflow_provider_s3ch.hooks.s3 import list_matching
from airflow_provider_s3ch.hooks.s3_source import S3Source


def look(source: S3Source, request: WaitRequest) -> Readiness:
    """One look at S3: the objects the glob matches, the marker, and whether that is ready.

    :param source: the ``aws`` connection's S3 client and credentials.
    :param request: what is waited for.
    :raises S3chTerminalError: the bucket is missing or may not be listed (``BucketError``), the connection
        is unknown or yields no credentials.
    :raises S3chTransientError: S3 did not answer, throttled or failed (``S3UnavailableError``).
    """
    with provider_errors():
        client = source.client()
        objects, _ = list_matching(client, request.bucket, request.key_pattern)
        marker = request.marker_key
        found = marker is not None and bool(list_matching(client, request.bucket, marker)[0])
        return readiness(request, objects, marker_found=found)


class S3GlobTrigger(BaseTrigger):
    """Look at S3 every ``poke_interval`` seconds until the files of ``s3_uri`` are ready.

    Fires once: ``{"status": "success", "summary": {...}, "message": ...}`` when they are ready, or
    ``{"status": "error", "error": <the provider's error class>, "message": ...}`` when a look fails.

    :param s3_uri: ``s3://bucket/key-or-glob``, rendered.
    :param min_files: at least this many matching files that are not empty.
    :param success_marker: a key, relative to the glob's fixed prefix, that must exist; None for none.
    :param aws_conn_id: the ``aws`` connection.
    :param poke_interval: seconds between two looks.
    """

    def __init__(
        self,
        *,
        s3_uri: str,
        min_files: int = 1,
        success_marker: str | None = None,
        aws_conn_id: str | None = "aws_default",
        poke_interval: float = 60.0,
    ) -> None:
        super().__init__()
        self.s3_uri = s3_uri
        self.min_files = min_files
        self.success_marker = success_marker
        self.aws_conn_id = aws_conn_id
        self.poke_interval = float(poke_interval)
        self._source: S3Source | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "s3_uri": self.s3_uri,
                "min_files": self.min_files,
                "success_marker": self.success_marker,
                "aws_conn_id": self.aws_conn_id,
                "poke_interval": self.poke_interval,
            },
        )

    def _look(self, request: WaitRequest) -> Readiness:
        """One look, in a worker thread (the hook reads the connection there, not on the event loop)."""
        if self._source is None:
            self._source = S3Source(self.aws_conn_id)
        return look(self._source, request)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        looks = 0
        try:
            with provider_errors():
                request = WaitRequest.build(
                    s3_uri=self.s3_uri, min_files=self.min_files, success_marker=self.success_marker
                )
            while True:
                state = await asyncio.to_thread(self._look, request)
                looks += 1
                if state.ready:
                    self.log.info("%s (after %d look(s) from the triggerer)", state.reason, looks)
                    yield TriggerEvent({"status": "success", "summary": state.summary(), "message": state.reason})
                    return
                self.log.info("%s; next look in %.0f s", state.reason, self.poke_interval)
                await asyncio.sleep(self.poke_interval)
        except S3chError as exc:
            yield TriggerEvent({"status": "error", "error": type(exc).__name__, "message": str(exc)})

"""The files an event named, as S3 holds them now: one HeadObject per file, and the manifest a run from events
loads (:func:`~airflow_provider_s3ch.core.events.manifest_of`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from botocore.client import BaseClient

from airflow_provider_s3ch.core import events
from airflow_provider_s3ch.core import manifest as policy
from airflow_provider_s3ch.core.events import EventFile
from airflow_provider_s3ch.core.models import LoadRequest, Manifest
from airflow_provider_s3ch.errors import provider_errors
from airflow_provider_s3ch.hooks.quiet import quiet_loggers
from airflow_provider_s3ch.hooks.s3 import head_objects, region_or_none, timed
from airflow_provider_s3ch.hooks.s3_footers import parquet_footer_stats

log = logging.getLogger(__name__)


@quiet_loggers()
def manifest_of_files(client: BaseClient, request: LoadRequest, files: Iterable[EventFile], *,
                      on_listed: Callable[[Manifest], None] | None = None) -> Manifest:
    """The manifest of files an event named (:func:`~airflow_provider_s3ch.core.events.manifest_of`), each as S3
    holds it now: no listing; one HeadObject per file the glob selects (an event is a hint: the file may have been
    overwritten or deleted since, :func:`~airflow_provider_s3ch.core.events.as_now`), one GetBucketLocation for
    the region, and the Parquet footers of the files still there as :func:`build_manifest` reads them.

    :param on_listed: called with the manifest before the footers are read.
    """
    with provider_errors():
        given = events.matching(files, request.key_pattern, request.settings)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3ch-region") as pool:
            located = pool.submit(timed, region_or_none, client, request.bucket)
            try:
                now = head_objects(client, request.bucket, [f.key for f in given])
            finally:
                (region, calls), region_ms = located.result()
        current, gone, changed = events.as_now(given, now)
        if changed:
            log.info("%d file(s) changed since their event; loading the version S3 holds now: %s", len(changed),
                     ", ".join(changed[:5]))
        if gone:
            log.warning("%d file(s) named by the events are gone from S3 (deleted since their event); left out: %s",
                        len(gone), ", ".join(gone[:5]))
        manifest = events.manifest_of(request, [*current, *(f for f in given if f.key in set(gone))], region=region,
                                      calls=calls + len(now), gone=gone)
        if on_listed is not None:
            on_listed(manifest)
        if policy.reads_footers(request, manifest.format, manifest.compression):
            there = [o for o in manifest.objects if o.key not in set(manifest.gone)]
            if there:
                manifest = policy.with_footers(manifest, parquet_footer_stats(client, request.bucket, there))
        return manifest.model_copy(update={"request_ms": min(region_ms, manifest.request_ms or region_ms)})

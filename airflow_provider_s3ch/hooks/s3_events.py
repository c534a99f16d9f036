"""Files as S3 holds them now: the files an event named (one HeadObject per file) and the manifest a run from events
loads (:func:`~airflow_provider_s3ch.core.events.manifest_of`); a listed run's files looked up again before a later
chunk's insert (:func:`look_objects`: a listing of their range when they are many)."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from botocore.client import BaseClient

from airflow_provider_s3ch.core import events
from airflow_provider_s3ch.core import manifest as policy
from airflow_provider_s3ch.core.events import EventFile
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.errors import provider_errors
from airflow_provider_s3ch.hooks.quiet import quiet_loggers
from airflow_provider_s3ch.hooks.s3 import _stamp, head_objects, list_pages, region_or_none, timed
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


#: From this many keys on, :func:`look_objects` lists their range (ListObjectsV2: up to 1,000 keys a call) rather
#: than one HeadObject a key; it lists at most one page per :data:`KEYS_PER_PAGE` keys, then looks up the rest.
LIST_FROM_KEYS = 64
KEYS_PER_PAGE = 100


@quiet_loggers()
def look_objects(client: BaseClient, bucket: str, keys: Iterable[str], *, may_list: bool) -> dict[str, S3Object | None]:
    """``keys`` as S3 holds them now (size, ETag, last-modified), None where a key is gone: as
    :func:`~airflow_provider_s3ch.hooks.s3.head_objects` says them, in fewer calls for many keys of a run that may list
    the bucket (``may_list``): the first key's HeadObject, then the keys after it in order (``StartAfter``) up to the
    last, one call per 1,000 keys. Keys spread thinly over a large prefix end the listing early (one page per
    :data:`KEYS_PER_PAGE` keys at most); those not reached yet are looked up one by one."""
    unique = sorted(dict.fromkeys(keys))
    if not may_list or len(unique) < LIST_FROM_KEYS:
        return head_objects(client, bucket, unique)
    wanted, found = set(unique), head_objects(client, bucket, unique[:1])
    reached, budget = unique[0], math.ceil(len(unique) / KEYS_PER_PAGE)
    with provider_errors():
        for contents in list_pages(client, bucket, os.path.commonprefix(unique), start_after=unique[0]):
            objects = [S3Object(key=e["Key"], size=int(e.get("Size") or 0)) for e in contents if e["Key"] in wanted]
            _stamp(objects, {e["Key"]: e for e in contents})
            found.update({o.key: o for o in objects})
            reached, budget = (contents[-1]["Key"] if contents else unique[-1]), budget - 1
            if reached >= unique[-1] or budget <= 0:
                break
        else:  # the listing ended: no key after the last one listed
            reached = unique[-1]
    rest = [k for k in unique if k > reached]
    if rest:
        found.update(head_objects(client, bucket, rest))
    return {k: found.get(k) for k in unique}

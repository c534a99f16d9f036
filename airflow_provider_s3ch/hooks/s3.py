"""S3 through Airflow's ``aws`` connection: listing, HeadObject, GetBucketLocation (footers: :mod:`.s3_footers`;
the client and the credentials: :mod:`.s3_source`).

What a listing means (which keys are in, one format) is decided in
:mod:`airflow_provider_s3ch.core.manifest`; this module only makes the calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from airflow_provider_s3ch.core import manifest as policy
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object
from airflow_provider_s3ch.errors import BucketError, S3chError, S3UnavailableError, provider_errors
from airflow_provider_s3ch.hooks.quiet import quiet_loggers
from airflow_provider_s3ch.hooks.s3_footers import parquet_footer_stats

log = logging.getLogger(__name__)

def _list_pages(client: BaseClient, bucket: str, prefix: str, start_after: str | None = None
                ) -> Iterator[list[dict[str, Any]]]:
    """Yield each ListObjectsV2 page's ``Contents``, one S3 call per page (keys after ``start_after`` only)."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if start_after:
        kwargs["StartAfter"] = start_after
    while True:
        page = _call(client.list_objects_v2, bucket, "list", prefix=prefix, **kwargs)
        yield page.get("Contents", [])
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return
        kwargs["ContinuationToken"] = token


def _call(method: Any, bucket: str, action: str, prefix: str = "", **kwargs: Any) -> dict[str, Any]:
    """Run one S3 call, turning a missing bucket or a refusal into :class:`BucketError`, and a server
    or a network that fails into :class:`S3UnavailableError`."""
    try:
        return method(**kwargs)
    except ClientError as exc:
        raise _bucket_error(exc, bucket, action, prefix) from exc
    except BotoCoreError as exc:
        raise _botocore_error(exc) from exc


def _botocore_error(exc: BotoCoreError) -> S3chError:
    """No usable credentials is terminal; a connection or a read that fails is transient."""
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return BucketError(f"the aws connection yields no usable S3 credentials ({exc}); fix its keys or role")
    return S3UnavailableError(f"S3 did not answer ({exc}); check the endpoint, the network and that S3 runs")


_DENIED = frozenset({"AccessDenied", "403", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
#: S3-compatible servers that do not implement GetBucketLocation: the region is then unknown.
_UNSUPPORTED = frozenset({"NotImplemented", "501", "MethodNotAllowed", "405"})


def _error_code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(err.get("Code") or status or "")


def _bucket_error(exc: ClientError, bucket: str, action: str, prefix: str) -> S3chError:
    """The terminal error for a missing bucket or a refusal; :class:`S3UnavailableError` for the rest
    (throttling, server errors: a retry may pass).

    :param action: ``list`` (ListObjectsV2 of ``prefix``), ``read`` (GetBucketLocation) or ``head``
        (HeadObject of the key ``prefix``).
    """
    code = _error_code(exc)
    if code in ("NoSuchBucket", "404"):
        return BucketError(
            f"bucket {bucket!r} does not exist (or is not on this endpoint); check the bucket name in s3_uri"
        )
    if code in _DENIED:
        if action == "head":
            return BucketError(
                f"access denied ({code}) to read s3://{bucket}/{prefix}; give the aws connection s3:GetObject "
                f"on arn:aws:s3:::{bucket}/{prefix} and check its keys (without s3:ListBucket on the bucket, S3 "
                "also answers 403 for a key that does not exist)"
            )
        where = f"s3://{bucket}/{prefix}" if action == "list" else f"the location of bucket {bucket!r}"
        permission = "s3:ListBucket" if action == "list" else "s3:GetBucketLocation"
        return BucketError(
            f"access denied ({code}) to {action} {where}; give the aws connection {permission} "
            f"on arn:aws:s3:::{bucket} and check its keys"
        )
    message = exc.response.get("Error", {}).get("Message") or exc
    return S3UnavailableError(f"S3 answered the {action} of s3://{bucket}/{prefix} with {code}: {message}")


def _head(client: BaseClient, bucket: str, key: str) -> dict[str, Any] | None:
    """One HeadObject (needs s3:GetObject only); None when the key does not exist."""
    try:
        return client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _error_code(exc) in ("404", "NoSuchKey", "NotFound"):
            return None
        raise _bucket_error(exc, bucket, "head", key) from exc
    except BotoCoreError as exc:
        raise _botocore_error(exc) from exc


#: The most HeadObject calls in flight at once when looking up many keys (boto3's clients are thread-safe).
HEAD_THREADS = 16


@quiet_loggers()
def head_objects(client: BaseClient, bucket: str, keys: Iterable[str]) -> dict[str, S3Object | None]:
    """One HeadObject per key (up to :data:`HEAD_THREADS` at once): the object with its size, ETag and
    last-modified time (the file ledger's version), or None where the key does not exist."""
    unique = list(dict.fromkeys(keys))

    def one(key: str) -> S3Object | None:
        head = _head(client, bucket, key)
        if head is None:
            return None
        obj = S3Object(key=key, size=int(head.get("ContentLength") or 0))
        _stamp([obj], {key: head})
        return obj

    if len(unique) <= 1:
        return {key: one(key) for key in unique}
    with ThreadPoolExecutor(max_workers=min(HEAD_THREADS, len(unique)), thread_name_prefix="s3ch-head") as pool:
        return dict(zip(unique, pool.map(one, unique), strict=True))


@quiet_loggers()
def list_matching(client: BaseClient, bucket: str, pattern: str) -> tuple[list[S3Object], int]:
    """The objects ClickHouse's ``s3()`` reads for the key glob, sorted by key.

    A key without globs, or a single ``{a,b}`` group of keys, is what ClickHouse reads directly:
    each key is looked up with HeadObject (s3:GetObject is enough). Any other glob is matched
    against the listing of its literal prefix, page by page (ListObjectsV2), with
    :func:`~airflow_provider_s3ch.core.glob.compile_glob`; zero-byte keys ending in ``/`` (folder
    markers) are skipped. For ``archive :: member`` these are the archives.

    :param client: a boto3 S3 client.
    :param bucket: the bucket name.
    :param pattern: the key part of the S3 URI.
    :return: the matching objects, and how many S3 calls the listing took.
    :raises BucketError: when the bucket does not exist or may not be listed or read.
    :raises InvalidRequestError: when ClickHouse rejects the glob.
    """
    with provider_errors():
        listing = _scan(client, bucket, pattern)
    return listing.objects, listing.calls


def list_pages(client: BaseClient, bucket: str, prefix: str, start_after: str | None = None
               ) -> Iterator[list[dict[str, Any]]]:
    """Each ListObjectsV2 page's ``Contents`` under ``prefix``, after ``start_after`` (S3's ``StartAfter``),
    one S3 call per page; the errors are :func:`list_matching`'s."""
    with provider_errors():
        yield from _list_pages(client, bucket, prefix, start_after)


def bucket_region(client: BaseClient, bucket: str) -> str:
    """The bucket's region, from GetBucketLocation.

    :param client: a boto3 S3 client.
    :param bucket: the bucket name.
    :return: the region; the legacy answers None/"" mean us-east-1 and "EU" means eu-west-1.
    :raises BucketError: when the bucket does not exist or its location may not be read.
    """
    answer = _call(client.get_bucket_location, bucket, "read", Bucket=bucket)
    location = answer.get("LocationConstraint")
    if not location:
        return "us-east-1"
    return "eu-west-1" if location == "EU" else str(location)


@quiet_loggers()
def build_manifest(client: BaseClient, request: LoadRequest, *, footer_sample: int = policy.FOOTER_SAMPLE,
                   on_listed: Callable[[Manifest], None] | None = None) -> Manifest:
    """List the request's objects and settle their format and compression.

    :param client: a boto3 S3 client with the aws connection's credentials.
    :param request: the validated load request.
    :param footer_sample: for Parquet, how many footers to read (the largest files) for the
        data's uncompressed size and its largest row group; 0 reads none.
    :param on_listed: called with the manifest once the listing is checked, before the footers are read.
    :return: the manifest; ``list_calls`` counts every S3 call, the location and footer calls included.
    :raises BucketError: when the bucket is missing or the connection may not list it (or, for keys
        ClickHouse reads directly, read them).
    :raises InvalidRequestError: when ClickHouse rejects the glob or cannot read a matched key as
        named; raised before any S3 call when the glob itself is the problem.
    :raises NoObjectsError: when nothing matches, or a key ClickHouse would read directly is missing.
    :raises FormatError: when the objects' format or compression is unknown or mixed and the
        request does not name it.
    """
    with provider_errors():
        listing = policy.listing_for(request)
        # The bucket's location beside the listing (one request's wait, not two); its errors come first.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3ch-region") as pool:
            located = pool.submit(timed, region_or_none, client, request.bucket)
            started = time.monotonic()
            try:
                _fill(client, request.bucket, listing)
            finally:
                (region, calls), region_ms = located.result()
        fill_ms = (time.monotonic() - started) * 1000 / max(1, listing.calls)
        policy.check_listing(request, listing)
        manifest = policy.make_manifest(request, listing, region=region, calls=calls)
        if on_listed is not None:
            on_listed(manifest)
        if footer_sample and policy.reads_footers(request, manifest.format, manifest.compression):
            manifest = policy.with_footers(
                manifest, parquet_footer_stats(client, request.bucket, manifest.objects, sample=footer_sample)
            )
        # S3's request latency as this worker sees it: the quickest of the location call, the listing's calls (on
        # average) and the footer reads (a footer read of a large object may also wait on the server reading it).
        quickest = min(region_ms, round(fill_ms, 1), manifest.request_ms or region_ms)
        return manifest.model_copy(update={"request_ms": quickest})


def timed(call: Any, *args: Any) -> tuple[Any, float]:
    """``call(*args)`` and the milliseconds it took."""
    started = time.monotonic()
    return call(*args), round((time.monotonic() - started) * 1000, 1)


def _scan(client: BaseClient, bucket: str, pattern: str) -> policy.Listing:
    """The objects the glob selects: looked up one by one, or listed from its prefix."""
    return _fill(client, bucket, policy.Listing(pattern))


def _fill(client: BaseClient, bucket: str, listing: policy.Listing) -> policy.Listing:
    """HeadObject for each key ClickHouse reads directly; else list the glob's literal prefix page by page.
    Each matched object keeps the ETag and last-modified time S3 gave with it (the file ledger's version)."""
    if listing.direct is not None:
        for key in dict.fromkeys(listing.direct):
            head, before = _head(client, bucket, key), len(listing.matched)
            listing.add_head(key, head)
            _stamp(listing.matched[before:], {key: head} if head is not None else {})
    else:
        for contents in _list_pages(client, bucket, listing.prefix):
            before = len(listing.matched)
            listing.add_page(contents)
            if len(listing.matched) > before:
                _stamp(listing.matched[before:], {entry["Key"]: entry for entry in contents})
    return listing


def _stamp(objects: list[S3Object], entries: dict[str, dict[str, Any]]) -> None:
    """Set each object's ETag (quotes removed) and last-modified time from its listing entry or HeadObject."""
    for obj in objects:
        entry = entries.get(obj.key)
        if entry is None:
            continue
        etag = str(entry.get("ETag") or "").strip('"')
        modified = entry.get("LastModified")
        obj.etag = etag or None
        obj.last_modified = modified.astimezone(UTC) if isinstance(modified, datetime) else None


def region_or_none(client: BaseClient, bucket: str) -> tuple[str | None, int]:
    """The bucket's region and the call count; None when only GetBucketLocation is refused.

    A connection may be allowed to list a bucket and not to read its location; the region check
    is then skipped rather than the load refused. A missing bucket still raises.
    """
    try:
        return bucket_region(client, bucket), 1
    except (BucketError, S3UnavailableError) as exc:
        cause = exc.__cause__
        if isinstance(cause, ClientError) and _error_code(cause) in _DENIED | _UNSUPPORTED:
            return None, 1
        raise

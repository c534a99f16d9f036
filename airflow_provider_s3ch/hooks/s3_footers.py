"""Parquet footers over S3: one or two ranged GETs per file, parsed without a Parquet library
(:mod:`airflow_provider_s3ch.core.parquet_footer`); what the sizes mean is
:mod:`~airflow_provider_s3ch.core.manifest`'s.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from botocore.client import BaseClient

from airflow_provider_s3ch.core import manifest as policy
from airflow_provider_s3ch.core import parquet_footer, parquet_stats
from airflow_provider_s3ch.core.models import S3Object

log = logging.getLogger(__name__)


def parquet_footer_stats(
    client: BaseClient, bucket: str, objects: list[S3Object], sample: int = policy.FOOTER_SAMPLE
) -> policy.FooterStats:
    """Read the footers of the ``sample`` largest Parquet files: uncompressed sizes, cheaply.

    One ranged GET of the last :data:`policy.FOOTER_PROBE_BYTES` per file (a second one when the
    footer is bigger), parsed by :mod:`airflow_provider_s3ch.core.parquet_footer` (no Parquet
    library to import). When a read or a footer fails, the planner falls back to its expansion
    factors for that file.

    :param client: a boto3 S3 client.
    :param bucket: the bucket.
    :param objects: the manifest's objects.
    :param sample: how many files to read.
    """
    schema: dict[str, bytes] = {}
    stats: dict[str, tuple[list[tuple[int, dict[str, tuple[int, int]]]], dict[str, str]]] = {}

    def read(obj: S3Object) -> tuple[int, float, list[int] | None]:
        """(GETs, the first GET's ms, the row groups' uncompressed sizes or None when skipped); the sample
        file's schema (:func:`~airflow_provider_s3ch.core.parquet_footer.schema_file`) into ``schema``, and for
        a load that reads the block rule's window, each file's row groups' integer ranges into ``stats``."""
        calls = 0
        try:
            started = time.monotonic()
            tail, n = _tail(client, bucket, obj, min(obj.size, policy.FOOTER_PROBE_BYTES))
            took = (time.monotonic() - started) * 1000 / n
            calls += n
            try:
                footer_len = parquet_footer.metadata_length(tail)
            except parquet_footer.FooterError as exc:
                log.info("Parquet footer of %s skipped: %s", obj.key, exc)
                return calls, took, None
            if footer_len + 8 > len(tail):
                if footer_len + 8 > min(obj.size, policy.MAX_FOOTER_BYTES):
                    log.info("Parquet footer of %s skipped: it claims %d bytes", obj.key, footer_len)
                    return calls, took, None
                tail, n = _tail(client, bucket, obj, footer_len + 8)
                calls += n
            groups = parquet_footer.row_group_sizes(tail)
            if obj.key == first.key:
                schema[obj.key] = parquet_footer.schema_file(tail)
            if window:
                groups_stats, units = parquet_stats.row_group_stats(tail)
                stats[obj.key] = ([(g.bytes, g.ranges) for g in groups_stats], units)
        except Exception as exc:  # noqa: BLE001 - footers are an optimisation: any failure falls back
            log.info("Parquet footer of %s skipped (the plan falls back to size estimates): %s", obj.key, exc)
            return calls, float("inf"), None
        return calls, took, groups

    chosen = policy.footer_sample(objects, sample)
    # The schema check's sample (the first file that is not empty) is read too: the server describes its schema
    # from these bytes (load/target.py), not from a second read of the file; it counts in the figures when chosen.
    first = policy.first_file(objects) if chosen else None
    extra = [first] if first is not None and first not in chosen else []
    # A big load reads the first files in key order too, and the last: their row groups' ranges of the partition
    # key's column say how many partitions an insert block spans (the block rule, core/plan/partition_spans.py).
    window = policy.window_sample(objects, sum(o.size for o in objects)) if chosen else []
    last = policy.last_file(objects) if window else None
    extra += [o for o in [*window, *([last] if last is not None else [])] if o not in chosen and o not in extra]
    # The footers at once: each is one or two small GETs, and over real S3 each GET waits tens of ms. No more at a
    # time than the client's connection pool holds (boto3: 10), which would otherwise drop connections.
    pool_size = client.meta.config.max_pool_connections or 10
    with ThreadPoolExecutor(max_workers=max(1, min(pool_size, len(chosen) + len(extra)))) as pool:
        answers = list(pool.map(read, chosen + extra))
    extra_calls = sum(n for n, _, _ in answers[len(chosen):])
    answers = answers[: len(chosen)]
    calls = sum(n for n, _, _ in answers)
    sampled = [(obj.size, groups) for obj, (_, _, groups) in zip(chosen, answers, strict=True) if groups is not None]
    quickest = min((took for _, took, groups in answers if groups is not None), default=None)
    # The window counts only where every file of it was read: a gap would hide the partitions a block spans.
    complete = bool(window) and all(o.key in stats for o in window)
    keys = policy.key_window([stats[o.key] for o in window],
                             [ranges for groups, _ in stats.values() for _, ranges in groups]) if complete else None
    footers = policy.footer_stats(objects, sampled, calls + extra_calls)._replace(
        schema=(first.key, schema[first.key]) if first is not None and first.key in schema else None,
        key_window=keys)
    return footers._replace(request_ms=round(quickest, 1)) if quickest is not None and footers.files else footers


def _tail(client: BaseClient, bucket: str, obj: S3Object, n: int) -> tuple[bytes, int]:
    """The last ``n`` bytes of an object and the GETs it took.

    A suffix range (``bytes=-N``) first; its ``Content-Range`` must say the object's last bytes.
    Some servers answer a suffix range with the object's first bytes: then an explicit range from the
    size the listing gave.

    :raises ValueError: neither answer is the object's tail.
    """
    first, last = obj.size - n, obj.size - 1
    expected = f"bytes {first}-{last}/{obj.size}"
    answer = client.get_object(Bucket=bucket, Key=obj.key, Range=f"bytes=-{n}")
    body = answer["Body"].read()
    if answer.get("ContentRange") == expected or (
        first == 0 and len(body) == obj.size and not answer.get("ContentRange")
    ):
        return body, 1
    log.info(
        "The S3 server answered the suffix range of %s with %r, not %r: reading bytes=%d-%d instead",
        obj.key, answer.get("ContentRange"), expected, first, last,
    )
    answer = client.get_object(Bucket=bucket, Key=obj.key, Range=f"bytes={first}-{last}")
    body = answer["Body"].read()
    if answer.get("ContentRange", expected) != expected or len(body) != n:
        raise ValueError(f"the server answered bytes={first}-{last} with {answer.get('ContentRange')!r}")
    return body, 2

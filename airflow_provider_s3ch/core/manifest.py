"""Manifest policy: which listed keys are in, what is skipped and why, one format, footer sums.

The S3 shell (:mod:`airflow_provider_s3ch.hooks.s3`) lists pages and reads footers; these
functions decide what the listing means. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from airflow_provider_s3ch.core.errors import FormatError, InvalidRequestError, NoObjectsError, NothingMatchedError
from airflow_provider_s3ch.core.formats import detect_compression, detect_format, is_compressed
from airflow_provider_s3ch.core.glob import (
    archive_path_syntax,
    check_key_pattern,
    compile_glob,
    literal_prefix,
    split_archive,
    unreadable_key,
)
from airflow_provider_s3ch.core.key_window import KeyWindow
from airflow_provider_s3ch.core.models import LoadRequest, Manifest, S3Object

EXAMPLES = 3

#: How many Parquet footers :func:`build_manifest` reads (the largest files first).
FOOTER_SAMPLE = 4

#: From this many listed bytes on, the footers of the first files in key order (the order ClickHouse reads them) are
#: read too, for the row groups' ranges of the partition key's column: they decide whether the plan's block grows
#: past ClickHouse's 256 MiB (``core/plan/partition_spans.py``). Below it the data-sized block stays under 256 MiB
#: anyway: 512 MiB of Parquet is ~1.5 GiB uncompressed, / (2 threads x 4 blocks).
WINDOW_FROM_BYTES = 512 * 1024 * 1024

#: The window: the first files until this many listed bytes (~1 GiB uncompressed: four 256 MiB blocks)...
WINDOW_BYTES = 384 * 1024 * 1024

#: ... and at most this many files (their footers are read side by side, one or two GETs each).
WINDOW_FILES = 32

#: Bytes fetched from the end of a file in the first GET: the 8-byte trailer and, usually,
#: the whole footer, so one ranged GET per file is the common case.
FOOTER_PROBE_BYTES = 64 * 1024

#: A footer claiming more is not read (a corrupt or hostile file must not fill the worker's memory).
MAX_FOOTER_BYTES = 16 * 1024 * 1024


class Listing:
    """The objects a key glob selects, as ClickHouse's ``s3()`` selects them, and a few others.

    ClickHouse reads a key without globs, or the keys of a single ``{a,b}`` group, directly: those
    are ``direct``, to be looked up one by one (:meth:`add_head`). Any other glob is matched against
    the listing of its literal ``prefix`` (:meth:`add_page`). For ``archive :: member`` the glob is
    the archive's; the members are the server's to read, and their format is the member pattern's.

    :param pattern: the key glob.
    :param archive_syntax: ``allow_archive_path_syntax``
        (see :func:`~airflow_provider_s3ch.core.glob.archive_path_syntax`).
    :raises InvalidRequestError: when ClickHouse rejects the glob or cannot read the key as named.
    """

    def __init__(self, pattern: str, *, archive_syntax: bool = True) -> None:
        self.pattern, self.member = split_archive(pattern, archive_syntax)
        check_key_pattern(self.pattern, self.member)
        self.glob = compile_glob(self.pattern)
        self.prefix = literal_prefix(self.pattern)
        #: The keys ClickHouse reads without listing, or None when it lists ``prefix``.
        self.direct = self.glob.keys
        self._repeats = Counter(self.direct or ())
        self.matched: list[S3Object] = []
        self.others: list[str] = []
        self.missing: list[str] = []
        self.unreadable: list[tuple[str, str]] = []
        self.seen = 0
        self.calls = 0

    def add_page(self, contents: Iterable[dict[str, Any]]) -> None:
        """Take one ListObjectsV2 page's ``Contents``; folder markers are skipped."""
        self.calls += 1
        for entry in contents:
            if _is_directory_marker(entry):
                continue
            self.seen += 1
            key = entry["Key"]
            if self.glob.fullmatch(key):
                reason = unreadable_key(key)
                if reason:
                    self.unreadable.append((key, reason))
                self.matched.append(self._object(key, entry.get("Size", 0)))
            elif len(self.others) < EXAMPLES:
                self.others.append(key)

    def add_head(self, key: str, head: dict[str, Any] | None) -> None:
        """Take the HeadObject answer for one of the ``direct`` keys; None when there is no such object.

        A key a ``{a,a}`` group names twice is read twice by ClickHouse, so it is in the manifest twice.
        """
        self.calls += 1
        if head is None:
            self.missing.append(key)
            return
        self.seen += 1
        obj = self._object(key, head.get("ContentLength", 0))
        self.matched.extend([obj] * self._repeats.get(key, 1))

    def _object(self, key: str, size: Any) -> S3Object:
        name = key if self.member is None else self.member
        return S3Object(key=key, size=int(size or 0), format=detect_format(name), compression=detect_compression(name))

    @property
    def objects(self) -> list[S3Object]:
        """The matching objects, sorted by key."""
        return sorted(self.matched, key=lambda o: o.key)


def listing_for(request: LoadRequest) -> Listing:
    """The empty :class:`Listing` of the request's key glob, under its ``allow_archive_path_syntax``."""
    return Listing(request.key_pattern, archive_syntax=archive_path_syntax(request.settings))


def _is_directory_marker(entry: dict[str, Any]) -> bool:
    return entry["Key"].endswith("/") and int(entry.get("Size", 0)) == 0


class FooterStats(NamedTuple):
    """What a sample of Parquet footers says about the data (all None when nothing was read)."""

    uncompressed_bytes: int | None = None
    max_row_group_bytes: int | None = None
    files: int = 0
    calls: int = 0
    #: The quickest footer read's round trip (ms): what one S3 request costs from here.
    request_ms: float | None = None
    #: The first file's key (the schema check's sample) and its schema as a Parquet file of the metadata alone.
    schema: tuple[str, bytes] | None = None
    #: The block rule's row groups' ranges (:func:`key_window`); None when not read.
    key_window: KeyWindow | None = None


def first_file(objects: Iterable[S3Object]) -> S3Object | None:
    """The first file that is not empty: the one the schema check describes (``core.schema.sample_file``)."""
    return next((o for o in objects if o.size > 0), None)


def footer_sample(objects: Iterable[S3Object], sample: int = FOOTER_SAMPLE) -> list[S3Object]:
    """The files whose Parquet footers to read: the ``sample`` largest (a footer needs 12 bytes)."""
    return sorted((o for o in objects if o.size > 12), key=lambda o: o.size, reverse=True)[:sample]


def window_sample(objects: list[S3Object], total_bytes: int) -> list[S3Object]:
    """The files whose row groups' ranges the block rule reads: the first in key order up to :data:`WINDOW_BYTES`
    (and :data:`WINDOW_FILES`); none below :data:`WINDOW_FROM_BYTES`. The last file is read with them
    (:func:`last_file`): its range and theirs bound the load's.

    :param objects: the manifest's objects, in key order.
    :param total_bytes: their bytes.
    """
    window: list[S3Object] = []
    if total_bytes < WINDOW_FROM_BYTES:
        return window
    for obj in (o for o in objects if o.size > 12):
        window.append(obj)
        if len(window) >= WINDOW_FILES or sum(o.size for o in window) >= WINDOW_BYTES:
            break
    return window


def last_file(objects: list[S3Object]) -> S3Object | None:
    """The last file in key order with a footer to read."""
    return next((o for o in reversed(objects) if o.size > 12), None)


def key_window(window: list[tuple[list[tuple[int, dict[str, tuple[int, int]]]], dict[str, str]]],
               others: Iterable[dict[str, tuple[int, int]]] = ()) -> KeyWindow | None:
    """The block rule's :class:`KeyWindow` from the window's footers (each file's row groups and units, in key
    order), and the ranges of other footers read (the last file, the largest ones) for the load's range.

    A column's unit must agree in every file; None when nothing was read.
    """
    if not window:
        return None
    units: dict[str, str] = {}
    disagree: set[str] = set()
    for _, file_units in window:
        for name, unit in file_units.items():
            if units.setdefault(name, unit) != unit:
                disagree.add(name)
    spans: dict[str, tuple[int, int]] = {}
    for ranges in [r for groups, _ in window for _, r in groups] + list(others):
        for name, (low, high) in ranges.items():
            had = spans.get(name, (low, high))
            spans[name] = (min(had[0], low), max(had[1], high))
    return KeyWindow(
        files=tuple(tuple(groups) for groups, _ in window),
        units={name: unit for name, unit in units.items() if name not in disagree},
        spans=spans,
    )


def footer_stats(objects: Iterable[S3Object], sampled: Iterable[tuple[int, list[int]]], calls: int) -> FooterStats:
    """Extrapolate the sampled footers to all the files.

    :param objects: every file of the manifest.
    :param sampled: (file size, uncompressed size of each row group) of each footer read.
    :param calls: the S3 calls the footer reads took.
    :return: the estimated uncompressed size of all the files (from the sampled files'
        uncompressed/compressed ratio) and the largest row group seen.
    """
    files = sampled_bytes = sampled_uncompressed = max_group = 0
    for size, groups in sampled:
        files += 1
        sampled_bytes += size
        sampled_uncompressed += sum(groups)
        max_group = max([max_group, *groups])
    if not files or not sampled_bytes:
        return FooterStats(calls=calls)
    total = sum(o.size for o in objects)
    return FooterStats(
        uncompressed_bytes=int(total * sampled_uncompressed / sampled_bytes),
        max_row_group_bytes=max_group,
        files=files,
        calls=calls,
    )


def wants_footers(fmt: str, compression: str | None) -> bool:
    """Whether footers can be read: Parquet without an outer compression."""
    return fmt.lower() == "parquet" and not is_compressed(compression)


def reads_footers(request: LoadRequest, fmt: str, compression: str | None) -> bool:
    """Whether the listing goes on to read footers (:func:`wants_footers`, and the files are not an archive's
    members, which the server reads)."""
    return wants_footers(fmt, compression) and listing_for(request).member is None


def make_manifest(request: LoadRequest, listing: Listing, *, region: str | None, calls: int) -> Manifest:
    """The manifest of a checked listing (see :func:`check_listing`); footers come after (:func:`with_footers`).

    :param request: the request (format and compression given by the user win).
    :param listing: the listed keys.
    :param region: the bucket's region, None when unknown.
    :param calls: S3 calls besides the listing (the location).
    """
    objects = listing.objects
    return Manifest(
        bucket=request.bucket,
        pattern=request.key_pattern,
        prefix=listing.prefix,
        objects=objects,
        format=request.format or single_format(objects),
        compression=request.compression or single_compression(objects),
        region=region,
        list_calls=calls + listing.calls,
    )


def with_footers(manifest: Manifest, footers: FooterStats) -> Manifest:
    """The manifest with what the Parquet footers said, and the calls reading them took."""
    return manifest.model_copy(
        update={
            "list_calls": manifest.list_calls + footers.calls,
            "uncompressed_bytes": footers.uncompressed_bytes,
            "max_row_group_bytes": footers.max_row_group_bytes,
            "footer_files": footers.files,
            "request_ms": footers.request_ms,
            "sample_schema": footers.schema,
            "key_window": footers.key_window,
        }
    )


#: What to do when nothing matches: the glob may be wrong, or the files not there yet.
_NOT_YET = (
    "check the s3_uri and its glob; if the files have not arrived yet, put an S3GlobSensor "
    "(airflow_provider_s3ch.sensors) with the same s3_uri in front of this task to wait for them, "
    "or pass skip_when_empty=True to end the run as skipped"
)


def check_listing(request: LoadRequest, listing: Listing) -> None:
    """Raise when the load would read nothing, fail on a missing key, or read a key under another name.

    :raises NoObjectsError: nothing matched, or a key ClickHouse reads directly does not exist
        (unless ``s3_ignore_file_doesnt_exist`` is set).
    :raises InvalidRequestError: the glob matches a key ClickHouse cannot read as named.
    """
    bucket, pattern, prefix = request.bucket, listing.pattern, listing.prefix
    objects, seen = listing.matched, listing.seen
    if not objects:
        if listing.direct is not None:
            looked = f"read directly, without listing: {len(set(listing.direct))} key(s) looked up, none found"
            raise NothingMatchedError(f"no object in bucket {bucket!r} matches {pattern!r} ({looked}); {_NOT_YET}")
        if seen:
            examples = ", ".join(repr(k) for k in listing.others)
            listed = f"{seen} object{'s' if seen != 1 else ''}, none matching, e.g. {examples}"
        else:
            listed = "no objects"
        raise NothingMatchedError(
            f"no object in bucket {bucket!r} matches {pattern!r} (listed prefix {prefix!r}: {listed}); {_NOT_YET}"
        )
    if listing.unreadable:
        shown = "; ".join(f"{key!r} {reason}" for key, reason in listing.unreadable[:EXAMPLES])
        raise InvalidRequestError(
            f"{pattern!r} matches {len(listing.unreadable)} key(s) in bucket {bucket!r} that ClickHouse cannot "
            f"read as named: {shown}; narrow the glob so that it leaves them out"
        )
    if listing.missing and not _ignores_missing(request):
        missing, expected = sorted(listing.missing), set(listing.direct or ())
        raise NoObjectsError(
            f"{len(missing)} of the {len(expected)} keys that {pattern!r} names do not exist in bucket "
            f"{bucket!r}: {', '.join(repr(k) for k in missing[:EXAMPLES])}; ClickHouse reads these keys "
            "directly and fails on a missing one: fix the {...} list, or pass "
            "settings={'s3_ignore_file_doesnt_exist': 1}"
        )


def _ignores_missing(request: LoadRequest) -> bool:
    value = request.settings.get("s3_ignore_file_doesnt_exist", 0)
    return str(value).strip().lower() in ("1", "true")


def _examples_by(objects: Iterable[S3Object], attr: str) -> dict[str | None, str]:
    """The first key of each distinct value of ``attr`` (format or compression)."""
    examples: dict[str | None, str] = {}
    for obj in objects:
        examples.setdefault(getattr(obj, attr), obj.key)
    return examples


def single_format(objects: list[S3Object]) -> str:
    """The one detected format, or :class:`FormatError`."""
    examples = _examples_by(objects, "format")
    if None in examples:
        raise FormatError(
            f"cannot tell the format of {examples[None]!r} from its extension; pass format= "
            "with a ClickHouse format name (e.g. format='Parquet' or format='CSVWithNames')"
        )
    if len(examples) > 1:
        found = "; ".join(f"{fmt} (e.g. {key!r})" for fmt, key in sorted(examples.items()))
        raise FormatError(
            f"the matched files have mixed formats: {found}; narrow the glob to one format, "
            "or pass format= if they really are all one format"
        )
    return next(iter(examples))  # type: ignore[return-value]


def single_compression(objects: list[S3Object]) -> str | None:
    """The one detected compression (None for none), or :class:`FormatError`."""
    examples = _examples_by(objects, "compression")
    if len(examples) > 1:
        ordered = sorted(examples.items(), key=lambda kv: kv[0] or "")
        found = "; ".join(f"{c or 'none'} (e.g. {key!r})" for c, key in ordered)
        raise FormatError(
            f"the matched files have mixed compression: {found}; narrow the glob to one compression, "
            "or pass compression= (e.g. compression='auto' to let ClickHouse pick per file by extension)"
        )
    return next(iter(examples))

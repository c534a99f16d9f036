"""S3 listing and glob matching with ClickHouse's own semantics.

ClickHouse's ``s3()`` table function decides which objects a URL reads in one of two ways
(``StorageObjectStorageSource::createFileIterator`` in ``src/Storages/ObjectStorage``):

* a key with exactly one ``{a,b,c}`` group and no other glob is *expanded*: ClickHouse reads
  ``a``, ``b`` and ``c`` directly, without listing, and fails on one that does not exist;
* any other key with a glob is *listed* from its literal prefix, and each listed key is kept when
  it fully matches the regular expression ``makeRegexpPatternFromGlobs`` builds
  (``src/Common/parseGlobs.cpp``).

:func:`glob_to_regex` reproduces both, quirks included, so the manifest lists exactly the files the
server-side ``INSERT ... SELECT FROM s3()`` will read. The pure functions here do no I/O; the
listing functions take a boto3 S3 client so that they can run against any S3 API server.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from airflow_provider_s3ch.errors import BucketError, FormatError, InvalidRequestError, NoObjectsError
from airflow_provider_s3ch.models import LoadRequest, Manifest, S3Object

#: Characters that make a key a glob for ClickHouse (``isPathWithGlobs``).
GLOB_CHARS = "*?{"
#: The most values one ``{N..M}`` range may hold (ClickHouse's ``MAX_RANGE_GLOB_VALUES``).
MAX_RANGE_VALUES = 100_000
#: How many non-matching keys an error message shows.
EXAMPLES = 3

#: How many Parquet footers :func:`build_manifest` reads (the largest files first).
FOOTER_SAMPLE = 4

#: Bytes fetched from the end of a file in the first GET: the 8-byte trailer and, usually,
#: the whole footer, so one ranged GET per file is the common case.
FOOTER_PROBE_BYTES = 64 * 1024

# ClickHouse's regexps, on the pattern after its first escaping pass (parseGlobs.cpp, ``Regexps``).
_RANGE_RE = re.compile(r"\{([0-9]+\.\.[0-9]+)\}")
_ENUM_RE = re.compile(r"\{([^{}*,]+[^{}*]*[^{}*,])\}")
# Characters ClickHouse escapes before it looks for ``{}`` groups; ``.``, ``{`` and ``}`` are escaped
# later; ``$`` and ``^`` are never escaped and stay anchors (see ``_final_pass``).
_FIRST_ESCAPES = frozenset("[]|+-()\\")

#: Compression by the key's last extension, as ``chooseCompressionMethod`` (src/IO/CompressionMethod.cpp)
#: names it; the extension is compared in lower case.
COMPRESSION_BY_EXTENSION: dict[str, str] = {
    "gz": "gzip",
    "gzip": "gzip",
    "deflate": "deflate",
    "br": "br",
    "brotli": "br",
    "xz": "xz",
    "lzma": "xz",
    "zst": "zstd",
    "zstd": "zstd",
    "lz4": "lz4",
    "bz2": "bz2",
    "snappy": "snappy",
}

#: Format by the extension under the compression one. ClickHouse (``FormatFactory::registerFileExtension``)
#: maps ``csv`` to ``CSV`` and ``tsv`` to ``TSV`` (no header) and ``json`` to ``JSON`` (one document with
#: ``meta``/``data``). Files in object storage almost always carry a header line, and ``.json`` data
#: files are almost always one object per line, so this provider picks ``CSVWithNames``,
#: ``TSVWithNames`` and ``JSONEachRow``; pass ``format=`` when your files differ.
FORMAT_BY_EXTENSION: dict[str, str] = {
    "parquet": "Parquet",
    "csv": "CSVWithNames",
    "tsv": "TSVWithNames",
    "json": "JSONEachRow",
    "ndjson": "JSONEachRow",
    "jsonl": "JSONEachRow",
    "orc": "ORC",
    "avro": "Avro",
    "arrow": "Arrow",
    "native": "Native",
    "bson": "BSONEachRow",
    "npy": "Npy",
}

#: ClickHouse registers every format's name as a file extension too (``x.csvwithnames``); these are the
#: input formats that need no schema file and are plausible for object storage.
_FORMAT_NAMES = (
    "CSV", "CSVWithNames", "CSVWithNamesAndTypes", "TSV", "TSVWithNames", "TSVWithNamesAndTypes",
    "TabSeparated", "TabSeparatedWithNames", "TabSeparatedWithNamesAndTypes", "TSVRaw", "CustomSeparated",
    "JSONEachRow", "JSONLines", "NDJSON", "JSONCompactEachRow", "JSONCompactEachRowWithNames",
    "JSONStringsEachRow", "JSON", "JSONCompact", "Parquet", "ORC", "Avro", "Arrow", "ArrowStream",
    "Native", "RowBinary", "RowBinaryWithNames", "RowBinaryWithNamesAndTypes", "MsgPack", "BSONEachRow",
    "LineAsString", "RawBLOB", "Values", "TSKV", "Npy",
)  # fmt: skip
_FORMAT_BY_NAME = {name.lower(): name for name in _FORMAT_NAMES}


# --------------------------------------------------------------------------------------------- globs


def has_glob(pattern: str) -> bool:
    """Whether ClickHouse treats the key as a glob (it holds ``*``, ``?`` or ``{``).

    :param pattern: the key part of an S3 URI.
    """
    return any(c in pattern for c in GLOB_CHARS)


def literal_prefix(pattern: str) -> str:
    """The key's text before its first glob character: the ListObjectsV2 ``Prefix`` ClickHouse uses.

    :param pattern: the key part of an S3 URI; a key without globs is its own prefix.
    """
    cut = min((i for i in (pattern.find(c) for c in GLOB_CHARS) if i >= 0), default=len(pattern))
    return pattern[:cut]


def expand_keys(pattern: str) -> list[str] | None:
    """The keys ClickHouse reads directly, without listing, or None when it lists the prefix.

    A key without globs is read as is; a key with exactly one ``{...}`` and no ``*``, ``?`` or
    ``{N..M}`` is expanded into one key per alternative (a one-character group such as ``{a}``
    included). A ``{`` that does not open a group stays literal text.

    :param pattern: the key part of an S3 URI.
    :raises InvalidRequestError: when ClickHouse would reject the group (a stray ``,`` or ``}``
        before it, or a group that is never closed).
    """
    if not has_glob(pattern):
        return [pattern]
    if pattern.count("{") != 1 or "*" in pattern or "?" in pattern or _RANGE_RE.search(pattern):
        return None
    if not _is_selector(pattern):
        return [pattern]
    head, alternatives, tail = _split_selector(pattern)
    return [head + alt + tail for alt in alternatives]


def _is_selector(text: str) -> bool:
    """ClickHouse's ``noSelectorGlobsToExpand``, negated, for a text holding one ``{``."""
    left, right = text.find("{"), text.find("}")
    one_char = right != -1 and right - left == 2
    return one_char or _ENUM_RE.search(text) is not None


def _split_selector(pattern: str) -> tuple[str, list[str], str]:
    """Split ``head{a,b}tail`` into its parts, rejecting what ClickHouse rejects."""
    opened_at = None
    for i, ch in enumerate(pattern):
        if ch == "{":
            opened_at = i
        elif ch in ",}" and opened_at is None:
            raise InvalidRequestError(
                f"the glob {pattern!r} has a {ch!r} outside a {{...}} group at position {i}, which "
                "ClickHouse rejects; remove it or close the group"
            )
        elif ch == "}":
            return pattern[:opened_at], pattern[opened_at + 1 : i].split(","), pattern[i + 1 :]
    raise InvalidRequestError(f"the glob {pattern!r} opens a {{...}} group it never closes; close it with '}}'")


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a key glob into the regex ClickHouse's ``s3()`` uses to select listed keys.

    The result has full-match semantics (anchored with ``\\A`` and ``\\Z``), so ``.match``,
    ``.search`` and ``.fullmatch`` agree. Semantics, from ``src/Common/parseGlobs.cpp``:

    * ``*`` is any run of characters but ``/``; ``?`` is one character but ``/``;
    * ``**/`` as a whole path segment is zero or more directories (``a/**/x.csv`` matches
      ``a/x.csv``); any other ``**`` is ``[^/]*[^{}]*``: it crosses ``/`` but not a ``{`` or ``}``
      after the first ``/``. A ``*`` after a ``*`` that only ``?`` separates behaves the same way,
      so ``*?*`` crosses ``/`` too;
    * ``{a,b}`` is an alternation; alternatives may hold ``?`` and ``/`` but not ``*``, ``{`` or
      ``}``; a group of one character (``{a}``) or one starting or ending with ``,`` is literal;
    * ``{N..M}`` is every integer from N to M, in either order; numbers are padded with zeros to
      the wider bound when the first bound (the smaller, for a descending range) starts with ``0``
      and has more than one digit: ``{01..10}`` is ``01``..``10``, ``{0..10}`` is ``0``..``10``;
    * ``$`` and ``^`` are *not* escaped by ClickHouse: they are anchors, and a key glob holding one
      matches nothing (a key without globs is read directly and is unaffected);
    * all else is literal.

    A key with exactly one ``{a,b}`` group and no other glob is read directly by ClickHouse; the
    regex then matches exactly the expanded keys (see :func:`expand_keys`).

    :param pattern: the key part of an S3 URI (without the bucket).
    :raises InvalidRequestError: when the glob is one ClickHouse rejects.
    """
    keys = expand_keys(pattern)
    if keys is not None:
        body = "|".join(re.escape(k) for k in keys)
    else:
        body = _final_pass(_replace_groups(_first_escape(pattern)), python=True)
    return re.compile(rf"\A(?:{body})\Z")


def clickhouse_regex(pattern: str) -> str:
    """The RE2 regex ClickHouse's ``makeRegexpPatternFromGlobs`` builds for the glob, verbatim.

    ClickHouse full-matches listed keys against it. It is what :func:`glob_to_regex` compiles (with
    ``$`` and ``^`` spelled for Python) when ClickHouse lists; useful in logs and to compare with
    ClickHouse's own unit tests.

    :param pattern: the key part of an S3 URI.
    """
    return _final_pass(_replace_groups(_first_escape(pattern)), python=False)


def _first_escape(pattern: str) -> str:
    """ClickHouse escapes these regex characters before it replaces the groups."""
    return "".join("\\" + c if c in _FIRST_ESCAPES else c for c in pattern)


def _replace_groups(text: str) -> str:
    """Replace ``{N..M}`` and ``{a,b}`` groups, leftmost first, by regex alternations."""
    out: list[str] = []
    pos = 0
    while True:
        rng, enum = _RANGE_RE.search(text, pos), _ENUM_RE.search(text, pos)
        match = rng if rng and (not enum or rng.start() <= enum.start()) else enum
        if match is None:
            break
        alternatives = _range_values(match.group(1)) if match is rng else match.group(1).split(",")
        out.append(text[pos : match.start()] + "(" + "|".join(alternatives) + ")")
        pos = match.end()
    return "".join(out) + text[pos:]


def _range_values(body: str) -> list[str]:
    """The values of ``{N..M}`` with ClickHouse's rules for leading zeros and descending ranges."""
    first, last = body.split("..")
    begin, end = int(first), int(last)
    if begin > end:
        first, last = last, first
        begin, end = end, begin
    if end - begin >= MAX_RANGE_VALUES:
        raise InvalidRequestError(
            f"the range glob {{{body}}} covers more than {MAX_RANGE_VALUES} values, which ClickHouse "
            "rejects; split the load or use '*'"
        )
    padded = first.startswith("0")
    width = 1 if padded and len(first) == 1 else max(len(first), len(last))
    return [str(n).zfill(width) if padded else str(n) for n in range(begin, end + 1)]


def _final_pass(text: str, python: bool) -> str:
    """Replace ``*``, ``**`` and ``?`` and escape ``.``, ``{`` and ``}``, character by character."""
    out: list[str] = []
    previous = " "
    i = 0
    while i < len(text):
        if text.startswith("**/", i) and (i == 0 or text[i - 1] == "/"):
            out.append("([^/]*/)*")
            previous = "/"
            i += 3
            continue
        ch = text[i]
        i += 1
        if ch == "?":
            out.append("[^/]")
            continue  # ClickHouse does not update ``previous`` after '?'
        out.append(_translate(ch, previous, python))
        previous = ch
    return "".join(out)


def _translate(ch: str, previous: str, python: bool) -> str:
    """One character of ClickHouse's final pass; in Python's regex syntax when ``python``."""
    if ch == "*":
        return "[^{}]*" if previous == "*" else "[^/]*"
    if ch in ".{}":
        return "\\" + ch
    if python and ch == "$":
        return r"\Z"  # RE2's '$' is the end of the text; Python's would also match before a final newline
    if python and ch == "^":
        return r"\A"
    return ch


# -------------------------------------------------------------------------------- format detection


def _extension(name: str) -> str:
    """The text after the last ``.``, lower-cased, as ClickHouse takes it ("" when there is none)."""
    pos = name.rfind(".")
    return name[pos + 1 :].lower() if pos >= 0 else ""


def detect_compression(key: str) -> str | None:
    """The compression ClickHouse's ``compression='auto'`` picks for the key, or None.

    Only the last extension counts, in any case (``x.CSV.GZ`` is gzip). ``.sz`` is *not*
    recognised: ClickHouse reads Hadoop snappy only and names it ``.snappy``.

    :param key: an object key.
    :return: one of gzip, deflate, br, xz, zstd, lz4, bz2, snappy; or None.
    """
    return COMPRESSION_BY_EXTENSION.get(_extension(key))


def detect_format(key: str) -> str | None:
    """The ClickHouse input format for the key, from the extension under the compression one.

    ``a.csv.gz`` is ``CSVWithNames``; ``X.PARQUET`` is ``Parquet`` (case does not matter, as in
    ClickHouse). See :data:`FORMAT_BY_EXTENSION` for where this provider departs from ClickHouse's
    own choices (headers in CSV/TSV, JSON lines). A format name used as extension
    (``x.jsoncompacteachrow``) is that format.

    :param key: an object key.
    :return: a ClickHouse format name, or None when the extension names none.
    """
    name = key[: key.rfind(".")] if detect_compression(key) else key
    ext = _extension(name)
    return FORMAT_BY_EXTENSION.get(ext) or _FORMAT_BY_NAME.get(ext)


# ---------------------------------------------------------------------------------------- listing


def _list_pages(client: Any, bucket: str, prefix: str) -> Iterator[list[dict[str, Any]]]:
    """Yield each ListObjectsV2 page's ``Contents``, one S3 call per page."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = _call(client.list_objects_v2, bucket, "list", prefix=prefix, **kwargs)
        yield page.get("Contents", [])
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return
        kwargs["ContinuationToken"] = token


def _call(method: Any, bucket: str, action: str, prefix: str = "", **kwargs: Any) -> dict[str, Any]:
    """Run one S3 call, turning a missing bucket or a refusal into :class:`BucketError`."""
    try:
        return method(**kwargs)
    except ClientError as exc:
        raise _bucket_error(exc, bucket, action, prefix) from exc


_DENIED = frozenset({"AccessDenied", "403", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch"})


def _error_code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(err.get("Code") or status or "")


def _bucket_error(exc: ClientError, bucket: str, action: str, prefix: str) -> Exception:
    """The terminal error for a ClientError, or the ClientError itself when it may be transient."""
    code = _error_code(exc)
    if code in ("NoSuchBucket", "404"):
        return BucketError(
            f"bucket {bucket!r} does not exist (or is not on this endpoint); check the bucket name in s3_uri"
        )
    if code in _DENIED:
        where = f"s3://{bucket}/{prefix}" if action == "list" else f"the location of bucket {bucket!r}"
        permission = "s3:ListBucket" if action == "list" else "s3:GetBucketLocation"
        return BucketError(
            f"access denied ({code}) to {action} {where}; give the aws connection {permission} "
            f"on arn:aws:s3:::{bucket} and check its keys"
        )
    return exc


def _is_directory_marker(entry: dict[str, Any]) -> bool:
    return entry["Key"].endswith("/") and int(entry.get("Size", 0)) == 0


def _to_object(entry: dict[str, Any]) -> S3Object:
    key = entry["Key"]
    return S3Object(
        key=key, size=int(entry.get("Size", 0)), format=detect_format(key), compression=detect_compression(key)
    )


def _scan(client: Any, bucket: str, pattern: str) -> tuple[list[S3Object], list[str], int, int]:
    """List the prefix and split it: (matching objects, some non-matching keys, keys seen, calls)."""
    regex = glob_to_regex(pattern)
    matched: list[S3Object] = []
    others: list[str] = []
    seen = calls = 0
    for contents in _list_pages(client, bucket, literal_prefix(pattern)):
        calls += 1
        for entry in contents:
            if _is_directory_marker(entry):
                continue
            seen += 1
            if regex.fullmatch(entry["Key"]):
                matched.append(_to_object(entry))
            elif len(others) < EXAMPLES:
                others.append(entry["Key"])
    matched.sort(key=lambda o: o.key)
    return matched, others, seen, calls


def list_matching(client: Any, bucket: str, pattern: str) -> tuple[list[S3Object], int]:
    """The objects ClickHouse's ``s3()`` reads for the key glob, sorted by key.

    Lists the glob's literal prefix page by page (ListObjectsV2) and keeps the keys that fully
    match :func:`glob_to_regex`. Zero-byte keys ending in ``/`` (folder markers) are skipped. A key
    without globs is listed too (prefix = the key) and kept on an exact match.

    :param client: a boto3 S3 client.
    :param bucket: the bucket name.
    :param pattern: the key part of the S3 URI.
    :return: the matching objects, and how many S3 calls the listing took.
    :raises BucketError: when the bucket does not exist or may not be listed.
    """
    matched, _, _, calls = _scan(client, bucket, pattern)
    return matched, calls


def bucket_region(client: Any, bucket: str) -> str:
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


# --------------------------------------------------------------------------------------- manifest


def build_manifest(client: Any, request: LoadRequest, *, footer_sample: int = FOOTER_SAMPLE) -> Manifest:
    """List the request's objects and settle their format and compression.

    :param client: a boto3 S3 client with the aws connection's credentials.
    :param request: the validated load request.
    :param footer_sample: for Parquet, how many footers to read (the largest files) for the
        data's uncompressed size and its largest row group; 0 reads none.
    :return: the manifest; ``list_calls`` counts every S3 call, the location and footer calls included.
    :raises BucketError: when the bucket is missing or the connection may not list it.
    :raises NoObjectsError: when nothing matches, or a key ClickHouse would read directly is missing.
    :raises FormatError: when the objects' format or compression is unknown or mixed and the
        request does not name it.
    """
    bucket, pattern = request.bucket, request.key_pattern
    region, calls = _region_or_none(client, bucket)
    objects, others, seen, list_calls = _scan(client, bucket, pattern)
    _check_found(bucket, pattern, objects, others, seen, request)
    fmt = request.format or _single_format(objects)
    compression = request.compression or _single_compression(objects)
    footers = FooterStats()
    if footer_sample and fmt.lower() == "parquet" and not _is_compressed(compression):
        footers = parquet_footer_stats(client, bucket, objects, sample=footer_sample)
    return Manifest(
        bucket=bucket,
        pattern=pattern,
        prefix=literal_prefix(pattern),
        objects=objects,
        format=fmt,
        compression=compression,
        region=region,
        list_calls=calls + list_calls + footers.calls,
        uncompressed_bytes=footers.uncompressed_bytes,
        max_row_group_bytes=footers.max_row_group_bytes,
        footer_files=footers.files,
    )


def _is_compressed(compression: str | None) -> bool:
    return (compression or "").strip().lower() not in ("", "none", "auto")


# ------------------------------------------------------------------------------ Parquet footers


class FooterStats(NamedTuple):
    """What a sample of Parquet footers says about the data (all None when nothing was read)."""

    uncompressed_bytes: int | None = None
    max_row_group_bytes: int | None = None
    files: int = 0
    calls: int = 0


def parquet_footer_stats(client: Any, bucket: str, objects: list[S3Object], sample: int = FOOTER_SAMPLE) -> FooterStats:
    """Read the footers of the ``sample`` largest Parquet files: uncompressed sizes, cheaply.

    One ranged GET of the last :data:`FOOTER_PROBE_BYTES` per file (a second one when the
    footer is bigger). The total uncompressed size is extrapolated from the sampled files'
    uncompressed/compressed ratio. Needs ``pyarrow`` to parse the footer; without it, or when a
    read fails, returns empty stats and the planner falls back to its expansion factors.

    :param client: a boto3 S3 client.
    :param bucket: the bucket.
    :param objects: the manifest's objects.
    :param sample: how many files to read.
    """
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return FooterStats()
    chosen = sorted((o for o in objects if o.size > 12), key=lambda o: o.size, reverse=True)[:sample]
    calls = files = 0
    sampled_bytes = sampled_uncompressed = max_group = 0
    for obj in chosen:
        try:
            probe = min(obj.size, FOOTER_PROBE_BYTES)
            tail = client.get_object(Bucket=bucket, Key=obj.key, Range=f"bytes=-{probe}")["Body"].read()
            calls += 1
            if len(tail) < 8 or tail[-4:] != b"PAR1":
                continue
            footer_len = int.from_bytes(tail[-8:-4], "little")
            if footer_len + 8 > len(tail):
                if footer_len + 8 > obj.size:
                    continue
                tail = client.get_object(Bucket=bucket, Key=obj.key, Range=f"bytes=-{footer_len + 8}")["Body"].read()
                calls += 1
            meta = pq.read_metadata(_TailFile(tail, obj.size))
        except Exception:  # noqa: BLE001 - footers are an optimisation: any failure falls back
            continue
        groups = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
        files += 1
        sampled_bytes += obj.size
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


class _TailFile(io.RawIOBase):
    """A read-only file of ``size`` bytes of which only the tail is known (zeros before it)."""

    def __init__(self, tail: bytes, size: int) -> None:
        self._tail, self._size, self._pos = tail, size, 0
        self._start = size - len(tail)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), max(0, self._size - self._pos))
        out = bytearray(n)
        lo, hi = max(self._pos, self._start), self._pos + n
        if hi > lo:
            out[lo - self._pos : hi - self._pos] = self._tail[lo - self._start : hi - self._start]
        buffer[:n] = out
        self._pos += n
        return n


def _region_or_none(client: Any, bucket: str) -> tuple[str | None, int]:
    """The bucket's region and the call count; None when only GetBucketLocation is refused.

    A connection may be allowed to list a bucket and not to read its location; the region check
    is then skipped rather than the load refused. A missing bucket still raises.
    """
    try:
        return bucket_region(client, bucket), 1
    except BucketError as exc:
        cause = exc.__cause__
        if isinstance(cause, ClientError) and _error_code(cause) in _DENIED:
            return None, 1
        raise


def _check_found(
    bucket: str, pattern: str, objects: list[S3Object], others: list[str], seen: int, request: LoadRequest
) -> None:
    """Raise :class:`NoObjectsError` when nothing matched or a directly read key is missing."""
    prefix = literal_prefix(pattern)
    if not objects:
        if seen:
            examples = ", ".join(repr(k) for k in others)
            listed = f"{seen} object{'s' if seen != 1 else ''}, none matching, e.g. {examples}"
        else:
            listed = "no objects"
        raise NoObjectsError(
            f"no object in bucket {bucket!r} matches {pattern!r} (listed prefix {prefix!r}: {listed}); "
            "check the s3_uri and its glob"
        )
    expected = expand_keys(pattern)
    if expected is None or _ignores_missing(request):
        return
    missing = sorted(set(expected) - {o.key for o in objects})
    if missing:
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


def _single_format(objects: list[S3Object]) -> str:
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


def _single_compression(objects: list[S3Object]) -> str | None:
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

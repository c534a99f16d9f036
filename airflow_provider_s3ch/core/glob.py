"""ClickHouse's glob semantics for S3 keys, and the URL ClickHouse reads.

ClickHouse's ``s3()`` table function decides which objects a URL reads in one of two ways
(``StorageObjectStorageSource::createFileIterator`` in ``src/Storages/ObjectStorage``):

* a key with exactly one ``{a,b,c}`` group and no other glob is *expanded*: ClickHouse reads
  ``a``, ``b`` and ``c`` directly, without listing, and fails on one that does not exist;
* any other key with a glob is *listed* from its literal prefix, and each listed key is kept when
  it fully matches the regular expression ``makeRegexpPatternFromGlobs`` builds
  (``src/Common/parseGlobs.cpp``).

:func:`glob_to_regex` reproduces both, quirks included, so the manifest lists exactly the files the
server-side ``INSERT ... SELECT FROM s3()`` will read. Pure: no I/O.
"""

from __future__ import annotations

import re

from airflow_provider_s3ch.core.errors import InvalidRequestError

#: Characters that make a key a glob for ClickHouse (``isPathWithGlobs``).
GLOB_CHARS = "*?{"
#: The most values one ``{N..M}`` range may hold (ClickHouse's ``MAX_RANGE_GLOB_VALUES``).
MAX_RANGE_VALUES = 100_000
#: How many non-matching keys an error message shows.
# ClickHouse's regexps, on the pattern after its first escaping pass (parseGlobs.cpp, ``Regexps``).
_RANGE_RE = re.compile(r"\{([0-9]+\.\.[0-9]+)\}")
_ENUM_RE = re.compile(r"\{([^{}*,]+[^{}*]*[^{}*,])\}")
# Characters ClickHouse escapes before it looks for ``{}`` groups; ``.``, ``{`` and ``}`` are escaped
# later; ``$`` and ``^`` are never escaped and stay anchors (see ``_final_pass``).
_FIRST_ESCAPES = frozenset("[]|+-()\\")


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


def object_url(bucket: str, key_pattern: str, *, endpoint_url: str | None, region: str | None) -> str:
    """The URL ClickHouse's ``s3()`` reads, glob included.

    With an endpoint (MinIO, a local server, a VPC endpoint) the URL is path-style
    ``{endpoint}/{bucket}/{key}``; on AWS it is virtual-hosted
    ``https://{bucket}.s3.{region}.amazonaws.com/{key}``.

    :param bucket: the bucket.
    :param key_pattern: the key or glob.
    :param endpoint_url: the S3 endpoint as ClickHouse reaches it, if not AWS.
    :param region: the bucket's region (AWS only).
    """
    if endpoint_url:
        return f"{endpoint_url.rstrip('/')}/{bucket}/{key_pattern}"
    region = region or "us-east-1"
    return f"https://{bucket}.s3.{region}.amazonaws.com/{key_pattern}"

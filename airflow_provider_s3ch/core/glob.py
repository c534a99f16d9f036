"""ClickHouse's glob semantics for S3 keys, and the URL ClickHouse reads.

ClickHouse's ``s3()`` table function decides which objects a URL reads in one of two ways
(``StorageObjectStorageSource::createFileIterator`` in ``src/Storages/ObjectStorage``):

* a key with exactly one ``{a,b,c}`` group and no other glob is *expanded*: ClickHouse reads
  ``a``, ``b`` and ``c`` directly, without listing, and fails on one that does not exist;
* any other key with a glob is *listed* from its literal prefix, and each listed key is kept when
  it fully matches the RE2 regular expression ``makeRegexpPatternFromGlobs`` builds
  (``src/Common/parseGlobs.cpp``).

:func:`compile_glob` reproduces both, quirks included, and matches with RE2 as ClickHouse does:
in time linear in the key, and refusing exactly the globs whose regex RE2 cannot compile.

The ``s3_uri`` is literal, as in the AWS CLI: ``s3://b/k/100%25.csv`` is the key ``k/100%25.csv``.
ClickHouse percent-decodes the URL's path (``Poco::URI``) before it matches, so :func:`object_url`
percent-encodes the key: the server decodes it back to exactly the literal pattern. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

import re2

from airflow_provider_s3ch.core.errors import InvalidRequestError

#: Characters that make a key a glob for ClickHouse (``isPathWithGlobs``).
GLOB_CHARS = "*?{"
#: Above this many values one ``{N..M}`` range is refused without building its regex: RE2 refuses
#: far smaller ones (``r/{0..2246750}.csv``, 2 246 751 values, is already too large to compile, on
#: the server as here; ``r/{0..2246749}.csv`` compiles). The limit is the compiled regex's size.
MAX_RANGE_VALUES = 10_000_000
#: The archive extensions ClickHouse recognises before ``::`` (``hasSupportedArchiveExtension``,
#: ``src/IO/Archives/ArchiveUtils.cpp``); compared case-sensitively, as there.
ARCHIVE_EXTENSIONS = (
    ".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz", ".tar.bz2", ".tar.lzma", ".zip", ".zipx", ".7z",
)  # fmt: skip
#: Characters of a key left as they are in the URL; every other byte is percent-encoded. ``:`` is
#: encoded so that a ``::`` of a key never reads as the archive separator.
_URL_SAFE = "/*{},="


def _options() -> re2.Options:
    """RE2's defaults, as ClickHouse's ``re2::RE2(pattern)`` uses them (8 MiB ``max_mem``, UTF-8)."""
    options = re2.Options()
    options.log_errors = False
    return options


_OPTIONS = _options()
# ClickHouse's regexps, on the pattern after its first escaping pass (parseGlobs.cpp, ``Regexps``).
_RANGE_RE = re2.compile(r"\{([0-9]+\.\.[0-9]+)\}", _OPTIONS)
_ENUM_RE = re2.compile(r"\{([^{}*,]+[^{}*]*[^{}*,])\}", _OPTIONS)
# The characters the final pass rewrites; runs of other characters are copied as they are.
_FINAL_SPECIAL = re2.compile(r"[*?.{}]", _OPTIONS)
# Characters ClickHouse escapes before it looks for ``{}`` groups; ``.``, ``{`` and ``}`` are escaped
# later; ``$`` and ``^`` are never escaped and stay RE2 anchors.
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


class KeyGlob:
    """A key glob as ClickHouse's ``s3()`` selects keys with it.

    ``keys`` holds the keys ClickHouse reads directly (no glob, or a single ``{a,b}`` group; see
    :func:`expand_keys`), else None, and ``regex`` the RE2 regex ClickHouse full-matches listed
    keys against (None when it reads directly). RE2 matches in time linear in the key, whatever
    the glob (``**a**a**a**aX`` included), as on the server.

    :param pattern: the key part of an S3 URI (without the bucket).
    :raises InvalidRequestError: when ClickHouse rejects the glob: a misplaced ``{``, ``,`` or
        ``}``, or a regex RE2 cannot compile (``r/{0..2246750}.csv`` is too large:
        ``CANNOT_COMPILE_REGEXP`` on the server).
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.keys = expand_keys(pattern)
        self._direct = frozenset(self.keys or ())
        self.regex: str | None = None
        self._compiled: re2._Regexp | None = None
        if self.keys is None:
            self.regex = clickhouse_regex(pattern)
            try:
                self._compiled = re2.compile(self.regex, _OPTIONS)
            except re2.error as exc:
                reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
                raise InvalidRequestError(
                    f"ClickHouse cannot compile the glob {pattern!r} into its regex (RE2: {reason}) and refuses "
                    "it with CANNOT_COMPILE_REGEXP; use fewer or smaller {N..M} ranges or {a,b} groups, '*', "
                    "or split the load"
                ) from None

    def fullmatch(self, key: str) -> bool:
        """Whether ClickHouse reads the key for this glob."""
        if self._compiled is None:
            return key in self._direct
        return self._compiled.fullmatch(key) is not None

    def __repr__(self) -> str:
        return f"KeyGlob({self.pattern!r})"


def compile_glob(pattern: str) -> KeyGlob:
    """The glob as ClickHouse's ``s3()`` applies it (see :class:`KeyGlob`).

    Semantics, from ``src/Common/parseGlobs.cpp``:

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
    * ``$`` and ``^`` are *not* escaped by ClickHouse: they are RE2 anchors, and a key glob holding
      one matches nothing (a key without globs is read directly and is unaffected);
    * all else is literal: a glob has no escape, so a key holding ``*``, ``?`` or ``{`` is matched
      by the glob those characters spell.

    :param pattern: the key part of an S3 URI (without the bucket).
    :raises InvalidRequestError: when the glob is one ClickHouse rejects.
    """
    return KeyGlob(pattern)


def clickhouse_regex(pattern: str) -> str:
    """The RE2 regex ClickHouse's ``makeRegexpPatternFromGlobs`` builds for the glob, verbatim.

    ClickHouse full-matches listed keys against it; :class:`KeyGlob` compiles it with RE2.

    :param pattern: the key part of an S3 URI.
    :raises InvalidRequestError: for a ``{N..M}`` range of more than :data:`MAX_RANGE_VALUES` values.
    """
    return _final_pass(_replace_groups(_first_escape(pattern)))


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
            f"the range glob {{{body}}} holds {end - begin + 1} values: ClickHouse cannot compile a glob regex "
            "that large (RE2: pattern too large) and refuses it with CANNOT_COMPILE_REGEXP; split the load or "
            "use '*'"
        )
    padded = first.startswith("0")
    width = 1 if padded and len(first) == 1 else max(len(first), len(last))
    if padded:
        return [str(n).zfill(width) for n in range(begin, end + 1)]
    return [str(n) for n in range(begin, end + 1)]


def _final_pass(text: str) -> str:
    """Replace ``*``, ``**`` and ``?`` and escape ``.``, ``{`` and ``}``, as ClickHouse's last loop does.

    Runs of other characters pass unchanged, so a large ``{N..M}`` alternation costs one copy.
    """
    out: list[str] = []
    previous = " "
    i, n = 0, len(text)
    while i < n:
        special = _FINAL_SPECIAL.search(text, i)
        j = special.start() if special else n
        if j > i:
            out.append(text[i:j])
            previous = text[j - 1]
            i = j
            if i == n:
                break
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
        if ch == "*":
            out.append("[^{}]*" if previous == "*" else "[^/]*")
        else:  # '.', '{' or '}'
            out.append("\\" + ch)
        previous = ch
    return "".join(out)


# ------------------------------------------------------------------------------------------ archives


def archive_path_syntax(settings: Mapping[str, object] | None) -> bool:
    """Whether ``archive :: member`` is read as an archive member (``allow_archive_path_syntax``, on by default).

    :param settings: the load's ClickHouse settings.
    """
    value = (settings or {}).get("allow_archive_path_syntax", 1)
    return str(value).strip().lower() not in ("0", "false")


def split_archive(pattern: str, enabled: bool = True) -> tuple[str, str | None]:
    """Split ``archive :: member`` as ClickHouse does (``S3::URI::getURIAndArchivePattern``).

    The text is cut at its first ``::``; it names an archive member when both sides are non-empty
    and the ``::`` has a space around it, or the text before it ends with an archive extension
    (``.tar``, ``.tar.gz``, ``.zip``, ... case-sensitive), or holds a glob character. Spaces around
    the ``::`` are dropped. Otherwise the whole text is one key (``a/x::y.csv``).

    :param pattern: the key part of an S3 URI.
    :param enabled: ``allow_archive_path_syntax`` (see :func:`archive_path_syntax`).
    :return: the archive key (or glob) and the member pattern; the pattern itself and None when it
        names no archive member.
    """
    pos = pattern.find("::")
    if not enabled or pos < 0:
        return pattern, None
    archive, member = pattern[:pos].rstrip(" "), pattern[pos + 2 :].lstrip(" ")
    spaced = len(archive) < pos or len(member) < len(pattern) - pos - 2
    if not archive or not member:
        return pattern, None
    if not (spaced or archive.endswith(ARCHIVE_EXTENSIONS) or any(c in archive for c in GLOB_CHARS)):
        return pattern, None
    return archive, member


# ---------------------------------------------------------------------------------- what S3 reads


def check_key_pattern(pattern: str, member: str | None = None) -> None:
    """Refuse a key or glob ClickHouse cannot read as written.

    :param pattern: the key or glob (the archive's, for an archive member).
    :param member: the archive member pattern, if any.
    :raises InvalidRequestError: when the key starts with ``/`` or holds ``//`` (ClickHouse refuses
        ``//`` as an "Invalid S3 key", and its S3 client reads ``k/x//y`` as ``k/x/y`` and ``/k`` as
        ``k``: another object), or when the member pattern holds ``?`` (a raw ``?`` makes ClickHouse
        re-parse the whole URL, ``::`` included, as the key: it reads nothing).
    """
    if pattern.startswith("/") or "//" in pattern:
        raise InvalidRequestError(f"the key {pattern!r} {unreadable_key(pattern)}; no s3_uri can load it as named")
    if member is not None and "?" in member:
        raise InvalidRequestError(
            f"the archive member pattern {member!r} holds '?', which ClickHouse cannot read in an archive "
            "path (the server then takes the whole text as one key and reads nothing); use '*' instead"
        )


def unreadable_key(key: str) -> str | None:
    """Why ClickHouse cannot read this key as named, or None when it can.

    Its S3 client collapses ``//`` and drops a leading ``/`` (``k/x//y.csv`` reads ``k/x/y.csv``'s
    bytes), and its ListObjectsV2 parser turns a carriage return into a line feed (a listed key
    holding one is read under another name; read directly, it is read as named).

    :param key: an object key a glob matched.
    """
    if key.startswith("/"):
        return "starts with '/', which ClickHouse's S3 client drops (it reads the key without it)"
    if "//" in key:
        return "holds '//', which ClickHouse refuses as an invalid S3 key and its S3 client reads as '/'"
    if "\r" in key:
        return "holds a carriage return, which ClickHouse's listing reads as a line feed"
    return None


def url_key(pattern: str, archive_syntax: bool = True) -> str:
    """The key part of the URL ClickHouse reads: percent-encoded, so that the server decodes it back
    to exactly ``pattern``; an archive member pattern follows `` :: `` as it is (ClickHouse does not
    decode it).

    ``%`` becomes ``%25``, ``#`` ``%23`` (a raw one would end the URL), ``?`` ``%3F`` (decoded, it
    is the glob ``?`` again), spaces, quotes, non-ASCII characters and ``:`` are encoded too; ``/``
    and the glob characters ``*{},`` stay as they are.

    :param pattern: the key part of the ``s3_uri``, literal.
    :param archive_syntax: ``allow_archive_path_syntax``.
    """
    archive, member = split_archive(pattern, archive_syntax)
    encoded = quote(archive, safe=_URL_SAFE)
    return encoded if member is None else f"{encoded} :: {member}"


def object_url(
    bucket: str, key_pattern: str, *, endpoint_url: str | None, region: str | None, archive_syntax: bool = True
) -> str:
    """The URL ClickHouse's ``s3()`` reads, glob included (see :func:`url_key` for the encoding).

    With an endpoint (MinIO, a local server, a VPC endpoint) the URL is path-style
    ``{endpoint}/{bucket}/{key}``; on AWS it is virtual-hosted
    ``https://{bucket}.s3.{region}.amazonaws.com/{key}``.

    :param bucket: the bucket.
    :param key_pattern: the key or glob, literal.
    :param endpoint_url: the S3 endpoint as ClickHouse reaches it, if not AWS.
    :param region: the bucket's region (AWS only).
    :param archive_syntax: ``allow_archive_path_syntax`` (see :func:`archive_path_syntax`).
    :raises InvalidRequestError: for a key with a line break on a path-style endpoint: ClickHouse
        takes the key of a path-style URL up to its first line break.
    """
    key = url_key(key_pattern, archive_syntax)
    if endpoint_url:
        if "\n" in split_archive(key_pattern, archive_syntax)[0]:
            raise InvalidRequestError(
                f"the key {key_pattern!r} holds a line break: ClickHouse cuts the key of a path-style URL "
                f"({endpoint_url}) at it and would read another object"
            )
        return f"{endpoint_url.rstrip('/')}/{bucket}/{key}"
    region = region or "us-east-1"
    return f"https://{bucket}.s3.{region}.amazonaws.com/{key}"


def key_url(url: str, pattern: str, key: str) -> str:
    """The URL of one object of a load: ``url`` (the load's :func:`object_url`) with ``key`` in place
    of ``pattern``; for an archive glob, the archive ``key`` with the same member pattern.

    :param url: the URL of the whole load.
    :param pattern: the key pattern ``url`` was made from.
    :param key: a key the pattern matched (an archive's, for an archive member pattern).
    """
    for archive_syntax in (True, False):
        suffix = url_key(pattern, archive_syntax)
        if url.endswith(suffix):
            member = split_archive(pattern, archive_syntax)[1]
            name = key if member is None else f"{key} :: {member}"
            return url[: len(url) - len(suffix)] + url_key(name, archive_syntax)
    raise ValueError(f"{url!r} is not the URL of {pattern!r}")

"""Format and compression from a key's extensions, as ClickHouse tells them. Pure: no I/O."""

from __future__ import annotations

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

#: Formats whose rows carry no column names: without ``structure`` the columns are named
#: ``c1, c2, ...`` and matched to the table by position.
NAMELESS_FORMATS = frozenset(
    name.lower()
    for name in (
        "CSV",
        "TSV",
        "TabSeparated",
        "TSVRaw",
        "TabSeparatedRaw",
        "JSONCompactEachRow",
        "JSONCompactStringsEachRow",
        "CustomSeparated",
        "Values",
        "RowBinary",
        "Template",
        "Regexp",
        "LineAsString",
        "RawBLOB",
        "JSONAsString",
        "JSONAsObject",
    )
)

#: Formats whose files declare each column's type. Schema inference on text formats (CSV, JSON, ...)
#: guesses types from the first rows (a quoted ``"123"`` is a String), and the server parses text into
#: the table's types anyway, so only these formats' types say something about the table's.
TYPED_FORMATS = frozenset(
    name.lower()
    for name in (
        "Parquet",
        "ORC",
        "Arrow",
        "ArrowStream",
        "Avro",
        "Native",
        "RowBinaryWithNamesAndTypes",
        "CSVWithNamesAndTypes",
        "TSVWithNamesAndTypes",
        "TabSeparatedWithNamesAndTypes",
        "JSONCompactEachRowWithNamesAndTypes",
    )
)

_NO_COMPRESSION = frozenset({"", "none", "auto"})

#: Every ``compression`` ClickHouse reads (``chooseCompressionMethod``, src/IO/CompressionMethod.cpp): the same
#: names as the extensions above, in any case, and ``auto``/``none``. Any other value stops the query (error 48).
COMPRESSION_METHODS = frozenset(COMPRESSION_BY_EXTENSION)


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


def is_compressed(compression: str | None) -> bool:
    """Whether ``compression`` names an actual compression method.

    :param compression: a compression name, ``"none"``, ``"auto"`` or None.
    """
    return (compression or "").strip().lower() not in _NO_COMPRESSION


def compression_method(value: str) -> str | None:
    """``value`` as the ``compression`` ClickHouse reads, lower-cased and stripped, or None when ClickHouse
    knows no such method (it would stop the query: error 48)."""
    name = value.strip().lower()
    return name if name in COMPRESSION_METHODS or name in _NO_COMPRESSION else None

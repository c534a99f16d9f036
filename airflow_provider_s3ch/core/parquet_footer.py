"""The row groups' sizes (and integer columns' ranges) from a Parquet footer, read without a Parquet library.

A Parquet file ends with its ``FileMetaData`` (Thrift's compact protocol), the metadata's
length (4 bytes, little-endian) and ``PAR1``. The planner needs one figure of it: each row
group's ``total_byte_size`` (``RowGroup`` field 2, in ``FileMetaData`` field 4), the
uncompressed size ClickHouse's reader holds in memory. ``pyarrow.parquet.read_metadata``
reads the same figure, but importing pyarrow (and the numpy it brings) took 0.22-0.25 s of
every task's time here, a third of what the operator spends around its insert; this reader
walks the Thrift fields it needs and skips the others by their wire types.

:func:`column_ranges` reads one more thing from the same footer: each top-level INT32/INT64 column's smallest and
largest value over the file (the column chunks' statistics), which tells the planner whether the files are
clustered by the partition key's column (docs/tuning.md).

The footer is untrusted input: every read is bounds-checked, collections may not claim more
elements than bytes are left, nesting is limited, and anything malformed raises
:class:`FooterError` (the caller then plans without footers). ``tests/unit/test_parquet_footer.py``
checks it against pyarrow's own reading of generated files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

MAGIC = b"PAR1"

# Thrift compact protocol wire types.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_UUID = 13  # Thrift 0.19+: 16 bytes; not in parquet.thrift, skipped if met

#: Deeper nesting than any Parquet footer has (schema elements are a flat list).
_MAX_DEPTH = 32


class FooterError(ValueError):
    """The bytes are not a Parquet footer this reader understands."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def left(self) -> int:
        return len(self.data) - self.pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise FooterError("the footer ends in the middle of a value")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def skip(self, n: int) -> None:
        if n < 0 or n > self.left():
            raise FooterError(f"a value claims {n} bytes, {self.left()} are left")
        self.pos += n

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise FooterError("a varint runs past 64 bits")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Iterator[tuple[int, int]]:
        """(field id, wire type) of each field of a struct, up to its STOP."""
        last = 0
        while True:
            header = self.byte()
            kind, delta = header & 0x0F, header >> 4
            if kind == _STOP:
                return
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def collection(self) -> tuple[int, int]:
        header = self.byte()
        size, kind = header >> 4, header & 0x0F
        if size == 15:
            size = self.varint()
        if size > self.left():  # every element takes at least one byte
            raise FooterError(f"a list claims {size} elements, {self.left()} bytes are left")
        return size, kind

    def skip_value(self, kind: int, *, in_field: bool, depth: int = 0) -> None:
        """Skip one value of wire type ``kind`` (``in_field``: a struct's field, whose bool is in its header)."""
        if depth > _MAX_DEPTH:
            raise FooterError("the footer nests deeper than Parquet does")
        size = _FIXED_SIZES.get(kind)
        if size is not None:
            self.skip(size)
            return
        skip = _SKIP_BY_KIND.get(kind)
        if skip is None:
            raise FooterError(f"unknown Thrift wire type {kind}")
        skip(self, in_field, depth + 1)

    def _skip_bool(self, in_field: bool, depth: int) -> None:
        if not in_field:  # a field's bool is its type; a list's bools are a byte each
            self.skip(1)

    def _skip_varint(self, in_field: bool, depth: int) -> None:
        self.varint()

    def _skip_binary(self, in_field: bool, depth: int) -> None:
        self.skip(self.varint())

    def _skip_list(self, in_field: bool, depth: int) -> None:
        size, element = self.collection()
        for _ in range(size):
            self.skip_value(element, in_field=False, depth=depth)

    def _skip_map(self, in_field: bool, depth: int) -> None:
        size = self.varint()
        if not size:
            return
        if 2 * size > self.left():
            raise FooterError(f"a map claims {size} entries, {self.left()} bytes are left")
        types = self.byte()
        for _ in range(size):
            self.skip_value(types >> 4, in_field=False, depth=depth)
            self.skip_value(types & 0x0F, in_field=False, depth=depth)

    def _skip_struct(self, in_field: bool, depth: int) -> None:
        for _, field_kind in self.fields():
            self.skip_value(field_kind, in_field=True, depth=depth)


#: The wire types of a fixed size: their bytes.
_FIXED_SIZES = {_BYTE: 1, _DOUBLE: 8, _UUID: 16}

#: How the other wire types are skipped (with the value's place and its elements' depth).
_SKIP_BY_KIND: dict[int, Callable[[_Reader, bool, int], None]] = {
    _TRUE: _Reader._skip_bool,
    _FALSE: _Reader._skip_bool,
    _I16: _Reader._skip_varint,
    _I32: _Reader._skip_varint,
    _I64: _Reader._skip_varint,
    _BINARY: _Reader._skip_binary,
    _LIST: _Reader._skip_list,
    _SET: _Reader._skip_list,
    _MAP: _Reader._skip_map,
    _STRUCT: _Reader._skip_struct,
}


def metadata_length(tail: bytes) -> int:
    """The ``FileMetaData``'s length from a file's last bytes (at least 8).

    :raises FooterError: the bytes do not end with ``PAR1`` (an encrypted footer ends with ``PARE``).
    """
    if len(tail) < 8 or tail[-4:] != MAGIC:
        raise FooterError("the file does not end with PAR1")
    return int.from_bytes(tail[-8:-4], "little")


def row_group_sizes(tail: bytes) -> list[int]:
    """Each row group's ``total_byte_size`` (uncompressed bytes), in the file's order.

    :param tail: the file's last bytes: at least the metadata, its length and ``PAR1``.
    :raises FooterError: when the tail is too short for the metadata it names, or the metadata
        is malformed or has no row groups' sizes.
    """
    length = metadata_length(tail)
    if length + 8 > len(tail):
        raise FooterError(f"the footer is {length} bytes, the tail holds {len(tail) - 8}")
    reader = _Reader(tail[len(tail) - 8 - length : len(tail) - 8])
    sizes: list[int] | None = None
    for field, kind in reader.fields():
        if field == 4 and kind == _LIST and sizes is None:
            count, element = reader.collection()
            if element != _STRUCT:
                raise FooterError("row_groups is not a list of structs")
            sizes = []
            for _ in range(count):
                total = None
                for group_field, group_kind in reader.fields():
                    if group_field == 2 and group_kind == _I64:
                        total = reader.zigzag()
                    else:
                        reader.skip_value(group_kind, in_field=True, depth=1)
                if total is None or total < 0:
                    raise FooterError("a row group has no total_byte_size")
                sizes.append(total)
        else:
            reader.skip_value(kind, in_field=True)
    if sizes is None:
        raise FooterError("the footer has no row groups")
    return sizes


def schema_file(tail: bytes) -> bytes:
    """A Parquet file of the footer's schema alone: ``PAR1``, the ``FileMetaData`` with no row groups (their
    column chunks, statistics and offsets gone), its length and ``PAR1``. ClickHouse infers a Parquet file's
    columns from its metadata alone, so ``DESCRIBE TABLE format(Parquet, <this>)`` answers what the file's
    own ``DESCRIBE`` does, without reading the file again or sending its values (the statistics) to the server.

    :param tail: the file's last bytes: at least the metadata, its length and ``PAR1``.
    :raises FooterError: when the tail is too short for the metadata it names, or the metadata is malformed.
    """
    length = metadata_length(tail)
    if length + 8 > len(tail):
        raise FooterError(f"the footer is {length} bytes, the tail holds {len(tail) - 8}")
    metadata = tail[len(tail) - 8 - length : len(tail) - 8]
    reader, span = _Reader(metadata), None
    for field, kind in reader.fields():
        start = reader.pos
        reader.skip_value(kind, in_field=True)
        if field == 4 and kind == _LIST:
            span = (start, reader.pos)
    if span is None:
        raise FooterError("the footer has no row groups")
    stripped = metadata[: span[0]] + bytes([_STRUCT]) + metadata[span[1] : reader.pos]  # an empty list of structs
    return MAGIC + stripped + len(stripped).to_bytes(4, "little") + MAGIC


#: Parquet physical types whose statistics :func:`column_ranges` decodes (``Type`` enum), with their byte widths.
_INT_WIDTHS = {1: 4, 2: 8}  # INT32, INT64


def column_ranges(tail: bytes) -> dict[str, tuple[int, int]]:
    """Each top-level INT32/INT64 column's smallest and largest value in the file, from the column chunks'
    statistics (dates, timestamps and integers as stored: days, ms/us/ns, the integer itself).

    A column is left out when any of its chunks has no statistics (a file written without them), when it is
    nested, or when its statistics do not decode to its width; a chunk of nulls only adds nothing. Unsigned
    columns are read as signed: a range that then runs backwards leaves the column out.

    :param tail: the file's last bytes: at least the metadata, its length and ``PAR1``.
    :raises FooterError: when the tail is too short for the metadata it names, or the metadata is malformed.
    """
    length = metadata_length(tail)
    if length + 8 > len(tail):
        raise FooterError(f"the footer is {length} bytes, the tail holds {len(tail) - 8}")
    reader = _Reader(tail[len(tail) - 8 - length : len(tail) - 8])
    ranges: dict[str, tuple[int, int]] = {}
    without: set[str] = set()
    for field, kind in reader.fields():
        if field == 4 and kind == _LIST:
            count, element = reader.collection()
            if element != _STRUCT:
                raise FooterError("row_groups is not a list of structs")
            for _ in range(count):
                for group_field, group_kind in reader.fields():
                    if group_field == 1 and group_kind == _LIST:
                        _widen(ranges, without, _chunk_ranges(reader))
                    else:
                        reader.skip_value(group_kind, in_field=True, depth=1)
        else:
            reader.skip_value(kind, in_field=True)
    return {name: span for name, span in ranges.items() if name not in without}


def _widen(ranges: dict[str, tuple[int, int]], without: set[str],
           chunks: Iterator[tuple[str, tuple[int, int] | None]]) -> None:
    """Widen ``ranges`` by one row group's chunks; a chunk without statistics puts its column in ``without``."""
    for name, found in chunks:
        if found is None:
            without.add(name)
        elif name in ranges:
            low, high = ranges[name]
            ranges[name] = (min(low, found[0]), max(high, found[1]))
        else:
            ranges[name] = found


def _chunk_ranges(reader: _Reader) -> Iterator[tuple[str, tuple[int, int] | None]]:
    """(column, (min, max) or None) of each INT32/INT64 top-level column chunk of one row group."""
    size, element = reader.collection()
    if element != _STRUCT:
        raise FooterError("a row group's columns are not a list of structs")
    for _ in range(size):
        found: tuple[str, tuple[int, int] | None] | None = None
        for chunk_field, chunk_kind in reader.fields():
            if chunk_field == 3 and chunk_kind == _STRUCT:
                found = _column_meta(reader)
            else:
                reader.skip_value(chunk_kind, in_field=True, depth=2)
        if found is not None:
            yield found


def _column_meta(reader: _Reader) -> tuple[str, tuple[int, int] | None] | None:
    """A ``ColumnMetaData``'s (column, (min, max) or None); None for a column this reader does not decode."""
    physical, path, stats = None, None, None
    for field, kind in reader.fields():
        if field == 1 and kind == _I32:
            physical = reader.zigzag()
        elif field == 3 and kind == _LIST:
            count, element = reader.collection()
            if element != _BINARY:
                raise FooterError("path_in_schema is not a list of strings")
            path = []
            for _ in range(count):
                n = reader.varint()
                start = reader.pos
                reader.skip(n)
                path.append(reader.data[start : start + n])
        elif field == 12 and kind == _STRUCT:
            stats = _statistics(reader)
        else:
            reader.skip_value(kind, in_field=True, depth=3)
    width = _INT_WIDTHS.get(physical) if physical is not None else None
    if width is None or not path or len(path) != 1:
        return None
    try:
        name = path[0].decode()
    except UnicodeDecodeError:
        return None
    if stats is None:  # written without statistics: the column's range is unknown
        return name, None
    low, high = stats.get("min"), stats.get("max")
    if low is None and high is None:  # a chunk of nulls only: nothing to add to the range
        return None
    if low is None or high is None or len(low) != width or len(high) != width:
        return name, None
    low_value, high_value = int.from_bytes(low, "little", signed=True), int.from_bytes(high, "little", signed=True)
    return name, (low_value, high_value) if low_value <= high_value else None


def _statistics(reader: _Reader) -> dict[str, bytes]:
    """A ``Statistics`` struct's min and max: ``min_value``/``max_value`` (fields 6, 5), else the deprecated
    ``min``/``max`` (2, 1), which writers fill with the same signed order for integers."""
    values: dict[int, bytes] = {}
    for field, kind in reader.fields():
        if field in (1, 2, 5, 6) and kind == _BINARY:
            n = reader.varint()
            start = reader.pos
            reader.skip(n)
            values[field] = reader.data[start : start + n]
        else:
            reader.skip_value(kind, in_field=True, depth=4)
    out = {}
    for key, new, old in (("min", 6, 2), ("max", 5, 1)):
        if new in values or old in values:
            out[key] = values.get(new, values.get(old, b""))
    return out

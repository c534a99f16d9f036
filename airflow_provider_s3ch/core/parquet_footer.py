"""The row groups' sizes from a Parquet footer, read without a Parquet library.

A Parquet file ends with its ``FileMetaData`` (Thrift's compact protocol), the metadata's
length (4 bytes, little-endian) and ``PAR1``. The planner needs one figure of it: each row
group's ``total_byte_size`` (``RowGroup`` field 2, in ``FileMetaData`` field 4), the
uncompressed size ClickHouse's reader holds in memory. ``pyarrow.parquet.read_metadata``
reads the same figure, but importing pyarrow (and the numpy it brings) took 0.22-0.25 s of
every task's time here, a third of what the operator spends around its insert; this reader
walks the Thrift fields it needs and skips the others by their wire types.

:mod:`airflow_provider_s3ch.core.parquet_stats` reads a little more of the same footer with this reader: each row
group's integer columns' ranges, for the planner's block rule.

The footer is untrusted input: every read is bounds-checked, collections may not claim more
elements than bytes are left, nesting is limited, and anything malformed raises
:class:`FooterError` (the caller then plans without footers). ``tests/unit/test_parquet_footer.py``
checks it against pyarrow's own reading of generated files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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


def _metadata(tail: bytes) -> _Reader:
    """A reader of the ``FileMetaData`` the tail ends with."""
    length = metadata_length(tail)
    if length + 8 > len(tail):
        raise FooterError(f"the footer is {length} bytes, the tail holds {len(tail) - 8}")
    return _Reader(tail[len(tail) - 8 - length : len(tail) - 8])


def _row_groups(reader: _Reader, chunks: Callable[[_Reader], list[Any]] | None) -> list[tuple[int, list[Any]]]:
    """``FileMetaData.row_groups`` (the reader at the list): each row group's ``total_byte_size`` and, given
    ``chunks`` (``core.parquet_stats``), what it reads of the row group's columns (an empty list otherwise)."""
    count, element = reader.collection()
    if element != _STRUCT:
        raise FooterError("row_groups is not a list of structs")
    groups = []
    for _ in range(count):
        total, found = None, []
        for group_field, group_kind in reader.fields():
            if group_field == 2 and group_kind == _I64:
                total = reader.zigzag()
            elif chunks is not None and group_field == 1 and group_kind == _LIST:
                found = chunks(reader)
            else:
                reader.skip_value(group_kind, in_field=True, depth=1)
        if total is None or total < 0:
            raise FooterError("a row group has no total_byte_size")
        groups.append((total, found))
    return groups


def row_group_sizes(tail: bytes) -> list[int]:
    """Each row group's ``total_byte_size`` (uncompressed bytes), in the file's order.

    :param tail: the file's last bytes: at least the metadata, its length and ``PAR1``.
    :raises FooterError: when the tail is too short for the metadata it names, or the metadata
        is malformed or has no row groups' sizes.
    """
    reader = _metadata(tail)
    sizes: list[int] | None = None
    for field, kind in reader.fields():
        if field == 4 and kind == _LIST and sizes is None:
            sizes = [total for total, _ in _row_groups(reader, chunks=None)]
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
    reader, span = _metadata(tail), None
    metadata = reader.data
    for field, kind in reader.fields():
        start = reader.pos
        reader.skip_value(kind, in_field=True)
        if field == 4 and kind == _LIST:
            span = (start, reader.pos)
    if span is None:
        raise FooterError("the footer has no row groups")
    stripped = metadata[: span[0]] + bytes([_STRUCT]) + metadata[span[1] : reader.pos]  # an empty list of structs
    return MAGIC + stripped + len(stripped).to_bytes(4, "little") + MAGIC

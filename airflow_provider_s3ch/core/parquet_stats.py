"""Each row group's integer columns' ranges and the columns' units, from a Parquet footer, with
:mod:`airflow_provider_s3ch.core.parquet_footer`'s reader.

:func:`row_group_stats` reads, with each row group's size, its top-level INT32/INT64 columns' smallest and largest
values (the column chunks' statistics), and each such column's unit from the schema (days, ms/us/ns, a plain
integer). The planner's block rule reckons from the partition key column's per-row-group ranges how many
partitions an insert block of those row groups spans (``core/plan/partition_spans.py``). Untrusted input like the
rest of the footer: anything malformed raises :class:`~airflow_provider_s3ch.core.parquet_footer.FooterError`.
"""

from __future__ import annotations

from typing import NamedTuple

from airflow_provider_s3ch.core.parquet_footer import (
    _BINARY,
    _FALSE,
    _I32,
    _LIST,
    _STRUCT,
    _TRUE,
    FooterError,
    _metadata,
    _Reader,
    _row_groups,
)


class RowGroupStats(NamedTuple):
    """One row group's figures from the footer."""

    #: The row group's ``total_byte_size`` (uncompressed), as ``parquet_footer.row_group_sizes`` gives it.
    bytes: int
    #: Each top-level INT32/INT64 column's (min, max) in this row group, from its chunk's statistics.
    ranges: dict[str, tuple[int, int]]


#: Parquet physical types whose statistics :func:`row_group_stats` decodes (``Type`` enum), with their byte widths.
_INT_WIDTHS = {1: 4, 2: 8}  # INT32, INT64

#: ``ConvertedType``: the units of DATE, TIMESTAMP_MILLIS and TIMESTAMP_MICROS; the unsigned (UINT_8..UINT_64) and
#: signed (INT_8..INT_64) integers.
_CONVERTED_UNITS = {6: "day", 9: "ms", 10: "us"}
_UNSIGNED, _SIGNED = range(11, 15), range(15, 19)

#: ``TimeUnit`` (a union in ``TimestampType`` field 2): MILLIS, MICROS, NANOS.
_TIME_UNITS = {1: "ms", 2: "us", 3: "ns"}

#: ``LogicalType``'s union members read here: DATE, TIMESTAMP, INTEGER.
_DATE, _TIMESTAMP, _INTEGER = 6, 8, 10


class _Column(NamedTuple):
    """A top-level INT32/INT64 leaf of the schema."""

    physical: int
    unit: str | None  # None: not a date, a timestamp or a plain integer (a decimal, a time, ...)
    signed: bool


class _Chunk(NamedTuple):
    """A top-level column chunk's name, physical type and statistics (field id: bytes of min/max fields)."""

    name: bytes
    physical: int
    stats: dict[int, bytes] | None


class _Element(NamedTuple):
    """The fields of a ``SchemaElement`` read here."""

    physical: int | None
    name: bytes | None
    children: int | None
    converted: int | None
    logical: tuple[int, int | bool | None] | None  # (union member, its unit or signedness)


def row_group_stats(tail: bytes) -> tuple[list[RowGroupStats], dict[str, str]]:
    """Each row group's uncompressed bytes and its integer columns' ranges, in file order, and each top-level
    INT32/INT64 column's unit from the schema: "day" (DATE), "ms"/"us"/"ns" (TIMESTAMP millis/micros/nanos,
    from ConvertedType TIMESTAMP_MILLIS=9 / TIMESTAMP_MICROS=10 or LogicalType TIMESTAMP's unit, incl. NANOS),
    "int" (a plain integer: no converted/logical type, or an INT logical/converted type). Other columns are absent.

    A range is a chunk's statistics as stored (days, ms/us/ns, the integer itself): ``min_value``/``max_value``,
    else the deprecated ``min``/``max`` (for unsigned integers only the former, read as unsigned; the latter
    sort them as signed). A chunk without statistics, of nulls only, with statistics that do not decode to its
    width, or whose min is above its max leaves its column out of that row group's ranges; nested columns, and
    names the schema's top level holds twice, are always left out.

    :param tail: the file's last bytes: at least the metadata, its length and ``PAR1``.
    :raises FooterError: when the tail is too short for the metadata it names, or the metadata is malformed or
        has no row groups or no schema.
    """
    reader = _metadata(tail)
    columns: dict[bytes, _Column] | None = None
    groups: list[tuple[int, list[_Chunk]]] | None = None
    for field, kind in reader.fields():
        if field == 2 and kind == _LIST and columns is None:
            columns = _top_level_columns(_schema_elements(reader))
        elif field == 4 and kind == _LIST and groups is None:
            groups = _row_groups(reader, chunks=_chunks)
        else:
            reader.skip_value(kind, in_field=True)
    if groups is None:
        raise FooterError("the footer has no row groups")
    if columns is None:
        raise FooterError("the footer has no schema")
    names = {name: _decode(name) for name in columns}
    units = {names[name]: column.unit for name, column in columns.items() if names[name] and column.unit}
    stats = []
    for total, chunks in groups:
        ranges: dict[str, tuple[int, int]] = {}
        for chunk in chunks:
            column, name = columns.get(chunk.name), names.get(chunk.name)
            found = _range(chunk, column) if column is not None and name else None
            if found is not None and name:
                ranges[name] = found
        stats.append(RowGroupStats(total, ranges))
    return stats, units


def _decode(name: bytes) -> str | None:
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None


def _range(chunk: _Chunk, column: _Column) -> tuple[int, int] | None:
    """A chunk's (min, max), or None where its statistics give none."""
    if chunk.stats is None or chunk.physical != column.physical:
        return None
    width = _INT_WIDTHS[column.physical]
    if column.signed:
        low, high = chunk.stats.get(6, chunk.stats.get(2)), chunk.stats.get(5, chunk.stats.get(1))
    else:
        low, high = chunk.stats.get(6), chunk.stats.get(5)
    if low is None or high is None or len(low) != width or len(high) != width:
        return None
    low_value = int.from_bytes(low, "little", signed=column.signed)
    high_value = int.from_bytes(high, "little", signed=column.signed)
    return (low_value, high_value) if low_value <= high_value else None


def _schema_elements(reader: _Reader) -> list[_Element]:
    """``FileMetaData.schema`` (the reader at the list): its elements, depth-first as stored."""
    count, element = reader.collection()
    if element != _STRUCT:
        raise FooterError("the schema is not a list of structs")
    elements = []
    for _ in range(count):
        physical = name = children = converted = logical = None
        for field, kind in reader.fields():
            if field in (1, 5, 6) and kind == _I32:
                value = reader.zigzag()
                if field == 1:
                    physical = value
                elif field == 5:
                    children = value
                else:
                    converted = value
            elif field == 4 and kind == _BINARY:
                name = _binary(reader)
            elif field == 10 and kind == _STRUCT:
                logical = _logical_type(reader)
            else:
                reader.skip_value(kind, in_field=True, depth=2)
        elements.append(_Element(physical, name, children, converted, logical))
    return elements


def _top_level_columns(elements: list[_Element]) -> dict[bytes, _Column]:
    """The root's direct INT32/INT64 leaves (a group's descendants, however deep, are passed over); a name held
    twice is left out."""
    if not elements or elements[0].children is None or elements[0].children < 0:
        raise FooterError("the schema has no root group")
    columns: dict[bytes, _Column] = {}
    seen: set[bytes] = set()
    at = 1
    for _ in range(elements[0].children):
        if at >= len(elements):
            raise FooterError("the schema has fewer elements than its groups claim")
        element = elements[at]
        at = _past_subtree(elements, at)
        if element.name is not None and element.name in seen:
            columns.pop(element.name, None)
            continue
        if element.name is not None:
            seen.add(element.name)
        if not element.children and element.physical in _INT_WIDTHS and element.name is not None:
            columns[element.name] = _column(element, element.physical)
    return columns


def _past_subtree(elements: list[_Element], at: int) -> int:
    """The index after the element at ``at`` and all its descendants."""
    pending = 1
    while pending:
        if at >= len(elements):
            raise FooterError("the schema has fewer elements than its groups claim")
        children = elements[at].children
        if children is not None and children < 0:
            raise FooterError(f"a schema element claims {children} children")
        pending += (children or 0) - 1
        at += 1
    return at


def _column(element: _Element, physical: int) -> _Column:
    """A top-level INT32/INT64 leaf's unit and signedness, from its logical type, else its converted type."""
    if element.logical is not None:
        member, detail = element.logical
        if member == _DATE:
            return _Column(physical, "day", True)
        if member == _TIMESTAMP:
            return _Column(physical, _TIME_UNITS.get(detail) if isinstance(detail, int) else None, True)
        if member == _INTEGER:
            signed = detail if isinstance(detail, bool) else element.converted not in _UNSIGNED
            return _Column(physical, "int", signed)
        return _Column(physical, None, True)
    converted = element.converted
    if converted is None or converted in _SIGNED:
        return _Column(physical, "int", True)
    if converted in _UNSIGNED:
        return _Column(physical, "int", False)
    return _Column(physical, _CONVERTED_UNITS.get(converted), True)


def _logical_type(reader: _Reader) -> tuple[int, int | bool | None] | None:
    """A ``LogicalType`` union's member and what it says here: TIMESTAMP's unit, INTEGER's signedness (None when
    not given); None for a union with no member set."""
    found: tuple[int, int | bool | None] | None = None
    for field, kind in reader.fields():
        if found is None and kind == _STRUCT and field == _TIMESTAMP:
            found = (field, _union_member(reader, 2))
        elif found is None and kind == _STRUCT and field == _INTEGER:
            found = (field, _signedness(reader))
        elif found is None and kind == _STRUCT:
            found = (field, None)
            reader.skip_value(kind, in_field=True, depth=3)
        else:
            reader.skip_value(kind, in_field=True, depth=3)
    return found


def _union_member(reader: _Reader, wanted: int) -> int | None:
    """Of a struct (the reader at its fields), the member set in its union field ``wanted``."""
    member = None
    for field, kind in reader.fields():
        if field == wanted and kind == _STRUCT and member is None:
            for inner, inner_kind in reader.fields():
                if member is None and inner_kind == _STRUCT:
                    member = inner
                reader.skip_value(inner_kind, in_field=True, depth=5)
        else:
            reader.skip_value(kind, in_field=True, depth=4)
    return member


def _signedness(reader: _Reader) -> bool | None:
    """``IntType.isSigned`` (field 2), None when not given."""
    signed = None
    for field, kind in reader.fields():
        if field == 2 and kind in (_TRUE, _FALSE):
            signed = kind == _TRUE
        else:
            reader.skip_value(kind, in_field=True, depth=4)
    return signed


def _binary(reader: _Reader) -> bytes:
    n = reader.varint()
    start = reader.pos
    reader.skip(n)
    return reader.data[start : start + n]


def _chunks(reader: _Reader) -> list[_Chunk]:
    """``RowGroup.columns`` (the reader at the list): its top-level INT32/INT64 chunks."""
    size, element = reader.collection()
    if element != _STRUCT:
        raise FooterError("a row group's columns are not a list of structs")
    chunks = []
    for _ in range(size):
        found = None
        for chunk_field, chunk_kind in reader.fields():
            if chunk_field == 3 and chunk_kind == _STRUCT and found is None:
                found = _column_meta(reader)
            else:
                reader.skip_value(chunk_kind, in_field=True, depth=2)
        if found is not None:
            chunks.append(found)
    return chunks


def _column_meta(reader: _Reader) -> _Chunk | None:
    """A ``ColumnMetaData``'s chunk; None for one not of a top-level INT32/INT64 column."""
    physical, path, stats = None, None, None
    for field, kind in reader.fields():
        if field == 1 and kind == _I32:
            physical = reader.zigzag()
        elif field == 3 and kind == _LIST:
            count, element = reader.collection()
            if element != _BINARY:
                raise FooterError("path_in_schema is not a list of strings")
            path = [_binary(reader) for _ in range(count)]
        elif field == 12 and kind == _STRUCT:
            stats = _statistics(reader)
        else:
            reader.skip_value(kind, in_field=True, depth=3)
    if physical not in _INT_WIDTHS or path is None or len(path) != 1:
        return None
    return _Chunk(path[0], physical, stats)


def _statistics(reader: _Reader) -> dict[int, bytes]:
    """A ``Statistics`` struct's ``max``, ``min`` (deprecated; fields 1, 2), ``max_value``, ``min_value`` (5, 6)."""
    values: dict[int, bytes] = {}
    for field, kind in reader.fields():
        if field in (1, 2, 5, 6) and kind == _BINARY:
            values[field] = _binary(reader)
        else:
            reader.skip_value(kind, in_field=True, depth=4)
    return values

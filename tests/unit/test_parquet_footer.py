"""The Parquet footer reader against pyarrow's own reading of the same files."""

from __future__ import annotations

import datetime as dt
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.parquet_footer import (
    FooterError,
    metadata_length,
    row_group_sizes,
    schema_file,
)
from airflow_provider_s3ch.core.parquet_stats import RowGroupStats, row_group_stats

#: Column makers: each gives ``rows`` values of one Arrow type, drawn from ``draw``.
COLUMNS = {
    "int64": lambda d, n: pa.array(d(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), pa.int64()),
    "int8": lambda d, n: pa.array(d(st.lists(st.integers(-128, 127) | st.none(), min_size=n, max_size=n)), pa.int8()),
    "float": lambda d, n: pa.array(d(st.lists(st.floats(allow_nan=True), min_size=n, max_size=n)), pa.float64()),
    "bool": lambda d, n: pa.array(d(st.lists(st.booleans() | st.none(), min_size=n, max_size=n)), pa.bool_()),
    "string": lambda d, n: pa.array(d(st.lists(st.text(max_size=30) | st.none(), min_size=n, max_size=n))),
    "binary": lambda d, n: pa.array(d(st.lists(st.binary(max_size=20), min_size=n, max_size=n)), pa.binary()),
    "date": lambda d, n: pa.array(d(st.lists(st.dates(), min_size=n, max_size=n)), pa.date32()),
    "timestamp": lambda d, n: pa.array(
        d(st.lists(st.datetimes(min_value=dt.datetime(1970, 1, 1)), min_size=n, max_size=n)), pa.timestamp("ms")
    ),
    "decimal": lambda d, n: pa.array(
        [None if v is None else pa.scalar(v, pa.decimal128(18, 2)).as_py() for v in d(
            st.lists(st.decimals(min_value=-(10**15), max_value=10**15, places=2) | st.none(), min_size=n, max_size=n)
        )],
        pa.decimal128(18, 2),
    ),
    "list": lambda d, n: pa.array(
        d(st.lists(st.lists(st.integers(0, 1000), max_size=5) | st.none(), min_size=n, max_size=n)),
        pa.list_(pa.int32()),
    ),
    "struct": lambda d, n: pa.array(
        d(st.lists(st.fixed_dictionaries({"a": st.integers(0, 9), "b": st.text(max_size=5)}), min_size=n, max_size=n)),
        pa.struct([("a", pa.int16()), ("b", pa.string())]),
    ),
    "map": lambda d, n: pa.array(
        d(st.lists(st.lists(st.tuples(st.text(max_size=4), st.integers(0, 99)), max_size=3), min_size=n, max_size=n)),
        pa.map_(pa.string(), pa.int64()),
    ),
    "dictionary": lambda d, n: pa.array(
        d(st.lists(st.sampled_from(["a", "bb", "ccc"]), min_size=n, max_size=n))
    ).dictionary_encode(),
}


@st.composite
def parquet_files(draw: st.DrawFn) -> bytes:
    """A Parquet file of random columns, row groups, compression, statistics and key-value metadata."""
    rows = draw(st.integers(0, 60))
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=6, unique=True))
    table = pa.table({name: COLUMNS[name](draw, rows) for name in names})
    meta = draw(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=40), max_size=3))
    if meta:
        table = table.replace_schema_metadata(meta)
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=draw(st.integers(1, 64)),
        compression=draw(st.sampled_from(["none", "snappy", "zstd", "gzip"])),
        write_statistics=draw(st.booleans()),
        use_dictionary=draw(st.booleans()),
        data_page_version=draw(st.sampled_from(["1.0", "2.0"])),
        version=draw(st.sampled_from(["1.0", "2.4", "2.6"])),
        write_page_index=draw(st.booleans()),
        store_schema=draw(st.booleans()),
    )
    return sink.getvalue()


def pyarrow_sizes(data: bytes) -> list[int]:
    meta = pq.read_metadata(io.BytesIO(data))
    return [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parquet_files())
def test_the_row_groups_sizes_are_pyarrows(data: bytes) -> None:
    assert row_group_sizes(data) == pyarrow_sizes(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parquet_files(), st.integers(0, 4096))
def test_any_tail_holding_the_metadata_is_enough(data: bytes, extra: int) -> None:
    """What the hook passes: the last bytes of the file, the metadata and possibly some data before it."""
    tail = data[-(metadata_length(data) + 8 + extra) :]
    assert row_group_sizes(tail) == pyarrow_sizes(data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(parquet_files(), st.integers(0, 4096))
def test_the_schema_file_is_the_files_schema_without_its_row_groups(data: bytes, extra: int) -> None:
    """pyarrow reads the same schema, key-value metadata included, and no row group (no statistics, no values)."""
    schema = schema_file(data[-(metadata_length(data) + 8 + extra) :])
    meta, original = pq.read_metadata(io.BytesIO(schema)), pq.read_metadata(io.BytesIO(data))
    assert meta.num_row_groups == 0
    assert meta.schema.equals(original.schema) and meta.metadata == original.metadata
    assert pq.read_schema(io.BytesIO(schema)).equals(pq.read_schema(io.BytesIO(data)), check_metadata=True)
    assert len(schema) <= len(data)


@settings(deadline=None)  # no per-example time limit: a busy machine can pause any example
@given(st.binary(max_size=300))
def test_random_bytes_give_a_schema_file_or_a_footer_error(body: bytes) -> None:
    try:
        schema = schema_file(body + b"PAR1")
    except FooterError:
        return
    assert schema.startswith(b"PAR1") and schema.endswith(b"PAR1")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def damaged_tail(data: bytes, draw: st.DataObject) -> bytes:
    """The file's footer with 1-4 bytes flipped, cut or inserted, as a tail with its length and ``PAR1``."""
    length = metadata_length(data)
    body = bytearray(data[-(length + 8) : -8])
    for _ in range(draw.draw(st.integers(1, 4))):
        at = draw.draw(st.integers(0, max(0, len(body) - 1)))
        action = draw.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and body:
            body[at] ^= draw.draw(st.integers(1, 255))
        elif action == "cut":
            del body[at:]
        else:
            body[at:at] = draw.draw(st.binary(min_size=1, max_size=8))
    tail = bytes(body) + len(body).to_bytes(4, "little") + b"PAR1"
    return tail


@given(parquet_files(), st.data())
def test_a_damaged_footer_gives_sizes_or_a_footer_error(data: bytes, draw: st.DataObject) -> None:
    """Footers come from a bucket: flipped, cut or inserted bytes never hang, crash or raise anything else."""
    tail = damaged_tail(data, draw)
    try:
        sizes = row_group_sizes(tail)
    except FooterError:
        return
    assert all(isinstance(size, int) and size >= 0 for size in sizes)


@settings(deadline=None)  # no per-example time limit: a busy machine can pause any example
@given(st.binary(max_size=300))
def test_random_bytes_give_sizes_or_a_footer_error(body: bytes) -> None:
    tail = body + len(body).to_bytes(4, "little") + b"PAR1"
    try:
        row_group_sizes(tail)
    except FooterError:
        pass
    try:
        row_group_stats(tail)
    except FooterError:
        pass


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"PAR1", "does not end with PAR1"),
        (b"\x00" * 8 + b"PARE", "does not end with PAR1"),  # an encrypted footer
        (b"\x15\x00" + (100).to_bytes(4, "little") + b"PAR1", "the footer is 100 bytes, the tail holds 2"),
        (b"\x15\x02\x00" + (3).to_bytes(4, "little") + b"PAR1", "the footer has no row groups"),
    ],
)
def test_not_a_footer_is_named(tail: bytes, message: str) -> None:
    with pytest.raises(FooterError, match=message):
        row_group_sizes(tail)


@pytest.mark.parametrize(
    ("kind", "in_field", "value"),
    [
        (1, True, b""),  # a field's bool is in its header
        (2, False, b"\x00"),  # a list's bool is a byte
        (3, True, b"\x07"),
        (5, True, b"\x96\x01"),  # a varint of two bytes
        (7, True, b"\x00" * 8),
        (13, True, b"\x00" * 16),
        (8, True, b"\x03abc"),
        (9, True, b"\x25\x02\x04"),  # a list of two i32
        (10, True, b"\x25\x02\x04"),  # a set: the same
        (11, True, b"\x00"),  # an empty map
        (11, True, b"\x01\x85\x01a\x02"),  # a map of one binary key and one i32 value
        (12, True, b"\x15\x02\x00"),  # a struct of one i32 field
    ],
)
def test_each_wire_type_is_skipped_to_its_last_byte(kind: int, in_field: bool, value: bytes) -> None:
    from airflow_provider_s3ch.core.parquet_footer import _Reader

    reader = _Reader(value + b"\xff")  # what follows is not read
    reader.skip_value(kind, in_field=in_field)
    assert reader.pos == len(value)


def test_an_unknown_wire_type_and_too_deep_a_nesting_are_footer_errors() -> None:
    from airflow_provider_s3ch.core.parquet_footer import _Reader

    with pytest.raises(FooterError, match="unknown Thrift wire type 14"):
        _Reader(b"\x00").skip_value(14, in_field=True)
    with pytest.raises(FooterError, match="nests deeper than Parquet does"):
        _Reader(b"\x19" * 40 + b"\x00").skip_value(9, in_field=True)  # lists of lists of ...


def _ints(draw: st.DrawFn, rows: int, bits: int, *, signed: bool = True) -> list[int | None]:
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    # a narrow range now and then, so that row groups' ranges differ and often repeat values
    if draw(st.booleans()):
        low = draw(st.integers(low, high))
        high = min(high, low + draw(st.integers(0, 1000)))
    return draw(st.lists(st.integers(low, high) | st.none(), min_size=rows, max_size=rows))


#: Columns for :func:`row_group_stats`: integer-stored ones of every unit, and others it passes over.
STATS_COLUMNS = {
    "day": lambda d, n: pa.array(_ints(d, n, 32), pa.date32()),
    "ms": lambda d, n: pa.array(_ints(d, n, 64), pa.timestamp("ms")),
    "us": lambda d, n: pa.array(_ints(d, n, 64), pa.timestamp("us", tz="UTC")),
    "ns": lambda d, n: pa.array(_ints(d, n, 64), pa.timestamp("ns")),
    "i32": lambda d, n: pa.array(_ints(d, n, 32), pa.int32()),
    "i64": lambda d, n: pa.array(_ints(d, n, 64), pa.int64()),
    "i16": lambda d, n: pa.array(_ints(d, n, 16), pa.int16()),
    "u32": lambda d, n: pa.array(_ints(d, n, 32, signed=False), pa.uint32()),
    "u64": lambda d, n: pa.array(_ints(d, n, 64, signed=False), pa.uint64()),
    "time": lambda d, n: pa.array(_ints(d, n, 16, signed=False), pa.time32("ms")),
    "nulls": lambda d, n: pa.nulls(n),
    "string": lambda d, n: pa.array(d(st.lists(st.text(max_size=10) | st.none(), min_size=n, max_size=n))),
    "struct": lambda d, n: pa.array(
        d(st.lists(st.fixed_dictionaries({"a": st.integers(-99, 99), "b": st.fixed_dictionaries(
            {"c": st.integers(0, 9) | st.none()})}) | st.none(), min_size=n, max_size=n)),
        pa.struct([("a", pa.int64()), ("b", pa.struct([("c", pa.int32())]))]),
    ),
    "list": lambda d, n: pa.array(
        d(st.lists(st.lists(st.integers(0, 1000), max_size=3) | st.none(), min_size=n, max_size=n)),
        pa.list_(pa.int64()),
    ),
}

#: pyarrow's logical types' JSON, as ``row_group_stats`` names their units.
_TIME_UNITS = {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}


@st.composite
def stats_files(draw: st.DrawFn) -> tuple[bytes, pa.Table, int, str]:
    """A Parquet file of random integer-stored and other columns, with or without (some columns') statistics."""
    rows = draw(st.integers(0, 50))
    names = draw(st.lists(st.sampled_from(sorted(STATS_COLUMNS)), min_size=1, max_size=8, unique=True))
    table = pa.table({name: STATS_COLUMNS[name](draw, rows) for name in names})
    statistics = draw(st.booleans() | st.lists(st.sampled_from(names), unique=True))
    version = draw(st.sampled_from(["1.0", "2.4", "2.6"]))
    if version != "2.6" and "ns" in names:  # written as us: whole us (toward zero, to stay in range)
        raw = table["ns"].cast(pa.int64()).to_pylist()
        whole = [None if v is None else (v // 1000 if v >= 0 else -(-v // 1000)) * 1000 for v in raw]
        table = table.set_column(names.index("ns"), "ns", pa.array(whole, pa.timestamp("ns")))
    size = draw(st.integers(1, 20))
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=size,
        write_statistics=statistics,
        version=version,
        use_dictionary=draw(st.booleans()),
        data_page_version=draw(st.sampled_from(["1.0", "2.0"])),
        compression=draw(st.sampled_from(["none", "snappy"])),
    )
    return sink.getvalue(), table, size, version


def pyarrow_stats(data: bytes) -> tuple[list[RowGroupStats], dict[str, str]]:
    """What ``row_group_stats`` should read, from pyarrow's reading of the footer."""
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    units: dict[str, str] = {}
    unsigned: set[str] = set()
    for j in range(meta.num_columns):
        column = meta.schema.column(j)
        if "." in column.path or column.physical_type not in ("INT32", "INT64"):
            continue
        logical = json.loads(column.logical_type.to_json())
        if logical["Type"] == "Int" and not logical["isSigned"]:
            unsigned.add(column.path)
        if logical["Type"] in ("Int", "None"):
            units[column.path] = "int"
        elif logical["Type"] == "Date":
            units[column.path] = "day"
        elif logical["Type"] == "Timestamp":
            units[column.path] = _TIME_UNITS[logical["timeUnit"]]
    groups = []
    for i in range(meta.num_row_groups):
        group, ranges = meta.row_group(i), {}
        for j in range(group.num_columns):
            chunk = group.column(j)
            stats = chunk.statistics
            if "." in chunk.path_in_schema or chunk.physical_type not in ("INT32", "INT64"):
                continue
            if stats is None or not stats.has_min_max:
                continue
            low, high = stats.min_raw, stats.max_raw  # the stored integers: days, ms/us/ns, the integer
            if chunk.path_in_schema in unsigned:  # pyarrow gives them as signed
                bits = 32 if chunk.physical_type == "INT32" else 64
                low, high = low % 2**bits, high % 2**bits
            is_date = chunk.physical_type == "INT32" and meta.schema.column(j).logical_type.type == "DATE"
            if is_date and -719162 <= low <= 2932896:  # in Python's dates: pyarrow's own reading, days since 1970
                assert (stats.min - dt.date(1970, 1, 1)).days == low
            if low <= high:
                ranges[chunk.path_in_schema] = (low, high)
        groups.append(RowGroupStats(group.total_byte_size, ranges))
    return groups, units


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stats_files(), st.integers(0, 2048))
def test_the_row_groups_stats_are_pyarrows(file: tuple[bytes, pa.Table, int, str], extra: int) -> None:
    data, table, size, version = file
    tail = data[-(metadata_length(data) + 8 + extra) :]
    groups, units = row_group_stats(tail)
    assert (groups, units) == pyarrow_stats(data)
    assert [group.bytes for group in groups] == row_group_sizes(tail)
    # the units the columns were written in (ns are us before version 2.6); the others have none
    written = {name: name for name in ("day", "ms", "us", "ns")}
    written |= dict.fromkeys(("i16", "i32", "i64", "u32", "u64"), "int")
    if version != "2.6":
        written["ns"] = "us"
    assert units == {name: written[name] for name in table.column_names if name in written}
    # and the ranges are the values' own, in the stored integers
    for i, group in enumerate(groups):
        for name, found in group.ranges.items():
            values = table.column(name).slice(i * size, size)
            if name in ("day", "time"):
                values = values.cast(pa.int32())
            elif name in ("ms", "us", "ns"):
                values = values.cast(pa.int64())
            raw = [v for v in values.to_pylist() if v is not None]
            if name == "ns" and version != "2.6":
                raw = [v // 1000 for v in raw]
            assert found == (min(raw), max(raw))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stats_files())
def test_without_statistics_no_row_group_has_ranges(file: tuple[bytes, pa.Table, int, str]) -> None:
    data, table, size, version = file
    stripped = io.BytesIO()
    pq.write_table(pq.read_table(io.BytesIO(data)), stripped, row_group_size=size, write_statistics=False,
                   version=version)
    groups, units = row_group_stats(stripped.getvalue())
    assert all(group.ranges == {} for group in groups)
    assert units == row_group_stats(data)[1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stats_files(), st.data())
def test_a_damaged_footer_gives_stats_or_a_footer_error(file: tuple[bytes, pa.Table, int, str],
                                                         draw: st.DataObject) -> None:
    """Flipped, cut or inserted bytes in a footer with statistics never hang, crash or raise anything else."""
    tail = damaged_tail(file[0], draw)
    try:
        groups, units = row_group_stats(tail)
    except FooterError:
        return
    assert all(isinstance(group.bytes, int) and group.bytes >= 0 for group in groups)
    assert all(low <= high for group in groups for low, high in group.ranges.values())
    assert set(units.values()) <= {"day", "ms", "us", "ns", "int"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stats_files(), st.data())
def test_a_cut_tail_is_a_footer_error(file: tuple[bytes, pa.Table, int, str], draw: st.DataObject) -> None:
    """The metadata cut anywhere (its length and PAR1 kept or not) is a FooterError, never another exception."""
    data = file[0]
    length = metadata_length(data)
    body = data[-(length + 8) : -8]
    cut = draw.draw(st.integers(0, len(body) - 1))
    with pytest.raises(FooterError):
        row_group_stats(body[:cut] + cut.to_bytes(4, "little") + b"PAR1")
    with pytest.raises(FooterError):
        row_group_stats(data[-(length + 8) + cut + 1 :])  # too short for the length it names


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _i(value: int) -> bytes:  # an i32/i64's zigzag varint
    return _varint((value << 1) ^ (value >> 63))


def _bin(value: bytes) -> bytes:
    return _varint(len(value)) + value


def _list(kind: int, items: list[bytes]) -> bytes:
    head = bytes([len(items) << 4 | kind]) if len(items) < 15 else bytes([0xF0 | kind]) + _varint(len(items))
    return head + b"".join(items)


def _struct(*fields: tuple[int, int, bytes]) -> bytes:
    """A compact-protocol struct of (field id, wire type, value) fields (a field id not 1-15 above the last one's
    in its long form)."""
    out, last = bytearray(), 0
    for field, kind, value in fields:
        delta = field - last
        out += (bytes([delta << 4 | kind]) if 0 < delta <= 15 else bytes([kind]) + _i(field)) + value
        last = field
    return bytes(out + b"\x00")


def _element(name: str, physical: int | None = None, *, children: int | None = None, converted: int | None = None,
             logical: bytes | None = None) -> bytes:
    fields = [(1, 5, _i(physical))] if physical is not None else []
    fields.append((4, 8, _bin(name.encode())))
    fields += [(5, 5, _i(children))] if children is not None else []
    fields += [(6, 5, _i(converted))] if converted is not None else []
    fields += [(10, 12, logical)] if logical is not None else []
    return _struct(*fields)


def _chunk(path: list[str], physical: int, stats: dict[int, bytes] | None) -> bytes:
    meta = [(1, 5, _i(physical)), (3, 9, _list(8, [_bin(p.encode()) for p in path]))]
    if stats is not None:
        meta.append((12, 12, _struct(*[(field, 8, _bin(stats[field])) for field in sorted(stats)], (3, 6, _i(0)))
                     if stats else _struct((3, 6, _i(4)))))  # a null count alone: a chunk of nulls only
    return _struct((2, 6, _i(4)), (3, 12, _struct(*meta)))


def _le(value: int, width: int, *, signed: bool = True) -> bytes:
    return value.to_bytes(width, "little", signed=signed)


def test_converted_types_groups_and_odd_statistics_by_hand() -> None:
    """What pyarrow does not write: converted types alone, deprecated statistics alone, groups within groups,
    unsigned statistics in the signed fields, ranges that run backwards, widths that do not fit, names held twice."""
    nanos = _struct((8, 12, _struct((1, 1, b""), (2, 12, _struct((3, 12, _struct()))))))  # TIMESTAMP(true, NANOS)
    unsigned = _struct((10, 12, _struct((1, 3, b"\x20"), (2, 2, b""))))  # INTEGER(32, false)
    schema = [
        _element("schema", children=13),
        _element("d", 1, converted=6),
        _element("ts", 2, converted=9),
        _element("tu", 2, converted=10),
        _element("u", 1, converted=13),  # UINT_32
        _element("i", 1, converted=16),  # INT_16
        _element("tm", 1, converted=7),  # TIME_MILLIS: no unit
        _element("g", children=2),
        _element("g1", 2),
        _element("g2", children=1),
        _element("g3", 2),
        _element("plain", 2),
        _element("dup", 2),
        _element("dup", 1),
        _element("ns", 2, logical=nanos),
        _element("li", 1, logical=unsigned),
        _element("s", 6),  # BYTE_ARRAY
    ]
    chunks = [
        _chunk(["d"], 1, {2: _le(-5, 4), 1: _le(7, 4)}),  # the deprecated fields alone
        _chunk(["ts"], 2, {6: _le(-3, 8), 5: _le(9, 8), 2: _le(-100, 8), 1: _le(100, 8)}),  # min_value/max_value
        _chunk(["tu"], 2, None),
        _chunk(["u"], 1, {2: _le(1, 4), 1: _le(2, 4)}),  # unsigned: the signed fields are not read
        _chunk(["i"], 1, {6: _le(5, 4), 5: _le(4, 4)}),  # backwards
        _chunk(["tm"], 1, {6: _le(1, 8), 5: _le(2, 8)}),  # 8 bytes for an INT32
        _chunk(["g", "g1"], 2, {6: _le(1, 8), 5: _le(2, 8)}),
        _chunk(["g", "g2", "g3"], 2, {6: _le(1, 8), 5: _le(2, 8)}),
        _chunk(["plain"], 2, {}),
        _chunk(["dup"], 2, {6: _le(1, 8), 5: _le(2, 8)}),
        _chunk(["ns"], 2, {6: _le(-(2**63), 8), 5: _le(2**63 - 1, 8)}),
        _chunk(["li"], 1, {6: _le(1, 4), 5: _le(2**32 - 1, 4, signed=False)}),
    ]
    group = _struct((1, 9, _list(12, chunks)), (2, 6, _i(1234)), (3, 6, _i(1)))
    metadata = _struct((1, 5, _i(2)), (2, 9, _list(12, schema)), (3, 6, _i(1)), (4, 9, _list(12, [group, group])))
    tail = metadata + len(metadata).to_bytes(4, "little") + b"PAR1"
    ranges = {"d": (-5, 7), "ts": (-3, 9), "ns": (-(2**63), 2**63 - 1), "li": (1, 2**32 - 1)}
    units = {"d": "day", "ts": "ms", "tu": "us", "u": "int", "i": "int", "plain": "int", "ns": "ns", "li": "int"}
    assert row_group_stats(tail) == ([RowGroupStats(1234, ranges)] * 2, units)
    assert row_group_sizes(tail) == [1234, 1234]
    for cut in range(len(metadata)):
        with pytest.raises(FooterError):
            row_group_stats(metadata[:cut] + cut.to_bytes(4, "little") + b"PAR1")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ([], "the schema has no root group"),
        ([_element("schema")], "the schema has no root group"),
        ([_element("schema", children=2), _element("a", 2)], "fewer elements than its groups claim"),
        ([_element("schema", children=1), _element("g", children=3), _element("a", 2)], "fewer elements"),
        ([_element("schema", children=1), _element("g", children=-1)], "claims -1 children"),
    ],
)
def test_a_schema_tree_that_does_not_add_up_is_a_footer_error(schema: list[bytes], message: str) -> None:
    metadata = _struct((2, 9, _list(12, schema)), (4, 9, _list(12, [])))
    with pytest.raises(FooterError, match=message):
        row_group_stats(metadata + len(metadata).to_bytes(4, "little") + b"PAR1")
    assert row_group_sizes(metadata + len(metadata).to_bytes(4, "little") + b"PAR1") == []

"""The Parquet footer reader against pyarrow's own reading of the same files."""

from __future__ import annotations

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_s3ch.core.parquet_footer import FooterError, metadata_length, row_group_sizes, schema_file

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
@given(parquet_files(), st.data())
def test_a_damaged_footer_gives_sizes_or_a_footer_error(data: bytes, draw: st.DataObject) -> None:
    """Footers come from a bucket: flipped, cut or inserted bytes never hang, crash or raise anything else."""
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

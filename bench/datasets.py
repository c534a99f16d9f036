"""Benchmark datasets: Stack Overflow-like posts as Parquet or gzip'd CSV, in S3 and on local disk.

Rows come from :func:`airflow_provider_s3ch.local.sample.posts_table` (the guide's ``posts``
columns). Generating rows costs ~3 s per 100k here, so a pool of one year of posts is
generated once and reused: a dataset larger than the pool repeats it with new ids and every
timestamp shifted by whole years, so each copy lands in its own monthly partitions.
Each dataset is written twice: to the S3 bucket (what ``s3()`` reads) and to a local
directory (what ``file()`` reads, for the engine-bound figure without S3).
"""

from __future__ import annotations

import gzip
import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Months in the generated pool (one year: 12 partitions per copy of the pool).
POOL_MONTHS = 12

#: gzip level of the CSV files: level 1 writes ~5x faster than the default 6 and reads as fast.
GZIP_LEVEL = 1


@dataclass
class DatasetSpec:
    """One dataset shape.

    :param name: short id, also the key prefix.
    :param fmt: ``parquet`` or ``csv.gz``.
    :param rows: total rows.
    :param files: how many files (rows split evenly, in time order).
    :param shape: a label, e.g. "few large files".
    """

    name: str
    fmt: str
    rows: int
    files: int
    shape: str


@dataclass
class Dataset:
    """A written dataset."""

    spec: DatasetSpec
    bucket: str
    prefix: str
    local_dir: str
    keys: list[str]
    bytes: int
    partitions: int
    extension: str
    write_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def s3_uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}*.{self.extension}"

    @property
    def local_glob(self) -> str:
        return f"{self.local_dir}/*.{self.extension}"

    def summary(self) -> dict[str, Any]:
        out = asdict(self.spec)
        out.update(
            {
                "s3_uri": self.s3_uri,
                "bytes": self.bytes,
                "file_count": len(self.keys),
                "mean_file_bytes": self.bytes // max(1, len(self.keys)),
                "partitions": self.partitions,
                "write_seconds": round(self.write_seconds, 2),
            }
        )
        out.update(self.extra)
        return out


class RowPool:
    """One year of posts, generated once; :meth:`rows` serves any count by repeating it."""

    def __init__(self, rows_per_month: int, seed: int = 7) -> None:
        import pyarrow as pa

        from airflow_provider_s3ch.local.sample import month_keys, posts_table

        tables, next_id = [], 1
        for year, month in month_keys(2008, 7, POOL_MONTHS):
            tables.append(posts_table(year, month, rows_per_month, next_id, seed))
            next_id += rows_per_month
        self.table = pa.concat_tables(tables).combine_chunks()
        self.size = self.table.num_rows

    def rows(self, count: int) -> Any:
        """``count`` rows in time order; copy k of the pool gets ids + k*size and dates + k years."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts, copy, left = [], 0, count
        while left > 0:
            take = min(left, self.size)
            part = self.table.slice(0, take)
            if copy:
                part = _shift(part, copy, self.size, pa, pc)
            parts.append(part)
            left -= take
            copy += 1
        return pa.concat_tables(parts).combine_chunks()


def _shift(table: Any, copy: int, size: int, pa: Any, pc: Any) -> Any:
    """Give a copy of the pool new ids and move its timestamps ``copy`` years later."""
    years_ms = pa.scalar(int(copy * 365.25 * 86_400_000), pa.duration("ms"))
    cols = {}
    for name in table.column_names:
        col = table[name]
        if name == "Id":
            col = pc.add(col, pa.scalar(copy * size, pa.int32()))
        elif name in ("CreationDate", "LastEditDate", "LastActivityDate"):
            col = pc.add(col, years_ms)
        cols[name] = col
    return pa.table(cols)


def _csv_bytes(table: Any) -> bytes:
    """CSVWithNames for the posts table: enum names, timestamps as ``YYYY-MM-DD hh:mm:ss.mmm``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    cols = {}
    for name in table.column_names:
        col = table[name]
        if pa.types.is_timestamp(col.type):
            col = pc.strftime(col, format="%Y-%m-%d %H:%M:%S")
        elif name == "PostTypeId":
            col = pc.if_else(pc.equal(col, 1), "Question", "Answer")
        cols[name] = col
    buf = io.BytesIO()
    pcsv.write_csv(pa.table(cols), buf)
    return gzip.compress(buf.getvalue(), compresslevel=GZIP_LEVEL)


def _file_bytes(table: Any, fmt: str) -> bytes:
    import pyarrow.parquet as pq

    if fmt == "parquet":
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="snappy")
        return buf.getvalue()
    return _csv_bytes(table)


def write_dataset(spec: DatasetSpec, pool: RowPool, client: Any, bucket: str, local_root: Path) -> Dataset:
    """Write ``spec`` to ``s3://bucket/<name>/`` and to ``local_root/<name>/``.

    :param spec: the shape.
    :param pool: the row pool.
    :param client: a boto3 S3 client.
    :param bucket: an existing bucket.
    :param local_root: where the ``file()`` copies go (inside the node's reach).
    """
    import time

    import pyarrow.compute as pc

    started = time.monotonic()
    table = pool.rows(spec.rows)
    ext = "parquet" if spec.fmt == "parquet" else "csv.gz"
    prefix = f"{spec.name}/"
    local_dir = local_root / spec.name
    local_dir.mkdir(parents=True, exist_ok=True)
    base, extra = divmod(spec.rows, spec.files)
    slices, start = [], 0
    for i in range(spec.files):
        n = base + (1 if i < extra else 0)
        slices.append((i, start, n))
        start += n

    def one(item: tuple[int, int, int]) -> tuple[str, int]:
        i, offset, n = item
        body = _file_bytes(table.slice(offset, n), spec.fmt)
        key = f"{prefix}part-{i:05d}.{ext}"
        (local_dir / f"part-{i:05d}.{ext}").write_bytes(body)
        client.put_object(Bucket=bucket, Key=key, Body=body)
        return key, len(body)

    workers = min(8, max(1, spec.files))
    with ThreadPoolExecutor(workers) as pool_exec:
        written = list(pool_exec.map(one, slices))
    months = pc.strftime(table["CreationDate"], format="%Y%m")
    partitions = len(pc.unique(months))
    return Dataset(
        spec=spec,
        bucket=bucket,
        prefix=prefix,
        local_dir=str(local_dir),
        keys=[k for k, _ in written],
        bytes=sum(b for _, b in written),
        partitions=partitions,
        extension=ext,
        write_seconds=time.monotonic() - started,
        extra={"rows_written": spec.rows, "pool_rows": pool.size},
    )


def node_files_dir(stack: Any) -> Path:
    """A directory next to node 0's data that ``file()`` can read by absolute path."""
    path = Path(stack.nodes[0].workdir) / "user_files" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


__all__ = ["Dataset", "DatasetSpec", "RowPool", "node_files_dir", "write_dataset"]

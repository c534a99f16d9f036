"""A sample dataset shaped like ClickHouse's Stack Overflow posts, one Parquet file per month.

The columns and types are those of the guide's ``posts`` table; the values are
random but deterministic (seeded), so a given size always writes the same rows.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

POSTS_PREFIX = "stackoverflow/parquet/posts/by_month/"

POSTS_DDL = """
CREATE TABLE IF NOT EXISTS {table}
(
    `Id` Int32 CODEC(Delta(4), ZSTD(1)),
    `PostTypeId` Enum8('Question' = 1, 'Answer' = 2, 'Wiki' = 3, 'TagWikiExcerpt' = 4,
                       'TagWiki' = 5, 'ModeratorNomination' = 6, 'WikiPlaceholder' = 7, 'PrivilegeWiki' = 8),
    `AcceptedAnswerId` UInt32,
    `CreationDate` DateTime64(3, 'UTC'),
    `Score` Int32,
    `ViewCount` UInt32 CODEC(Delta(4), ZSTD(1)),
    `Body` String,
    `OwnerUserId` Int32,
    `OwnerDisplayName` String,
    `LastEditorUserId` Int32,
    `LastEditorDisplayName` String,
    `LastEditDate` DateTime64(3, 'UTC') CODEC(Delta(8), ZSTD(1)),
    `LastActivityDate` DateTime64(3, 'UTC'),
    `Title` String,
    `Tags` String,
    `AnswerCount` UInt16 CODEC(Delta(2), ZSTD(1)),
    `CommentCount` UInt8,
    `FavoriteCount` UInt8,
    `ContentLicense` LowCardinality(String),
    `ParentId` String,
    `CommunityOwnedDate` DateTime64(3, 'UTC'),
    `ClosedDate` DateTime64(3, 'UTC')
)
ENGINE = {engine}
PARTITION BY toYYYYMM(CreationDate)
ORDER BY (PostTypeId, toDate(CreationDate), CreationDate)
"""

_WORDS = [
    "clickhouse", "insert", "select", "parquet", "bucket", "thread", "block", "memory", "merge", "part",
    "query", "table", "column", "index", "python", "airflow", "operator", "task", "schedule", "backfill",
    "region", "cluster", "node", "shard", "replica", "cache", "buffer", "file", "format", "gzip", "stream",
    "read", "write", "sort", "key", "partition", "month", "year", "error", "retry", "timeout", "setting"
]
_TAGS = ["<python>", "<sql>", "<clickhouse>", "<airflow>", "<s3>", "<parquet>", "<aws>", "<java>", "<go>"]
_LICENSES = ["CC BY-SA 2.5", "CC BY-SA 3.0", "CC BY-SA 4.0"]


def posts_ddl(table: str, engine: str = "MergeTree") -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` statement of the posts table.

    :param table: the table, already quoted for SQL (e.g. ```default`.`posts` ``).
    :param engine: the table engine clause.
    """
    return POSTS_DDL.format(table=table, engine=engine)


def month_keys(start_year: int = 2008, start_month: int = 7, months: int = 12) -> list[tuple[int, int]]:
    """``months`` consecutive (year, month) pairs from the start month."""
    out = []
    y, m = start_year, start_month
    for _ in range(months):
        out.append((y, m))
        m += 1
        if m == 13:
            y, m = y + 1, 1
    return out


def posts_table(year: int, month: int, rows: int, first_id: int, seed: int = 0) -> Any:
    """One month of posts as a ``pyarrow.Table``.

    :param year: the month's year.
    :param month: the month (1-12).
    :param rows: how many posts.
    :param first_id: the first post id; ids are consecutive.
    :param seed: the random seed (with the month) for reproducible values.
    """
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed * 100_003 + year * 12 + month)
    start = np.datetime64(f"{year:04d}-{month:02d}-01T00:00:00", "ms")
    end = np.datetime64(f"{year + (month == 12):04d}-{month % 12 + 1:02d}-01T00:00:00", "ms")
    span = int((end - start).astype(np.int64))
    created = start + np.sort(rng.integers(0, span, rows)).astype("timedelta64[ms]")
    post_type = rng.choice(np.array([1, 2], dtype=np.int8), rows, p=[0.4, 0.6])
    words = np.array(_WORDS)
    n_words = rng.integers(20, 160, rows)
    flat = words[rng.integers(0, len(words), int(n_words.sum()))]
    bodies, titles, pos = [], [], 0
    for n in n_words:
        chunk = flat[pos : pos + n]
        pos += n
        bodies.append("<p>" + " ".join(chunk) + "</p>")
        titles.append(" ".join(chunk[:8]).capitalize())
    is_q = post_type == 1
    users = rng.integers(1, 500_000, rows).astype(np.int32)
    ts = pa.timestamp("ms", tz="UTC")
    zero_ts = np.zeros(rows, dtype="datetime64[ms]")
    edited = created + rng.integers(0, 86_400_000 * 30, rows).astype("timedelta64[ms]")
    return pa.table(
        {
            "Id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int32)),
            "PostTypeId": pa.array(post_type.astype(np.int8)),
            "AcceptedAnswerId": pa.array(np.where(is_q, rng.integers(0, 10_000_000, rows), 0).astype(np.uint32)),
            "CreationDate": pa.array(created, type=ts),
            "Score": pa.array(rng.integers(-5, 200, rows).astype(np.int32)),
            "ViewCount": pa.array(np.where(is_q, rng.integers(0, 100_000, rows), 0).astype(np.uint32)),
            "Body": pa.array(bodies),
            "OwnerUserId": pa.array(users),
            "OwnerDisplayName": pa.array([f"user{u}" for u in users]),
            "LastEditorUserId": pa.array(rng.integers(0, 500_000, rows).astype(np.int32)),
            "LastEditorDisplayName": pa.array([""] * rows),
            "LastEditDate": pa.array(edited, type=ts),
            "LastActivityDate": pa.array(edited, type=ts),
            "Title": pa.array(np.where(is_q, np.array(titles, dtype=object), "")),
            "Tags": pa.array(
                np.where(is_q, np.array(_TAGS, dtype=object)[rng.integers(0, len(_TAGS), rows)], "")
            ),
            "AnswerCount": pa.array(np.where(is_q, rng.integers(0, 12, rows), 0).astype(np.uint16)),
            "CommentCount": pa.array(rng.integers(0, 20, rows).astype(np.uint8)),
            "FavoriteCount": pa.array(rng.integers(0, 5, rows).astype(np.uint8)),
            "ContentLicense": pa.array(np.array(_LICENSES, dtype=object)[rng.integers(0, 3, rows)]),
            "ParentId": pa.array(np.where(is_q, "", rng.integers(1, 10_000_000, rows).astype(str)).astype(object)),
            "CommunityOwnedDate": pa.array(zero_ts, type=ts),
            "ClosedDate": pa.array(zero_ts, type=ts),
        }
    )


@dataclass
class SampleDataset:
    """What :func:`write_posts` wrote."""

    bucket: str
    prefix: str
    keys: list[str]
    rows: int
    bytes: int

    @property
    def s3_uri(self) -> str:
        """A glob over every file written."""
        return f"s3://{self.bucket}/{self.prefix}*.parquet"


def write_posts(
    client: Any,
    bucket: str,
    *,
    rows: int = 200_000,
    months: int = 12,
    prefix: str = POSTS_PREFIX,
    start: tuple[int, int] = (2008, 7),
    seed: int = 0,
) -> SampleDataset:
    """Write ``rows`` posts spread over ``months`` Parquet files (``YYYY-MM.parquet``) to S3.

    :param client: a boto3 S3 client.
    :param bucket: an existing bucket.
    :param rows: total rows (split evenly; the first months take the remainder).
    :param months: how many monthly files.
    :param prefix: the key prefix, ending with ``/``.
    :param start: the first (year, month).
    :param seed: the random seed.
    """
    import pyarrow.parquet as pq

    keys, total_bytes, next_id = [], 0, 1
    base, extra = divmod(rows, months)
    for i, (year, month) in enumerate(month_keys(start[0], start[1], months)):
        n = base + (1 if i < extra else 0)
        buf = io.BytesIO()
        pq.write_table(posts_table(year, month, n, next_id, seed), buf, compression="snappy")
        next_id += n
        key = f"{prefix}{year:04d}-{month:02d}.parquet"
        client.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
        keys.append(key)
        total_bytes += buf.tell()
    return SampleDataset(bucket=bucket, prefix=prefix, keys=keys, rows=rows, bytes=total_bytes)

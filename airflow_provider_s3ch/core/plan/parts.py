"""How many parts an insert writes: the figure a block rule that knows partitions needs (docs/benchmarks.md).

ClickHouse squashes the rows it reads into blocks of ``min_insert_block_size_bytes`` and cuts each block by the
partition key: every partition a block holds rows of becomes one new part. So an insert writes, summed over its
blocks, the number of partitions each block spans; and each part is Wide (two files a column) from the table's
``min_bytes_for_wide_part`` (10 MiB by default) and Compact (one data file) below it.

A block is filled from the files being read while it fills: in the order the files are read, the files whose
rows fall in its stretch of the data (``block`` bytes of it). Where each file spans a few partitions and files
follow the partition key (a month a file, or files of one era after another), a larger block takes in more
files, and with them more partitions: the parts it saves are few. Where neighbouring files share the same
partitions (every file across every month, or many files of one era), a larger block spans no more partitions,
and the insert writes fewer, larger parts.

:func:`predicted_parts` reckons it from each file's uncompressed bytes and the partitions its rows fall in;
``bench/parts_model.py`` holds it against the parts the engine reports writing (``InsertedWideParts`` and
``InsertedCompactParts`` in ``system.query_log``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: ClickHouse's default ``min_bytes_for_wide_part``: parts of at least this many (uncompressed) bytes are Wide.
WIDE_PART_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class PartsEstimate:
    """What an insert with one block size writes, reckoned from its files."""

    #: Blocks the insert fills (its uncompressed bytes over the block, rounded up).
    blocks: int
    #: Parts it writes: summed over the blocks, the partitions each spans.
    parts: int
    #: Of those, parts of at least the Wide threshold (each block's bytes shared evenly by its partitions).
    wide_parts: int

    @property
    def partitions_per_block(self) -> float:
        return self.parts / self.blocks if self.blocks else 0.0


def predicted_parts(files: Sequence[tuple[int, frozenset[Hashable]]], block: int, *,
                    wide_from: int = WIDE_PART_BYTES) -> PartsEstimate:
    """The parts an insert of ``files`` (in the order they are read) writes with blocks of ``block`` bytes.

    :param files: each file's uncompressed bytes and the partitions its rows fall in.
    :param block: ``min_insert_block_size_bytes``.
    :param wide_from: the table's ``min_bytes_for_wide_part``.
    """
    if block <= 0:
        raise ValueError(f"block={block} must be positive")
    total = sum(size for size, _ in files)
    if total <= 0:
        return PartsEstimate(0, 0, 0)
    blocks, parts, wide = 0, 0, 0
    start, index, begun = 0, 0, 0  # the block's first byte; the first file it may take rows from, and its start
    while start < total:
        end = min(start + block, total)
        spanned: set[Hashable] = set()
        i, at = index, begun
        while i < len(files) and at < end:  # every file whose bytes overlap [start, end)
            size, partitions = files[i]
            if at + size > start and size > 0:
                spanned |= partitions
            if at + size <= end:
                i, at = i + 1, at + size
            else:
                break
        # the next block starts in file i (or later): files wholly before ``end`` are done
        index, begun = i, at
        count = max(1, len(spanned))
        blocks, parts = blocks + 1, parts + count
        if (end - start) / count >= wide_from:
            wide += count
        start = end
    return PartsEstimate(blocks, parts, wide)

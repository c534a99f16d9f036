"""What the Parquet footers of the first files read say of their integer columns: the block rule's input
(:mod:`airflow_provider_s3ch.core.plan.partition_spans`), read with the footers (``hooks/s3_footers.py``); or, for
a text load, what a sample of its rows says (:mod:`airflow_provider_s3ch.core.key_sample`)."""

from __future__ import annotations

from typing import NamedTuple


class KeyWindow(NamedTuple):
    """What the footers of the first files in read order say of their integer columns (kept in memory only)."""

    #: Each file of the window, in read order: its row groups' (uncompressed bytes, {column: (min, max)}).
    files: tuple[tuple[tuple[int, dict[str, tuple[int, int]]], ...], ...]
    #: Each integer column's unit in the files: ``day``, ``ms``, ``us``, ``ns`` or ``int``.
    units: dict[str, str]
    #: Each column's range over every footer read (the window, the last file and the largest ones): the load's.
    spans: dict[str, tuple[int, int]]
    #: A sample's estimate of the load's bytes in memory; None for footers (the plan's estimate holds).
    data_bytes: int | None = None
    #: The rows a sample read (each file's first rows: one row group a file); 0 for footers.
    sampled_rows: int = 0

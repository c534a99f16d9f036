"""What the benchmarks measured, for the reasons of the block rule's choices
(:func:`~airflow_provider_s3ch.core.plan.settings.block_size`; docs/benchmarks.md)."""

from __future__ import annotations

#: What the size ladder measured, for the reason of a block held at ClickHouse's 256 MiB.
LADDER_POINT = (
    "the size ladder (1 GB and 3 GB of Parquet and gzip'd CSV, 1/12/120 partitions, 2 cores: data-sized blocks of "
    "316-766 MiB loaded within 0-6 % of 256 MiB into 12 and 120 partitions and peaked 9-76 % above the defaults; "
    "docs/benchmarks.md)"
)

#: What the size ladder measured where the floor holds, for that reason.
SMALL_LADDER_POINT = (
    "the size ladder at 100 MB of Parquet and CSV.gz: 64 MiB blocks loaded 1.5-1.9x as fast as ClickHouse's defaults "
    "into 12 and 120 partitions at 0.62-0.77 of their memory; docs/benchmarks.md"
)

#: What the layouts with many small parts measured, for the reason of a block past 256 MiB.
LARGE_POINT = (
    "1 GiB blocks loaded 1.6-1.9x as fast as 256 MiB where the 256 MiB block wrote 8-9 parts of 3-11 MiB a "
    "partition: ClickHouse merges small parts beside the insert; docs/benchmarks.md"
)

#: What gzip'd CSV measured where blocks of 64 MiB write few parts a partition, for the reason of that block.
SMALL_TEXT_POINT = (
    "gzip'd CSV, 2 cores: 64 MiB blocks loaded 2-14 % faster than 256 MiB where they wrote 1.5-4.5 parts a "
    "partition, 7-32 % slower where they wrote 7.8-90, as ClickHouse merged beside the insert; docs/benchmarks.md"
)

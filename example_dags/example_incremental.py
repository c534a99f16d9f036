"""Incremental loads: every 15 minutes, load the files that no run loaded before.

``skip_loaded=True`` keeps a file ledger in ClickHouse (``<database>._s3ch_ledger``, created by the
first run): one row per file and load, by key and ETag. Each run lists the glob, leaves out the files
the ledger records as loaded into the table, and loads the rest with one ``INSERT … SELECT`` that
names exactly those keys (``s3('…/{a.parquet,b.parquet}')``: the server reads them without listing).
There is no watermark: a file that arrives late, or with a key that sorts before the loaded ones, is
loaded by the next run (every run here reads the whole glob; for a glob per period, see
example_late_files.py). A run with nothing new succeeds with zero rows (``skip_when_empty=True``
would mark it skipped instead).

Each file is loaded exactly once whatever happens: a retry finishes what its earlier try began (the
staging table and the ledger say where it stopped), and runs that overlap (a slow run and the next
one, ``max_active_runs=2``) claim their files in the ledger first, so a file goes to one of them.
The ledger's states and recovery rules are in docs/ledger.md.

See what was loaded, and by which query::

    SELECT key, etag, state, rows, query_id, updated_at
    FROM default._s3ch_ledger FINAL
    WHERE table = 'default.posts_incremental'
    ORDER BY updated_at DESC

Connections: ``clickhouse_native_default`` and ``aws_default`` (on the local stack, from the
``AIRFLOW_CONN_*`` variables ``s3ch-local up`` prints).
"""

from __future__ import annotations

import datetime

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_provider_s3ch.local.sample import POSTS_PREFIX
from airflow_provider_s3ch.operators.s3_to_clickhouse import S3ToClickHouseOperator

with DAG(
    dag_id="s3_to_clickhouse_incremental",
    schedule=datetime.timedelta(minutes=15),
    start_date=datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    catchup=False,
    max_active_runs=2,
    default_args={"retries": 2, "retry_delay": datetime.timedelta(minutes=1)},
    params={
        "s3_uri": Param(f"s3://s3ch-sample/{POSTS_PREFIX}*.parquet", type="string",
                        description="the files: every run loads those no run loaded before"),
        "table": Param("default.posts_incremental", type="string"),
    },
    tags=["s3ch", "example", "incremental"],
) as dag:

    load_new_files = S3ToClickHouseOperator(
        task_id="load_new_files",
        s3_uri="{{ params.s3_uri }}",
        table="{{ params.table }}",
        skip_loaded=True,
        # A file rewritten in place (another ETag) fails the run, naming it; 'skip' leaves it out, 'reload'
        # (with mode='replace_partitions') loads it again.
        on_changed="fail",
        memory_cap="2GiB",
        # The first run creates the table from the files' columns.
        create_table="if_missing",
        order_by="(PostTypeId, toDate(CreationDate), CreationDate)",
        partition_by="toYYYYMM(CreationDate)",
    )

    @task
    def report(figures: dict) -> None:
        """Log what the run loaded and what it left out."""
        ledger = figures["ledger"]
        print(
            f"{figures['written_rows']} rows from {ledger['new']} new file(s) {ledger['new_keys']}; "
            f"left out {ledger['skipped_loaded']} loaded before, {ledger['skipped_claimed']} held by another run"
        )

    report(load_new_files.output)

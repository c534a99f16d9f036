"""The ledger's arguments: which of them work together, which table is the ledger, and which loads it can
make exactly-once. Pure: no I/O.
"""

from __future__ import annotations

from airflow_provider_s3ch.core.errors import InvalidRequestError, PlanError
from airflow_provider_s3ch.core.models import LoadRequest, TableRef
from airflow_provider_s3ch.core.recovery import LoadSteps

#: The ledger's name in the target's database unless ``ledger_table`` names another.
LEDGER_NAME = "_s3ch_ledger"


# ---------------------------------------------------------------------- the request


def check_request(request: LoadRequest) -> None:
    """Refuse the ledger arguments that cannot work together, before anything is listed or loaded.

    - ``skip_loaded`` with ``mode='overwrite'``: the load would replace the table with the new files alone.
    - ``on_changed='reload'`` with ``mode='append'``: the changed file's old rows would stay beside the new
      ones; ``replace_partitions`` replaces them when the file holds whole partitions.

    :raises InvalidRequestError: a combination that cannot work, or a malformed ``ledger_table``.
    """
    if not request.skip_loaded:
        if request.on_bad_file == "set_aside":
            raise InvalidRequestError(
                "on_bad_file='set_aside' needs skip_loaded=True: the file ledger remembers the files set aside, so "
                "that later runs leave them out; set skip_loaded=True, or on_bad_file='fail'"
            )
        if request.chunked:
            raise InvalidRequestError(
                "max_files_per_load / max_bytes_per_load need skip_loaded=True: the file ledger records which "
                "chunks are committed, so that a retry resumes at the next one; set skip_loaded=True"
            )
        return
    if request.mode == "overwrite":
        raise InvalidRequestError(
            "skip_loaded=True cannot run with mode='overwrite': the new files alone would replace the whole "
            "table; use mode='append' (or 'replace_partitions'), or load every file without skip_loaded"
        )
    if request.chunked and request.mode != "append":
        raise InvalidRequestError(
            f"max_files_per_load / max_bytes_per_load cannot run with mode={request.mode!r}: a later chunk would "
            "replace the partitions an earlier chunk wrote; use mode='append', or load without chunks"
        )
    if request.on_changed == "reload" and request.mode == "append":
        raise InvalidRequestError(
            "on_changed='reload' cannot run with mode='append': a changed file's old rows would stay in the "
            "table beside its new ones; use mode='replace_partitions' (each file holding whole partitions, whose "
            "rows the reload replaces) or on_changed='skip' / 'fail'"
        )
    ledger_ref(request, "default")


def ledger_ref(request: LoadRequest, default_database: str) -> TableRef:
    """The ledger table: ``ledger_table`` (in the target's database when it names no database), else
    ``<target database>._s3ch_ledger``.

    :param request: the request.
    :param default_database: the connection's database, for a target that names none.
    """
    database = request.table.database or default_database
    if request.ledger_table is None or not request.ledger_table.strip():
        return TableRef(database=database, name=LEDGER_NAME)
    ref = TableRef.parse(request.ledger_table)
    return ref if ref.database else TableRef(database=database, name=ref.name)


def target_name(request: LoadRequest, default_database: str) -> str:
    """The ledger's ``table`` column for the target: ``database.name``."""
    return f"{request.table.database or default_database}.{request.table.name}"


def check_steps(steps: LoadSteps, *, strategy: str) -> None:
    """Refuse a load the ledger cannot make exactly-once: one that does not go through a staging table.

    A distributed insert (``s3Cluster``) into a staging table, and a load into a Distributed table staged on
    every shard, are recorded as one load: claimed before the insert, ``pending`` once the insert finished,
    ``loaded`` once every shard published (docs/distributed.md).

    :raises PlanError: ``replace_partitions`` into a table that materialized views read; a direct insert (a
        target that is not a MergeTree table or a Distributed table over MergeTree tables, or one that
        materialized views read from and that cannot be staged with them).
    """
    if steps.views and steps.mode == "replace_partitions":
        raise PlanError(
            f"skip_loaded=True with mode='replace_partitions' rebuilds the partitions it touches from the ledger's "
            f"files, and materialized views read from {steps.target}: recomputing the views from that rebuild is not "
            "built; use mode='append' with skip_loaded (every view is fed once), or replace_partitions without "
            "skip_loaded (the views are recomputed)"
        )
    if steps.staging is None:
        how = " through a distributed insert" if strategy == "distributed" else ""
        raise PlanError(
            f"skip_loaded=True needs a staging table, and {steps.target} takes a direct insert{how} ({steps.reason}); "
            "load into a MergeTree table (or a Distributed table over MergeTree tables) whose materialized views "
            "can be staged (docs/views.md), or load without skip_loaded"
        )

"""What a load run is given: its options beside the request (:class:`RunOptions`) and what it talks to
(:class:`RunParts`), the seam through which the operator, a run from events and the tests hand it its parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airflow_provider_s3ch.core.freshness import QueueDepth
from airflow_provider_s3ch.core.models import Manifest
from airflow_provider_s3ch.core.tables import TableSpec
from airflow_provider_s3ch.hooks.clickhouse import ClickHouseHook
from airflow_provider_s3ch.hooks.s3 import build_manifest
from airflow_provider_s3ch.hooks.s3_source import S3Source
from airflow_provider_s3ch.load.complete import Completion
from airflow_provider_s3ch.load.insert import Inserter
from airflow_provider_s3ch.load.ledger import LedgerRun
from airflow_provider_s3ch.load.target import Target


@dataclass(frozen=True)
class RunOptions:
    """What the run needs beside the request: the table to create, and how it waits. No defaults here: the
    operator's arguments are the one place that sets them.

    :param defers: the load starts its insert over HTTP and signals a deferral (``deferrable``, no ledger).
    """

    table_spec: TableSpec | None
    defers: bool
    earlier_try_timeout: float
    claim_timeout: float
    claim_heartbeat: float
    learn_from_history: bool


@dataclass(frozen=True)
class RunParts:
    """What a run talks to, each made when the run needs it: the operator gives its connections'
    (:meth:`connections`); another caller may give others (a pooled client, a test's stand-ins).

    :param clickhouse: the ClickHouse hook (closed by the run).
    :param s3: the S3 side: the client, the credentials the statements carry, the endpoint.
    :param listing: the manifest of the files to load (:func:`~airflow_provider_s3ch.hooks.s3.build_manifest`).
    :param queue: a run from events: the events it took (``core.freshness.queue_of``), for its ``freshness``.

    The phases that talk to the servers, each made with the hook: the ``target`` phase (:class:`~.target.Target`),
    the file ledger of a load with ``skip_loaded`` (:class:`~.ledger.LedgerRun`), the inserts
    (:class:`~.insert.Inserter`) and the ``complete`` phase (:class:`~.complete.Completion`).
    """

    clickhouse: Callable[[], ClickHouseHook]
    s3: Callable[[], S3Source]
    listing: Callable[..., Manifest] = build_manifest
    target: Callable[..., Target] = Target
    ledger: Callable[..., LedgerRun] = LedgerRun
    inserter: Callable[..., Inserter] = Inserter
    completion: Callable[..., Completion] = Completion
    queue: QueueDepth | None = None

    @classmethod
    def connections(cls, clickhouse_conn_id: str, aws_conn_id: str | None) -> RunParts:
        """The parts of the operator's connections."""
        return cls(clickhouse=lambda: ClickHouseHook(clickhouse_conn_id), s3=lambda: S3Source(aws_conn_id))

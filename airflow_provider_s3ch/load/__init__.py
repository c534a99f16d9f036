"""The load path, once: :class:`~.run.LoadRun` and its phases (target, prepare, resume, insert, complete).

Every kind of load (plain, chunked, attached, dry run, deferred, nothing new) runs through it; the operator
declares its arguments and hands the run a validated request and its options (docs/architecture.md).
"""

from __future__ import annotations

from airflow_provider_s3ch.load.report import DeferLoad, LoadReport, NothingNew
from airflow_provider_s3ch.load.run import LoadRun, RunOptions

__all__ = ["DeferLoad", "LoadReport", "LoadRun", "NothingNew", "RunOptions"]
